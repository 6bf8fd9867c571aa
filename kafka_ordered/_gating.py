"""The gating consumer core, composed over a :class:`~kafka_ordered._ports.ConsumerPort`.

One implementation of the consumer side of the protocol for every client:
the confluent-kafka adapter (:class:`kafka_ordered.OrderedConsumer`) and the
kafka-python adapter (:class:`kafka_ordered.kafka_python.OrderedKafkaConsumer`)
own a :class:`GatingCore` and call it around their client's fetches. The gate
decisions themselves (processed offsets, start positions, which gates are
closed) come from the pure :mod:`kafka_ordered.gates`.

Offsets: the core owns offset storage. Adapters turn the client's own
auto-commit off; with the application's auto-commit on, the core commits the
positions of records returned by earlier polls every ``auto.commit.interval``
and promptly when another member's gate waits on a partition it owns.
Records fetched but held at a gate are never committed.
"""

from __future__ import annotations

import bisect
import logging
import time
from dataclasses import replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ._freshness import CausalFreshness
from ._ports import TP, ConsumerPort, LayoutView, OffsetsPort
from .gates import GateKeeper, GateStatus, ResetPolicy, processed_offset, start_position
from .history import LayoutHistory
from .listener import PartitionKeyRebalanceListener
from .metrics import GATE_WAIT_BUCKETS, ConsumerMetrics, GateMetrics, WaitHistogram
from .tokens import Run

__all__ = ["GatingCore", "PartitionState", "GatingOptions"]

log = logging.getLogger("kafka_ordered.consumer")

_LOG_START_REFRESH_S = 5.0


class PartitionState:
    """Everything the core knows about one partition (as kafka-python's
    ``TopicPartitionState``). Kept for owned partitions and for the sources
    of closed gates (their committed and log-start offsets)."""

    __slots__ = (
        "owned",
        "position",
        "processed",
        "revoke_mark",
        "committed",
        "log_start",
        "held",
        "held_since",
        "held_wall",
        "user_paused",
        "stored",
        "deps",
        "init_commit",
        "stall_s",
    )

    def __init__(self) -> None:
        self.owned = False
        # Position the client cannot tell (it reports none after a seek until
        # the next record): starts, holds, seeks.
        self.position: Optional[int] = None
        self.processed: Optional[int] = None  # position as of the previous poll
        self.revoke_mark = -1  # processed offset at the last maybe_revoked check
        self.committed = -1  # the group's committed offset, as last known
        self.log_start: Optional[int] = None
        self.held: Optional[int] = None  # first offset held back at a closed gate
        self.held_since: Optional[float] = None  # monotonic
        self.held_wall: Optional[float] = None  # wall clock, for operators
        self.user_paused = False
        self.stored: Optional[int] = None  # store_offsets()
        # Gates opened inside this member: (start, {source: wait}) whose source
        # commits must be durable before commits of this partition past start.
        self.deps: List[Tuple[int, Dict[TP, int]]] = []
        self.init_commit = False
        self.stall_s = 0.0

    def start_at(self, offset: int) -> None:
        self.position = self.processed = self.revoke_mark = offset

    def drop_ownership(self) -> None:
        self.owned = False
        self.position = self.processed = self.held = self.held_since = self.held_wall = self.stored = None
        self.revoke_mark = -1
        self.deps = []
        self.init_commit = False


class GatingOptions:
    """The ``ordered.*`` consumer options the core uses, parsed."""

    __slots__ = ("timeout", "gating", "commit_interval", "auto_commit", "auto_commit_interval", "reset")

    def __init__(self, opts: Mapping[str, Any], auto_commit: bool, auto_commit_interval_s: float,
                 reset: ResetPolicy) -> None:
        self.timeout: float = opts["ordered.metadata.timeout.ms"] / 1000.0
        self.gating: bool = opts["ordered.gating"]
        self.commit_interval: float = opts["ordered.commit.interval.ms"] / 1000.0
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval_s
        self.reset = reset


