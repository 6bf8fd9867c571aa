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

Protocol: :attr:`LayoutHistory.protocol` is the ordering protocol named by
the log's protocol record (``None`` before one: a log written by protocol 1
clients, or an empty one); :meth:`LayoutHistory.protocol_problem` says why a
client of this version must not use the log. A ``"v": 1`` record after the
protocol record was written by a protocol 1 client that had not read it yet:
it is applied and its offset kept in :attr:`LayoutHistory.legacy_after_marker`
(the reader reports it).
"""

from __future__ import annotations

import bisect
import threading
from typing import Dict, List, Optional, Tuple

from .errors import CorruptLayoutRecordError, UnsupportedLayoutVersionError
from .layout import Layout
from .records import (
    PROTOCOL_VERSION,
    RECORD_VERSION,
    BadRecord,
    CorruptPolicy,
    Gate,
    LayoutChange,
    LayoutRecord,
    LogProblem,
    NewerRecordVersion,
    ProtocolRecord,
    Registration,
    RegistrationRecord,
    decode,
    encode_layout,
    encode_registration,
)

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
        #: Offsets of gated registrations that repeat the same producer's
        #: previous one for the topic (same epochs and gates): applied once, at the first.
        self.duplicates: List[int] = []
        #: Ordering protocol of the log (from its protocol record), ``None`` before one.
        self.protocol: Optional[int] = None
        #: Offset of the protocol record that set :attr:`protocol`.
        self.protocol_offset: Optional[int] = None
        #: ``"v": 1`` records (protocol 1 writers) found after the protocol record.
        self.legacy_after_marker: List[int] = []
        #: Valid records applied (any type).
        self.records = 0
        self._current: Dict[str, Layout] = {}
        self._changes: Dict[str, List[LayoutChange]] = {}
        self._registrations: Dict[str, List[Registration]] = {}
        # Gates by target and by source partition, in log order (consumers
        # load those of partitions they are assigned).
        self._gates_on: Dict[Tuple[str, int], List[Gate]] = {}
        self._gates_from: Dict[Tuple[str, int], List[Gate]] = {}
        self._last_by_producer: Dict[Tuple[str, str], Registration] = {}
        self._lock = threading.RLock()

    # -- applying records

    def apply(self, offset: int, key: Optional[bytes], value: Optional[bytes], timestamp_ms: int = 0) -> None:
        """Apply the record at ``offset``, which must be :attr:`next_offset`
        (a record already applied is ignored; a gap is the reader's to
        resolve, see :meth:`skip_to`).

        Raises :class:`CorruptLayoutRecordError` for a bad record under the
        ``refuse`` policy (under ``skip`` it is recorded in :attr:`problems`
        and skipped alone), :class:`UnsupportedLayoutVersionError` for a
        record written by a newer kafka-ordered, under either policy. After
        either error nothing more can be applied.
        """
        with self._lock:
            if offset < self.next_offset:
                return
            if offset > self.next_offset:
                raise ValueError(f"layout log offset {offset} applied before {self.next_offset}: a gap to resolve first")
            try:
                self._apply(offset, value, timestamp_ms)
            except NewerRecordVersion as e:
                raise UnsupportedLayoutVersionError(
                    f"layout log record at offset {offset} was written by a newer kafka-ordered ({e}): "
                    "upgrade kafka-ordered on this client before it reads the layout log",
                    offset=offset, version=e.version,
                ) from None
            except BadRecord as e:
                if self.corrupt_policy == "refuse":
                    raise CorruptLayoutRecordError(
                        f"layout log record at offset {offset} is corrupt: {e} (policy 'refuse'; "
                        "set ordered.layout.corrupt.policy=skip to skip it)",
                        offset=offset, reason=str(e),
                    ) from None
                self.problems.append(LogProblem(offset, str(e)))
            self.next_offset = offset + 1
            self.version += 1

    def skip_to(self, offset: int) -> None:
        """Accept that no record exists below ``offset`` from :attr:`next_offset`
        (a gap the reader found permanent: compaction, transaction markers)."""
        with self._lock:
            if offset > self.next_offset:
                self.next_offset = offset
                self.version += 1

    def _apply(self, offset: int, value: Optional[bytes], ts: int) -> None:
        rec = decode(value)
        if isinstance(rec, ProtocolRecord):
            if rec.protocol > PROTOCOL_VERSION:
                raise NewerRecordVersion(RECORD_VERSION + rec.protocol - PROTOCOL_VERSION)
            if self.protocol is None or rec.protocol > self.protocol:
                self.protocol, self.protocol_offset = rec.protocol, offset
            self.records += 1
            return
        if isinstance(rec, LayoutRecord):
            self._apply_layout(offset, rec, ts)
        else:
            self._apply_registration(offset, rec, ts)
        self.records += 1
        if rec.version < RECORD_VERSION and self.protocol is not None:
            self.legacy_after_marker.append(offset)

    def protocol_problem(self) -> Optional[str]:
        """Why a client of this version must not use the log as read so far,
        or ``None``: the log is empty or carries this version's protocol record."""
        if self.protocol is not None or self.next_offset == 0:
            return None
        return (
            "the layout log was written by kafka-ordered clients of protocol 1 (time-based: a settle pause "
            f"after each registration) and has no protocol-version record; this kafka-ordered speaks protocol "
            f"{PROTOCOL_VERSION} (causal freshness tokens) and the two must not share a log. Stop every "
            "producer, consumer and Spark query of older versions, then run `kafka-ordered upgrade-protocol` "
            "(LayoutAdmin.upgrade_protocol) once, then start the upgraded clients (docs/protocol.md)"
        )

    def _apply_layout(self, offset: int, rec: LayoutRecord, ts: int) -> None:
        layout = rec.layout
        change = LayoutChange(layout, rec.op, rec.admin_id, offset, ts)
        cur = self._current.get(layout.topic)
        if rec.op == "unmanage":
            self._unmanage(layout, cur, change)
            return
        if cur is None:
            if layout.epoch != 1 or rec.op not in ("create", "adopt"):
                raise BadRecord(f"first layout of {layout.topic} must be epoch 1 from create/adopt, "
                                f"got epoch {layout.epoch} from {rec.op}")
        else:
            if layout.epoch <= cur.epoch:
                self.superseded.append(change)
                return
            if layout.epoch != cur.epoch + 1:
                raise BadRecord(f"epoch gap for {layout.topic}: {cur.epoch} -> {layout.epoch}")
            if (layout.initial_partitions, layout.hash, layout.strategy) != (cur.initial_partitions, cur.hash, cur.strategy):
                raise BadRecord(f"layout of {layout.topic} changes initial_partitions, hash or strategy")
            if layout.physical_partitions < cur.physical_partitions:
                raise BadRecord(f"layout of {layout.topic} removes physical partitions")
        self._current = {**self._current, layout.topic: layout}
        self._changes.setdefault(layout.topic, []).append(change)

    def _unmanage(self, layout: Layout, cur: Optional[Layout], change: LayoutChange) -> None:
        """An ``unmanage`` record names the layout it ends (its current one):
        the topic, its layouts, registrations and gates leave the history (a
        later create/adopt starts again at epoch 1). One naming an older
        epoch lost a race with a layout change and is superseded."""
        topic = layout.topic
        if cur is None:
            raise BadRecord(f"unmanage of {topic}, which is not managed")
        if layout.epoch != cur.epoch:
            if layout.epoch < cur.epoch:
                self.superseded.append(change)
                return
            raise BadRecord(f"unmanage of {topic} names epoch {layout.epoch}, current is {cur.epoch}")
        self._current = {t: lay for t, lay in self._current.items() if t != topic}
        self._changes.pop(topic, None)
        self._registrations.pop(topic, None)
        self._gates_on = {k: v for k, v in self._gates_on.items() if k[0] != topic}
        self._gates_from = {k: v for k, v in self._gates_from.items() if k[0] != topic}
        self._last_by_producer = {k: v for k, v in self._last_by_producer.items() if k[0] != topic}

    def _apply_registration(self, offset: int, rec: RegistrationRecord, ts: int) -> None:
        topic = rec.topic
        cur = self._current.get(topic)
        if cur is None:
            raise BadRecord(f"registration for unmanaged topic {topic}")
        if rec.epoch > cur.epoch or rec.from_epoch > rec.epoch:
            raise BadRecord(f"registration epochs {rec.from_epoch}->{rec.epoch} do not exist for {topic} "
                            f"(current {cur.epoch})")
        layout = self.layout(topic, rec.epoch)
        gates: List[Gate] = []
        for p, (start, wait) in rec.gates.items():
            if not 0 <= p < layout.partitions or any(not 0 <= q < layout.physical_partitions for q in wait):
                raise BadRecord(f"gate partitions out of range for {topic} epoch {rec.epoch}")
            gates.append(Gate(topic, p, start, dict(wait), rec.producer_id, rec.epoch, offset))
        last = self._last_by_producer.get((topic, rec.producer_id))
        if (gates and last is not None
                and (last.epoch, last.from_epoch, last.stable) == (rec.epoch, rec.from_epoch, rec.stable)
                and [(g.partition, g.start, dict(g.wait)) for g in last.gates]
                == [(g.partition, g.start, dict(g.wait)) for g in gates]):
            # The same registration again: a writer's retry after its acknowledgement was lost
            # (the layout log's leader failed), or a switch retried after such a failure. It adds
            # no gate; the first one stands (a stamp naming this offset is covered by a view past it).
            self.duplicates.append(offset)
            return
        reg = Registration(topic, rec.producer_id, rec.stable, rec.epoch, rec.from_epoch, tuple(gates), offset, ts)
        self._registrations.setdefault(topic, []).append(reg)
        for g in gates:
            self._gates_on.setdefault((topic, g.partition), []).append(g)
            for q in g.wait:
                self._gates_from.setdefault((topic, q), []).append(g)
        self._last_by_producer[(topic, rec.producer_id)] = reg

    # -- reading

    def topics(self) -> List[str]:
        """Every managed topic (with at least one layout), sorted."""
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
        """Every layout of ``topic``, oldest (epoch 1) first; empty when unmanaged."""
        with self._lock:
            return [c.layout for c in self._changes.get(topic, [])]

    def changes(self, topic: str) -> List[LayoutChange]:
        """Every :class:`LayoutChange` of ``topic`` (layout, operation, log offset
        and time), in log order; empty when unmanaged."""
        with self._lock:
            return list(self._changes.get(topic, []))

    def registrations(self, topic: str) -> List[Registration]:
        """Every :class:`Registration` of ``topic`` that was appended (those
        carrying gates, and those of stable producer ids), in log order."""
        with self._lock:
            return list(self._registrations.get(topic, []))

    def gates(self, topic: str, since_offset: int = 0) -> List[Gate]:
        """Every gate of ``topic`` from registrations at log offset >= ``since_offset``, in log order
        (a look-up, then work proportional to the gates returned)."""
        with self._lock:
            regs = self._registrations.get(topic, [])
            first = bisect.bisect_left(regs, since_offset, key=lambda r: r.offset)
            return [g for r in regs[first:] for g in r.gates]

    def gates_on(self, topic: str, partition: int, before_offset: Optional[int] = None) -> List[Gate]:
        """The gates on ``topic``/``partition`` from registrations at log offset
        < ``before_offset`` (default: all), in log order."""
        return self._indexed(self._gates_on, (topic, partition), before_offset)

    def gates_waiting_on(self, topic: str, partition: int, before_offset: Optional[int] = None) -> List[Gate]:
        """The gates that wait on ``topic``/``partition`` (a source), from
        registrations at log offset < ``before_offset`` (default: all), in log order."""
        return self._indexed(self._gates_from, (topic, partition), before_offset)

    def _indexed(self, index: Dict[Tuple[str, int], List[Gate]], key: Tuple[str, int],
                 before: Optional[int]) -> List[Gate]:
        with self._lock:
            gs = index.get(key, [])
            if before is None:
                return list(gs)
            return gs[: bisect.bisect_left(gs, before, key=lambda g: g.offset)]

    def last_registration(self, topic: str, producer_id: str) -> Optional[Registration]:
        """The latest registration of ``producer_id`` for ``topic``, or ``None``:
        where a restarting stable producer id continues from."""
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
