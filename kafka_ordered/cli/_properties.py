"""``--command-config FILE``: a Java properties file, as Kafka's own command
line tools take (pure: parsing only, the caller reads the file).

The syntax is ``java.util.Properties``: ``key=value``, ``key: value`` or
``key value``; ``#`` and ``!`` start comment lines; blank lines are
skipped; a line ending in an odd number of backslashes continues on the next
line; ``\\t``, ``\\n``, ``\\r``, ``\\f``, ``\\uXXXX`` and ``\\`` before any
other character are escapes; the last of repeated keys wins. Unlike Java, a
line holding a key and nothing else is an error (it is almost always a
mistake), and so are the Java-client-only settings librdkafka has no
equivalent for (the error names the librdkafka setting to use instead).
Values are never shown in errors (they may be secrets).
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Tuple

from ..errors import ConfigError

__all__ = ["parse_properties", "JAVA_ONLY"]

#: Java client settings librdkafka does not have, with what to use instead.
JAVA_ONLY: Dict[str, str] = {
    "sasl.jaas.config": "sasl.username and sasl.password (PLAIN, SCRAM) or the sasl.oauthbearer.* settings",
    "ssl.truststore.location": "ssl.ca.location (a PEM file of CA certificates)",
    "ssl.truststore.password": "ssl.ca.location (a PEM file needs no password)",
    "ssl.truststore.type": "ssl.ca.location (PEM)",
    "ssl.keystore.type": "ssl.keystore.location (PKCS#12) or ssl.certificate.location and ssl.key.location (PEM)",
}

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_WS = " \t\f"


def _logical_lines(text: str) -> Iterator[Tuple[int, str]]:
    """(first line number, logical line) with continuations joined, comments and blanks skipped."""
    physical = text.splitlines()
    i = 0
    while i < len(physical):
        number, line = i + 1, physical[i].lstrip(_WS)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(physical):
            line = line[:-1] + physical[i].lstrip(_WS)
            i += 1
        if _continues(line):
            line = line[:-1]
        yield number, line


def _continues(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def _unescape(raw: str, where: str) -> str:
    out: List[str] = []
    i = 0
    while i < len(raw):
        c = raw[i]
        i += 1
        if c != "\\" or i >= len(raw):
            out.append(c)
            continue
        e = raw[i]
        i += 1
        if e == "u":
            digits = raw[i:i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"{where}: malformed \\uXXXX escape")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(e, e))
    return "".join(out)


def _split(line: str) -> Tuple[str, str, bool]:
    """(raw key, raw value, whether a separator was found)."""
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _WS:
            break
        i += 1
    key, rest = line[:i], line[i:]
    if not rest:
        return key, "", False
    rest = rest.lstrip(_WS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WS)
    return key, rest, True


def parse_properties(text: str, source: str) -> Dict[str, str]:
    """The settings of a properties file's ``text``; ``source`` names the
    file in errors. Raises :class:`ConfigError` naming the line for a key
    without a value, a malformed escape, or a Java-only setting."""
    out: Dict[str, str] = {}
    for number, line in _logical_lines(text):
        where = f"{source} line {number}"
        raw_key, raw_value, separated = _split(line)
        key = _unescape(raw_key, where)
        if not key:
            raise ConfigError(f"{where}: a setting without a key")
        if not separated:
            raise ConfigError(f"{where}: {key!r} has no value (expected key=value)")
        if key in JAVA_ONLY:
            raise ConfigError(f"{where}: {key} is a Java client setting librdkafka does not have; "
                              f"use {JAVA_ONLY[key]}")
        out[key] = _unescape(raw_value, where)
    return out
