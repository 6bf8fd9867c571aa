"""``ordered.*`` configuration keys.

Every wrapper takes the underlying client's own config dict. Our keys live
under the ``ordered.`` prefix and are popped before the rest is passed to the
client untouched. A key under ``ordered.`` that the component does not know
is a :class:`ConfigError` (typos must not silently disable ordering).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple

from .errors import ConfigError

__all__ = ["OPTIONS", "DEFAULT_LAYOUT_TOPIC", "split_config", "connection_config", "kafka_python_connection_config"]

DEFAULT_LAYOUT_TOPIC = "_kafka_ordered"


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


@dataclass(frozen=True)
class _Option:
    parse: Callable[[Any], Any]
    default: Any
    doc: str


#: Every ``ordered.*`` key: (parser, default, description).
OPTIONS: Dict[str, _Option] = {
    "ordered.layout.topic": _Option(_nonempty_str, DEFAULT_LAYOUT_TOPIC, "the layout log topic"),
    "ordered.layout.corrupt.policy": _Option(
        _policy, "skip", "what to do with a layout-log record that does not parse: skip (report) or refuse (raise)"
    ),
    "ordered.follower.poll.interval.ms": _Option(
        _pos_int, 50, "how often the background follower checks the layout log for new records"
    ),
    "ordered.producer.id": _Option(
        _nonempty_str, None, "stable producer id (like transactional.id): ordering survives restarts across layout changes"
    ),
    "ordered.transition.window.ms": _Option(
        _nonneg_int, 600_000, "an anonymous producer starting within this long after a layout change registers for it"
    ),
    "ordered.registration.settle.ms": _Option(
        _nonneg_int, None, "override of the topic's settle pause (producers take the larger, consumers the smaller)"
    ),
    "ordered.switch.timeout.ms": _Option(_pos_int, 30_000, "how long a layout switch (flush + registration) may take"),
    "ordered.commit.interval.ms": _Option(
        _pos_int, 200, "commit interval for owners of partitions other members' gates wait on (auto-commit mode)"
    ),
    "ordered.gating": _Option(_bool, True, "false disables gating (for testing only: ordering is not guaranteed)"),
    "ordered.metadata.timeout.ms": _Option(_pos_int, 10_000, "timeout of metadata, offset and layout-log requests"),
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
        if key not in OPTIONS:
            known = ", ".join(sorted(allowed))
            raise ConfigError(f"unknown configuration key {key!r}; {component} accepts: {known}")
        if key not in allowed:
            raise ConfigError(f"{key!r} is not a {component} option (it accepts: {', '.join(sorted(allowed))})")
        try:
            ours[key] = None if value is None else OPTIONS[key].parse(value)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"bad value {value!r} for {key}: {e}") from e
    return ours, rest


_CONNECTION_PREFIXES = (
    "bootstrap.servers",
    "metadata.broker.list",
    "security.protocol",
    "sasl.",
    "ssl.",
    "ssl_",
    "socket.",
    "broker.address.",
    "client.dns.lookup",
    "client.id",
    "oauthbearer_token_refresh_cb",
    "error_cb",
    "logger",
)


def connection_config(config: Mapping[str, Any]) -> Dict[str, Any]:
    """The subset of a librdkafka config that internal clients (layout log,
    offset reader) need to reach the same cluster: addresses, security, sockets."""
    return {k: v for k, v in config.items() if k.startswith(_CONNECTION_PREFIXES)}


_KAFKA_PYTHON_TO_LIBRDKAFKA = {
    "security_protocol": "security.protocol",
    "sasl_mechanism": "sasl.mechanism",
    "sasl_plain_username": "sasl.username",
    "sasl_plain_password": "sasl.password",
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
    "client_id": "client.id",
}


def kafka_python_connection_config(config: Mapping[str, Any]) -> Dict[str, Any]:
    """:func:`connection_config` for a kafka-python config (keyword names)."""
    out: Dict[str, Any] = {}
    servers = config.get("bootstrap_servers", "localhost:9092")
    out["bootstrap.servers"] = servers if isinstance(servers, str) else ",".join(servers)
    for k, v in config.items():
        if k in _KAFKA_PYTHON_TO_LIBRDKAFKA and v is not None:
            out[_KAFKA_PYTHON_TO_LIBRDKAFKA[k]] = v
    return out
