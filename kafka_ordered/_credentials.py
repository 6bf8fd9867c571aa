"""Authentication failures that librdkafka reports only through ``error_cb``.

A client with a wrong SASL password or an untrusted certificate never gets
an answer: librdkafka retries the connection and every request ends in a
timeout (``_TRANSPORT``, ``_TIMED_OUT``). Its ``error_cb`` is the one place
that says why. The internal clients' ``error_cb`` records such failures here,
keyed by the connection (addresses and credentials), so that a metadata request that
would end in "broker unavailable" fails at once with
:class:`~kafka_ordered.errors.AuthenticationError` instead.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from .errors import AuthenticationError, for_code

__all__ = ["watch", "failure"]

#: How long a recorded failure explains a later timeout of the same connection.
RECENT_S = 30.0

_Key = Tuple[Tuple[str, str], ...]
_lock = threading.Lock()
_failures: Dict[_Key, Tuple[float, int, str]] = {}
_IDENTITY = ("bootstrap.servers", "metadata.broker.list", "security.protocol")


def _key(conf: Mapping[str, Any]) -> _Key:
    """The connection's addresses and credentials: another password is another connection."""
    return tuple(sorted((k, repr(v)) for k, v in conf.items()
                        if k in _IDENTITY or k.startswith(("sasl.", "ssl."))))


def _servers(conf: Mapping[str, Any]) -> str:
    return str(conf.get("bootstrap.servers", conf.get("metadata.broker.list", "")))


def watch(conf: Dict[str, Any]) -> Dict[str, Any]:
    """``conf`` with an ``error_cb`` that records authentication failures of
    its connection, then calls the application's own ``error_cb`` (if any)."""
    key = _key(conf)
    user_cb: Optional[Callable[[Any], None]] = conf.get("error_cb")

    def error_cb(err: Any) -> None:
        code = err.code()
        if for_code(code) is AuthenticationError:
            with _lock:
                _failures[key] = (time.monotonic(), code, err.str())
        if user_cb is not None:
            user_cb(err)

    conf["error_cb"] = error_cb
    return conf


def failure(conf: Mapping[str, Any], what: str) -> Optional[AuthenticationError]:
    """The :class:`AuthenticationError` to raise instead of "broker
    unavailable" for ``what`` (a phrase), when the connection of ``conf`` had
    an authentication failure in the last :data:`RECENT_S` seconds; else ``None``."""
    with _lock:
        got = _failures.get(_key(conf))
    if got is None or time.monotonic() - got[0] > RECENT_S:
        return None
    _, code, text = got
    return AuthenticationError(
        f"{what}: the cluster refused the connection's credentials ({text}); check the sasl.* and ssl.* "
        f"settings for bootstrap.servers={_servers(conf)}", code=code)
