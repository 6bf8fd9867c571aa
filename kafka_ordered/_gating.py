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

Cost: while a member has no gating work to do at every poll (records below
the closed gates on partitions it owns pass, ``Calm.limits``; nothing in
hand waits to be delivered, no announcement is pending, no start is to be
committed)
:attr:`GatingCore.calm` says so, and the adapters return the client's
fetches untouched without calling into the core, as long as the
causal-token check of each record finds no stamp and no gap, until the
next auto-commit or an event (new layout-log records, an assignment
change, a source of this member reaching a gate's wait or crossing a
hand-off wait: ``Calm.until_offsets``) ends the calm. With
gates closed, fetched records are decided per partition and batch
(:meth:`GatingCore.admit_run`), by bisection on offsets.
"""

from __future__ import annotations

import bisect
import logging
import time
from dataclasses import replace
from typing import AbstractSet, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ._fastpath import Calm
from ._freshness import CausalFreshness
from ._partitions import Partitions
from ._ports import TP, ConsumerPort, LayoutView, OffsetsPort, Pending
from .errors import KafkaOrderedError
from .gates import GateKeeper, GateStatus, ResetPolicy, processed_offset, start_position
from .history import LayoutHistory
from .listener import PartitionKeyRebalanceListener
from .metrics import GATE_WAIT_BUCKETS, ConsumerMetrics, GateMetrics, WaitHistogram
from .tokens import Run, stamp_prefix

__all__ = ["GATE_READ_TIMEOUT_S", "KEEP_IN_HAND_BYTES", "KEEP_IN_HAND_RECORDS", "START_READ_RETRY_S", "GateRead",
           "GatingCore", "GatingOptions", "PollCycle", "StartRead"]

log = logging.getLogger("kafka_ordered.consumer")

_LOG_START_REFRESH_S = 5.0

#: A partition held at a gate is held in hand (its fetched records kept by
#: the adapter, the client neither paused nor sought back, so nothing is
#: fetched twice; see :attr:`GatingCore.keep_in_hand`) until it keeps more
#: than this many records or bytes (keys and values): then
#: :meth:`GatingCore.keep` pauses it and seeks it back to the hold.
KEEP_IN_HAND_RECORDS = 10_000
KEEP_IN_HAND_BYTES = 16 * 1024 * 1024

#: How long the read of the group's commits that starts an assignment is
#: tried again while the cluster cannot answer it (the group coordinator
#: moving): the assigned partitions are not fetched meanwhile.
START_READ_RETRY_S = 60.0


class StartRead:
    """The retry rule of the read of the group's commits that starts an
    assignment, for every client: a retriable failure is tried again after
    a growing pause (50 ms doubling to 1 s) for up to
    :data:`START_READ_RETRY_S`; any other failure, or one past that, is
    final. The partitions of a final failure must not be fetched ungated:
    the adapter leaves them paused in the client and raises the error
    (librdkafka and kafka-python would otherwise fetch them from their
    commit when the assignment callback raises)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until = clock() + START_READ_RETRY_S
        self._delay = 0.05

    def retry_after(self, error: KafkaOrderedError) -> float:
        """The pause before trying again after ``error``; raises ``error``
        when it is final."""
        if not error.retriable or self._clock() + self._delay > self._until:
            raise error
        log.warning("could not read the group's commits to start an assignment (%s); trying again", error)
        delay, self._delay = self._delay, min(1.0, self._delay * 2)
        return delay


#: The longest a read that opens gates (the group's commits of sources,
#: their log starts) waits for the cluster, if ``ordered.metadata.timeout.ms``
#: is longer: it runs inside a poll, and a raw client's poll does not stall
#: while the group coordinator or a leader moves.
GATE_READ_TIMEOUT_S = 1.0
#: How often polls look whether a read sent in the background was answered.
READ_CHECK_S = 0.005


class GateRead:
    """When a read that opens gates is next due, for every client: every
    ``period`` seconds (0: every poll) while it succeeds; after a retriable
    failure (the cluster cannot answer now) after twice, then four times
    ``max(period, 0.5 s)``, so that an outage stalls polls only now and
    then. The gates waiting on the read stay closed meanwhile. An outage is
    logged once, when it begins, and once when the read succeeds again."""

    __slots__ = ("what", "period", "due", "failures", "pending", "asked")

    def __init__(self, what: str, period: float) -> None:
        self.what = what
        self.period = period
        self.due = float("-inf")
        self.failures = 0
        #: A read sent and not answered yet (see GatingCore._read_in_background).
        self.pending: Optional[Pending[Dict[TP, int]]] = None
        #: The partitions the last read sent asked about (its answer is of those only).
        self.asked: Tuple[TP, ...] = ()

    def succeeded(self, now: float) -> None:
        if self.failures:
            log.info("read %s again", self.what)
        self.failures = 0
        self.due = now + self.period

    def drop(self) -> None:
        """What the read was for went away: its answer is not looked for."""
        self.pending = None
        self.asked = ()

    def failed(self, now: float, error: KafkaOrderedError) -> None:
        self.failures += 1
        delay = max(self.period, 0.5) * 2 ** min(self.failures, 2)
        if self.failures == 1:
            log.warning("could not read %s (%s); the gates waiting on them stay closed, read again "
                        "in %.1f s", self.what, error, delay)
        self.due = now + delay


class GatingOptions:
    """The ``ordered.*`` consumer options the core uses, parsed."""

    __slots__ = ("timeout", "gating", "commit_interval", "auto_commit", "auto_commit_interval", "reset", "auto_store")

    def __init__(self, opts: Mapping[str, Any], auto_commit: bool, auto_commit_interval_s: float,
                 reset: ResetPolicy, auto_store: bool = True) -> None:
        self.timeout: float = opts["ordered.metadata.timeout.ms"] / 1000.0
        self.gating: bool = opts["ordered.gating"]
        self.commit_interval: float = opts["ordered.commit.interval.ms"] / 1000.0
        self.auto_commit = auto_commit
        self.auto_commit_interval = auto_commit_interval_s
        self.reset = reset
        #: ``False``: the application stores the offsets it finished
        #: (``enable.auto.offset.store=false``); only those count as processed.
        self.auto_store = auto_store


