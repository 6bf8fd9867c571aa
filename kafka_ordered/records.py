"""The layout-log record types and their codec, in one place (pure, no I/O).

Each record of the layout log is a UTF-8 JSON object with a format version
``"v"`` and a ``"type"``: ``"layout"`` (an admin's layout change),
``"registration"`` (a producer's switch to a layout, with its gates) or
``"protocol"`` (the version of the ordering protocol the log's clients speak
from that record on).

Versions: protocol 1 clients (time-based freshness: a settle pause after each
registration) wrote ``"v": 1`` and refuse any newer record. Protocol 2
clients (causal freshness tokens, :mod:`kafka_ordered.tokens`) write
``"v": 2``; the first record they write to a log is a protocol record, so a
protocol 1 client stops there with its "upgrade" error. They still read the
``"v": 1`` layout and registration records that precede it.
:func:`decode` checks the *shape* of a record; what a record means for the
topic's history (epoch order, known topics) is checked by
:class:`kafka_ordered.history.LayoutHistory`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, Literal, Mapping, Optional, Tuple, Union

from .errors import InvalidLayoutError
from .layout import Layout

__all__ = [
    "RECORD_VERSION",
    "PROTOCOL_VERSION",
    "PROTOCOL_KEY",
    "CorruptPolicy",
    "LayoutOp",
    "Gate",
    "Registration",
    "LayoutChange",
    "LogProblem",
    "LayoutRecord",
    "RegistrationRecord",
    "ProtocolRecord",
    "BadRecord",
    "NewerRecordVersion",
    "encode_layout",
    "encode_registration",
    "encode_protocol",
    "decode",
]

#: The record format this version writes (it also reads ``"v": 1`` records).
RECORD_VERSION = 2
#: The ordering protocol this version speaks (1: settle pause, 2: causal tokens).
PROTOCOL_VERSION = 2
#: Key of protocol records (not a managed topic's name in practice; harmless if it were).
PROTOCOL_KEY = b"kafka-ordered.protocol"
#: What a malformed layout-log record does: ``skip`` (reported with its offset) or ``refuse`` (raise).
CorruptPolicy = Literal["skip", "refuse"]
#: The operation that wrote a layout record.
LayoutOp = Literal["create", "adopt", "expand", "shrink", "retire", "unmanage"]
_OPS = ("create", "adopt", "expand", "shrink", "retire", "unmanage")


@dataclass(frozen=True)
class Gate:
    """Records of ``topic``/``partition`` at offsets ``>= start`` may be
    delivered to a group only once the group has processed every source
    ``q`` in ``wait`` up to ``wait[q]`` (processed offset ``>= wait[q]``)."""

    topic: str
    partition: int
    start: int
    wait: Mapping[int, int]
    producer_id: str
    epoch: int
    offset: int  # of the registration in the layout log


@dataclass(frozen=True)
class Registration:
    """A producer's switch to layout ``epoch`` (from ``from_epoch``)."""

    topic: str
    producer_id: str
    stable: bool
    epoch: int
    from_epoch: int
    gates: Tuple[Gate, ...]
    offset: int
    timestamp_ms: int


@dataclass(frozen=True)
class LayoutChange:
    """An accepted layout change, written at ``offset`` of the layout log."""

    layout: Layout
    op: str
    admin_id: str
    offset: int
    timestamp_ms: int


@dataclass(frozen=True)
class LogProblem:
    """A layout-log record that was skipped, and why."""

    offset: int
    reason: str


@dataclass(frozen=True)
class LayoutRecord:
    """A decoded layout record."""

    op: str
    admin_id: str
    layout: Layout
    version: int = RECORD_VERSION


@dataclass(frozen=True)
class RegistrationRecord:
    """A decoded registration record; ``gates`` maps a target partition to
    ``(start, {source: wait})``."""

    topic: str
    producer_id: str
    stable: bool
    epoch: int
    from_epoch: int
    gates: Mapping[int, Tuple[int, Mapping[int, int]]]
    version: int = RECORD_VERSION


@dataclass(frozen=True)
class ProtocolRecord:
    """From this record on, the log's clients speak ordering protocol ``protocol``."""

    protocol: int


class BadRecord(Exception):
    """A record that does not decode; the message says why."""


class NewerRecordVersion(Exception):
    """A record written in a format newer than :data:`RECORD_VERSION`."""

    def __init__(self, version: int) -> None:
        super().__init__(f"record format version {version} is newer than this kafka-ordered reads ({RECORD_VERSION})")
        self.version = version


