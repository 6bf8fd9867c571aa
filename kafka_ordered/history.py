"""Layout-log records and the history they build (pure, no I/O).

The layout log is one single-partition topic holding, in one total order,
every managed topic's layout changes and every producer registration. Each
record is a UTF-8 JSON object with a version ``"v"`` and a ``"type"``;
:class:`LayoutHistory` applies records in log order and validates them.

Validation policy (``corrupt_policy``):

- ``"skip"`` (default): a record that does not parse, has an unknown type,
  or breaks an invariant (epoch gap, changed initial count or hash,
  registration for an unknown epoch) is recorded in
  :attr:`LayoutHistory.problems` with its offset and otherwise ignored. Our
  writers validate before appending, so such a record was not written by a
  kafka-ordered writer and cannot be a registration anyone waits on.
- ``"refuse"``: the same records raise :class:`CorruptLayoutRecordError`.

A layout record whose epoch is not newer than the topic's current epoch is
not corrupt: it lost a race with another admin (the first record claiming an
epoch wins). It is recorded in :attr:`LayoutHistory.superseded`.

Records with a version newer than :data:`RECORD_VERSION` always raise: a
newer writer's records cannot be safely ignored.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Iterable, List, Literal, Mapping, Optional, Tuple

from .errors import CorruptLayoutRecordError, InvalidLayoutError
from .layout import Layout

__all__ = [
    "RECORD_VERSION",
    "CorruptPolicy",
    "Gate",
    "Registration",
    "LayoutChange",
    "LogProblem",
    "LayoutHistory",
    "encode_layout",
    "encode_registration",
]

RECORD_VERSION = 1
CorruptPolicy = Literal["skip", "refuse"]
LayoutOp = Literal["create", "adopt", "expand", "shrink", "retire"]
_OPS = ("create", "adopt", "expand", "shrink", "retire")


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
    layout: Layout
    op: str
    admin_id: str
    offset: int
    timestamp_ms: int


@dataclass(frozen=True)
class LogProblem:
    offset: int
    reason: str


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


class _Bad(Exception):
    pass


def _int(d: Mapping[str, Any], name: str, minimum: int = 0) -> int:
    v = d.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise _Bad(f"field {name!r} must be an int >= {minimum}, got {v!r}")
    return v


class LayoutHistory:
    """Every managed topic's layouts and registrations, rebuilt from the log.

    Not thread-safe for writers: one thread applies records; readers on other
    threads see a consistent value per call (state is replaced, not mutated,
    where readers look without the lock).
    """

    def __init__(self, corrupt_policy: CorruptPolicy = "skip") -> None:
        if corrupt_policy not in ("skip", "refuse"):
            raise ValueError(f"corrupt_policy must be 'skip' or 'refuse', got {corrupt_policy!r}")
        self.corrupt_policy = corrupt_policy
        self.next_offset = 0
        self.version = 0
        self.problems: List[LogProblem] = []
        self.superseded: List[LayoutChange] = []
        self._current: Dict[str, Layout] = {}
        self._changes: Dict[str, List[LayoutChange]] = {}
        self._registrations: Dict[str, List[Registration]] = {}
        self._last_by_producer: Dict[Tuple[str, str], Registration] = {}
        self._lock = threading.RLock()

    # -- applying records

    def apply(self, offset: int, key: Optional[bytes], value: Optional[bytes], timestamp_ms: int = 0) -> None:
        """Apply the record at ``offset`` (offsets must increase)."""
        with self._lock:
            if offset < self.next_offset:
                return
            try:
                self._apply(offset, value, timestamp_ms)
            except _Bad as e:
                problem = LogProblem(offset, str(e))
                if self.corrupt_policy == "refuse":
                    raise CorruptLayoutRecordError(
                        f"layout log record at offset {offset} is corrupt: {e} (policy 'refuse'; "
                        "set ordered.layout.corrupt.policy=skip to ignore it)",
                        offset=offset,
                    ) from None
                self.problems.append(problem)
            self.next_offset = offset + 1
            self.version += 1

    def _apply(self, offset: int, value: Optional[bytes], ts: int) -> None:
        if value is None:
            raise _Bad("empty record")
        try:
            d = json.loads(value.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise _Bad(f"not UTF-8 JSON ({e})") from None
        if not isinstance(d, dict):
            raise _Bad("not a JSON object")
        v = d.get("v")
        if isinstance(v, int) and not isinstance(v, bool) and v > RECORD_VERSION:
            raise CorruptLayoutRecordError(
                f"layout log record at offset {offset} has version {v}, newer than this "
                f"kafka-ordered understands ({RECORD_VERSION}): upgrade kafka-ordered",
                offset=offset,
            )
        if v != RECORD_VERSION:
            raise _Bad(f"unsupported record version {v!r}")
        kind = d.get("type")
        if kind == "layout":
            self._apply_layout(offset, d, ts)
        elif kind == "registration":
            self._apply_registration(offset, d, ts)
        else:
            raise _Bad(f"unknown record type {kind!r}")

    def _apply_layout(self, offset: int, d: Mapping[str, Any], ts: int) -> None:
        raw = d.get("layout")
        op = d.get("op")
        if not isinstance(raw, dict) or op not in _OPS:
            raise _Bad("layout record needs a 'layout' object and a known 'op'")
        try:
            layout = Layout.from_dict(raw)
        except InvalidLayoutError as e:
            raise _Bad(f"invalid layout: {e}") from None
        change = LayoutChange(layout, str(op), str(d.get("admin", "")), offset, ts)
        cur = self._current.get(layout.topic)
        if cur is None:
            if layout.epoch != 1 or op not in ("create", "adopt"):
                raise _Bad(f"first layout of {layout.topic} must be epoch 1 from create/adopt, got epoch {layout.epoch} from {op}")
        else:
            if layout.epoch <= cur.epoch:
                self.superseded.append(change)
                return
            if layout.epoch != cur.epoch + 1:
                raise _Bad(f"epoch gap for {layout.topic}: {cur.epoch} -> {layout.epoch}")
            if (layout.initial_partitions, layout.hash, layout.strategy) != (cur.initial_partitions, cur.hash, cur.strategy):
                raise _Bad(f"layout of {layout.topic} changes initial_partitions, hash or strategy")
            if layout.physical_partitions < cur.physical_partitions:
                raise _Bad(f"layout of {layout.topic} removes physical partitions")
        self._current = {**self._current, layout.topic: layout}
        self._changes.setdefault(layout.topic, []).append(change)

    def _apply_registration(self, offset: int, d: Mapping[str, Any], ts: int) -> None:
        topic = d.get("topic")
        producer = d.get("producer")
        if not isinstance(topic, str) or not isinstance(producer, str) or not producer:
            raise _Bad("registration needs string 'topic' and 'producer'")
        cur = self._current.get(topic)
        if cur is None:
            raise _Bad(f"registration for unmanaged topic {topic}")
        epoch = _int(d, "epoch", 1)
        from_epoch = _int(d, "from_epoch", 1)
        if epoch > cur.epoch or from_epoch > epoch:
            raise _Bad(f"registration epochs {from_epoch}->{epoch} do not exist for {topic} (current {cur.epoch})")
        layout = self.layout(topic, epoch)
        raw_gates = d.get("gates", {})
        if not isinstance(raw_gates, dict):
            raise _Bad("'gates' must be an object")
        gates: List[Gate] = []
        for p_s, g in sorted(raw_gates.items(), key=lambda kv: str(kv[0])):
            try:
                p = int(p_s)
            except ValueError:
                raise _Bad(f"gate partition {p_s!r} is not an int") from None
            if not isinstance(g, dict) or not isinstance(g.get("wait"), dict):
                raise _Bad(f"gate of partition {p} needs 'start' and 'wait'")
            start = _int(g, "start")
            wait: Dict[int, int] = {}
            for q_s, w in g["wait"].items():
                try:
                    q = int(q_s)
                except ValueError:
                    raise _Bad(f"wait partition {q_s!r} is not an int") from None
                if isinstance(w, bool) or not isinstance(w, int) or w < 0:
                    raise _Bad(f"wait offset for partition {q} must be an int >= 0")
                wait[q] = w
            if not 0 <= p < layout.partitions or any(not 0 <= q < layout.physical_partitions for q in wait):
                raise _Bad(f"gate partitions out of range for {topic} epoch {epoch}")
            gates.append(Gate(topic, p, start, wait, producer, epoch, offset))
        reg = Registration(topic, producer, bool(d.get("stable", False)), epoch, from_epoch, tuple(gates), offset, ts)
        self._registrations.setdefault(topic, []).append(reg)
        self._last_by_producer[(topic, producer)] = reg

    # -- reading

    def topics(self) -> List[str]:
        return sorted(self._current)

    def current(self, topic: str) -> Optional[Layout]:
        """The topic's current layout, or ``None`` when it is not managed."""
        return self._current.get(topic)

    def layout(self, topic: str, epoch: int) -> Layout:
        """The topic's layout at ``epoch`` (``KeyError`` when unknown)."""
        with self._lock:
            changes = self._changes.get(topic, [])
            if 1 <= epoch <= len(changes):
                return changes[epoch - 1].layout
        raise KeyError(f"{topic} has no layout epoch {epoch}")

    def layouts(self, topic: str) -> List[Layout]:
        with self._lock:
            return [c.layout for c in self._changes.get(topic, [])]

    def changes(self, topic: str) -> List[LayoutChange]:
        with self._lock:
            return list(self._changes.get(topic, []))

    def registrations(self, topic: str) -> List[Registration]:
        with self._lock:
            return list(self._registrations.get(topic, []))

    def gates(self, topic: str, since_offset: int = 0) -> List[Gate]:
        """Every gate of ``topic`` from registrations at log offset >= ``since_offset``, in log order."""
        with self._lock:
            return [g for r in self._registrations.get(topic, []) if r.offset >= since_offset for g in r.gates]

    def last_registration(self, topic: str, producer_id: str) -> Optional[Registration]:
        with self._lock:
            return self._last_by_producer.get((topic, producer_id))

    def epochs_changed_since(self, topic: str, timestamp_ms: int) -> List[int]:
        """Epochs (>= 2) of layout changes of ``topic`` recorded at or after ``timestamp_ms``."""
        with self._lock:
            return [c.layout.epoch for c in self._changes.get(topic, []) if c.layout.epoch >= 2 and c.timestamp_ms >= timestamp_ms]

    def find_change(self, topic: str, offset: int) -> Optional[LayoutChange]:
        """The accepted layout change written at ``offset``, if any."""
        with self._lock:
            for c in self._changes.get(topic, []):
                if c.offset == offset:
                    return c
        return None

    def lineage(self, topic: str) -> Dict[int, Optional[int]]:
        """Partition -> the partition it split from (``None`` for initial ones),
        for every physical partition the topic ever had."""
        cur = self.current(topic)
        if cur is None:
            return {}
        return {p: cur.parent(p) for p in range(cur.physical_partitions)}
