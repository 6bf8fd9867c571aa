"""Gate decisions (pure, no I/O): how far each partition may be delivered.

A registration puts a :class:`~kafka_ordered.history.Gate` on each target
partition ``p`` at offset ``start``: records of ``p`` at offsets ``>= start``
may be delivered to a group only once, for every source ``q`` of the gate,
the group's *processed* offset of ``q`` is ``>= wait[q]``. Processed is the
maximum of the group's committed offset, the log-start offset, and (for the
owner of ``q``) its own delivered position; for a Spark query it is the
start offsets of the batch being planned.

The consumer wrappers and the Spark source both decide with this module;
neither has a second implementation.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, List, Literal, Mapping, Optional, Set, Tuple

from .history import Gate
from .layout import Layout

__all__ = [
    "TP",
    "gate_open",
    "delivery_limit",
    "pending_waits",
    "plan_end_offsets",
    "processed_offset",
    "ResetPolicy",
    "reset_policy",
    "start_position",
    "GateStatus",
    "GateKeeper",
]

#: A ``(topic, partition)`` pair.
TP = Tuple[str, int]


def processed_offset(*candidates: Optional[int]) -> int:
    """The processed offset of a partition: the largest of the known
    candidates (committed, log start, own position); ``-1`` if none is known."""
    best = -1
    for c in candidates:
        if c is not None and c > best:
            best = c
    return best


#: Where a partition without a committed offset starts: a client's offset reset
#: setting normalised by :func:`reset_policy`.
ResetPolicy = Literal["earliest", "latest", "error"]


def reset_policy(value: Any) -> ResetPolicy:
    """A client's offset reset setting (librdkafka's ``auto.offset.reset`` or
    kafka-python's ``auto_offset_reset``, any of their spellings) normalised."""
    v = str(value).lower()
    if v in ("smallest", "earliest", "beginning"):
        return "earliest"
    if v in ("largest", "latest", "end"):
        return "latest"
    return "error"


def start_position(layout: Optional[Layout], partition: int, reset: ResetPolicy) -> Optional[ResetPolicy]:
    """Where a member starts a partition the group has no committed offset for.

    ``None`` for an unmanaged topic (the client's own reset applies). A
    partition that became undeleted after the topic was managed starts at its
    log start whatever ``reset`` says: records written there before this
    member's metadata refresh must not be skipped. The others follow ``reset``.
    """
    if layout is None:
        return None
    if partition >= layout.initial_partitions:
        return "earliest"
    return reset


def gate_open(gate: Gate, processed: Mapping[int, int]) -> bool:
    """True when every source of ``gate`` is processed up to its wait offset."""
    return all(processed.get(q, -1) >= w for q, w in gate.wait.items())


def delivery_limit(gates: Iterable[Gate], processed: Mapping[int, int]) -> Optional[int]:
    """The first offset of a partition that may not be delivered yet: the
    smallest ``start`` among its closed gates, or ``None`` when none is closed."""
    limit: Optional[int] = None
    for g in gates:
        if (limit is None or g.start < limit) and not gate_open(g, processed):
            limit = g.start
    return limit


def pending_waits(gates: Iterable[Gate], processed: Mapping[int, int]) -> Dict[int, int]:
    """Source partition -> the highest wait offset a closed gate still needs from it."""
    out: Dict[int, int] = {}
    for g in gates:
        for q, w in g.wait.items():
            if processed.get(q, -1) < w and w > out.get(q, -1):
                out[q] = w
    return out


def plan_end_offsets(
    gates: Iterable[Gate], start: Mapping[int, int], latest: Mapping[int, int]
) -> Dict[int, int]:
    """End offsets of the next micro-batch of one topic.

    ``start`` is what earlier, committed batches processed (so it is the
    group's processed offset); ``latest`` the partitions' end offsets. Each
    partition's end is ``latest`` capped at its first gate that ``start``
    does not open, and never below its own start. Partitions missing from
    ``start`` start at 0.
    """
    by_partition: Dict[int, List[Gate]] = {}
    for g in gates:
        by_partition.setdefault(g.partition, []).append(g)
    processed = {p: start.get(p, 0) for p in set(start) | set(latest)}
    out: Dict[int, int] = {}
    for p, hi in latest.items():
        lo = start.get(p, 0)
        limit = delivery_limit(by_partition.get(p, ()), processed)
        end = hi if limit is None else min(hi, limit)
        out[p] = max(lo, end)
    return out


@dataclass(frozen=True)
class GateStatus:
    """A closed gate as seen by one consumer: partition, first held offset,
    and for each source still short of its wait: ``(wait, processed)``.

    ``since`` is when this consumer first saw the gate closed (monotonic
    clock, for durations); ``since_wall`` the same instant as wall-clock Unix
    seconds (``None`` when unknown); ``held_since`` the wall-clock time this
    consumer stopped the partition at the gate (``None`` while it is not
    held, e.g. its position has not reached ``start`` yet).
    """

    topic: str
    partition: int
    start: int
    waiting_on: Mapping[int, Tuple[int, int]]
    since: float
    since_wall: Optional[float] = None
    held_since: Optional[float] = None


def _gate_id(g: Gate) -> Tuple[int, int]:
    return (g.offset, g.partition)


