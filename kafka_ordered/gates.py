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
import heapq
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, List, Literal, Mapping, Optional, Tuple

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


class _Closed:
    """A tracked closed gate: the gate, its unmet waits, since when, and the
    serial number that tells its index entries from those of an earlier
    tracking of the same gate (dropped, then added again)."""

    __slots__ = ("gate", "unmet", "since", "since_wall", "serial")

    def __init__(self, gate: Gate, since: float, since_wall: Optional[float], serial: int) -> None:
        self.gate = gate
        self.unmet = 0
        self.since = since
        self.since_wall = since_wall
        self.serial = serial


_Entry = Tuple[int, int, int, int]  # (wait or -wait or start, registration offset, target partition, serial)


class GateKeeper:
    """Incremental, indexed gate bookkeeping for one group member (pure state).

    The caller decides the scope: it feeds the gates on partitions it
    delivers (:meth:`add_gates`), the waits of gates elsewhere on partitions
    it owns (:meth:`add_waits`), processed offsets of sources
    (:meth:`update`), and forgets partitions it no longer owns
    (:meth:`drop`). It asks how far a partition may be delivered
    (:meth:`limit`), whether delivering a record must first be announced with
    ``on_partition_key_assigned`` (:meth:`announce`), and which owned sources
    crossed a pending wait (:meth:`crossed`).

    Cost: every closed gate is indexed by its target (a heap on start) and by
    each of its waits (per source, a heap of unmet and one of met waits), so
    :meth:`update` does work for the sources whose processed offset changed
    and the gates that opened, never for the gates that stay closed. An
    opened gate is forgotten (only its start stays until announced); nothing
    is kept for a partition without a closed gate, a pending announcement or
    a pending hand-off wait.

    A gate that opened stays open (commits move forward; seeking a source
    backwards does not re-close gates already passed). A closed gate opens
    when all its sources are processed far enough at the same time.
    """

    def __init__(self) -> None:
        self._gates: Dict[Tuple[int, int], _Closed] = {}
        self._serial = 0
        self._targets: Dict[TP, List[_Entry]] = {}  # heap of (start, reg offset, partition, serial)
        # per source: heaps of (wait, ...) not yet processed and of (-wait, ...)
        # processed; entries of gates no longer tracked are skipped and
        # compacted away; counts of live entries
        self._unmet: Dict[TP, List[_Entry]] = {}
        self._met: Dict[TP, List[_Entry]] = {}
        self._live: Dict[TP, List[int]] = {}  # source -> [live unmet, live met]
        self._processed: Dict[TP, int] = {}  # last processed offset of each indexed source
        self._to_open: List[Tuple[int, int]] = []  # closed gates whose waits all hold
        self._opened: Dict[TP, List[int]] = {}
        self._floor: Dict[TP, int] = {}  # announcements below this offset are someone else's
        self._waits: Dict[TP, List[int]] = {}
        self._waited: FrozenSet[TP] = frozenset()
        #: Whether opened gates are remembered for :meth:`announce` (a member
        #: without a hand-off listener has nothing to announce).
        self.announcing = True
        #: Counts changes of what :meth:`watched` returns (for callers' caches).
        self.changes = 0

    # -- feeding

    def add_gates(self, gates: Iterable[Gate], now: float = 0.0, wall: Optional[float] = None,
                  waits_for: Optional[Mapping[TP, int]] = None) -> int:
        """Track new gates as closed until :meth:`update` opens them (a gate
        already tracked is ignored); returns how many were new. ``now``
        (monotonic) and ``wall`` (wall-clock Unix seconds) are when they were
        seen, reported by :meth:`status`. Their waits count for
        :meth:`crossed`/:meth:`needs_commit` on every source, or, with
        ``waits_for`` (owned source -> its committed offset), only on those
        sources and above that offset."""
        new: List[Gate] = []
        for g in gates:
            gid = _gate_id(g)
            if gid in self._gates:
                continue
            self._serial += 1
            n = self._serial
            c = self._gates[gid] = _Closed(g, now, wall, n)
            heapq.heappush(self._targets.setdefault((g.topic, g.partition), []), (g.start, g.offset, g.partition, n))
            for q, w in g.wait.items():
                src = (g.topic, q)
                live = self._live.setdefault(src, [0, 0])
                if self._processed.get(src, -1) >= w:
                    heapq.heappush(self._met.setdefault(src, []), (-w, g.offset, g.partition, n))
                    live[1] += 1
                else:
                    heapq.heappush(self._unmet.setdefault(src, []), (w, g.offset, g.partition, n))
                    live[0] += 1
                    c.unmet += 1
            if not c.unmet:
                self._to_open.append(gid)
            new.append(g)
        if new:
            self.changes += 1
            self.add_waits(new, waits_for)
        return len(new)

    def add_waits(self, gates: Iterable[Gate], waits_for: Optional[Mapping[TP, int]] = None) -> None:
        """Record the waits of ``gates`` for :meth:`crossed`/:meth:`needs_commit`
        without tracking the gates themselves (their partitions are another
        member's): on every source, or only those in ``waits_for`` (source ->
        committed offset) and above that offset."""
        changed = False
        for g in gates:
            for q, w in g.wait.items():
                src = (g.topic, q)
                if waits_for is not None and (src not in waits_for or w <= waits_for[src]):
                    continue
                ws = self._waits.setdefault(src, [])
                i = bisect.bisect_left(ws, w)
                if i == len(ws) or ws[i] != w:
                    ws.insert(i, w)
                    changed = True
        if changed:
            self._waited = frozenset(self._waits)

    def drop(self, tp: TP) -> None:
        """Forget ``tp`` as a target (its closed gates, announcements) and as a
        source of hand-off waits (the member no longer owns it)."""
        for e in self._targets.pop(tp, ()):
            c = self._live_gate(e)
            if c is not None:
                del self._gates[(e[1], e[2])]
                self._untrack(c.gate)
        if self._to_open:
            self._to_open = [gid for gid in self._to_open if gid in self._gates]
        self._opened.pop(tp, None)
        self._floor.pop(tp, None)
        if self._waits.pop(tp, None) is not None:
            self._waited = frozenset(self._waits)
        self.changes += 1

    def prune_waits(self, tp: TP, committed: int) -> None:
        """The group committed ``tp`` at ``committed``: waits at or below it
        need no hand-off any more."""
        ws = self._waits.get(tp)
        if ws and ws[0] <= committed:
            del ws[: bisect.bisect_right(ws, committed)]
            if not ws:
                del self._waits[tp]
                self._waited = frozenset(self._waits)

    def _untrack(self, g: Gate) -> None:
        """``g`` left ``_gates`` (opened or dropped): count its index entries out."""
        for q, w in g.wait.items():
            src = (g.topic, q)
            live = self._live.get(src)
            if live is None:
                continue
            live[1 if self._processed.get(src, -1) >= w else 0] -= 1
            if live[0] + live[1] <= 0:
                del self._live[src]
                self._unmet.pop(src, None)
                self._met.pop(src, None)
                self._processed.pop(src, None)
                continue
            for index, n in ((self._unmet, live[0]), (self._met, live[1])):
                h = index.get(src)
                if h is not None and len(h) > 2 * n + 16:  # mostly entries of gates no longer tracked
                    h = [e for e in h if self._live_gate(e) is not None]
                    heapq.heapify(h)
                    index[src] = h

    def _live_gate(self, e: _Entry) -> Optional[_Closed]:
        """The tracked gate an index entry belongs to, or None for a stale entry."""
        c = self._gates.get((e[1], e[2]))
        return c if c is not None and c.serial == e[3] else None

    # -- opening

    def sources(self) -> FrozenSet[TP]:
        """Every source partition a closed gate still waits on (unmet waits)."""
        return frozenset(src for src, live in self._live.items() if live[0] > 0)

    def has_closed(self) -> bool:
        """Whether any tracked gate is closed."""
        return bool(self._gates)

    def has_announcements(self) -> bool:
        """Whether an opened gate waits for :meth:`announce`."""
        return bool(self._opened)

    def waited_on(self) -> FrozenSet[TP]:
        """Every partition with a pending hand-off wait (see :meth:`add_waits`)."""
        return self._waited

    def update(self, processed: Mapping[TP, int]) -> List[Gate]:
        """Take the processed offsets of sources; open every gate whose
        sources are all processed far enough; returns the newly opened gates.

        A source's offset is remembered while a tracked gate waits on it (a
        source left out keeps that value; a gate added later starts from it);
        offsets of sources nothing waits on are ignored."""
        for src, off in processed.items():
            live = self._live.get(src)
            if live is None or self._processed.get(src) == off:
                continue
            self._processed[src] = off
            unmet = self._unmet.get(src)
            while unmet and unmet[0][0] <= off:
                e = heapq.heappop(unmet)
                c = self._live_gate(e)
                if c is None:
                    continue
                heapq.heappush(self._met.setdefault(src, []), (-e[0], e[1], e[2], e[3]))
                live[0] -= 1
                live[1] += 1
                c.unmet -= 1
                if not c.unmet:
                    self._to_open.append((e[1], e[2]))
            met = self._met.get(src)
            while met and -met[0][0] > off:  # processed went back below a met wait
                e = heapq.heappop(met)
                c = self._live_gate(e)
                if c is None:
                    continue
                if not c.unmet:
                    self._to_open.remove((e[1], e[2]))
                heapq.heappush(self._unmet.setdefault(src, []), (-e[0], e[1], e[2], e[3]))
                live[1] -= 1
                live[0] += 1
                c.unmet += 1
        opened: List[Gate] = []
        if self._to_open:
            to_open, self._to_open = self._to_open, []
            for gid in to_open:
                c = self._gates.pop(gid, None)
                if c is None:
                    continue
                g = c.gate
                opened.append(g)
                self._untrack(g)
                tp = (g.topic, g.partition)
                if self.announcing and g.start >= self._floor.get(tp, -1):
                    bisect.insort(self._opened.setdefault(tp, []), g.start)
                self._head(tp)
            if opened:
                self.changes += 1
        return opened

    def _head(self, tp: TP) -> Optional[_Entry]:
        """The first still-closed gate of ``tp`` (drops opened ones from the heap)."""
        h = self._targets.get(tp)
        while h and self._live_gate(h[0]) is None:
            heapq.heappop(h)
        if h:
            return h[0]
        self._targets.pop(tp, None)
        return None

    # -- delivering

    def limit(self, tp: TP) -> Optional[int]:
        """First offset of ``tp`` that may not be delivered yet (``None``: no limit)."""
        head = self._head(tp) if tp in self._targets else None
        return head[0] if head is not None else None

    def limit_sources(self, tp: TP) -> FrozenSet[TP]:
        """The sources the first closed gate of ``tp`` waits on (empty: none is closed)."""
        head = self._head(tp) if tp in self._targets else None
        c = self._live_gate(head) if head is not None else None
        if c is None:
            return frozenset()
        return frozenset((c.gate.topic, q) for q in c.gate.wait)

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
            self.changes += 1
        return True

    def next_announcement(self, tp: TP) -> Optional[int]:
        """The start of the first opened gate of ``tp`` not announced yet."""
        starts = self._opened.get(tp)
        return starts[0] if starts else None

    def forget_announcements(self, tp: TP, position: int) -> None:
        """Drop announcements for records before ``position`` (delivered by
        someone else), also of gates that open later."""
        self._floor[tp] = max(self._floor.get(tp, -1), position)
        starts = self._opened.get(tp)
        if starts:
            del starts[: bisect.bisect_left(starts, position)]
            if not starts:
                del self._opened[tp]
                self.changes += 1

    def crossed(self, tp: TP, before: int, after: int) -> bool:
        """Whether moving source ``tp``'s processed offset from ``before`` to
        ``after`` reaches a pending hand-off wait (of an open or closed gate)."""
        if after <= before:
            return False
        w = self.next_wait(tp, before)
        return w is not None and w <= after

    def next_wait(self, tp: TP, processed: int) -> Optional[int]:
        """The first pending hand-off wait on source ``tp`` above
        ``processed``: moving the processed offset there or past
        :meth:`crossed` it (``None``: none)."""
        ws = self._waits.get(tp)
        if not ws:
            return None
        i = bisect.bisect_right(ws, processed)
        return ws[i] if i < len(ws) else None

    def first_unmet(self, src: TP) -> Optional[int]:
        """The lowest wait of a closed gate on source ``src`` not met yet
        (perhaps of a gate no longer tracked: never above the true one):
        until ``src`` is processed that far, :meth:`update` opens nothing
        because of it."""
        unmet = self._unmet.get(src)
        return unmet[0][0] if unmet else None

    def needs_commit(self, tp: TP, committed: int) -> bool:
        """Whether some gate waits on source ``tp`` beyond ``committed`` (so its
        owner should commit promptly)."""
        ws = self._waits.get(tp)
        return ws is not None and len(ws) > 0 and ws[-1] > committed

    def watched(self) -> FrozenSet[TP]:
        """Partitions whose records need a decision: closed gates or opened
        gates not yet announced."""
        return frozenset(tp for tp in self._targets if self._head(tp) is not None) | frozenset(self._opened)

    def status(self, processed: Mapping[TP, int]) -> List[GateStatus]:
        """The first closed gate of every partition, with what it waits on
        (``held_since`` is left ``None``: holding is the consumer's business)."""
        out: List[GateStatus] = []
        for tp in sorted(self._targets):
            head = self._head(tp)
            if head is None:
                continue
            c = self._gates[(head[1], head[2])]
            g = c.gate
            waiting = {
                q: (w, processed.get((g.topic, q), -1))
                for q, w in sorted(g.wait.items())
                if processed.get((g.topic, q), -1) < w
            }
            out.append(GateStatus(g.topic, g.partition, g.start, waiting, c.since, c.since_wall))
        return out

    def closed_partitions(self) -> List[TP]:
        """The partitions with a gate added and not yet opened by
        :meth:`update`, sorted."""
        return sorted(tp for tp in list(self._targets) if self._head(tp) is not None)