class GatingCore:
    """Gate bookkeeping of one group member over a client port.

    The adapter calls :meth:`assigned`/:meth:`assigned_at`/:meth:`revoked`
    from its rebalance callbacks, :meth:`begin_poll` at the start of each
    poll (unless :attr:`calm` allows skipping it), :meth:`ensure_fresh`,
    :meth:`watched` and :meth:`admit_run` on each fetched batch,
    :meth:`rewind` when a batch cannot be returned, :meth:`maintain` between
    empty fetches and :meth:`settle` at the end of a poll; :meth:`close` when
    the consumer closes.

    Scope: gates are tracked for owned partitions only (loaded from the
    history's per-partition index on assignment); for owned sources the
    core keeps the waits of other partitions' gates that are above the
    group's commit (the hand-off).
    """

    def __init__(self, port: ConsumerPort, follower: LayoutView, offsets: OffsetsPort,
                 options: GatingOptions, clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: monotonic seconds (the simulation passes a counter)."""
        self._clock = clock
        self.port = port
        self.follower = follower
        self.offsets = offsets
        self.opts = options
        self.keeper = GateKeeper()
        self.keeper.announcing = False
        self._listener: Optional[PartitionKeyRebalanceListener] = None
        self.subscribed: Set[str] = set()
        # Physical partition count per subscribed topic in the view, to notice expansions.
        self._physical: Dict[str, int] = {}
        #: Every partition's state and the sets derived from it (see :mod:`kafka_ordered._partitions`).
        self.parts = Partitions()
        self._scope = 0  # counts ownership, hold and listener changes (for the watched() cache)
        self._watched: Tuple[int, int, Set[TP]] = (-1, -1, set())
        self._dirty = True  # processed offsets or gates changed since the last evaluation
        self._stall: Dict[TP, float] = {}
        self._stored_mode = not options.auto_store
        self._commits_read = GateRead("the commits of partitions other members own", options.commit_interval / 2)
        self._log_starts_read = GateRead("the log-start offsets of sources", _LOG_START_REFRESH_S)
        self._starts_read = GateRead("the commits of partitions assigned at explicit offsets", 0.0)
        self._gate_offsets: Dict[str, int] = {}
        self._seen_version = -1
        #: Expected fetch offsets and the catch-ups of the causal-token rule.
        self.freshness = CausalFreshness(follower)
        self._owned_topics: Optional[Set[str]] = None
        #: Whether the adapters may skip this core for a while: ``quiet`` (no
        #: gating work pending; set only by :meth:`settle`, cleared by any
        #: event that may need work), ``until`` (monotonic: the next
        #: auto-commit), before which a fetch the causal-token check admits
        #: may be returned untouched without :meth:`begin_poll` (see
        #: :func:`kafka_ordered._fastpath.fast_fetch`), and the check's
        #: ``expected`` offsets (this core's freshness dict) and ``managed`` topics.
        self.calm: Any = Calm()
        self.calm.expected = self.freshness.expected
        self.last_commit = self._clock()
        self.records_held_back = 0
        self.last_wait_s: Optional[float] = None
        self._wait_counts = [0] * (len(GATE_WAIT_BUCKETS) + 1)
        self._wait_sum = 0.0
        #: Holds kept in hand (set by the adapters and the simulation): a partition at a
        #: gate whose sources this member owns is then held without pausing
        #: or seeking its client. Pausing makes
        #: librdkafka drop what it prefetched, and the refetch after the
        #: release waits behind the Fetch in flight, a long poll of up to
        #: ``fetch.wait.max.ms`` once the other partitions are caught up.
        #: The adapter instead keeps the records it fetched from the hold on
        #: in :attr:`kept` (per partition, in offset order, ``kept_offset``
        #: reads a record's offset, ``kept_bytes`` the size of a list of them in bytes) through
        #: :meth:`keep`, and decides them again once released (the grouped
        #: path: :func:`kafka_ordered._grouped.take`); :meth:`keep` turns a
        #: hold that keeps too much into a pause (:meth:`pause_in_hand`).
        self.keep_in_hand = False
        self.kept: Dict[TP, List[Any]] = {}
        self.kept_offset: Callable[[Any], int] = lambda record: record.offset  # type: ignore[no-any-return]
        self.kept_bytes: Callable[[List[Any]], int] = lambda records: 0
        self._kept_bytes: Dict[TP, int] = {}
        follower.add_listener(self._on_history)

    def close(self) -> None:
        """Stop following the layout view (the consumer is closing)."""
        self.follower.remove_listener(self._on_history)
        self.calm.quiet = False

    def _on_history(self) -> None:
        # On the follower's thread: new records may carry gates for us.
        self.calm.quiet = False

    # -- state

    @property
    def listener(self) -> Optional[PartitionKeyRebalanceListener]:
        """The application's per-key hand-off listener (``None``: none)."""
        return self._listener

    @listener.setter
    def listener(self, value: Optional[PartitionKeyRebalanceListener]) -> None:
        self._listener = value
        self.keeper.announcing = value is not None
        self._scope += 1
        self.calm.quiet = False

    @property
    def history(self) -> LayoutHistory:
        return self.follower.history

    @property
    def owned(self) -> AbstractSet[TP]:
        """Partitions this member owns (read-only view)."""
        return self.parts.owned

    def owned_topics(self) -> Set[str]:
        """Topics of the owned partitions (cached until the assignment changes)."""
        topics = self._owned_topics
        if topics is None:
            topics = self._owned_topics = {t for t, _ in self.parts.owned}
        return topics

    def held(self) -> AbstractSet[TP]:
        """Partitions stopped at a closed gate (read-only view)."""
        return self.parts.held

    @property
    def stall_seconds(self) -> Dict[TP, float]:
        """Total time each partition has waited at gates that since opened."""
        return dict(self._stall)

    # -- assignment

    def assigned(self, tps: Sequence[TP], committed: Mapping[TP, int],
                 forced: Optional[Mapping[TP, ResetPolicy]] = None) -> Dict[TP, int]:
        """Record an assignment; returns where each partition of ``tps``
        starts, for the client to seek to: its committed offset, else (a
        managed partition, see :func:`gates.start_position`, or one in
        ``forced``: the application asked for the log start or end, the
        commit and the reset policy do not apply) the resolved offset.
        Partitions with neither are left out (the client's own reset
        applies). Resolved starts are committed at the next poll so that
        gates waiting on them can open before any record arrives."""
        if not tps:
            return {}
        self.calm.quiet = False
        self._scope += 1
        self._dirty = True
        # Where a partition without a commit starts depends on its layout
        # (gates.start_position), unless the reset policy is the log start
        # anyway: then a topic the view does not know as managed yet starts
        # there by the client's own reset.
        decide = any(committed.get(tp, -1) < 0 and (self.opts.reset != "earliest" or (forced and tp in forced))
                     for tp in tps)
        # A topic may have become managed a moment ago.
        history = self.follower.sync() if decide and self.opts.gating else self.follower.history
        earliest: List[TP] = []
        latest: List[TP] = []
        new: List[TP] = []
        for tp in tps:
            st, fresh = self.parts.own(tp)
            if fresh:
                new.append(tp)
            self._owned_topics = None
            self.freshness.jumped(tp)
            c = committed.get(tp, -1)
            if c >= 0:
                st.committed = max(st.committed, c)
                self.parts.start(tp, c)
                self.keeper.forget_announcements(tp, c)
                continue
            where = start_position(history.current(tp[0]), tp[1], self.opts.reset)
            if where is not None and forced and tp in forced:
                where = forced[tp]
            if where == "earliest":
                earliest.append(tp)
            elif where == "latest":
                latest.append(tp)
        ends = self.offsets.end_offsets(latest)
        if ends:
            # "latest" as read_committed readers (librdkafka's default) see it: an
            # open transaction's records, committed later, are not skipped.
            ends.update(self.offsets.open_transactions(latest))
        starts = {**self.offsets.start_offsets(earliest), **ends}
        for tp, off in starts.items():
            self.parts.start(tp, off, commit=True)
            self.keeper.forget_announcements(tp, off)
        at = {tp: committed[tp] if committed.get(tp, -1) >= 0 else starts[tp]
              for tp in tps if committed.get(tp, -1) >= 0 or tp in starts}
        if self.opts.gating:
            # A sync above came after the committed positions were fixed; the
            # others are owed one catch-up, made when the next poll begins,
            # while the client fetches (docs/protocol.md, "one catch-up per
            # assignment").
            for tp, off in at.items():
                if decide and tp not in starts:
                    self.freshness.cover({tp: off})
                else:
                    self.freshness.jumped(tp, off)
        self._load(new)
        self.refresh_gates(force=True)
        return at

    def assigned_at(self, offsets: Mapping[TP, int]) -> None:
        """Record partitions assigned at explicit offsets (nothing to resolve).
        The offsets count as fixed (the application observed them before the
        call): the next poll catches the layout view up once for all of them
        (:meth:`begin_poll`)."""
        self.calm.quiet = False
        self._scope += 1
        self._dirty = True
        new: List[TP] = []
        for tp, off in offsets.items():
            _, fresh = self.parts.own(tp)
            if fresh:
                new.append(tp)
            self._owned_topics = None
            self.freshness.jumped(tp, off)
            self.parts.start(tp, off)
            self.keeper.forget_announcements(tp, off)
        self.parts.commits_unknown(new)
        if offsets:
            self._load(new)
            self.refresh_gates(force=True)

    def _load(self, tps: Sequence[TP]) -> None:
        """Track the gates that touch newly owned partitions, from registrations
        the per-topic cursor already passed (later ones come with the next
        :meth:`refresh_gates`)."""
        history = self.follower.history
        now = self._clock()
        for tp in tps:
            before = self._gate_offsets.get(tp[0])
            if not before:
                continue
            self.keeper.add_gates(history.gates_on(tp[0], tp[1], before), now, time.time(), self._hand_off())
            self.keeper.add_waits(history.gates_waiting_on(tp[0], tp[1], before), {tp: self.parts[tp].committed})

    def _hand_off(self) -> Dict[TP, int]:
        """Owned partitions and the group's commit on each: waits above it on
        them are this member's to announce and commit promptly."""
        parts = self.parts
        return {tp: parts[tp].committed for tp in parts.owned}

    def revoked(self, tps: Iterable[TP]) -> None:
        """Forget ownership of ``tps``. Every partition this core paused at a
        gate is resumed first, so that no client keeps it paused when it is
        assigned again."""
        owned = self.parts.owned
        tps = [tp for tp in tps if tp in owned]
        if not tps:
            return
        self.calm.quiet = False
        self._scope += 1
        try:
            self._unpause([tp for tp in tps if tp in self.parts.held and tp not in self.parts.in_hand])
        except Exception as e:  # already gone from the client's assignment
            log.debug("resume on revoke of %s: %s", tps, e)
        self._owned_topics = None
        if any(tp in self._starts_read.asked for tp in tps):
            # Its answer may predate a commit made from now on (this
            # member's at the revocation, another member's): the partitions
            # still unread are asked about again.
            self._starts_read.drop()
        for tp in tps:
            self._forget_kept(tp)
            self.freshness.forget(tp)
            self.keeper.drop(tp)
        sources = self.keeper.sources()
        for tp in tps:
            # Still a source of a closed gate here: its offsets are kept.
            self.parts.disown(tp, keep_as_source=tp in sources)

    # -- positions

    def positions(self, tps: Iterable[TP]) -> Dict[TP, int]:
        """Next offset to deliver for each owned partition (records returned
        so far count; held ones do not); partitions without one are left out."""
        owned = self.parts.owned
        want = [tp for tp in tps if tp in owned]
        if not want:
            return {}
        client = self.port.positions(want)
        out: Dict[TP, int] = {}
        kept = self.kept
        for tp in want:
            st = self.parts[tp]
            off = client.get(tp, -1)
            if kept and kept.get(tp) and st.held is None:
                # Released with records still in hand: the client is past them
                # (the port's position may be lower: records fetched before them).
                first = self.kept_offset(kept[tp][0])
                out[tp] = min(first, off) if off >= 0 else first
                continue
            if st.held is not None:
                # Records before the hold may still be on their way to the
                # application (kafka-python's iterator moves the position per
                # record): never count past what the client delivered.
                out[tp] = min(st.held, off) if off >= 0 else st.held
                continue
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
        crossed waits, refresh gates, commit if due. A catch-up owed by an
        assignment or seeks is made first, before the poll's fetch (the
        client has been fetching since; see CausalFreshness.pay_sought)."""
        if self.opts.gating and self.freshness.sought:
            self.freshness.pay_sought()
        waited = self.keeper.waited_on()
        unread: AbstractSet[TP] = frozenset()
        if waited and self.parts.commit_unknown:
            if self._read_commits():
                waited = self.keeper.waited_on()
            else:
                # Not answered yet: what this member processed opens its own
                # gates now; which waits it crossed is judged once the group's
                # commit tells those an earlier member passed.
                unread = self.parts.commit_unknown
        if waited:
            new = self._finished(waited)
            crossed = []
            for tp, off in new.items():
                st = self.parts[tp]
                if st.processed != off:
                    self._dirty = True
                st.processed = off
                if tp in unread:
                    continue
                if self.keeper.crossed(tp, st.revoke_mark, off):
                    crossed.append(tp)
                st.revoke_mark = off
                # This member's own commits made while the group's commit was
                # unread (see committed) end the waits only now.
                self.keeper.prune_waits(tp, st.committed)
            if crossed and self._listener is not None:
                self._listener.on_partition_key_maybe_revoked(self.port.partitions(sorted(crossed)))
            if crossed and self.opts.auto_commit:
                self.commit_processed()
        self.maintain()

    def poll_may_block(self) -> bool:
        """Whether the per-poll work (:meth:`begin_poll`, :meth:`maintain`,
        :meth:`settle`) may make a blocking call: a catch-up to the layout
        log's end owed by an assignment or seeks, or a key listener to call
        (an asynchronous one is awaited). Reads, commits and pauses it
        starts never block. The aiokafka adapter runs a poll on its event
        loop only when this is false."""
        return bool(self.opts.gating and self.freshness.sought) or self._listener is not None

    def _read_commits(self) -> bool:
        """Read the group's commit of the partitions assigned at explicit
        offsets, once hand-off waits are kept (a request per assignment):
        waits it passed need nothing more. Every such partition is asked
        about, also those without a wait yet: a registration the view
        applies after the assignment may bring one. Whether the commits are
        known now: while the read fails they stay unknown, and it is sent
        again (see :class:`GateRead`). An answer tells only of the
        partitions its read asked about (see :meth:`revoked`): for those
        assigned while it was on its way, a read is sent at once."""
        parts = self.parts
        while True:
            want = list(parts.commit_unknown)  # (sorted into read.asked when sent)
            if not want:
                return True
            got = self._read_in_background(self._starts_read, self.port.committed_later, want)
            if got is None:
                return False
            parts.commits_known(self._starts_read.asked)
            self.committed(got)

    def refresh_gates(self, force: bool = False) -> None:
        """Track the gates of registrations applied since the last refresh
        (work proportional to them): those on owned partitions, and the
        waits of the others on owned partitions."""
        history = self.follower.history
        version = history.version
        if not force and version == self._seen_version:
            return
        # Read the log position before the gates: a registration applied in
        # between is then read again next time instead of being skipped.
        upto = history.next_offset
        now, wall = self._clock(), time.time()
        hand_off: Optional[Dict[TP, int]] = None
        owned = self.parts.owned
        for topic in self.owned_topics() | self.subscribed:
            layout = history.current(topic)
            if layout is None:
                continue
            if topic in self.subscribed and layout.physical_partitions > self._physical.setdefault(
                    topic, layout.physical_partitions):
                self._physical[topic] = layout.physical_partitions
                self.port.learn_partitions(topic)
            since = self._gate_offsets.get(topic)
            self._gate_offsets[topic] = upto
            if not since:  # first look at this topic: only what touches owned partitions
                self._load([tp for tp in owned if tp[0] == topic])
                self._dirty = True
                continue
            new = [g for g in history.gates(topic, since) if g.offset < upto]
            if not new:
                continue
            if hand_off is None:
                hand_off = self._hand_off()
            self._dirty = True
            mine = [g for g in new if (topic, g.partition) in owned]
            if mine:
                self.keeper.add_gates(mine, now, wall, hand_off)
            if len(mine) < len(new):
                self.keeper.add_waits([g for g in new if (topic, g.partition) not in owned], hand_off)
        self._seen_version = version

    def managed(self, topic: str) -> bool:
        """Whether ``topic`` has a layout (its records are checked for stamps)."""
        return self.follower.history.current(topic) is not None

    def managed_after_stamp(self, topic: str, stamp: int) -> bool:
        """Whether ``topic`` is managed, for a record of it that carries a
        stamp of this consumer's layout log (offset ``stamp``) while the view
        calls the topic unmanaged: the stamp proves the view stale (the topic
        was created, adopted or changed since), so the view is first caught
        up past it, whatever it says about the topic. Raises what the
        catch-up raised (nothing of the fetch may then be delivered)."""
        if self.opts.gating:
            self.freshness.past(stamp)
        return self.managed(topic)

    def ensure_fresh(self, runs: Sequence[Run] = ()) -> None:
        """Freshness (causal tokens): before any record of a fetch is
        delivered, catch the layout view up as ``runs`` (what the fetch
        returned per managed owned partition, see :class:`~kafka_ordered.tokens.Run`)
        require, then take in the gates it brought."""
        if not self.opts.gating:
            return
        self.freshness.admit(runs)
        self.refresh_gates()

    def _read_in_background(self, read: GateRead, start: Callable[[List[TP], float], Pending[Dict[TP, int]]],
                            tps: Iterable[TP]) -> Optional[Dict[TP, int]]:
        """A read that opens gates, never waited for: when ``read`` is due,
        ``start(tps, timeout)`` sends it (the request gives up after at most
        :data:`GATE_READ_TIMEOUT_S`); its answer is returned by the first
        call that finds it came. ``None`` until then (``read.due`` moves
        :data:`READ_CHECK_S` on: the calm ends then, to look again), and
        when the cluster could not answer (a retriable error: the group
        coordinator or a leader moving; ``read`` backs off). A poll neither
        waits for it nor fails because of it, as a raw client's does not.
        Other errors are raised."""
        now = self._clock()
        try:
            if read.pending is None:
                if now < read.due:
                    return None
                read.asked = tuple(sorted(tps))
                read.pending = start(list(read.asked), min(self.opts.timeout, GATE_READ_TIMEOUT_S))
            if not read.pending.done():
                read.due = now + READ_CHECK_S
                return None
            pending, read.pending = read.pending, None
            got = pending.result()
        except KafkaOrderedError as e:
            read.pending = None
            if not e.retriable:
                raise
            read.failed(now, e)
            return None
        read.succeeded(now)
        return got

    def _drop_unwanted_reads(self) -> AbstractSet[TP]:
        """The sources of this member's closed gates; the reads sent for
        gates that no longer need them are dropped (see :meth:`GateRead.drop`:
        the calm is not cut short to look for their answers)."""
        parts = self.parts
        sources = self.keeper.sources() if parts.owned and self.keeper.has_closed() else frozenset()
        if all(tp in parts.owned for tp in sources):
            self._commits_read.drop()
        if not sources:
            self._log_starts_read.drop()
        if not (parts.commit_unknown and self.keeper.waited_on()):
            self._starts_read.drop()
        return sources

    def maintain(self) -> None:
        """Open gates whose sources were processed, release held partitions,
        make due commits. Does nothing while this member owns nothing."""
        parts = self.parts
        if not parts.owned:
            self._drop_unwanted_reads()
            return
        now = self._clock()
        self.refresh_gates()
        sources = self._drop_unwanted_reads()
        if sources:
            unowned = [tp for tp in sources if tp not in parts.owned]
            if unowned:
                commits = self._read_in_background(self._commits_read, self.port.committed_later, unowned) or {}
                for tp, off in commits.items():
                    if tp not in sources or tp in parts.owned:
                        continue  # (asked for before an assignment changed)
                    st = parts.source(tp)
                    st.committed = max(st.committed, off)
                self._dirty = self._dirty or bool(commits)
            starts = self._read_in_background(self._log_starts_read, self.offsets.start_offsets_later, sources) or {}
            for tp, off in starts.items():
                if tp in sources:
                    parts.source(tp).log_start = off
            self._dirty = self._dirty or bool(starts)
        if self._dirty:
            # Work only when an input changed: new gates, commits, positions,
            # log starts (the keeper then touches what moved).
            self._dirty = False
            processed = {tp: self.processed(tp) for tp in sources}
            opened = self.keeper.update(processed)
            for g in opened:
                tp = (g.topic, g.partition)
                if tp in parts.owned:
                    local = {(g.topic, q): w for q, w in g.wait.items() if parts.committed_of((g.topic, q)) < w}
                    if local:
                        parts[tp].deps.append((g.start, local))
            for tp in list(parts.held):
                limit = self.keeper.limit(tp)
                if limit is None or limit > parts[tp].held:  # type: ignore[operator]
                    self.release(tp)
            if parts.foreign and opened:
                parts.forget_sources(self.keeper.sources())
            if self.opts.gating and self.keeper.has_closed():
                self._hold_at_positions()
        if parts.init_commit:
            self._commit_initial()
        if self.opts.auto_commit and self._commit_due(now):
            self.commit_processed()

    def _hold_at_positions(self) -> None:
        """Hold owned partitions already at or past their first closed gate
        (e.g. just assigned at a gated offset) before anything of them is
        fetched and handed over for inspection."""
        owned, held = self.parts.owned, self.parts.held
        closed = [tp for tp in self.keeper.closed_partitions() if tp in owned and tp not in held]
        if not closed:
            return
        at = self.positions(closed)
        for tp in closed:
            limit = self.keeper.limit(tp)
            pos = at.get(tp)
            if limit is not None and pos is not None and pos >= limit:
                self.hold(tp, pos)

    def settle(self) -> None:
        """End of a poll: when nothing is pending, let the next polls skip the
        core (see :class:`Calm`) until the next auto-commit or until an event
        needs work. Records fetched meanwhile are still checked for the
        causal-token rule (stamps, gaps) on the way; one that needs a
        catch-up takes the full path.

        Partitions held by a pause at gates that wait on other members do
        not end the calm: it then lasts until the sources' commits are read
        again (every ``ordered.commit.interval.ms`` / 2), and records of a
        held partition that a client hands out anyway take the full path
        (:attr:`Calm.held`). A gate opened by another member meanwhile is
        seen at the first poll after that, or when a poll's own wait ends,
        so at most one poll timeout later.

        Nor do partitions held (in hand or by a pause) at gates this
        member's own deliveries open, or hand-off waits on partitions it
        owns: ``Calm.until_offsets`` (:meth:`_calm_ends`) ends the calm at
        the fetch that gets a source to a gate's wait or across a hand-off
        wait, and it lasts one ``ordered.commit.interval.ms`` at most (the
        commits those waits ask for). A closed gate that an owned
        partition's position has not reached puts its start in
        ``Calm.limits``: records below it pass the calm check, the first at
        or past it takes the full path, which holds the partition there.
        Records in hand of a released partition, and offsets the
        application stores itself while such waits or holds exist, keep
        the full path."""
        calm = self.calm
        gating = self.opts.gating
        keeper = self.keeper
        parts = self.parts
        closed = gating and keeper.has_closed()
        waited = keeper.waited_on()
        if (parts.init_commit or self._dirty
                or any(tp not in parts.held for tp in self.kept)  # released: what is in hand goes first
                or (self._stored_mode and (waited or parts.in_hand))
                or (parts.held and not closed)
                or (gating and self._listener is not None and keeper.has_announcements())):
            calm.quiet = False
            return
        limits: Dict[TP, int] = {}
        for tp in (self.to_inspect(self.watched()) if closed else ()):
            limit = keeper.limit(tp)
            if limit is None:
                calm.quiet = False
                return
            limits[tp] = limit
        sources = keeper.sources() if closed else frozenset()
        ends = self._calm_ends(waited, sources)
        expected = calm.expected
        if any(expected.get(tp, -1) >= off for tp, off in ends.items()):
            calm.quiet = False  # this poll's deliveries got there: the next poll looks
            return
        now = self._clock()
        calm.until = self.last_commit + self.opts.auto_commit_interval if self.opts.auto_commit else float("inf")
        if not sources <= parts.owned:
            # A closed gate waits on other members: it is looked at again
            # when their commits are read again (see maintain).
            calm.until = min(calm.until, self._commits_read.due)
        if ends or parts.in_hand:
            # Owners of sources commit every commit interval (_commit_due);
            # a gate this member's deliveries open is looked at then at the
            # latest, whatever the calm's offsets.
            due = self.last_commit + self.opts.commit_interval
            calm.until = min(calm.until, due if due > now else now + self.opts.commit_interval)
        if waited and parts.commit_unknown:
            # The crossings of their waits are judged once the read answers.
            calm.until = min(calm.until, self._starts_read.due)
        reads = (self._commits_read, self._starts_read, self._log_starts_read)
        if any(read.pending is not None for read in reads):
            self._drop_unwanted_reads()
            for read in reads:
                if read.pending is not None:  # its answer is looked for then
                    calm.until = min(calm.until, read.due)
        calm.held = frozenset(parts.held)
        calm.until_offsets = ends
        calm.limits = limits
        calm.managed = frozenset(t for t in self.owned_topics() if self.managed(t)) if gating else frozenset()
        # Stamps the view includes cost the calm check only their removal.
        log_id = self.freshness.log_id
        calm.stamp_prefix = stamp_prefix(log_id) if gating else None
        calm.view_next = self.follower.history.next_offset if gating else 0
        calm.quiet = True
        if self.follower.history.version != self._seen_version:  # applied meanwhile: look first
            calm.quiet = False

    def _calm_ends(self, waited: AbstractSet[TP], sources: AbstractSet[TP]) -> Dict[TP, int]:
        """Where a calm beside this member's own sources ends
        (``Calm.until_offsets``): for each owned partition not held, the
        next offset whose delivery crosses a hand-off wait on it (``waited``;
        announced and committed by :meth:`begin_poll`) or meets the lowest
        unmet wait of a closed gate on it (``sources``: those closed gates
        wait on; :meth:`maintain` may then open the gate). Hand-off waits on
        partitions whose group commit is not read yet end nothing: their
        crossings are judged when the read answers, which ends the calm."""
        parts, keeper = self.parts, self.keeper
        owned, held = parts.owned, parts.held
        ends: Dict[TP, int] = {}
        unread = parts.commit_unknown
        for tp in waited:
            if tp not in owned or tp in held or tp in unread:
                continue
            st = parts[tp]
            marks = [m for m in (st.revoke_mark, st.processed) if m is not None]
            w = keeper.next_wait(tp, min(marks) if marks else -1)
            if w is not None:
                ends[tp] = w
        for tp in sources:
            if tp in owned and tp not in held:
                w = keeper.first_unmet(tp)
                if w is not None and w < ends.get(tp, w + 1):
                    ends[tp] = w
        return ends

    def idle(self) -> None:
        """A fetch of the fast path came back empty past the calm's deadline:
        the per-poll work (nothing is in hand), then :meth:`settle`."""
        self.begin_poll()
        self.settle()

    def fetched_late(self) -> None:
        """A fetch of the fast path brought records past the calm's deadline:
        they are decided as usual; the per-poll work (commits of records
        returned before) waits for the next poll, which the end of the calm
        sends through :meth:`begin_poll`."""
        self.calm.quiet = False

    def poll_cycle(self, timeout: Optional[float]) -> "PollCycle":
        """Begin one poll of up to ``timeout`` seconds (``None``: until
        something is deliverable); see :class:`PollCycle`."""
        return PollCycle(self, timeout)

    def poll_chunk(self, left: Optional[float]) -> Optional[float]:
        """How long one client fetch may wait inside a poll of ``left`` seconds
        (``None``: forever): short while gates are closed, so they are re-evaluated."""
        if self.has_closed_gates() or self.parts.init_commit:
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
        offsets = self.positions(self.parts.starts_committed())
        if offsets:
            self.commit(offsets, asynchronous=True)

    def processed_offsets(self) -> Dict[TP, int]:
        """What a commit without arguments commits: the positions of returned
        records, or the offsets stored with ``store_offsets``."""
        return self._finished(self.parts.owned)

    def _finished(self, tps: Iterable[TP]) -> Dict[TP, int]:
        """What the application finished of owned ``tps``: the positions of
        returned records, or (once it stores offsets itself) the offsets it
        stored. Gates open on these, so a commit that carries the sources a
        gate waited on never passes a record the application did not finish."""
        if self._stored_mode:
            parts = self.parts
            return {tp: st.stored for tp in tps if tp in parts.owned and (st := parts[tp]).stored is not None}
        return self.positions(tps)

    def uncommitted(self, tps: Optional[Iterable[TP]] = None) -> Dict[TP, int]:
        """Processed offsets (of ``tps``, default all owned) beyond the known commit."""
        base = self.processed_offsets()
        want = self.parts.owned if tps is None else set(tps)
        return {tp: off for tp, off in base.items() if tp in want and off > self.parts[tp].committed}

    def commit_processed(self, asynchronous: bool = True) -> None:
        """Commit what the application processed; call at the start of a poll."""
        offsets = self.uncommitted()
        self.last_commit = self._clock()
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
                        if q in self.parts.owned and self.parts[q].committed < w and out.get(q, -1) < w:
                            out[q] = w
        return out

    def commit(self, offsets: Dict[TP, int], asynchronous: bool) -> Any:
        """Commit ``offsets`` (plus the source offsets opened gates depend on)."""
        offsets = self.with_dependencies(offsets)
        result = self.port.commit(offsets, asynchronous)
        self.committed(offsets)
        return result

    def committed(self, offsets: Mapping[TP, int]) -> None:
        """Record commits made (also those the adapter made itself). A
        commit of a partition whose group commit is not read yet ends none
        of its hand-off waits: whether this member crossed them is judged
        once the read answers (:meth:`begin_poll`), which then ends them."""
        unread = self.parts.commit_unknown
        for tp, off in offsets.items():
            st = self.parts.get(tp)
            if st is not None and off > st.committed:
                st.committed = off
                self._dirty = True
            if tp not in unread:
                self.keeper.prune_waits(tp, off)
        parts = self.parts
        for tp in parts.owned:
            st = parts[tp]
            if st.deps:
                st.deps = [(s, w) for s, w in st.deps if any(parts.committed_of(q) < x for q, x in w.items())]

    def store(self, offsets: Mapping[TP, int]) -> None:
        """``store_offsets``: from now on commits take stored offsets instead of
        the positions of returned records (of owned partitions)."""
        self._stored_mode = True
        for tp, off in offsets.items():
            if tp in self.parts.owned:
                self.parts[tp].stored = off

    # -- holding and releasing

    def hold(self, tp: TP, offset: int) -> None:
        """Stop ``tp`` at ``offset``: pause it and seek back so the held record
        is fetched again when the gate opens; with :attr:`keep_in_hand` (and
        unless ``tp`` is held already or paused by the application) the
        client is left alone and the adapter keeps the records from
        ``offset`` on in :attr:`kept`."""
        parts = self.parts
        in_hand = (self.keep_in_hand and tp not in parts.held and tp not in parts.user_paused
                   and self._opens_here(tp))
        parts.hold(tp, offset, self._clock(), time.time(), in_hand)
        self._scope += 1
        self.calm.quiet = False
        if in_hand:
            # Records still kept from an earlier hold (released, not yet all
            # delivered) are the first held ones: the client is past them.
            self.kept.setdefault(tp, [])
        else:
            self._pause_at(tp, offset)
        waits = {q: w for q, (w, _) in next((g.waiting_on for g in self.gate_status()
                                              if (g.topic, g.partition) == tp), {}).items()}
        log.info("%s [%d] held at offset %d by a gate waiting for %s", tp[0], tp[1], offset,
                 ", ".join(f"partition {q} >= {w}" for q, w in sorted(waits.items())) or "its sources")

    def release(self, tp: TP) -> None:
        """Undo :meth:`hold` (the one release path: gate opened, seek, rewind)."""
        in_hand = tp in self.parts.in_hand  # never paused: its kept records are decided again by the adapter
        held_s = self.parts.release(tp, self._clock())
        self._scope += 1
        if held_s is not None:
            self._stall[tp] = self._stall.get(tp, 0.0) + held_s
            self._observe_wait(held_s)
            log.info("%s [%d] released after %.3f s at a gate", tp[0], tp[1], held_s)
        if not in_hand:
            self._unpause([tp])
        elif tp in self.kept and not self.kept[tp]:
            self._forget_kept(tp)  # nothing in hand: the calm may come back
        else:
            self._kept_bytes.pop(tp, None)  # what a released partition keeps is not bounded

    def _opens_here(self, tp: TP) -> bool:
        """Whether this member owns every source of ``tp``'s first closed gate:
        its own deliveries open it, typically a moment later (a replay of
        history). A gate that waits for another member's commits may stay
        closed long: its partition is held by a pause."""
        sources = self.keeper.limit_sources(tp)
        return bool(sources) and all(q in self.parts.owned for q in sources)

    def in_hand(self, tp: TP) -> bool:
        """Whether ``tp`` is held in hand (see :attr:`keep_in_hand`)."""
        return tp in self.parts.in_hand

    def pause_in_hand(self, tp: TP) -> None:
        """Turn ``tp``'s hold in hand into a pause: the client is paused and
        sought back to the hold, and the records kept of it go."""
        if tp not in self.parts.in_hand:
            return
        self.parts.pause_hold(tp)
        held = self.parts[tp].held
        assert held is not None
        self._pause_at(tp, held)

    def _pause_at(self, tp: TP, offset: int) -> None:
        """A hold by a pause: the client stops ``tp`` and fetches it again
        from ``offset`` once resumed (records kept of it go)."""
        self._forget_kept(tp)
        self.freshness.moved(tp, offset)
        self.port.pause([tp])
        self.port.seek(tp, offset)

    def keep(self, tp: TP, records: List[Any]) -> None:
        """Keep ``records`` of ``tp`` in hand after those kept already (they
        follow them in offset order; ``tp`` is held in hand, or was released
        with records still kept). A hold in hand that then keeps more than
        :data:`KEEP_IN_HAND_RECORDS` records or :data:`KEEP_IN_HAND_BYTES`
        bytes becomes a pause (:meth:`pause_in_hand`: the kept records go
        back to the client); a released partition keeps whatever it must."""
        recs = self.kept[tp]
        recs.extend(records)
        if tp not in self.parts.in_hand:
            return
        # Sized while held in hand only (see release): in full at the
        # hold's first keep, then as records come.
        size = self._kept_bytes.get(tp)
        size = self._kept_bytes[tp] = self.kept_bytes(recs) if size is None else size + self.kept_bytes(records)
        if len(recs) > KEEP_IN_HAND_RECORDS or size > KEEP_IN_HAND_BYTES:
            self.pause_in_hand(tp)

    def handed(self, tp: TP, count: int) -> None:
        """The first ``count`` records kept of ``tp`` were delivered: they go
        from :attr:`kept` (the entry too once empty, unless ``tp`` is held in
        hand)."""
        recs = self.kept[tp]
        if tp in self._kept_bytes:
            self._kept_bytes[tp] -= self.kept_bytes(recs[:count])
        del recs[:count]
        if not recs and tp not in self.parts.in_hand:
            self._forget_kept(tp)

    def _forget_kept(self, tp: TP) -> Optional[List[Any]]:
        """Remove ``tp``'s kept records (and their size); returns them."""
        self._kept_bytes.pop(tp, None)
        return self.kept.pop(tp, None)

    def _drop_kept(self, tp: TP) -> None:
        """Give the records kept of ``tp`` back to the client: a hold in hand
        becomes a pause; kept records of a released partition are fetched
        again (the client seeks back to the first)."""
        if tp in self.parts.in_hand:
            self.pause_in_hand(tp)
            return
        recs = self._forget_kept(tp)
        if recs:
            self.refetch(tp, self.kept_offset(recs[0]))

    def refetch(self, tp: TP, offset: int) -> None:
        """Records of owned ``tp`` from ``offset`` on were fetched and never
        delivered: the client seeks back to ``offset`` to fetch them again."""
        st = self.parts.get(tp)
        if st is not None and st.owned:
            self.parts.refetch(tp, offset)
            self.freshness.moved(tp, offset)
            self.port.seek(tp, offset)

    def _unpause(self, tps: Sequence[TP]) -> None:
        """The one place that resumes partitions: those of ``tps`` the
        application did not pause itself."""
        paused = self.parts.user_paused
        mine = [tp for tp in tps if tp not in paused]
        if mine:
            self.port.resume(mine)

    def start_failed(self, tps: Sequence[TP]) -> None:
        """The client took an assignment of ``tps`` whose start could not be
        read (:class:`StartRead`): they stay paused in the client, so
        nothing of them is fetched ungated, until a later assignment
        (:meth:`unpause_assigned`)."""
        if tps:
            self.port.pause(list(tps))

    def unpause_assigned(self, tps: Sequence[TP]) -> None:
        """The client took an assignment of ``tps``: a hold from before the
        rebalance is forgotten, so its pause goes too (librdkafka keeps a
        partition paused across reassignment), and the application's own
        pauses are applied again (kafka-python forgets them)."""
        self._unpause(tps)
        paused = self.parts.user_paused
        user = [tp for tp in tps if tp in paused]
        if user:
            self.port.pause(user)

    def seeked(self, tp: TP, offset: int) -> None:
        """The application sought ``tp`` to ``offset`` (``< 0``: a logical
        offset, whose position the client tells once it resolved it): the
        new position counts as processed; a hold is released."""
        st = self.parts.get(tp)
        if st is None or not st.owned:
            return
        self.calm.quiet = False
        self._dirty = True
        self._forget_kept(tp)  # the client fetches from the new position
        self.parts.seek(tp, offset)
        self.freshness.jumped(tp, offset if offset >= 0 else None)
        if tp in self.parts.held:
            self.release(tp)

    def user_pause(self, tps: Iterable[TP]) -> None:
        """The application paused ``tps`` (kept across rebalances and gate releases).
        Records kept in hand of them go back to the client (a paused client
        hands out nothing more of a partition)."""
        for tp in tps:
            if tp in self.kept:
                self._drop_kept(tp)
            self.parts.user_pause(tp)

    def user_resume(self, tps: Iterable[TP]) -> List[TP]:
        """Mark ``tps`` resumed by the application; returns those the client
        may resume now (not held at a gate)."""
        out = []
        for tp in tps:
            self.parts.user_resume(tp)
            if tp not in self.parts.held:
                out.append(tp)
        return out

    def paused_by_user(self, tp: TP) -> bool:
        return tp in self.parts.user_paused

    # -- delivering

    def watched(self) -> Set[TP]:
        """Owned partitions whose records need a decision: a closed gate, a
        hold, or (with a listener) an opened gate not yet announced. Empty
        once this member's transitions are passed, so the adapters' fetch
        path is then the same as on a topic that never changed. (Cached
        until the gates, holds or ownership change; do not modify.)"""
        key = (self.keeper.changes, self._scope)
        if self._watched[:2] == key:
            return self._watched[2]
        if not self.opts.gating:
            out: Set[TP] = set()
        else:
            gated = self.keeper.watched() if self._listener is not None else self.keeper.closed_partitions()
            owned = self.parts.owned
            out = {tp for tp in gated if tp in owned} | self.parts.held
        self._watched = (key[0], key[1], out)
        return out

    def to_inspect(self, watched: Set[TP]) -> Set[TP]:
        """Of ``watched``, the partitions whose fetched records the adapter
        must look at. A held partition's are not: the client was paused and
        sought back when it was held, and a seek makes librdkafka and
        kafka-python drop what they fetched before it (librdkafka's version
        barrier; kafka-python stops handing out a paused partition), so
        nothing of it arrives until it is released. (A partition held in
        hand is not paused: the adapter moves its records to :attr:`kept`
        before it asks.)"""
        held = self.parts.held
        return watched - held if held else watched

    def admit_run(self, tp: TP, count: int, offset_at: Callable[[int], int]) -> int:
        """Decide ``count`` fetched records of watched partition ``tp`` at
        increasing offsets ``offset_at(0..count-1)``: returns how many of the
        first ones may be delivered (by bisection on the gate's start; after
        announcing opened gates they pass). When some may not, ``tp`` is held
        at the first of those."""
        if tp in self.parts.held:
            self.records_held_back += count
            # The client handed out records of a partition it should have
            # kept paused (aiokafka forgets a pause when its assignment
            # changes under it): pause it and seek back to the hold again,
            # or its position would skip the held records.
            held_at = self.parts[tp].held
            assert held_at is not None
            self.hold(tp, held_at)
            return 0
        limit = self.keeper.limit(tp)
        n = count if limit is None else bisect.bisect_left(range(count), limit, key=offset_at)
        if self._listener is not None:
            while n:
                start = self.keeper.next_announcement(tp)
                if start is None:
                    break
                i = bisect.bisect_left(range(n), start, key=offset_at)
                if i >= n:
                    break
                self.keeper.announce(tp, offset_at(i))
                self._listener.on_partition_key_assigned(self.port.partitions([tp]))
        if n < count:
            self.hold(tp, offset_at(n))
            self.records_held_back += count - n
        return n

    def admit(self, tp: TP, offset: int) -> bool:
        """Decide one record of a watched partition: True to deliver (after
        announcing an opened gate), False when held at a closed gate."""
        return self.admit_run(tp, 1, lambda i: offset) == 1

    def rewind(self, first: Mapping[TP, int]) -> None:
        """Records from ``first[tp]`` on were fetched but will not reach the
        application: seek back so they are fetched (and decided) again.
        Records kept in hand go back to the client too (holds in hand
        become pauses)."""
        first = dict(first)
        for tp in list(self.kept):
            recs = self.kept[tp]
            if recs and tp not in self.parts.in_hand:
                off = self.kept_offset(recs[0])
                first[tp] = min(first.get(tp, off), off)
                self._forget_kept(tp)
            else:
                self._drop_kept(tp)
        for tp, off in first.items():
            st = self.parts.get(tp)
            if st is None or not st.owned:
                continue
            if st.held is not None:
                if st.held <= off:
                    continue  # already sought back to the hold
                self.release(tp)
            self.parts.refetch(tp, off)
            self.freshness.moved(tp, off)
            self.port.seek(tp, off)

    def _observe_wait(self, seconds: float) -> None:
        self.last_wait_s = seconds
        self._wait_sum += seconds
        i = bisect.bisect_left(GATE_WAIT_BUCKETS, seconds)
        for j in range(i, len(self._wait_counts)):
            self._wait_counts[j] += 1

    def metrics(self, group_id: str, client_id: str = "") -> ConsumerMetrics:
        """A snapshot for :meth:`OrderedConsumer.ordered_metrics`. Reads the
        owned partitions' log-end offsets (one request) for the lag and the
        records behind each gate; when that fails they are ``None``."""
        now = self._clock()
        owned = sorted(self.parts.owned)
        ends: Optional[Dict[TP, int]]
        try:
            ends = self.offsets.end_offsets(owned, self.opts.timeout) if owned else {}
        except KafkaOrderedError as e:
            log.warning("metrics: end offsets of %d partition(s) unreadable: %s", len(owned), e)
            ends = None
        gates = []
        for status in self.gate_status():
            tp = (status.topic, status.partition)
            if tp not in self.parts.owned:
                continue
            st = self.parts[tp]
            held = tp in self.parts.held
            behind = None if ends is None or tp not in ends else max(0, ends[tp] - status.start)
            gates.append(GateMetrics(status.topic, status.partition, status.start, held, st.held_wall,
                                     now - st.held_since if st.held_since is not None else 0.0,
                                     dict(status.waiting_on), behind))
        lag: Optional[Dict[TP, int]] = None
        if ends is not None:
            lag = {tp: max(0, ends[tp] - pos) for tp, pos in self.positions(owned).items() if tp in ends}
        history = self.follower.history
        topics = self.owned_topics() | self.subscribed
        epochs = {t: lay.epoch for t in sorted(topics) if (lay := history.current(t)) is not None}
        return ConsumerMetrics(
            group_id=group_id,
            owned_partitions=len(self.parts.owned),
            closed_gates=tuple(gates),
            held_partitions=len(self.parts.held),
            records_held_back=self.records_held_back,
            last_gate_wait_s=self.last_wait_s,
            gate_waits=WaitHistogram(GATE_WAIT_BUCKETS, tuple(self._wait_counts), self._wait_counts[-1],
                                     self._wait_sum),
            layout_epochs=epochs,
            layout_view=self.follower.view_metrics(),
            client_id=client_id,
            records_lag=lag,
        )

    def has_closed_gates(self) -> bool:
        return self.opts.gating and self.keeper.has_closed()

    def gate_status(self) -> List[GateStatus]:
        """Every partition with a closed gate: first held offset, the sources
        it waits on as ``(wait, processed)``, since when it was seen closed
        (``since`` monotonic, ``since_wall`` wall clock) and since when this
        member holds the partition there (``held_since``, wall clock)."""
        out = self.keeper.status({tp: self.processed(tp) for tp in self.keeper.sources()})
        return [replace(s, held_since=st.held_wall) if (st := self.parts.get((s.topic, s.partition))) is not None
                and st.held is not None else s for s in out]


