"""``ordered.*`` configuration keys.

Every wrapper takes the underlying client's own config dict. Our keys live
under the ``ordered.`` prefix and are popped before the rest is passed to the
client untouched. A key under ``ordered.`` that the component does not know
is a :class:`ConfigError` (typos must not silently disable ordering). A key
that earlier versions accepted and this one no longer uses
(:data:`REMOVED_OPTIONS`) is dropped with a WARNING on the
``kafka_ordered.config`` logger that says why: it cannot weaken ordering (the
mechanisms it tuned are gone), so upgraded configs keep working, but it is
never ignored silently.
"""

from __future__ import annotations

import difflib
import itertools
import logging
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Literal, Mapping, Optional, Tuple

from . import _credentials
from .errors import ConfigError
from ._pollbatch import POLL_BATCH_RECORDS

__all__ = [
    "OPTIONS",
    "REMOVED_OPTIONS",
    "DEFAULT_LAYOUT_TOPIC",
    "CONSUMER_OPTIONS",
    "CONFLUENT_CONSUMER_OPTIONS",
    "PRODUCER_OPTIONS",
    "split_config",
    "dotted",
    "client_config",
    "internal_config",
    "connection_identity",
    "kafka_python_connection_config",
    "KAFKA_PYTHON_OPTIONS",
    "KAFKA_PYTHON_TO_LIBRDKAFKA",
    "librdkafka_logger",
    "truthy",
    "forced",
    "client_bool",
    "client_int",
    "client_config_error",
    "metrics_client_id",
]

#: The layout log's default topic name (``ordered.layout.topic``).
DEFAULT_LAYOUT_TOPIC = "_kafka_ordered"

log = logging.getLogger("kafka_ordered.config")


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise ValueError("expected true or false")


def _nonneg_int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("expected an integer")
    i = int(v)
    if i < 0:
        raise ValueError("must be >= 0")
    return i


def _pos_int(v: Any) -> int:
    i = _nonneg_int(v)
    if i == 0:
        raise ValueError("must be > 0")
    return i