def _dumps(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode("utf-8")


def encode_layout(layout: Layout, op: str, admin_id: str) -> Tuple[bytes, bytes]:
    """Key and value of a layout record."""
    if op not in _OPS:
        raise InvalidLayoutError(f"unknown layout operation {op!r}")
    return layout.topic.encode(), _dumps(
        {"v": RECORD_VERSION, "type": "layout", "op": op, "admin": admin_id, "layout": layout.to_dict()}
    )


def encode_registration(
    topic: str,
    producer_id: str,
    stable: bool,
    epoch: int,
    from_epoch: int,
    gates: Mapping[int, Tuple[int, Mapping[int, int]]],
) -> Tuple[bytes, bytes]:
    """Key and value of a registration record; ``gates`` maps a target
    partition to ``(start, {source: wait})``."""
    body = {
        "v": RECORD_VERSION,
        "type": "registration",
        "topic": topic,
        "producer": producer_id,
        "stable": bool(stable),
        "epoch": int(epoch),
        "from_epoch": int(from_epoch),
        "gates": {
            str(p): {"start": int(start), "wait": {str(q): int(w) for q, w in sorted(wait.items())}}
            for p, (start, wait) in sorted(gates.items())
        },
    }
    return topic.encode(), _dumps(body)


def encode_protocol(protocol: int = PROTOCOL_VERSION) -> Tuple[bytes, bytes]:
    """Key and value of the protocol-version record."""
    return PROTOCOL_KEY, _dumps({"v": RECORD_VERSION, "type": "protocol", "protocol": int(protocol)})


def _int(d: Mapping[str, Any], name: str, minimum: int = 0) -> int:
    v = d.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise BadRecord(f"field {name!r} must be an int >= {minimum}, got {v!r}")
    return v


def _partition(s: Any, what: str) -> int:
    try:
        return int(s)
    except (TypeError, ValueError):
        raise BadRecord(f"{what} partition {s!r} is not an int") from None


def decode(value: Optional[bytes]) -> Union[LayoutRecord, RegistrationRecord, ProtocolRecord]:
    """Decode one record value.

    Raises :class:`NewerRecordVersion` for a format this version does not
    read, :class:`BadRecord` for anything else that is not a well-formed
    record of the current format.
    """
    if value is None:
        raise BadRecord("empty record")
    try:
        d = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BadRecord(f"not UTF-8 JSON ({e})") from None
    if not isinstance(d, dict):
        raise BadRecord("not a JSON object")
    v = d.get("v")
    if isinstance(v, int) and not isinstance(v, bool) and v > RECORD_VERSION:
        raise NewerRecordVersion(v)
    if v not in (1, RECORD_VERSION) or isinstance(v, bool):
        raise BadRecord(f"unsupported record version {v!r}")
    kind = d.get("type")
    if kind == "protocol":
        if v < 2:
            raise BadRecord("a protocol record must have version >= 2")
        return ProtocolRecord(_int(d, "protocol", 1))
    if kind == "layout":
        raw = d.get("layout")
        op = d.get("op")
        if not isinstance(raw, dict) or op not in _OPS:
            raise BadRecord("layout record needs a 'layout' object and a known 'op'")
        try:
            layout = Layout.from_dict(raw)
        except InvalidLayoutError as e:
            raise BadRecord(f"invalid layout: {e}") from None
        return LayoutRecord(str(op), str(d.get("admin", "")), layout, v)
    if kind == "registration":
        topic = d.get("topic")
        producer = d.get("producer")
        if not isinstance(topic, str) or not isinstance(producer, str) or not producer:
            raise BadRecord("registration needs string 'topic' and 'producer'")
        epoch = _int(d, "epoch", 1)
        from_epoch = _int(d, "from_epoch", 1)
        raw_gates = d.get("gates", {})
        if not isinstance(raw_gates, dict):
            raise BadRecord("'gates' must be an object")
        gates: Dict[int, Tuple[int, Mapping[int, int]]] = {}
        for p_s, g in sorted(raw_gates.items(), key=lambda kv: str(kv[0])):
            p = _partition(p_s, "gate")
            if not isinstance(g, dict) or not isinstance(g.get("wait"), dict):
                raise BadRecord(f"gate of partition {p} needs 'start' and 'wait'")
            start = _int(g, "start")
            wait: Dict[int, int] = {}
            for q_s, w in g["wait"].items():
                q = _partition(q_s, "wait")
                if isinstance(w, bool) or not isinstance(w, int) or w < 0:
                    raise BadRecord(f"wait offset for partition {q} must be an int >= 0")
                wait[q] = w
            gates[p] = (start, wait)
        return RegistrationRecord(topic, producer, bool(d.get("stable", False)), epoch, from_epoch, gates, v)
    raise BadRecord(f"unknown record type {kind!r}")