class GateKeeper:
    """Incremental gate bookkeeping for one group member (pure state).

    The caller feeds gates from the layout history (:meth:`add_gates`) and
    processed offsets (:meth:`update`), and asks how far a partition may be
    delivered (:meth:`limit`), whether delivering a record must first be
    announced with ``on_partition_key_assigned`` (:meth:`announce`), and which
    owned sources crossed a pending wait (:meth:`crossed`).

    A gate that opened stays open (commits move forward; seeking a source
    backwards does not re-close gates already passed).
    """

    def __init__(self) -> None:
        self._seen: Set[Tuple[int, int]] = set()
        self._closed: Dict[TP, List[Gate]] = {}
        self._since: Dict[Tuple[int, int], float] = {}
        self._since_wall: Dict[Tuple[int, int], Optional[float]] = {}
        self._opened: Dict[TP, List[int]] = {}
        self._waits: Dict[TP, List[int]] = {}
        self._waited: FrozenSet[TP] = frozenset()
        self._sources: Optional[FrozenSet[TP]] = frozenset()

    def add_gates(self, gates: Iterable[Gate], now: float = 0.0, wall: Optional[float] = None) -> int:
        """Track new gates (already-known ones are ignored); returns how many
        were new. ``now`` (monotonic) and ``wall`` (wall-clock Unix seconds)
        are when they were seen, reported by :meth:`status`."""
        added = 0
        for g in gates:
            gid = _gate_id(g)
            if gid in self._seen:
                continue
            self._seen.add(gid)
            self._since[gid] = now
            self._since_wall[gid] = wall
            lst = self._closed.setdefault((g.topic, g.partition), [])
            bisect.insort(lst, g, key=lambda x: (x.start, x.offset))
            for q, w in g.wait.items():
                ws = self._waits.setdefault((g.topic, q), [])
                i = bisect.bisect_left(ws, w)
                if i == len(ws) or ws[i] != w:
                    ws.insert(i, w)
            added += 1
        if added:
            self._waited = frozenset(self._waits)
            self._sources = None
        return added

    def sources(self) -> FrozenSet[TP]:
        """Every source partition some closed gate still waits on."""
        if self._sources is None:
            self._sources = frozenset((tp[0], q) for tp, gs in self._closed.items() for g in gs for q in g.wait)
        return self._sources

    def waited_on(self) -> FrozenSet[TP]:
        """Every partition some gate (open or closed) waits on."""
        return self._waited

    def update(self, processed: Mapping[TP, int]) -> List[Gate]:
        """Open every gate whose sources are processed far enough; returns the
        newly opened gates."""
        opened: List[Gate] = []
        self._sources = None
        for tp in list(self._closed):
            topic = tp[0]
            keep: List[Gate] = []
            for g in self._closed[tp]:
                if all(processed.get((topic, q), -1) >= w for q, w in g.wait.items()):
                    opened.append(g)
                    bisect.insort(self._opened.setdefault(tp, []), g.start)
                    self._since.pop(_gate_id(g), None)
                    self._since_wall.pop(_gate_id(g), None)
                else:
                    keep.append(g)
            if keep:
                self._closed[tp] = keep
            else:
                del self._closed[tp]
        return opened

    def limit(self, tp: TP) -> Optional[int]:
        """First offset of ``tp`` that may not be delivered yet (``None``: no limit)."""
        gs = self._closed.get(tp)
        return gs[0].start if gs else None

    def announce(self, tp: TP, offset: int) -> bool:
        """Whether delivering the record of ``tp`` at ``offset`` must be preceded
        by ``on_partition_key_assigned([tp])``: true once per opened gate, for
        the first record at or past its start. Marks it announced."""
        starts = self._opened.get(tp)
        if not starts or starts[0] > offset:
            return False
        del starts[: bisect.bisect_right(starts, offset)]
        if not starts:
            del self._opened[tp]
        return True

    def forget_announcements(self, tp: TP, position: int) -> None:
        """Drop announcements for records before ``position`` (delivered by someone else)."""
        starts = self._opened.get(tp)
        if starts:
            del starts[: bisect.bisect_left(starts, position)]
            if not starts:
                del self._opened[tp]

    def crossed(self, tp: TP, before: int, after: int) -> bool:
        """Whether moving source ``tp``'s processed offset from ``before`` to
        ``after`` reaches the wait offset of some gate (open or closed)."""
        ws = self._waits.get(tp)
        if not ws or after <= before:
            return False
        i = bisect.bisect_right(ws, before)
        return i < len(ws) and ws[i] <= after

    def needs_commit(self, tp: TP, committed: int) -> bool:
        """Whether some gate waits on source ``tp`` beyond ``committed`` (so its
        owner should commit promptly)."""
        ws = self._waits.get(tp)
        return ws is not None and len(ws) > 0 and ws[-1] > committed

    def watched(self) -> FrozenSet[TP]:
        """Partitions whose records need a per-record decision: closed gates or
        opened gates not yet announced."""
        return frozenset(self._closed) | frozenset(self._opened)

    def status(self, processed: Mapping[TP, int]) -> List[GateStatus]:
        """The first closed gate of every partition, with what it waits on
        (``held_since`` is left ``None``: holding is the consumer's business)."""
        out: List[GateStatus] = []
        for (topic, p), gs in sorted(self._closed.items()):
            g = gs[0]
            waiting = {
                q: (w, processed.get((topic, q), -1))
                for q, w in sorted(g.wait.items())
                if processed.get((topic, q), -1) < w
            }
            gid = _gate_id(g)
            out.append(GateStatus(topic, p, g.start, waiting, self._since.get(gid, 0.0), self._since_wall.get(gid)))
        return out

    def closed_partitions(self) -> List[TP]:
        """The partitions with a gate added and not yet opened by
        :meth:`update`, sorted."""
        return sorted(self._closed)