def _nonempty_str(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError("expected a non-empty string")
    return v


def _policy(v: Any) -> str:
    if v not in ("skip", "refuse"):
        raise ValueError("expected 'skip' or 'refuse'")
    return str(v)


def _librdkafka_config(v: Any) -> Dict[str, Any]:
    if not isinstance(v, Mapping) or not all(isinstance(k, str) for k in v):
        raise ValueError("expected a dict of librdkafka settings with string keys")
    return dict(v)


@dataclass(frozen=True)
class _Option:
    parse: Callable[[Any], Any]
    default: Any
    doc: str
    kind: str  # the accepted values, for people (docs/configuration.md)


#: Every ``ordered.*`` key: (parser, default, description, accepted values).
OPTIONS: Dict[str, _Option] = {
    "ordered.layout.topic": _Option(_nonempty_str, DEFAULT_LAYOUT_TOPIC, "the layout log topic", "string"),
    "ordered.layout.corrupt.policy": _Option(
        _policy, "skip", "what to do with a layout-log record that does not parse: skip (report) or refuse (raise)",
        "skip or refuse",
    ),
    "ordered.producer.id": _Option(
        _nonempty_str, None, "stable producer id (like transactional.id): ordering survives restarts across layout "
        "changes", "string",
    ),
    "ordered.transition.window.ms": _Option(
        _nonneg_int, 600_000, "an anonymous producer starting within this long after a layout change registers for it",
        "int >= 0 (ms)",
    ),
    "ordered.switch.timeout.ms": _Option(_pos_int, 30_000, "how long a layout switch (flush + registration) may take",
                                         "int > 0 (ms)"),
    "ordered.commit.interval.ms": _Option(
        _pos_int, 200, "commit interval for owners of partitions other members' gates wait on (auto-commit mode)",
        "int > 0 (ms)",
    ),
    "ordered.gating": _Option(_bool, True, "false disables gating (for testing only: ordering is not guaranteed)",
                              "bool (true or false)"),
    "ordered.tombstones": _Option(
        _bool, True, "false: no move tombstones on compacted topics (for testing only: values of keys that moved "
        "survive compaction in the partitions they left)", "bool (true or false)",
    ),
    "ordered.metadata.timeout.ms": _Option(_pos_int, 10_000, "timeout of metadata, offset and layout-log requests "
                                           "(also how long a producer's first send waits for the layout log)",
                                           "int > 0 (ms)"),
    "ordered.poll.batch.records": _Option(
        _pos_int, POLL_BATCH_RECORDS, "the most records one poll() fetches with consume() and "
        "returns over the next calls (sized to the application's pace; 1: one fetch per poll())", "int > 0",
    ),
    "ordered.librdkafka.config": _Option(
        _librdkafka_config, None,
        "kafka-python wrappers: librdkafka settings for the internal clients, added to those translated from the "
        "wrapper's keywords", "dict of librdkafka settings",
    ),
}


#: Keys earlier versions accepted, and why they are gone (a WARNING when given).
REMOVED_OPTIONS: Dict[str, str] = {
    "ordered.registration.settle.ms": (
        "producers no longer pause after a registration and consumers no longer compare the age of their "
        "layout view: freshness comes from the kafka-ordered.reg stamp on records (protocol 2)"
    ),
    "ordered.follower.poll.interval.ms": (
        "the layout-log follower no longer polls at an interval: it keeps one long-poll Fetch in flight and "
        "learns of appends as the broker answers it"
    ),
}


def split_config(
    config: Optional[Mapping[str, Any]], allowed: Iterable[str], component: str
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Split ``config`` into (ordered options with defaults, client config).

    Raises :class:`ConfigError` for unknown ``ordered.*`` keys, keys not
    valid for ``component``, and unparsable values.
    """
    allowed = set(allowed)
    ours: Dict[str, Any] = {k: OPTIONS[k].default for k in allowed}
    rest: Dict[str, Any] = {}
    for key, value in (config or {}).items():
        if not isinstance(key, str) or not key.startswith("ordered."):
            rest[key] = value
            continue
        if key in REMOVED_OPTIONS:
            log.warning("%s: configuration key %s is no longer used and is ignored (%s); remove it",
                        component, key, REMOVED_OPTIONS[key])
            continue
        if key not in OPTIONS:
            known = ", ".join(sorted(allowed))
            raise ConfigError(f"unknown configuration key {key!r}; {component} accepts: {known}")
        if key not in allowed:
            raise ConfigError(f"{key!r} is not a {component} option (it accepts: {', '.join(sorted(allowed))})")
        try:
            ours[key] = None if value is None else OPTIONS[key].parse(value)
        except (TypeError, ValueError) as e:
            shown = "a mapping" if isinstance(value, Mapping) else repr(value)  # it may hold secrets
            raise ConfigError(f"bad value {shown} for {key}: {e}") from e
    return ours, rest


#: ``ordered.*`` keys the consumers of both clients accept.
CONSUMER_OPTIONS = (
    "ordered.layout.topic",
    "ordered.layout.corrupt.policy",
    "ordered.commit.interval.ms",
    "ordered.gating",
    "ordered.metadata.timeout.ms",
)
#: ``ordered.*`` keys the producers of both clients accept.
PRODUCER_OPTIONS = (
    "ordered.layout.topic",
    "ordered.layout.corrupt.policy",
    "ordered.producer.id",
    "ordered.transition.window.ms",
    "ordered.switch.timeout.ms",
    "ordered.tombstones",
    "ordered.metadata.timeout.ms",
)

#: ``ordered.*`` keys confluent-kafka's ``OrderedConsumer`` accepts.
CONFLUENT_CONSUMER_OPTIONS = CONSUMER_OPTIONS + ("ordered.poll.batch.records",)

#: ``ordered.*`` keys only the kafka-python wrappers accept (on top of the above).
KAFKA_PYTHON_OPTIONS = ("ordered.librdkafka.config",)

Role = Literal["producer", "consumer"]

# librdkafka properties that apply to one client type only (CONFIGURATION.md,
# column C/P). Internal clients of the other type do not get them: librdkafka
# would warn, and some (transactional.id) would change what they do.
_CONSUMER_ONLY_PREFIXES = ("group.", "fetch.", "queued.", "offset.store.", "auto.commit.", "enable.auto.")
_CONSUMER_ONLY = frozenset({
    "session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy", "coordinator.query.interval.ms",
    "max.poll.interval.ms", "auto.offset.reset", "enable.partition.eof", "check.crcs", "isolation.level",
    "allow.auto.create.topics", "consume.callback.max.messages", "on_commit", "offset_commit_cb",
    "rebalance_cb", "max.partition.fetch.bytes", "client.rack",
})
_PRODUCER_ONLY_PREFIXES = ("queue.buffering.", "batch.", "compression.", "retry.backoff", "sticky.")
_PRODUCER_ONLY = frozenset({
    "transactional.id", "transaction.timeout.ms", "enable.idempotence", "enable.gapless.guarantee",
    "acks", "request.required.acks", "linger.ms", "message.send.max.retries", "retries", "compression.codec",
    "compression.type", "compression.level", "on_delivery", "delivery.report.only.error", "dr_cb", "dr_msg_cb",
    "partitioner", "partitioner_cb", "msg_order_cmp", "message.timeout.ms", "delivery.timeout.ms",
    "queuing.strategy", "produce.offset.report", "request.timeout.ms", "produce.request.timeout.ms",
})
# Per-instance observers of the application's own client: internal clients
# must not report into them. (A transactional.id is the application
# producer's identity: an internal producer with it would fence that producer.)
_APPLICATION_ONLY = frozenset({"stats_cb", "statistics.interval.ms", "transactional.id", "transaction.timeout.ms"})


def _is_consumer_only(key: str) -> bool:
    return key in _CONSUMER_ONLY or key.startswith(_CONSUMER_ONLY_PREFIXES)


def _is_producer_only(key: str) -> bool:
    return key in _PRODUCER_ONLY or key.startswith(_PRODUCER_ONLY_PREFIXES)


def librdkafka_logger(component: str) -> logging.Logger:
    """The Python logger librdkafka's own log of ``component`` goes to."""
    return logging.getLogger(f"kafka_ordered.librdkafka.{component}")


def client_config(config: Mapping[str, Any], component: str) -> Dict[str, Any]:
    """The config of an application-facing client: unchanged, except that
    librdkafka's log goes through Python ``logging`` (logger
    ``kafka_ordered.librdkafka.<component>``) unless the caller set ``logger``."""
    out = dict(config)
    out.setdefault("logger", librdkafka_logger(component))
    return out


def internal_config(config: Mapping[str, Any], role: Role) -> Dict[str, Any]:
    """The config of an internal client of type ``role`` (layout-log reader
    or writer, offset reader, admin) made from the application's config:
    every client-level key passes through (security, OAuth callbacks,
    sockets, timeouts, ``debug``, ``logger``, ...), minus the keys that only
    make sense for the other client type and the application's own
    observers (``stats_cb``). Admin clients take the ``"producer"`` role.
    Its ``error_cb`` records authentication failures
    (:mod:`kafka_ordered._credentials`) before calling the application's."""
    skip = _is_consumer_only if role == "producer" else _is_producer_only
    out = {k: v for k, v in config.items() if not skip(k) and k not in _APPLICATION_ONLY}
    if role == "producer":
        out = {k: v for k, v in out.items() if not (k.startswith("enable.") and k.endswith(".commit"))}
    out.setdefault("logger", librdkafka_logger("internal"))
    return _credentials.watch(out)


_PER_CLIENT = frozenset({"logger", "client.id", "error_cb", "throttle_cb", "oauth_cb", "log_cb"})


def connection_identity(config: Mapping[str, Any]) -> Tuple[Tuple[str, str], ...]:
    """What decides whether two clients' configs reach the same cluster the
    same way (addresses, security, sockets): clients of one process with the
    same identity share one set of internal clients. Role-specific keys and
    per-client callbacks do not count."""
    return tuple(sorted(
        (str(k), repr(v)) for k, v in config.items()
        if not _is_consumer_only(k) and not _is_producer_only(k) and k not in _APPLICATION_ONLY
        and k not in _PER_CLIENT and not str(k).startswith("ordered.")
    ))


def client_bool(conf: Mapping[str, Any], key: str, default: bool) -> bool:
    """``conf[key]`` (``default`` when absent) read as librdkafka reads a
    boolean property (``true``/``t``/``1``, ``false``/``f``/``0``, any case;
    Python bools). For settings the wrapper takes over from the client:
    anything else raises :class:`ConfigError` with librdkafka's own words."""
    if key not in conf:
        return default
    v = conf[key]
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    if text in ("true", "t", "1"):
        return True
    if text in ("false", "f", "0"):
        return False
    raise ConfigError(f'Expected bool value for "{key}": true or false')


def client_int(conf: Mapping[str, Any], key: str, default: int) -> int:
    """``conf[key]`` (``default`` when absent) as a non-negative integer
    property the wrapper takes over from the client; else :class:`ConfigError`."""
    if key not in conf:
        return default
    v = conf[key]
    try:
        if isinstance(v, bool):
            raise ValueError
        out = int(v)
    except (TypeError, ValueError):
        out = -1
    if out < 0:
        raise ConfigError(f'Invalid value for configuration property "{key}": expected an integer >= 0')
    return out


# librdkafka properties users set most (CONFIGURATION.md), for "did you mean"
# suggestions; the role-specific tables above add the rest.
_COMMON_CLIENT_KEYS = frozenset({
    "bootstrap.servers", "metadata.broker.list", "client.id", "security.protocol", "sasl.mechanism",
    "sasl.mechanisms", "sasl.username", "sasl.password", "sasl.kerberos.service.name",
    "sasl.kerberos.principal", "sasl.kerberos.keytab", "sasl.oauthbearer.method", "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.scope",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "ssl.cipher.suites", "ssl.crl.location", "ssl.keystore.location",
    "ssl.keystore.password", "socket.timeout.ms", "socket.keepalive.enable", "socket.connection.setup.timeout.ms",
    "connections.max.idle.ms", "reconnect.backoff.ms", "reconnect.backoff.max.ms", "metadata.max.age.ms",
    "topic.metadata.refresh.interval.ms", "debug", "log_level", "log.connection.close", "api.version.request",
    "broker.version.fallback", "client.dns.lookup", "group.instance.id", "group.protocol", "group.id",
    "auto.commit.interval.ms", "enable.auto.commit", "enable.auto.offset.store", "fetch.min.bytes",
    "fetch.max.bytes", "fetch.wait.max.ms", "queue.buffering.max.messages", "queue.buffering.max.kbytes",
    "queue.buffering.max.ms", "batch.num.messages", "batch.size", "max.in.flight.requests.per.connection",
    "max.in.flight", "message.max.bytes", "receive.message.max.bytes", "statistics.interval.ms",
})


def client_config_error(exc: BaseException, config: Mapping[str, Any], component: str) -> Optional[ConfigError]:
    """The :class:`ConfigError` for a confluent-kafka ``KafkaException`` the
    client's constructor raised for a bad setting (librdkafka's message; for
    an unknown property also "did you mean ..." when a known one is close),
    or ``None`` when ``exc`` is something else."""
    err: Any = exc.args[0] if exc.args else None
    text = err.str() if callable(getattr(err, "str", None)) else None
    if not isinstance(text, str) or not any(w in text for w in ("configuration property", "value for")):
        return None
    m = re.search(r'No such configuration property: "([^"]+)"', text)
    if m is None:
        return ConfigError(f"{component}: {text}")
    key = m.group(1)
    known = _COMMON_CLIENT_KEYS | _CONSUMER_ONLY | _PRODUCER_ONLY | set(OPTIONS)
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
    hint = f"; did you mean {close[0]}?" if close else ""
    return ConfigError(f"{component}: unknown configuration key {key!r} (librdkafka has no such property){hint}")


_client_numbers = itertools.count(1)


def metrics_client_id(conf: Mapping[str, Any], role: Role, group: Optional[str] = None) -> str:
    """The ``client_id`` a wrapper reports in its metrics: its ``client.id``
    when set, else one unique in the process named as Kafka's Java clients
    name theirs (``producer-1``, ``consumer-GROUP-2``). The client's own
    config is not changed."""
    given = conf.get("client.id")
    if given:
        return str(given)
    n = next(_client_numbers)
    return f"consumer-{group}-{n}" if role == "consumer" and group else f"{role}-{n}"


def truthy(v: Any) -> bool:
    """A boolean config value given as a bool or a string."""
    return v if isinstance(v, bool) else str(v).lower() in ("true", "1", "yes")


def forced(conf: Dict[str, Any], key: str, value: Any, ok: Tuple[Any, ...]) -> None:
    """Set ``conf[key] = value``; an explicit other value raises :class:`ConfigError`."""
    if key in conf and conf[key] not in ok:
        raise ConfigError(
            f"{key}={conf[key]!r} is not allowed for an ordered producer: ordering across layout "
            f"changes needs {key}={value!r}"
        )
    conf[key] = value


#: kafka-python keyword -> the librdkafka key of the same setting (the one
#: table for both directions; ``ssl_check_hostname`` is mapped by value).
KAFKA_PYTHON_TO_LIBRDKAFKA: Mapping[str, str] = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "sasl_kerberos_service_name": "sasl.kerberos.service.name",
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
    "ssl_crlfile": "ssl.crl.location",
    "ssl_ciphers": "ssl.cipher.suites",
    "client_id": "client.id",
}

# kafka-python keywords that decide how a client reaches the cluster but
# hold Python objects (or settings) librdkafka has no equivalent of.
_KAFKA_PYTHON_UNTRANSLATABLE = (
    "ssl_context", "sasl_oauth_token_provider", "sasl_kerberos_name", "sasl_kerberos_domain_name", "socks5_proxy",
)


def kafka_python_connection_config(
    config: Mapping[str, Any], librdkafka: Optional[Mapping[str, Any]] = None
) -> Dict[str, Any]:
    """The librdkafka connection settings (addresses, security) of a
    kafka-python config (keyword names), for the internal clients (layout
    log, offsets, admin), with ``librdkafka`` (the ``ordered.librdkafka.config``
    option) added on top.

    Raises :class:`ConfigError` naming a keyword that has no librdkafka
    equivalent (``ssl_context``, ``sasl_oauth_token_provider``, ...) when
    ``librdkafka`` is not given: the internal clients would reach the
    cluster without it. Values never appear in the error.
    """
    out: Dict[str, Any] = {}
    servers = config.get("bootstrap_servers", "localhost:9092")
    out["bootstrap.servers"] = servers if isinstance(servers, str) else ",".join(servers)
    for k, v in config.items():
        if v is None:
            continue
        if k in KAFKA_PYTHON_TO_LIBRDKAFKA:
            out[KAFKA_PYTHON_TO_LIBRDKAFKA[k]] = v
        elif k == "ssl_check_hostname":
            out["ssl.endpoint.identification.algorithm"] = "https" if truthy(v) else "none"
    untranslatable = sorted(k for k in _KAFKA_PYTHON_UNTRANSLATABLE if config.get(k) is not None)
    if untranslatable and librdkafka is None:
        raise ConfigError(
            f"{', '.join(untranslatable)} cannot reach this wrapper's internal librdkafka clients (layout log, "
            "offsets, admin), which would then reach the cluster without it: give them the equivalent librdkafka "
            "settings in ordered.librdkafka.config (e.g. ssl.ca.location, sasl.oauthbearer.method, oauth_cb)"
        )
    out.update(librdkafka or {})
    return out


def dotted(configs: Mapping[str, Any]) -> Dict[str, Any]:
    """Accept ``ordered_x_y=...`` as an alias of ``ordered.x.y``."""
    out: Dict[str, Any] = {}
    for key, value in configs.items():
        if key.startswith("ordered_"):
            name = key.replace("_", ".")
            if name in configs and configs[name] != value:
                raise ConfigError(f"{key}={value!r} conflicts with {name}={configs[name]!r}")
            out[name] = value
        elif key not in out:
            out[key] = value
    return out