class PollCycle:
    """The cycle of one application poll, decided by the core and performed
    by an adapter, whose only part is the I/O::

        cycle = core.poll_cycle(timeout)
        while True:
            raw = client_fetch(cycle.wait())
            out = decide(raw)              # e.g. kafka_ordered._grouped.take
            if cycle.done(bool(out)):
                return out

    Creating it is the start of the poll (:meth:`GatingCore.begin_poll`:
    what the application processed is announced, gates refreshed, commits
    made when due); :meth:`done` ends it with :meth:`GatingCore.settle` once
    something is deliverable or the time is up, else does the work between
    two fetches (:meth:`GatingCore.maintain`).
    """

    __slots__ = ("_core", "_deadline")

    def __init__(self, core: GatingCore, timeout: Optional[float]) -> None:
        self._core = core
        self._deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        core.begin_poll()

    @property
    def core(self) -> GatingCore:
        """The core whose poll this is."""
        return self._core

    def wait(self, full: bool = False) -> Optional[float]:
        """How long the next client fetch may wait (``None``: forever): what
        is left of the poll, shorter while gates are closed so that they are
        re-evaluated (:meth:`GatingCore.poll_chunk`); ``full``: what is left
        (the client is busy rejoining its group)."""
        left = None if self._deadline is None else max(0.0, self._deadline - time.monotonic())
        return left if full else self._core.poll_chunk(left)

    def done(self, delivered: bool) -> bool:
        """After one fetch: whether the poll is over (``delivered``: the
        fetch gave the application something)."""
        if delivered or (self._deadline is not None and time.monotonic() >= self._deadline):
            self._core.settle()
            return True
        self._core.maintain()
        return False