class GatingCore:
    """Gate bookkeeping of one group member over a client port.

    The adapter calls :meth:`assigned`/:meth:`assigned_at`/:meth:`revoked`
    from its rebalance callbacks, :meth:`begin_poll` at the start of each
    poll, :meth:`watched` and :meth:`admit` on each
    fetched batch, :meth:`rewind` when a batch cannot be returned, and
    :meth:`maintain` between empty fetches.
    """

    def __init__(self, port: ConsumerPort, follower: LayoutView, offsets: OffsetsPort,
                 options: GatingOptions) -> None:
        self.port = port
        self.follower = follower
        self.offsets = offsets
        self.opts = options
        self.keeper = GateKeeper()
        self.listener: Optional[PartitionKeyRebalanceListener] = None
        self.subscribed: Set[str] = set()
        self.parts: Dict[TP, PartitionState] = {}
        self._owned: Set[TP] = set()
        self._held: Set[TP] = set()
        self._init_commit: Set[TP] = set()
        self._stored_mode = False
        self._committed_at = float("-inf")
        self._log_start_at = float("-inf")
        self._gate_offsets: Dict[str, int] = {}
        self._seen_version = -1
        #: Expected fetch offsets and the catch-ups of the causal-token rule.
        self.freshness = CausalFreshness(follower)
        self._owned_topics: Optional[Set[str]] = None
        self.last_commit = time.monotonic()
        self.records_held_back = 0
        self.last_wait_s: Optional[float] = None
        self._wait_counts = [0] * (len(GATE_WAIT_BUCKETS) + 1)
        self._wait_sum = 0.0

    # -- state

    @property
    def history(self) -> LayoutHistory:
        return self.follower.history

    @property
    def owned(self) -> Set[TP]:
        """Partitions this member owns (read-only view)."""
        return self._owned

    def state(self, tp: TP) -> PartitionState:
        st = self.parts.get(tp)
        if st is None:
            st = self.parts[tp] = PartitionState()
        return st

    def owned_topics(self) -> Set[str]:
        """Topics of the owned partitions (cached until the assignment changes)."""
        topics = self._owned_topics
        if topics is None:
            topics = self._owned_topics = {t for t, _ in self._owned}
        return topics

    def held(self) -> Set[TP]:
        """Partitions stopped at a closed gate."""
        return self._held

    @property
    def stall_seconds(self) -> Dict[TP, float]:
        """Total time each partition has waited at gates that since opened."""
        return {tp: st.stall_s for tp, st in self.parts.items() if st.stall_s}

    # -- assignment

    def assigned(self, tps: Sequence[TP], committed: Mapping[TP, int]) -> Dict[TP, int]:
        """Record an assignment; returns explicit start offsets for managed
        partitions without a committed offset (see :func:`gates.start_position`).
        Those starts are committed at the next poll so that gates waiting on
        them can open before any record arrives."""
        history = self.follower.sync()  # a topic may have become managed a moment ago
        earliest: List[TP] = []
        latest: List[TP] = []
        for tp in tps:
            st = self.state(tp)
            st.owned = True
            self._owned.add(tp)
            self._owned_topics = None
            self.freshness.jumped(tp)
            c = committed.get(tp, -1)
            if c >= 0:
                st.committed = max(st.committed, c)
                st.start_at(c)
                self.keeper.forget_announcements(tp, c)
                continue
            where = start_position(history.current(tp[0]), tp[1], self.opts.reset)
            if where == "earliest":
                earliest.append(tp)
            elif where == "latest":
                latest.append(tp)
        starts = {**self.offsets.start_offsets(earliest), **self.offsets.end_offsets(latest)}
        for tp, off in starts.items():
            self.parts[tp].start_at(off)
            self.parts[tp].init_commit = True
            self._init_commit.add(tp)
            self.keeper.forget_announcements(tp, off)
        self.refresh_gates(force=True)
        return starts

    def assigned_at(self, offsets: Mapping[TP, int]) -> None:
        """Record partitions assigned at explicit offsets (nothing to resolve)."""
        for tp, off in offsets.items():
            st = self.state(tp)
            st.owned = True
            self._owned.add(tp)
            self._owned_topics = None
            self.freshness.jumped(tp)
            st.start_at(off)
            self.keeper.forget_announcements(tp, off)
        if offsets:
            self.refresh_gates(force=True)

    def revoked(self, tps: Iterable[TP]) -> None:
        """Forget ownership of ``tps``. Every partition this core paused at a
        gate is resumed first, so that no client keeps it paused when it is
        assigned again."""
        tps = [tp for tp in tps if tp in self._owned]
        unpause = [tp for tp in tps if tp in self._held and not self.parts[tp].user_paused]
        if unpause:
            try:
                self.port.resume(unpause)
            except Exception as e:  # already gone from the client's assignment
                log.debug("resume on revoke of %s: %s", unpause, e)
        self._owned_topics = None
        for tp in tps:
            self._owned.discard(tp)
            self._held.discard(tp)
            self._init_commit.discard(tp)
            self.freshness.forget(tp)
            self.parts[tp].drop_ownership()

    # -- positions

    def positions(self, tps: Iterable[TP]) -> Dict[TP, int]:
        """Next offset to deliver for each owned partition (records returned
        so far count; held ones do not); partitions without one are left out."""
        want = [tp for tp in tps if tp in self._owned]
        if not want:
            return {}
        client = self.port.positions(want)
        out: Dict[TP, int] = {}
        for tp in want:
            st = self.parts[tp]
            if st.held is not None:
                out[tp] = st.held
                continue
            off = client.get(tp, -1)
            if off >= 0:
                out[tp] = off
            elif st.position is not None:
                out[tp] = st.position
        return out

    def processed(self, tp: TP) -> int:
        """The group's processed offset of ``tp`` as this member knows it."""
        st = self.parts.get(tp)
        if st is None:
            return -1
        return processed_offset(st.committed, st.log_start, st.processed if st.owned else None)

    # -- per poll

    def begin_poll(self) -> None:
        """The application processed what earlier polls returned: announce
        crossed waits, refresh gates, commit if due."""
        new = self.positions(self.keeper.waited_on())
        crossed = []
        for tp, off in new.items():
            st = self.parts[tp]
            if self.keeper.crossed(tp, st.revoke_mark, off):
                crossed.append(tp)
            st.revoke_mark = st.processed = off
        if crossed and self.listener is not None:
            self.listener.on_partition_key_maybe_revoked(self.port.partitions(sorted(crossed)))
        if crossed and self.opts.auto_commit:
            self.commit_processed()
        self.maintain()

    def refresh_gates(self, force: bool = False) -> None:
        history = self.follower.history
        version = history.version
        if not force and version == self._seen_version:
            return
        # Read the log position before the gates: a registration applied in
        # between is then read again next time instead of being skipped.
        upto = history.next_offset
        now, wall = time.monotonic(), time.time()
        for topic in {t for t, _ in self._owned} | self.subscribed:
            if history.current(topic) is None:
                continue
            self.keeper.add_gates(history.gates(topic, self._gate_offsets.get(topic, 0)), now, wall)
            self._gate_offsets[topic] = upto
        self._seen_version = version

    def managed(self, topic: str) -> bool:
        """Whether ``topic`` has a layout (its records are checked for stamps)."""
        return self.follower.history.current(topic) is not None

    def ensure_fresh(self, runs: Sequence[Run] = ()) -> None:
        """Freshness (causal tokens): before any record of a fetch is
        delivered, catch the layout view up as ``runs`` (what the fetch
        returned per managed owned partition, see :class:`~kafka_ordered.tokens.Run`)
        require, then take in the gates it brought."""
        if not self.opts.gating:
            return
        self.freshness.admit(runs)
        self.refresh_gates()

    def maintain(self) -> None:
        """Open gates whose sources were processed, release held partitions,
        make due commits. Does nothing while this member owns nothing."""
        if not self._owned:
            return
        now = time.monotonic()
        self.refresh_gates()
        sources = self.keeper.sources()
        if sources:
            unowned = [tp for tp in sources if tp not in self._owned]
            if unowned and now - self._committed_at >= self.opts.commit_interval / 2:
                for tp, off in self.port.committed(unowned).items():
                    st = self.state(tp)
                    st.committed = max(st.committed, off)
                self._committed_at = now
            if now - self._log_start_at >= _LOG_START_REFRESH_S:
                for tp, off in self.offsets.start_offsets(sources).items():
                    self.state(tp).log_start = off
                self._log_start_at = now
            processed = {tp: self.processed(tp) for tp in sources}
            for g in self.keeper.update(processed):
                tp = (g.topic, g.partition)
                if tp in self._owned:
                    local = {(g.topic, q): w for q, w in g.wait.items() if self.state((g.topic, q)).committed < w}
                    if local:
                        self.parts[tp].deps.append((g.start, local))
            for tp in list(self._held):
                limit = self.keeper.limit(tp)
                if limit is None or limit > self.parts[tp].held:  # type: ignore[operator]
                    self.release(tp)
        if self._init_commit:
            self._commit_initial()
        if self.opts.auto_commit and self._commit_due(now):
            self.commit_processed()

    def poll_chunk(self, left: Optional[float]) -> Optional[float]:
        """How long one client fetch may wait inside a poll of ``left`` seconds
        (``None``: forever): short while gates are closed, so they are re-evaluated."""
        if self.has_closed_gates() or self._init_commit:
            half = self.opts.commit_interval / 2
            return half if left is None else min(left, half)
        return left

    # -- commits

    def _commit_due(self, now: float) -> bool:
        since = now - self.last_commit
        if since >= self.opts.auto_commit_interval:
            return True
        if since < self.opts.commit_interval:
            return False
        for tp in self.keeper.waited_on():
            st = self.parts.get(tp)
            if st is None or not st.owned:
                continue
            base = st.stored if self._stored_mode else st.processed
            if base is not None and base > st.committed and self.keeper.needs_commit(tp, st.committed):
                return True
        return False

    def _commit_initial(self) -> None:
        """Commit the resolved start of owned partitions that had no commit."""
        offsets = self.positions(self._init_commit)
        for tp in self._init_commit:
            self.parts[tp].init_commit = False
        self._init_commit.clear()
        if offsets:
            self.commit(offsets, asynchronous=True)

    def processed_offsets(self) -> Dict[TP, int]:
        """What a commit without arguments commits: the positions of returned
        records, or the offsets stored with ``store_offsets``."""
        if self._stored_mode:
            return {tp: st.stored for tp in self._owned if (st := self.parts[tp]).stored is not None}
        return self.positions(self._owned)

    def uncommitted(self, tps: Optional[Iterable[TP]] = None) -> Dict[TP, int]:
        """Processed offsets (of ``tps``, default all owned) beyond the known commit."""
        base = self.processed_offsets()
        want = self._owned if tps is None else set(tps)
        return {tp: off for tp, off in base.items() if tp in want and off > self.parts[tp].committed}

    def commit_processed(self, asynchronous: bool = True) -> None:
        """Commit what the application processed; call at the start of a poll."""
        offsets = self.uncommitted()
        self.last_commit = time.monotonic()
        if offsets:
            self.commit(offsets, asynchronous)

    def with_dependencies(self, offsets: Dict[TP, int]) -> Dict[TP, int]:
        """Add the source commits that gates opened inside this member need to
        be durable before (or with) commits past their start."""
        out = dict(offsets)
        for tp, off in offsets.items():
            st = self.parts.get(tp)
            for start, waits in (st.deps if st is not None else ()):
                if off > start:
                    for q, w in waits.items():
                        # A source lost meanwhile is its new owner's to commit.
                        if q in self._owned and self.parts[q].committed < w and out.get(q, -1) < w:
                            out[q] = w
        return out

    def commit(self, offsets: Dict[TP, int], asynchronous: bool) -> Any:
        """Commit ``offsets`` (plus the source offsets opened gates depend on)."""
        offsets = self.with_dependencies(offsets)
        result = self.port.commit(offsets, asynchronous)
        self.committed(offsets)
        return result

    def committed(self, offsets: Mapping[TP, int]) -> None:
        """Record commits made (also those the adapter made itself)."""
        for tp, off in offsets.items():
            st = self.state(tp)
            if off > st.committed:
                st.committed = off
        for tp in self._owned:
            st = self.parts[tp]
            if st.deps:
                st.deps = [(s, w) for s, w in st.deps if any(self.state(q).committed < x for q, x in w.items())]

    def store(self, offsets: Mapping[TP, int]) -> None:
        """``store_offsets``: from now on commits take stored offsets instead of
        the positions of returned records."""
        self._stored_mode = True
        for tp, off in offsets.items():
            self.state(tp).stored = off

    # -- holding and releasing

    def hold(self, tp: TP, offset: int) -> None:
        """Stop ``tp`` at ``offset``: pause it and seek back so the held record
        is fetched again when the gate opens."""
        st = self.parts[tp]
        st.held = st.position = offset
        self.freshness.moved(tp, offset)
        if st.held_since is None:
            st.held_since = time.monotonic()
            st.held_wall = time.time()
        self._held.add(tp)
        self.port.pause([tp])
        self.port.seek(tp, offset)
        waits = {q: w for q, (w, _) in next((g.waiting_on for g in self.gate_status()
                                              if (g.topic, g.partition) == tp), {}).items()}
        log.info("%s [%d] held at offset %d by a gate waiting for %s", tp[0], tp[1], offset,
                 ", ".join(f"partition {q} >= {w}" for q, w in sorted(waits.items())) or "its sources")

    def release(self, tp: TP) -> None:
        """Undo :meth:`hold` (the one release path: gate opened, seek, rewind)."""
        st = self.parts[tp]
        self._held.discard(tp)
        st.held = None
        if st.held_since is not None:
            held_s = time.monotonic() - st.held_since
            st.stall_s += held_s
            st.held_since = st.held_wall = None
            self._observe_wait(held_s)
            log.info("%s [%d] released after %.3f s at a gate", tp[0], tp[1], held_s)
        if not st.user_paused:
            self.port.resume([tp])

    def seeked(self, tp: TP, offset: int) -> None:
        """The application sought ``tp`` to ``offset`` (``< 0``: a logical
        offset): the new position counts as processed; a hold is released."""
        st = self.state(tp)
        if offset >= 0:
            st.position = st.processed = offset
        self.freshness.jumped(tp)
        if tp in self._held:
            self.release(tp)

    def user_pause(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            self.state(tp).user_paused = True

    def user_resume(self, tps: Iterable[TP]) -> List[TP]:
        """Mark ``tps`` resumed by the application; returns those the client
        may resume now (not held at a gate)."""
        out = []
        for tp in tps:
            self.state(tp).user_paused = False
            if tp not in self._held:
                out.append(tp)
        return out

    def paused_by_user(self, tp: TP) -> bool:
        st = self.parts.get(tp)
        return st is not None and st.user_paused

    # -- delivering

    def watched(self) -> Set[TP]:
        """Owned partitions whose records need a per-record decision: a closed
        gate, a hold, or (with a listener) an opened gate not yet announced.
        Empty once this member's transitions are passed, so the adapters'
        fetch path is then the same as on a topic that never changed."""
        if not self.opts.gating:
            return set()
        gated = self.keeper.watched() if self.listener is not None else self.keeper.closed_partitions()
        return {tp for tp in gated if tp in self._owned} | self._held

    def admit(self, tp: TP, offset: int) -> bool:
        """Decide one record of a watched partition: True to deliver (after
        announcing an opened gate), False when held at a closed gate."""
        if tp in self._held:
            self.records_held_back += 1
            return False
        limit = self.keeper.limit(tp)
        if limit is not None and offset >= limit:
            self.hold(tp, offset)
            self.records_held_back += 1
            return False
        if self.keeper.announce(tp, offset) and self.listener is not None:
            self.listener.on_partition_key_assigned(self.port.partitions([tp]))
        return True

    def rewind(self, first: Mapping[TP, int]) -> None:
        """Records from ``first[tp]`` on were fetched but will not reach the
        application: seek back so they are fetched (and decided) again."""
        for tp, off in first.items():
            st = self.parts.get(tp)
            if st is None or not st.owned:
                continue
            if st.held is not None:
                if st.held <= off:
                    continue  # already sought back to the hold
                self.release(tp)
            st.position = off
            self.freshness.moved(tp, off)
            self.port.seek(tp, off)

    def _observe_wait(self, seconds: float) -> None:
        self.last_wait_s = seconds
        self._wait_sum += seconds
        i = bisect.bisect_left(GATE_WAIT_BUCKETS, seconds)
        for j in range(i, len(self._wait_counts)):
            self._wait_counts[j] += 1

    def metrics(self, group_id: str) -> ConsumerMetrics:
        """A snapshot for :meth:`OrderedConsumer.ordered_metrics`."""
        now = time.monotonic()
        gates = []
        for status in self.gate_status():
            tp = (status.topic, status.partition)
            if tp not in self._owned:
                continue
            st = self.parts[tp]
            held = tp in self._held
            gates.append(GateMetrics(status.topic, status.partition, status.start, held, st.held_wall,
                                     now - st.held_since if st.held_since is not None else 0.0,
                                     dict(status.waiting_on)))
        history = self.follower.history
        topics = {t for t, _ in self._owned} | self.subscribed
        epochs = {t: lay.epoch for t in sorted(topics) if (lay := history.current(t)) is not None}
        return ConsumerMetrics(
            group_id=group_id,
            owned_partitions=len(self._owned),
            closed_gates=tuple(gates),
            held_partitions=len(self._held),
            records_held_back=self.records_held_back,
            last_gate_wait_s=self.last_wait_s,
            gate_waits=WaitHistogram(GATE_WAIT_BUCKETS, tuple(self._wait_counts), self._wait_counts[-1],
                                     self._wait_sum),
            layout_epochs=epochs,
            layout_view=self.follower.view_metrics(),
        )

    def has_closed_gates(self) -> bool:
        return self.opts.gating and bool(self.keeper.closed_partitions())

    def gate_status(self) -> List[GateStatus]:
        """Every partition with a closed gate: first held offset, the sources
        it waits on as ``(wait, processed)``, since when it was seen closed
        (``since`` monotonic, ``since_wall`` wall clock) and since when this
        member holds the partition there (``held_since``, wall clock)."""
        out = self.keeper.status({tp: self.processed(tp) for tp in self.keeper.sources()})
        return [replace(s, held_since=st.held_wall) if (st := self.parts.get((s.topic, s.partition))) is not None
                and st.held is not None else s for s in out]
