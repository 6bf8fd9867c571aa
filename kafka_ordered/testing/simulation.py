"""Broker-free simulation of producer registrations and consumer gates.

Pure and deterministic (one seeded :class:`random.Random`), no I/O: importable
by tests and by a CLI. It runs the shipped code, not copies of it: every
producer is the registering core
(:class:`~kafka_ordered._registering.RegisteringCore`: layout following,
buffering, the switch steps of :func:`~kafka_ordered.registration.switch_steps`,
stamps and move tombstones) and every group member the gating core
(:class:`~kafka_ordered._gating.GatingCore`), each over fake ports, with its
own view of one in-memory layout log
(:class:`~kafka_ordered.history.LayoutHistory`, the shipped record codecs).
What is modelled instead of run is the I/O: partition logs, in-flight
records, offsets and the group coordinator. The producer core's
registration is performed one request at a time
(:meth:`~kafka_ordered._registering.RegisteringCore.registration_steps`),
so that other actors interleave between its flush, reads and append.

The model
---------
* **Topic**: one managed topic with ``max(layouts)`` physical partitions from
  the start (pre-provisioned spares), each an append-only list of records.
* **Admin**: applies a scripted sequence of partition counts (expand when
  larger, shrink when smaller), e.g. ``4 -> 5 -> 6 -> 8 -> 6 -> 8``, at random
  times spread over the producing period.
* **Producers** (some with a stable id, the others anonymous), each a
  registering core whose steps interleave at random with everyone else's:

  - *send* a keyed record through the core (the application's per-key
    sequence number is given at the send, so the oracle sees any reordering
    of the core's buffer); the core buffers it while a switch runs, and
    starts a switch when its view of the layout log shows a layout it has
    not registered for;
  - *ack* the head of one partition's in-flight queue (appends it to the
    partition log: records can sit in flight for a long time; per partition
    in order, like an idempotent producer), then send the move tombstones
    that made due, as the adapters' ``poll`` does;
  - *observe*: its layout-log follower applies a random prefix of the unread
    records (so a producer may register for an intermediate epoch);
  - *registration steps*, the core's own requests (§3):
    ``flush`` (enabled once nothing is in flight), then one step per offset
    read — every ``wait`` (sources) first, then every ``start`` (targets); each
    read is its own step, so other producers' appends interleave between them
    — then ``append`` the registration to the layout log and switch (the buffer
    is sent under the new layout). ``reverse_reads=True`` reads the starts
    first (through the core's test-only knob ``RegisteringCore.reads_first``).
    Without sources there is no flush and no read; a stable id still
    appends a gate-less registration when its last one is for another epoch;
  - *restart* (crash): per partition a random prefix of the in-flight records
    is acknowledged, the rest (and the buffer) is lost — unacknowledged records
    carry no promise. The new incarnation follows the whole log and registers
    at its first send from :func:`~kafka_ordered.registration.initial_from_epoch`: a stable id from the epoch
    of its last registration, an anonymous one from the oldest layout change
    inside ``window`` steps (none: no gates).
* **Stamps** (causal freshness tokens, :mod:`kafka_ordered.tokens`): after a
  switch that appended a registration, a producer stamps every keyed record
  to a partition the registration gates with the registration's layout-log
  offset, until a stamped record there is acknowledged; the shipped
  :class:`~kafka_ordered.tokens.StampBook` and
  :func:`~kafka_ordered.tokens.partitions_to_stamp` decide (stamps
  accumulate over registrations; a restarting stable id stamps what its
  earlier registrations gated). ``stamps=False``: the fake client drops
  the stamps (the control).
* **Consumers**: one group of ``members``; every physical partition is owned
  by one member. Each member runs the shipped
  :class:`~kafka_ordered._gating.GatingCore` (gates, holds, the causal-token
  rule of :class:`~kafka_ordered._freshness.CausalFreshness`, commits with
  their dependencies, the hand-off on revoke) over fake ports: a client of
  positions and pauses, the group's committed offsets, the partition logs'
  offsets, and its own follower of the layout log, which reads only when
  told to (a late follower: a random prefix of what it has not read, at
  random times) or when the core asks for a catch-up. A poll is the core's
  own cycle (``poll_cycle``, the fetch decided by
  :func:`kafka_ordered._grouped.take`) over a fetch of a few
  records of one owned partition, stamped records carrying the
  ``kafka-ordered.reg`` header and move tombstones their header, as a
  broker returns them; while the core's calm lasts, the adapters' calm
  path instead: the fetch as fetched when the shipped calm check
  (:func:`kafka_ordered._fastpath.admits_runs`) admits it, else
  ``take``. The controls switch steps of the shipped rule off
  through its test-only knob (``CausalFreshness.skip``):
  ``catch_up_on_stamp=False`` (what the tests show to be unsafe),
  ``catch_up_on_jump=False``, ``catch_up_on_gap=False``, and
  ``freshness=False`` for all three; ``gating=False`` runs the core with
  ``ordered.gating=false``. The core's clock advances one second per
  reading, so its time-based refreshes happen at every poll.
  Steps: poll a few records of one owned partition, commit (one OffsetCommit
  of every owned partition's position, with what opened gates depend on),
  follow the log, *rebalance* (move one partition; the revoking member
  commits first, as ``_on_revoke`` does with auto-commit), *crash* (the
  member's process restarts: a new core from the committed offsets, which
  replays).
* **End**: once every producer has sent its budget and has nothing buffered or
  in flight, and the admin is done, the consumers are run to a fixpoint
  (follow, deliver everything allowed, commit, repeat).

Definitions
-----------
* **Order** is per *(key, producer lineage)*. A lineage is a stable id across
  all its incarnations; an anonymous producer's new incarnation continues the
  lineage when its first registration covers the previous incarnation's
  writes (its ``from_epoch`` is at most the epoch the previous one wrote
  under: the design's "restart within the window"), else it starts a new
  lineage (Kafka promises nothing there). The *chain* of a (key, lineage) is
  its acknowledged records in sequence order.
* **Effective set** ``E``: the records whose processing the group's state
  reflects, Kafka at-least-once style. Per partition ``p`` it is the prefix
  ``[0, eff[p])``: delivering the record at ``eff[p]`` extends it; a crash
  rolls ``eff[p]`` back to the committed offset (those records will be
  replayed); a rebalance commits first so it changes nothing.
* **Violation**: ``E`` restricted to a chain must always be a prefix of the
  chain. Checked (1) at every delivery: the delivered record's chain
  predecessor must be in ``E`` (a record delivered before an earlier one of
  the same key and lineage); (2) at every rollback: no rolled-back record may
  leave its chain successor in ``E`` (a committed later record whose earlier
  record is replayed after it). Replays of an uncommitted suffix are allowed:
  re-delivering ``2, 3`` after ``1, 2, 3`` and a crash is fine.
* **Deadlock**: at the end fixpoint (producers finished, everything
  committed, every view complete) some acknowledged record is undelivered:
  every partition with records left is held at a closed gate.
* **Lost**: an acknowledged record never delivered although there is no
  deadlock (must never happen).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

from .._fastpath import admits_runs, calm_wait, replace_headers
from .._freshness import SkippableStep
from .._gating import GatingCore, GatingOptions
from .._grouped import from_hand, released_in_hand, take
from .._ports import TP, Answered, LayoutView, OffsetsPort, Stamp
from .._registering import RegisteringCore, TopicState
from ..history import LayoutHistory, encode_layout
from ..layout import Layout
from ..metrics import LayoutViewMetrics
from ..registration import Append, Flush, ReadEnds, SwitchPlan, SwitchStep, initial_from_epoch
from ..tokens import HEADER as STAMP_HEADER
from ..tokens import decode, encode, stamp_of
from ..tombstones import HEADER as MOVED_HEADER

__all__ = ["SimulationResult", "Simulation", "run", "find_seed", "crossing_scenario", "TOPIC"]

#: The one topic a simulation runs on.
TOPIC = "sim"
#: The simulated layout log's identity in stamps.
LOG_ID = "sim-log"


@dataclass(frozen=True)
class SimulationResult:
    """What one run did. ``violations``, ``deadlock`` and ``lost`` are the verdicts."""

    seed: int
    steps: int
    produced: int  # acknowledged records
    delivered: int  # delivery events, replays included
    replays: int
    violations: int
    deadlock: bool
    undelivered: int  # acknowledged records never delivered
    lost: int  # undelivered without a deadlock (must be 0)
    layout_changes: int
    registrations: int  # registrations appended with gates
    gates: int
    concurrent_registrations: int  # most producers registering at the same time
    gate_holds: int  # delivery attempts stopped at a closed gate
    producer_restarts: int
    consumer_crashes: int
    rebalances: int
    lineage_breaks: int  # anonymous restarts outside the window (new lineage)
    stamped: int = 0  # acknowledged records that carry a stamp
    stamp_catch_ups: int = 0  # catch-ups a stamp asked for
    jump_catch_ups: int = 0  # catch-ups at the first record after an assignment or restart
    calm_fetches: int = 0  # fetches the calm check admitted (delivered without the core)
    detail: str = ""  # first violation, or the held gates of a deadlock
    # compacted runs (``compacted=True``; 0 otherwise)
    tombstones: int = 0  # acknowledged move tombstones
    compactions: int = 0  # compaction passes over a partition's cleanable prefix
    compacted_away: int = 0  # records (tombstones included) compaction removed
    gap_catch_ups: int = 0  # catch-ups on an offset gap a compaction left
    table_errors: int = 0  # keys whose value in the group's table is not their last acknowledged one
    rebuilt_table_errors: int = 0  # the same for a new group rebuilding from earliest after the final compaction
    stale_copies: int = 0  # keys with more than one live value left after the final compaction
    unexplained_stale_copies: int = 0  # of those, keys no producer crash lost a move tombstone of

    @property
    def ok(self) -> bool:
        """No deadlock, no violation and nothing lost; on a compacted run also
        both tables right and no stale copy a lost tombstone does not explain."""
        return (not self.deadlock and self.violations == 0 and self.lost == 0 and self.table_errors == 0
                and self.rebuilt_table_errors == 0 and self.unexplained_stale_copies == 0)


@dataclass(frozen=True)
class _Record:
    partition: int
    offset: int
    key: bytes
    lineage: str
    seq: int
    stamp: Optional[int]  # the kafka-ordered.reg offset the record carries
    chain_index: int  # -1 for a move tombstone (in no chain)

    @property
    def tombstone(self) -> bool:
        return self.chain_index < 0


class _Inflight(NamedTuple):
    """A record the producer's fake client holds until it is acknowledged."""

    key: bytes
    lineage: str
    seq: int  # -1: a move tombstone
    stamp: Optional[int]  # the kafka-ordered.reg offset it carries
    acked: Optional[Callable[[], None]]  # its stamp's acknowledgement, to call
    done: Optional[Callable[[bool], None]]  # the core's on_done: its key's move tombstones become due


class _Registration:
    """A producer's switch in progress: the shipped core's
    :meth:`~kafka_ordered._registering.RegisteringCore.registration_steps`,
    its pending step, and the offsets read so far of a ``ReadEnds`` step
    (the simulation reads one partition per step, so that other actors
    interleave between the reads of one request)."""

    __slots__ = ("steps", "state", "step", "pending", "got", "gated")

    def __init__(self, steps: Any, state: TopicState, first: SwitchStep) -> None:
        self.steps = steps
        self.state = state
        self.step: SwitchStep = first
        self.pending: List[int] = list(first.partitions) if isinstance(first, ReadEnds) else []
        self.got: Dict[int, int] = {}
        self.gated = isinstance(first, Flush)  # only switches with sources flush

    @property
    def phase(self) -> str:
        return {Flush: "flush", ReadEnds: "reads", Append: "append"}[type(self.step)]


class _SimProducerClient:
    """:class:`~kafka_ordered._ports.ProducerPort`: a producer process's fake
    client. Records wait in flight, per partition in order, until the
    simulation acknowledges them. ``stamps=False`` writes no stamp (the
    control); ``ack_at_send`` reports a record delivered as soon as it is
    sent, so that the move tombstones it makes due go out right after it
    (the control of ``tombstones_after_ack=False``)."""

    def __init__(self, producer: "_Producer", stamps: bool, ack_at_send: bool) -> None:
        self._pr = producer
        self._stamps = stamps
        self._ack_at_send = ack_at_send

    def send(self, topic: str, partition: Optional[int], item: Any, stamp: Optional[Stamp] = None,
             on_done: Optional[Callable[[bool], None]] = None) -> None:
        assert partition is not None, "the simulation sends keyed records only"
        key, lineage, seq = item
        offset: Optional[int] = None
        acked: Optional[Callable[[], None]] = None
        if stamp is not None and self._stamps:
            token = decode(stamp.value)
            assert token is not None and token[0] == LOG_ID
            offset, acked = token[1], stamp.acked
        pr = self._pr
        pr.inflight.setdefault(partition, deque()).append(
            _Inflight(key, lineage, seq, offset, acked, None if self._ack_at_send else on_done))
        layout = pr.state.layout
        assert layout is not None
        pr.written_epoch = layout.epoch
        if on_done is not None and self._ack_at_send:
            on_done(True)
            pr.core.send_due_tombstones()

    def flush(self, timeout: float) -> int:
        return sum(len(q) for q in self._pr.inflight.values())

    def learn_partitions(self, topic: str, count: int, timeout: float) -> None:
        pass  # the topic has all its physical partitions from the start

    def failed(self, item: Any, error: BaseException) -> None:  # pragma: no cover - nothing is refused
        raise AssertionError(f"the simulated client refused {item!r}: {error}")

    def send_tombstone(self, topic: str, partition: int, key: bytes, headers: List[Tuple[str, bytes]]) -> None:
        offset = stamp_of(headers, LOG_ID)
        self._pr.inflight.setdefault(partition, deque()).append(
            _Inflight(key, self._pr.lineage, -1, offset, None, None))


class _SimLogResources:
    """:class:`~kafka_ordered._ports.LogResources` of one producer process:
    its follower, the partition logs' offsets and the simulated layout log."""

    def __init__(self, follower: LayoutView, offsets: OffsetsPort, append: Callable[[bytes, bytes], int],
                 compacted: bool) -> None:
        self._follower = follower
        self._offsets = offsets
        self._append = append
        self._compacted = compacted

    @property
    def follower(self) -> LayoutView:
        return self._follower

    @property
    def offsets(self) -> OffsetsPort:
        return self._offsets

    @property
    def writer(self) -> "_SimLogResources":
        return self

    def append(self, key: bytes, value: bytes) -> int:
        return self._append(key, value)

    def compacted(self, topic: str, timeout: Optional[float] = None) -> bool:
        return self._compacted


class _Producer:
    """One producer: the shipped :class:`~kafka_ordered._registering.RegisteringCore`
    of its current process over a fake client, and its own follower of the
    layout log; the simulation performs the core's registration steps one
    at a time (:meth:`Simulation.reg_step`)."""

    def __init__(self, index: int, stable: bool, budget: int) -> None:
        self.index = index
        self.stable = stable
        self.incarnation = 0
        self.lineage = f"s{index}" if stable else f"a{index}.0"
        self.budget = budget
        self.inflight: Dict[int, Deque[_Inflight]] = {}
        self.reg: Optional[_Registration] = None
        self.written_epoch: Optional[int] = None  # newest epoch the lineage wrote under
        self.fresh = True  # the process has not sent yet: its first send starts its first switch

    def start(self, sim: "Simulation") -> None:
        """Start a new process (a new core and follower, everything else forgotten)."""
        self.view = _SimView(sim.log)
        self.view.read()
        opts = {"ordered.metadata.timeout.ms": 10_000, "ordered.switch.timeout.ms": 10_000,
                "ordered.transition.window.ms": sim.window, "ordered.tombstones": sim.tombstones,
                "ordered.producer.id": f"stable-{self.index}" if self.stable else None}
        client = _SimProducerClient(self, sim.stamps, not sim.tombstones_after_ack)
        shared = _SimLogResources(self.view, sim._offsets, sim._append_log, sim.compacted)
        self.core = RegisteringCore(client, shared, opts, producer_id=f"anon-{self.index}.{self.incarnation}")
        self.core.reads_first = "starts" if sim.reverse_reads else "waits"
        self.core.run_switch = lambda topic, st, own: sim._begin_switch(self, st)
        self.reg = None
        self.fresh = True

    @property
    def state(self) -> TopicState:
        st = self.core.state(TOPIC)
        assert st is not None
        return st

    @property
    def done(self) -> bool:
        return (self.budget == 0 and self.reg is None and not self.state.buffer
                and not self.core.tombstones_due and not any(self.inflight.values()))


class _Partition(NamedTuple):
    """A partition as the members' fake client names it."""

    topic: str
    partition: int


class _Fetched(NamedTuple):
    """A fetched record as the members' fake client hands it to the core."""

    topic: str
    partition: int
    offset: int
    key: bytes
    value: Optional[bytes]
    headers: List[Tuple[str, bytes]]
    record: "_Record"


def _fetched_bytes(recs: List[_Fetched]) -> int:
    return sum(len(rec.key) + len(rec.value or b"") for rec in recs)


class _SimView:
    """:class:`~kafka_ordered._ports.LayoutView` over the simulated layout
    log: one participant's follower, which reads only when told to (a late
    follower) or when its core asks (the catch-ups)."""

    def __init__(self, log: List[Tuple[bytes, bytes, int]]) -> None:
        self._log = log
        self._history = LayoutHistory(corrupt_policy="refuse")
        self._applied = 0
        self._listeners: List[Callable[[], None]] = []
        self.synced = 0  # catch-ups to the end that moved the view
        self.caught_up = 0  # catch-ups past a stamp that moved the view

    fatal: Optional[BaseException] = None

    @property
    def log_id(self) -> str:
        return LOG_ID

    @property
    def history(self) -> LayoutHistory:
        return self._history

    @property
    def applied(self) -> int:
        """How many layout-log records the view applied."""
        return self._applied

    def read(self, upto: Optional[int] = None) -> bool:
        """Apply the log up to ``upto`` (default: all); whether the view moved."""
        end = len(self._log) if upto is None else min(upto, len(self._log))
        if end <= self._applied:
            return False
        while self._applied < end:
            key, value, ts = self._log[self._applied]
            self._history.apply(self._applied, key, value, ts)
            self._applied += 1
        for listener in list(self._listeners):
            listener()
        return True

    def sync(self, timeout: Optional[float] = None) -> LayoutHistory:
        self.synced += self.read()
        return self.history

    def catch_up_past(self, offset: int, timeout: Optional[float] = None) -> LayoutHistory:
        self.caught_up += self.read(offset + 1)
        return self.history

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.remove(listener)

    def view_metrics(self) -> LayoutViewMetrics:  # pragma: no cover - the simulation reads no metrics
        raise NotImplementedError


class _SimOffsets:
    """:class:`~kafka_ordered._ports.OffsetsPort` over the simulated partition
    logs (compaction leaves the log start at 0; no transactions)."""

    def __init__(self, logs: List[List["_Record"]]) -> None:
        self._logs = logs

    def end_offsets(self, tps: Iterable[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        return {tp: len(self._logs[tp[1]]) for tp in tps}

    def start_offsets(self, tps: Iterable[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        return {tp: 0 for tp in tps}

    def start_offsets_later(self, tps: Iterable[TP], timeout: Optional[float] = None) -> Answered[Dict[TP, int]]:
        return Answered(self.start_offsets(tps, timeout))

    def open_transactions(self, tps: Iterable[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        return {}

    def group_commits(self, group: str, tps: Iterable[TP], timeout: Optional[float] = None
                      ) -> Answered[Dict[TP, int]]:  # pragma: no cover - members read through their ports
        raise NotImplementedError("simulated members read the group's commits through _SimClient")


class _SimClient:
    """:class:`~kafka_ordered._ports.ConsumerPort`: one member's fake client
    (fetch positions, pauses) and the group's committed offsets."""

    def __init__(self, group: Dict[int, int]) -> None:
        self.group = group
        self.pos: Dict[int, int] = {}
        self.paused: Set[int] = set()

    def pause(self, tps: List[TP]) -> None:
        self.paused.update(p for _, p in tps)

    def resume(self, tps: List[TP]) -> None:
        self.paused.difference_update(p for _, p in tps)

    def seek(self, tp: TP, offset: int) -> None:
        if tp[1] in self.pos:
            self.pos[tp[1]] = offset

    def committed(self, tps: List[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        return {tp: self.group[tp[1]] for tp in tps if tp[1] in self.group}

    def committed_later(self, tps: List[TP], timeout: float) -> Answered[Dict[TP, int]]:
        return Answered(self.committed(tps, timeout))

    def commit(self, offsets: Dict[TP, int], asynchronous: bool) -> None:
        for (_, p), off in offsets.items():
            self.group[p] = max(self.group.get(p, -1), off)

    def positions(self, tps: List[TP]) -> Dict[TP, int]:
        return {tp: self.pos[tp[1]] for tp in tps if tp[1] in self.pos}

    def partitions(self, tps: List[TP]) -> List[Any]:
        return list(tps)

    def learn_partitions(self, topic: str) -> None:
        pass


class _Member:
    """One group member: the shipped :class:`~kafka_ordered._gating.GatingCore`
    over a fake client, its own follower of the layout log, and the logs' offsets."""

    def __init__(self, index: int, log: List[Tuple[bytes, bytes, int]], offsets: _SimOffsets,
                 group: Dict[int, int], options: GatingOptions, skip: FrozenSet[SkippableStep],
                 clock: Callable[[], float], in_hand: bool = True) -> None:
        self.index = index
        self.view = _SimView(log)
        self.view.read()  # a process starts with its follower caught up
        self.client = _SimClient(group)
        self.core = GatingCore(self.client, self.view, offsets, options, clock=clock)
        self.core.freshness.skip = skip
        self.core.keep_in_hand = in_hand
        self.core.kept_bytes = _fetched_bytes

    @property
    def owned(self) -> Set[int]:
        return {p for _, p in self.core.owned}

    @property
    def pos(self) -> Dict[int, int]:
        return self.client.pos

    def take(self, ps: Iterable[int]) -> None:
        """The member is assigned ``ps`` (the group's commit, else the log start)."""
        tps = [(TOPIC, p) for p in ps]
        committed = self.client.committed(tps)
        starts = self.core.assigned(tps, committed)
        for tp in tps:
            self.client.pos[tp[1]] = starts.get(tp, 0)
        self.core.unpause_assigned(tps)

    def give(self, p: int) -> None:
        """The member loses ``p`` (a rebalance)."""
        self.core.revoked([(TOPIC, p)])
        self.client.pos.pop(p, None)
        self.client.paused.discard(p)


def _apply(table: Dict[bytes, _Record], rec: _Record) -> None:
    """Apply a delivered record to a key -> value table (a tombstone deletes)."""
    if rec.tombstone:
        table.pop(rec.key, None)
    else:
        table[rec.key] = rec


def _keys(keys: Union[int, Sequence[bytes]]) -> Tuple[bytes, ...]:
    if isinstance(keys, int):
        return tuple(f"key-{i}".encode() for i in range(keys))
    return tuple(bytes(k) for k in keys)


class Simulation:
    """One simulated topic, producers, layout log and consumer group.

    Drive it at random with :meth:`run` (or :meth:`step` / :meth:`finish`),
    or script an interleaving with the action methods (``send``, ``ack``,
    ``observe``, ``reg_step``, ``admin_step``, ``deliver``, ``commit``, ...).

    Knobs: ``initial_partitions`` and ``layouts`` (the admin's sequence of
    partition counts after the initial one); ``producers`` of which the first
    ``stable_producers`` have a stable id; ``records_per_producer`` keyed
    sends each, over ``keys`` keys (a count or the key bytes); ``members`` in
    the group. ``reverse_reads`` reads the starts before the waits (the order
    §3 forbids); ``gating=False`` delivers without gates; ``freshness=False``
    delivers with whatever view the member's follower has;
    ``catch_up_on_stamp=False`` skips the catch-up a stamp asks for (step 2 of
    the token rule), ``catch_up_on_jump=False`` the one after an assignment
    (step 3), ``stamps=False`` makes producers send no stamps. At most
    ``producer_restarts``, ``consumer_crashes`` and ``rebalances`` happen per
    run; ``window`` is the anonymous restart window in steps;
    ``reg_weight`` and ``consumer_weight`` scale how often registration and
    consumer steps are picked (lower: registrations span more of the others'
    steps; consumers lag more); ``burst`` is the chance that a layout change
    is followed at once by the next one (keys move twice before the
    intermediate partitions receive anything).

    ``compacted=True`` makes the topic a compacted changelog: each key has
    one writer (key ``i`` belongs to producer ``i % producers``), producers
    send move tombstones as the shipped core decides (``tombstones``) once
    the key's new record is acknowledged (``tombstones_after_ack=False``: the
    fake client reports it delivered at the send, so the tombstone goes out
    right after it and a crash can acknowledge the tombstone and lose the
    record), the broker's cleaner compacts
    random cleanable prefixes while everything runs, members consume move
    tombstones without delivering them (``hide_tombstones``; ``False``
    applies them as deletes, as a plain consumer would) and read the layout
    log to its end after an offset gap (``catch_up_on_gap``). The group's
    table, and the table a new group rebuilds from earliest after a final
    compaction, must hold each key's last acknowledged value; after that
    compaction each key has one live copy unless a producer crash lost one
    of its move tombstones (reported apart).

    ``in_hand=True`` (the default) lets members hold in hand, as the
    adapters do (:attr:`~kafka_ordered._gating.GatingCore.keep_in_hand`):
    at a gate whose sources the member owns, the fetched records are kept
    and decided again once it opens; ``False`` holds every partition by a
    pause and a seek back.
    """

    def __init__(
        self,
        seed: int = 0,
        *,
        initial_partitions: int = 4,
        layouts: Sequence[int] = (5, 6, 8, 6, 8),
        producers: int = 3,
        stable_producers: int = 1,
        records_per_producer: int = 40,
        keys: Union[int, Sequence[bytes]] = 16,
        members: int = 3,
        reverse_reads: bool = False,
        gating: bool = True,
        freshness: bool = True,
        catch_up_on_stamp: bool = True,
        catch_up_on_jump: bool = True,
        stamps: bool = True,
        producer_restarts: int = 2,
        consumer_crashes: int = 2,
        rebalances: int = 4,
        window: int = 10**9,
        reg_weight: float = 1.0,
        consumer_weight: float = 0.5,
        burst: float = 0.0,
        max_steps: int = 200_000,
        compacted: bool = False,
        tombstones: bool = True,
        tombstones_after_ack: bool = True,
        hide_tombstones: bool = True,
        catch_up_on_gap: bool = True,
        in_hand: bool = True,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.reverse_reads = reverse_reads
        self.gating = gating
        self.freshness = freshness
        self.catch_up_on_stamp = catch_up_on_stamp
        self.catch_up_on_jump = catch_up_on_jump
        self.stamps = stamps
        self.window = window
        self.reg_weight = reg_weight
        self.consumer_weight = consumer_weight
        self.burst = burst
        self.max_steps = max_steps
        self.compacted = compacted
        self.tombstones = tombstones
        self.tombstones_after_ack = tombstones_after_ack
        self.hide_tombstones = hide_tombstones
        self.catch_up_on_gap = catch_up_on_gap
        self.in_hand = in_hand
        self.keys = _keys(keys)
        counts = [initial_partitions, *layouts]
        self.physical = max(counts)
        # The admin's scripted layouts (epoch e at index e - 1).
        lay = Layout(TOPIC, 1, initial_partitions, initial_partitions, self.physical)
        self.layouts: List[Layout] = [lay]
        ops: List[str] = []
        for n in layouts:
            lay = lay.expanded(n) if n > lay.partitions else lay.shrunk(n)
            ops.append("expand" if n > self.layouts[-1].partitions else "shrink")
            self.layouts.append(lay)
        self._ops = ops
        self._partition_of = [{k: lay.partition_for(k) for k in self.keys} for lay in self.layouts]

        self.step_no = 0
        self.log: List[Tuple[bytes, bytes, int]] = []  # the layout log: (key, value, timestamp)
        self._append_log(*encode_layout(self.layouts[0], "create", "admin"))
        self.applied_layouts = 1
        total = producers * records_per_producer
        self._admin_at = sorted(self.rng.randrange(max(1, total)) for _ in layouts)
        self.sent = 0

        self.logs: List[List[_Record]] = [[] for _ in range(self.physical)]
        self._offsets = _SimOffsets(self.logs)
        self.producers = [_Producer(i, i < stable_producers, records_per_producer) for i in range(producers)]
        for pr in self.producers:
            pr.start(self)
        self._seq: Dict[Tuple[str, bytes], int] = {}

        self.committed: Dict[int, int] = {}
        self._ticks = 0
        self._options = GatingOptions({"ordered.metadata.timeout.ms": 10_000, "ordered.gating": gating,
                                       "ordered.commit.interval.ms": 200},
                                      auto_commit=False, auto_commit_interval_s=5.0, reset="earliest")
        skip: Set[SkippableStep] = set() if freshness else {"jump", "gap", "stamp"}
        for step, on in (("jump", catch_up_on_jump), ("gap", catch_up_on_gap), ("stamp", catch_up_on_stamp)):
            if not on:
                skip.add(step)  # type: ignore[arg-type]
        self._skip: FrozenSet[SkippableStep] = frozenset(skip)
        self.members = [self._new_member(i) for i in range(members)]
        self.owner: Dict[int, _Member] = {p: self.members[p % members] for p in range(self.physical)}
        for m in self.members:
            m.take(sorted(p for p, o in self.owner.items() if o is m))

        # oracle
        self.eff = [0] * self.physical
        self.chains: Dict[Tuple[bytes, str], List[_Record]] = {}
        self._delivered_once: Set[Tuple[int, int]] = set()
        self.violations = 0
        self.detail = ""

        # budgets and counters
        self._restarts_left = producer_restarts
        self._crashes_left = consumer_crashes
        self._rebalances_left = rebalances
        self.delivered = 0
        self.replays = 0
        self.registrations = 0
        self.gates = 0
        self.gate_holds = 0
        self.concurrent = 0
        self.producer_restarts = 0
        self.consumer_crashes = 0
        self.rebalances = 0
        self.lineage_breaks = 0
        self.stamped = 0
        self.stamp_catch_ups = 0
        self.jump_catch_ups = 0
        self.calm_fetches = 0
        self.deadlock = False
        self.finished = False

        # compacted runs
        self.removed: Set[Tuple[int, int]] = set()  # (partition, offset) the cleaner removed
        self.table: Dict[bytes, _Record] = {}  # the group's table: what it delivered, in order
        self.last_written: Dict[bytes, _Record] = {}  # each key's last acknowledged value
        self.lost_tombstone_keys: Set[bytes] = set()  # keys a producer crash lost a move tombstone of
        self.tombstones_written = 0
        self.compactions = 0
        self.compacted_away = 0
        self.gap_catch_ups = 0
        self.table_errors = 0
        self.rebuilt_table_errors = 0
        self.stale_copies = 0
        self.unexplained_stale_copies = 0

    # ------------------------------------------------------------------ helpers

    def _append_log(self, key: bytes, value: bytes) -> int:
        self.log.append((key, value, self.step_no))
        return len(self.log) - 1

    def advance(self, steps: int) -> None:
        """Move the clock (the step counter, what layout-log timestamps and
        ``window`` are measured in) without doing anything."""
        self.step_no += steps

    def partition_of(self, epoch: int, key: bytes) -> int:
        """Partition of ``key`` under the scripted layout of ``epoch``."""
        return self._partition_of[epoch - 1][key]

    # ------------------------------------------------------------------ admin

    def admin_step(self) -> bool:
        """Append the next scripted layout change; False when none is left."""
        if self.applied_layouts >= len(self.layouts):
            return False
        lay = self.layouts[self.applied_layouts]
        self._append_log(*encode_layout(lay, self._ops[self.applied_layouts - 1], "admin"))
        self.applied_layouts += 1
        return True

    # ------------------------------------------------------------------ producers

    def send(self, i: int, key: Optional[bytes] = None) -> None:
        """Producer ``i`` sends one keyed record (``key`` random when omitted)
        through its core, which sends it, buffers it behind a running switch
        or starts a switch (:meth:`_begin_switch`). The record's sequence
        number is given here, in application order."""
        pr = self.producers[i]
        if key is None:
            # A changelog's key has one writer.
            own = self.keys[i::len(self.producers)] if self.compacted else ()
            key = self.rng.choice(own or self.keys)
        if pr.budget > 0:
            pr.budget -= 1
        self.sent += 1
        st = pr.state
        if pr.fresh:
            pr.fresh = False
            self._check_lineage(pr)
        sk = (pr.lineage, key)
        seq = self._seq.get(sk, 0)
        self._seq[sk] = seq + 1
        pr.core.route(TOPIC, st, key, (key, pr.lineage, seq))

    def _check_lineage(self, pr: _Producer) -> None:
        """Before a process's first send (which starts its first switch): the
        oracle's bookkeeping needs the epoch it registers from, the shipped
        rule with the step number as the clock. When the new incarnation's
        gates do not cover the old one's writes there is no promise, so the
        oracle starts a new lineage."""
        from_epoch = initial_from_epoch(pr.view.history, TOPIC, pr.core.producer_id, pr.stable, self.step_no,
                                        self.window)
        if (not pr.stable and pr.incarnation > 0 and pr.written_epoch is not None
                and from_epoch > pr.written_epoch):
            self.lineage_breaks += 1
            pr.lineage = f"a{pr.index}.{pr.incarnation}"
            pr.written_epoch = None

    def _begin_switch(self, pr: _Producer, st: TopicState) -> None:
        """The core starts a switch (its ``run_switch``): its registration
        steps are performed one by one by :meth:`reg_step`."""
        steps = pr.core.registration_steps(TOPIC, st, self.step_no)
        try:
            first = next(steps)
        except StopIteration as done:  # nothing to flush, read or append
            self._switched(pr, st, done.value)
            return
        pr.reg = _Registration(steps, st, first)
        busy = sum(1 for x in self.producers if x.reg is not None and x.reg.gated)
        self.concurrent = max(self.concurrent, busy)

    def _answer(self, pr: _Producer, answer: Any) -> None:
        """Send ``answer`` to the pending step; the switch ends when the steps do."""
        reg = pr.reg
        assert reg is not None
        try:
            reg.step = reg.steps.send(answer)
        except StopIteration as done:
            pr.reg = None
            self._switched(pr, reg.state, done.value)
            return
        reg.pending = list(reg.step.partitions) if isinstance(reg.step, ReadEnds) else []
        reg.got = {}

    def _switched(self, pr: _Producer, st: TopicState, plan: SwitchPlan) -> None:
        if plan.spec:
            self.registrations += 1
            self.gates += len(plan.spec)
        refused = pr.core.switched(TOPIC, st, plan, self.compacted)
        assert refused is None

    def ack(self, i: int, partition: Optional[int] = None) -> bool:
        """Acknowledge the head in-flight record of one partition (random when
        omitted), then send the move tombstones that made due, as the
        adapters' ``poll`` does after serving delivery reports."""
        pr = self.producers[i]
        ready = [p for p, q in sorted(pr.inflight.items()) if q]
        if not ready:
            return False
        p = partition if partition is not None else self.rng.choice(ready)
        rec = pr.inflight[p].popleft()
        self._write(p, rec.key, rec.lineage, rec.seq, rec.stamp)
        if rec.acked is not None:
            rec.acked()
        if rec.done is not None:
            rec.done(True)
        if pr.core.tombstones_due:
            pr.core.send_due_tombstones()
        return True

    def ack_all(self, i: int) -> None:
        """Acknowledge every in-flight record of producer ``i``."""
        while self.ack(i):
            pass

    def _write(self, p: int, key: bytes, lineage: str, seq: int, stamp: Optional[int]) -> None:
        if seq < 0:
            self.logs[p].append(_Record(p, len(self.logs[p]), key, lineage, seq, stamp, -1))
            self.tombstones_written += 1
            return
        chain = self.chains.setdefault((key, lineage), [])
        assert not chain or chain[-1].seq < seq, "a producer wrote a key out of sequence order"
        rec = _Record(p, len(self.logs[p]), key, lineage, seq, stamp, len(chain))
        if stamp is not None:
            self.stamped += 1
        chain.append(rec)
        self.logs[p].append(rec)
        self.last_written[key] = rec

    def observe(self, i: int, upto: Optional[int] = None) -> bool:
        """Producer ``i``'s follower reads the layout log up to ``upto`` (default: a random prefix)."""
        pr = self.producers[i]
        if pr.view.applied >= len(self.log):
            return False
        if upto is None:
            upto = self.rng.randint(pr.view.applied + 1, len(self.log))
        return pr.view.read(upto)

    def reg_enabled(self, i: int) -> bool:
        """Whether producer ``i`` has a registration that can take its next step
        (its flush waits until nothing is in flight)."""
        pr = self.producers[i]
        return pr.reg is not None and not (pr.reg.phase == "flush" and any(pr.inflight.values()))

    def reg_step(self, i: int) -> Optional[str]:
        """One step of producer ``i``'s registration: the flush, one offset
        read, or the append and switch. Returns what it did (None: nothing)."""
        pr = self.producers[i]
        reg = pr.reg
        if reg is None or not self.reg_enabled(i):
            return None
        step = reg.step
        if isinstance(step, Flush):
            self._answer(pr, None)
            return "flush"
        if isinstance(step, ReadEnds):
            p = reg.pending.pop(self.rng.randrange(len(reg.pending)))
            reg.got[p] = len(self.logs[p])
            if not reg.pending:
                self._answer(pr, dict(reg.got))
            return f"{'wait' if step.role == 'waits' else 'start'}[{p}]"
        assert isinstance(step, Append)
        self._answer(pr, self._append_log(step.key, step.value))
        return "append"

    def read_group(self, i: int) -> List[str]:
        """Producer ``i`` flushes if still needed, then performs every read of
        its current read request (the waits, or the starts when reversed)."""
        pr = self.producers[i]
        if pr.reg is None:
            return []
        if pr.reg.phase == "flush":
            self.ack_all(i)
            self.reg_step(i)
        done: List[str] = []
        reg = pr.reg
        if reg is not None and isinstance(reg.step, ReadEnds):
            step = reg.step
            while pr.reg is reg and reg.step is step:
                done.append(str(self.reg_step(i)))
        return done

    def register(self, i: int) -> None:
        """Run producer ``i``'s pending registration to the end (acks first)."""
        self.ack_all(i)
        while self.reg_step(i) is not None:
            pass

    def restart_producer(self, i: int, acked: Optional[Dict[int, int]] = None) -> None:
        """Crash producer ``i`` and start a new process; of each partition's
        in-flight records the first ``acked[p]`` (default: a random number)
        were acknowledged as it died, the rest are lost, and so is its
        buffer."""
        pr = self.producers[i]
        for p, q in sorted(pr.inflight.items()):
            n = self.rng.randint(0, len(q)) if acked is None else min(len(q), acked.get(p, 0))
            for _ in range(n):
                rec = q.popleft()
                self._write(p, rec.key, rec.lineage, rec.seq, rec.stamp)
                if rec.done is not None:  # acknowledged as the process died: its tombstones are never sent
                    self.lost_tombstone_keys.add(rec.key)
            self.lost_tombstone_keys.update(rec.key for rec in q if rec.seq < 0)
            q.clear()
        self.lost_tombstone_keys.update(key for _, key, _, _ in pr.core.tombstones_due)
        pr.core.close()
        pr.incarnation += 1
        pr.start(self)
        self.producer_restarts += 1

    def _producer_step(self, pr: _Producer) -> None:
        opts: List[Tuple[str, float]] = []
        if pr.budget > 0:
            opts.append(("send", 3.0))
        if any(pr.inflight.values()):
            opts.append(("ack", 2.5))
        if pr.view.applied < len(self.log):
            opts.append(("observe", 0.7))
        if self.reg_enabled(pr.index):
            opts.append(("reg", self.reg_weight))
        if self._restarts_left > 0 and pr.budget > 0:
            opts.append(("restart", 0.02))
        if not opts:
            return
        what = self._pick(opts)[0]
        if what == "send":
            self.send(pr.index)
        elif what == "ack":
            self.ack(pr.index)
        elif what == "observe":
            self.observe(pr.index)
        elif what == "reg":
            self.reg_step(pr.index)
        else:
            self._restarts_left -= 1
            self.restart_producer(pr.index)

    # ------------------------------------------------------------------ consumers

    def _clock(self) -> float:
        """The members' monotonic clock: one second per reading, so every
        time-based refresh of the core (the group's commits of unowned
        sources, log starts) happens at every poll."""
        self._ticks += 1
        return float(self._ticks)

    def _new_member(self, index: int, group: Optional[Dict[int, int]] = None) -> _Member:
        return _Member(index, self.log, self._offsets, self.committed if group is None else group,
                       self._options, self._skip, self._clock, self.in_hand)

    def _follow(self, m: _Member, upto: Optional[int] = None) -> None:
        m.view.read(upto)

    def follow(self, j: int, upto: Optional[int] = None) -> None:
        """Member ``j``'s follower reads the layout log (to ``upto``, default all)."""
        self._follow(self.members[j], upto)

    def deliver(self, j: int, p: int, n: int = 1 << 30) -> int:
        """Member ``j`` polls up to ``n`` records of its partition ``p``
        (hidden move tombstones and offsets the cleaner removed included);
        returns how many offsets its position moved."""
        m = self.members[j]
        if p not in m.owned:
            return 0
        return self._consume(m, p, n, self._deliver_record, self.eff)

    def _fetched(self, rec: _Record) -> _Fetched:
        headers: List[Tuple[str, bytes]] = []
        if rec.tombstone:
            headers.append((MOVED_HEADER, b"0"))
        if rec.stamp is not None:
            headers.append((STAMP_HEADER, encode(LOG_ID, rec.stamp)))
        value = None if rec.tombstone else f"{rec.lineage}#{rec.seq}".encode()
        return _Fetched(TOPIC, rec.partition, rec.offset, rec.key, value, headers, rec)

    def _consume(self, m: _Member, p: int, n: int, deliver: Callable[[_Record], None],
                 eff: Optional[List[int]]) -> int:
        """One poll of member ``m`` on partition ``p``, as the adapters poll.
        While the core's calm lasts (:meth:`~kafka_ordered._gating.GatingCore.settle`)
        the core is skipped: a fetch of up to ``n`` records of ``p`` that
        the calm check (:func:`~kafka_ordered._fastpath.admits_runs`)
        admits before the calm's deadline is delivered untouched, any other
        is decided by ``take`` after ``fetched_late`` (an empty one past the
        deadline runs ``idle``; while partitions are held, a poll past it
        takes the full path, see :func:`~kafka_ordered._fastpath.calm_wait`).
        Otherwise the shipped core's cycle
        (:meth:`~kafka_ordered._gating.GatingCore.poll_cycle`, the fetch
        decided by ``take``) over the records in hand of released
        partitions first, else such a fetch. What the core delivers goes to
        ``deliver`` in order (with ``hide_tombstones=False`` also the move
        tombstones the core consumed, as a plain consumer applies them).
        Returns how many offsets the member's processed positions moved."""
        core, client = m.core, m.client
        calm = core.calm
        # While partitions are held, a calm fetch waits no longer than the
        # calm lasts: past its end the poll takes the full path (calm_wait).
        quiet = calm.quiet and calm_wait(calm, 0.0, self._clock()) is not None
        # (A catch-up owed by an assignment or a seek may be made when the cycle begins.)
        jump = (TOPIC, p) not in core.freshness.expected or bool(core.freshness.sought)
        synced, caught = m.view.synced, m.view.caught_up
        cycle = None if quiet else core.poll_cycle(0.0)  # one fetch per poll
        owned = sorted(core.owned)
        before = core.positions(owned)
        got: Dict[Any, List[_Fetched]] = {}
        fetched: List[_Fetched] = []
        if cycle is not None and released_in_hand(core):
            got = from_hand(core)
        if not got:
            if p in client.paused:
                self.gate_holds += 1
                if cycle is not None:
                    cycle.done(False)
                return 0
            log = self.logs[p]
            off = client.pos[p]
            while off < len(log) and len(fetched) < n:
                if (p, off) not in self.removed:
                    fetched.append(self._fetched(log[off]))
                off += 1
            client.pos[p] = fetched[-1].offset + 1 if fetched else off
        if fetched:
            run = {_Partition(TOPIC, p): fetched}
            if quiet and self._clock() < calm.until and admits_runs(calm, run, replace_headers):
                got = run
                self.calm_fetches += 1
            else:
                if quiet:
                    core.fetched_late()
                got = take(core, run, {}, replace_headers)
            if m.view.synced > synced:
                if jump:
                    self.jump_catch_ups += 1
                else:
                    self.gap_catch_ups += 1
            if m.view.caught_up > caught:
                self.stamp_catch_ups += 1
        elif quiet and self._clock() >= calm.until:
            core.idle()
        after = core.positions(owned)
        if fetched and after.get((TOPIC, p), 0) <= fetched[-1].offset:
            self.gate_holds += 1
        moved = 0
        for tp in owned:
            q = tp[1]
            start, end = before.get(tp, 0), after.get(tp, 0)
            delivered = {r.offset: r.record for r in got.get(_Partition(TOPIC, q), [])}
            if any(not start <= off < end for off in delivered):
                self._violation(f"p{q}: records delivered outside the processed positions {start}..{end}")
            if end <= start:
                continue
            moved += end - start
            log = self.logs[q]
            for off in range(start, end):
                rec = delivered.get(off)
                if rec is None and log[off].tombstone and not self.hide_tombstones and (q, off) not in self.removed:
                    rec = log[off]
                if eff is not None:
                    eff[q] = off  # the offsets the cleaner removed before it are passed
                if rec is not None:
                    deliver(rec)
                if eff is not None:
                    eff[q] = off + 1
        if cycle is not None:
            cycle.done(moved > 0)
        return moved

    def commit(self, j: int) -> bool:
        """Member ``j`` commits every owned partition's position (one
        OffsetCommit, with what opened gates depend on); whether it moved any."""
        m = self.members[j]
        before = dict(self.committed)
        offsets = m.core.uncommitted()
        if offsets:
            m.core.commit(offsets, asynchronous=False)
        return self.committed != before

    def crash_member(self, j: int) -> None:
        """Member ``j`` crashes: uncommitted progress is lost and will be replayed."""
        m = self.members[j]
        rolled: List[_Record] = []
        for p in sorted(m.owned):
            c = self.committed.get(p, 0)
            rolled.extend(self.logs[p][c:self.eff[p]])
            self.eff[p] = c
        for rec in rolled:
            if rec.tombstone:
                continue
            chain = self.chains[(rec.key, rec.lineage)]
            if rec.chain_index + 1 < len(chain):
                succ = chain[rec.chain_index + 1]
                if succ.offset < self.eff[succ.partition]:
                    self._violation(f"rollback of {self._describe(rec)} leaves the later {self._describe(succ)} processed")
        owned = sorted(m.owned)
        m.core.close()
        restarted = self.members[j] = self._new_member(j)  # its first fetch of each partition is a jump
        for p in owned:
            self.owner[p] = restarted
        restarted.take(owned)
        self.consumer_crashes += 1

    def move_partition(self, p: int, j: int) -> None:
        """Rebalance: partition ``p`` moves to member ``j`` (the old owner commits on revoke)."""
        old = self.owner[p]
        new = self.members[j]
        if old is new:
            return
        self.commit(old.index)
        old.give(p)
        new.take([p])
        self.owner[p] = new
        self.rebalances += 1

    def _member_step(self, m: _Member) -> None:
        r = self.rng.random()
        if r < 0.7:
            ready = [p for p in sorted(m.owned) if m.pos[p] < len(self.logs[p]) or (TOPIC, p) in m.core.kept]
            if ready:
                self.deliver(m.index, self.rng.choice(ready), self.rng.randint(1, 3))
        elif r < 0.85:
            self.commit(m.index)
        elif m.view.applied < len(self.log):
            self._follow(m, self.rng.randint(m.view.applied + 1, len(self.log)))

    # ------------------------------------------------------------------ the log cleaner

    def compact(self, p: int, end: Optional[int] = None, retention_elapsed: Optional[bool] = None) -> int:
        """The broker's cleaner over offsets ``[0, end)`` of partition ``p``
        (default: a random prefix; the active segment is never cleaned): a
        record is removed when a later one with the same key lies in that
        range, and a tombstone left as its key's latest is removed once
        ``delete.retention.ms`` has passed (``retention_elapsed``; default:
        at random). Offsets stay: removed records leave gaps. Returns how
        many records it removed."""
        log = self.logs[p]
        if end is None:
            end = self.rng.randint(0, len(log))
        if retention_elapsed is None:
            retention_elapsed = self.rng.random() < 0.5
        live = [rec for rec in log[:end] if (p, rec.offset) not in self.removed]
        latest = {rec.key: rec.offset for rec in live}
        gone = [rec for rec in live if latest[rec.key] != rec.offset or (rec.tombstone and retention_elapsed)]
        self.removed.update((p, rec.offset) for rec in gone)
        self.compactions += 1
        self.compacted_away += len(gone)
        return len(gone)

    def _check_tables(self) -> None:
        """After the group's fixpoint: its table, then a final compaction of
        everything, the live copies it leaves and a new group's rebuilt table."""
        expected = self.last_written
        self.table_errors = sum(1 for k, rec in expected.items() if self.table.get(k) is not rec)
        for p in range(self.physical):
            self.compact(p, len(self.logs[p]), retention_elapsed=True)
        copies: Dict[bytes, int] = {}
        for p, log in enumerate(self.logs):
            for rec in log:
                if not rec.tombstone and (p, rec.offset) not in self.removed:
                    copies[rec.key] = copies.get(rec.key, 0) + 1
        stale = {k for k, n in copies.items() if n > 1}
        self.stale_copies = len(stale)
        self.unexplained_stale_copies = len(stale - self.lost_tombstone_keys)
        rebuilt = self.rebuild_table()
        self.rebuilt_table_errors = sum(1 for k, rec in expected.items() if rebuilt.get(k) is not rec)

    def rebuild_table(self) -> Dict[bytes, _Record]:
        """The table a new ordered group (one member, a full view of the
        layout log) rebuilds from earliest, moving between partitions at
        random under the same gate and token rules."""
        m = self._new_member(-1, group={})
        m.take(range(self.physical))
        table: Dict[bytes, _Record] = {}
        progress = True
        while progress:
            progress = False
            ready = [p for p in sorted(m.owned) if m.pos[p] < len(self.logs[p]) or (TOPIC, p) in m.core.kept]
            for p in self.rng.sample(ready, len(ready)):
                if self._consume(m, p, self.rng.randint(1, 3), lambda rec: _apply(table, rec), None):
                    progress = True
        m.core.close()
        return table

    # ------------------------------------------------------------------ oracle

    def _describe(self, rec: _Record) -> str:
        return f"{rec.key.decode(errors='replace')}/{rec.lineage}#{rec.seq}@{rec.partition}:{rec.offset}"

    def _violation(self, what: str) -> None:
        self.violations += 1
        if not self.detail:
            self.detail = f"step {self.step_no}: {what}"

    def _deliver_record(self, rec: _Record) -> None:
        self.delivered += 1
        ident = (rec.partition, rec.offset)
        if ident in self._delivered_once:
            self.replays += 1
        else:
            self._delivered_once.add(ident)
        if self.compacted:
            _apply(self.table, rec)
        if rec.chain_index > 0:
            pred = self.chains[(rec.key, rec.lineage)][rec.chain_index - 1]
            if pred.offset >= self.eff[pred.partition]:
                self._violation(f"{self._describe(rec)} delivered before {self._describe(pred)}")

    # ------------------------------------------------------------------ driving

    def producing(self) -> bool:
        """Whether layout changes or producer budgets remain."""
        return self.applied_layouts < len(self.layouts) or not all(pr.done for pr in self.producers)

    def _pick(self, options: Sequence[Any]) -> Any:
        """A random option, weighted by its last element."""
        r = self.rng.random() * sum(o[-1] for o in options)
        for o in options:
            r -= o[-1]
            if r < 0:
                return o
        return options[-1]

    def step(self) -> None:
        """One random step of one actor."""
        self.step_no += 1
        actors: List[Tuple[str, Any, float]] = []
        if self.applied_layouts < len(self.layouts) and (
            self._admin_at[self.applied_layouts - 1] <= self.sent or all(pr.budget == 0 for pr in self.producers)
        ):
            actors.append(("admin", None, 0.5))
        for pr in self.producers:
            if pr.budget or pr.reg is not None or any(pr.inflight.values()):
                actors.append(("producer", pr, 1.0))
        cw = self.consumer_weight
        for m in self.members:
            actors.append(("member", m, cw))
        if self._rebalances_left > 0 and len(self.members) > 1:
            actors.append(("rebalance", None, 0.03))
        if self._crashes_left > 0:
            actors.append(("crash", None, 0.01))
        if self.compacted:
            actors.append(("compact", None, 0.05))
        kind, actor, _ = self._pick(actors)
        if kind == "member":
            self._member_step(actor)
        elif kind == "producer":
            self._producer_step(actor)
        elif kind == "admin":
            if (self.admin_step() and self.burst and self.applied_layouts < len(self.layouts)
                    and self.rng.random() < self.burst):
                # The next change follows at once: keys move twice before the
                # intermediate partitions receive anything.
                self._admin_at[self.applied_layouts - 1] = self.sent
        elif kind == "compact":
            self.compact(self.rng.randrange(self.physical))
        elif kind == "rebalance":
            self._rebalances_left -= 1
            p = self.rng.randrange(self.physical)
            others = [m.index for m in self.members if m is not self.owner[p]]
            self.move_partition(p, self.rng.choice(others))
        else:
            self._crashes_left -= 1
            self.crash_member(self.rng.randrange(len(self.members)))

    def finish(self) -> None:
        """Run every member to a fixpoint; decides ``deadlock``."""
        while True:
            progress = False
            for m in self.members:
                self._follow(m)
            for m in self.members:
                for p in sorted(m.owned):
                    if self.deliver(m.index, p) > 0:
                        progress = True
            for m in self.members:
                if self.commit(m.index):
                    progress = True
            if not progress:
                break
        held = [p for p in range(self.physical) if self.eff[p] < len(self.logs[p])]
        self.deadlock = bool(held) and self.gating
        if held and self.gating and not self.detail:
            parts = []
            for p in held:
                for st in self.owner[p].core.gate_status():
                    if st.partition == p:
                        parts.append(f"p{p} held at {st.start} waiting on {dict(st.waiting_on)}")
            self.detail = "deadlock: " + "; ".join(parts)
        if self.compacted:
            self._check_tables()
        self.finished = True

    def run(self) -> "SimulationResult":
        """Step at random until everything is produced, let the consumers run on
        for a while, then to a fixpoint; returns the :class:`SimulationResult`.
        Raises ``RuntimeError`` when producing does not finish within
        ``max_steps``."""
        while self.producing():
            if self.step_no >= self.max_steps:
                raise RuntimeError(f"simulation seed {self.seed} did not finish producing in {self.max_steps} steps")
            self.step()
        # Consumers keep running at random (rebalances, crashes included) for a while ...
        tail = 4 * self._undelivered() + 50
        while tail > 0 and self.step_no < self.max_steps:
            self.step()
            tail -= 1
            if tail % 16 == 0 and not self._undelivered():
                break
        # ... then to a fixpoint.
        self.finish()
        return self.result()

    def _undelivered(self) -> int:
        return sum(len(log) - e for log, e in zip(self.logs, self.eff))

    def result(self) -> SimulationResult:
        """The :class:`SimulationResult` of the steps taken so far."""
        produced = sum(len(log) for log in self.logs) - self.tombstones_written
        undelivered = self._undelivered()
        return SimulationResult(
            seed=self.seed,
            steps=self.step_no,
            produced=produced,
            delivered=self.delivered,
            replays=self.replays,
            violations=self.violations,
            deadlock=self.deadlock,
            undelivered=undelivered,
            lost=0 if self.deadlock else undelivered,
            layout_changes=self.applied_layouts - 1,
            registrations=self.registrations,
            gates=self.gates,
            concurrent_registrations=self.concurrent,
            gate_holds=self.gate_holds,
            producer_restarts=self.producer_restarts,
            consumer_crashes=self.consumer_crashes,
            rebalances=self.rebalances,
            lineage_breaks=self.lineage_breaks,
            stamped=self.stamped,
            stamp_catch_ups=self.stamp_catch_ups,
            jump_catch_ups=self.jump_catch_ups,
            calm_fetches=self.calm_fetches,
            detail=self.detail,
            tombstones=self.tombstones_written,
            compactions=self.compactions,
            compacted_away=self.compacted_away,
            gap_catch_ups=self.gap_catch_ups,
            table_errors=self.table_errors,
            rebuilt_table_errors=self.rebuilt_table_errors,
            stale_copies=self.stale_copies,
            unexplained_stale_copies=self.unexplained_stale_copies,
        )


def run(seed: int, **knobs: Any) -> SimulationResult:
    """Run one random simulation; ``knobs`` are :class:`Simulation`'s keyword
    arguments (``reverse_reads``, ``gating``, ``layouts``, ``producers``, ...)."""
    return Simulation(seed, **knobs).run()


def crossing_scenario(reverse_reads: bool = True) -> Simulation:
    """The adversarial interleaving that deadlocks when offsets are read starts-first.

    Topic with 4 initial partitions; layouts 4 -> 8 (epoch 2) -> 4 (epoch 3).
    One key ``k`` lives in partition 2 under 4 partitions and in 6 under 8.
    Producers A and B both write ``k`` under epoch 1 (to 2), then:

    1. epoch 2 appears; A registers 1 -> 2 and writes ``k`` to 6;
    2. B starts registering 1 -> 2 (gate on 6 waiting on 2) and performs its
       *first* read group only;
    3. A writes ``k`` to 6 again (A is already on epoch 2);
    4. epoch 3 appears; A registers 2 -> 3 (gate on 2 waiting on 6) and writes
       ``k`` to 2;
    5. B performs its second read group, appends, switches, writes ``k`` to 6.

    Starts first, B read ``start[6]`` in step 2, before A's write of step 3,
    and ``wait[2]`` in step 5, after A's write of step 4; A read ``start[2]``
    before its own write to 2 and ``wait[6]`` after its write of step 3. So
    B's gate holds 6 from an offset *below* A's ``wait[6]`` until 2 is
    processed *past* A's ``start[2]``, where A's gate holds 2 until 6 reaches
    its ``wait[6]``: each gate waits for records behind the other, forever.

    Waits first, B reads ``wait[2]`` in step 2 (before A's write to 2, so at
    or below A's ``start[2]``) and ``start[6]`` in step 5 (after A's write to
    6, so at or above A's ``wait[6]``): the cycle cannot close. In general a
    gate then waits only for records written before its starts were read,
    whose own gates had their starts read earlier still: a chain back in time.

    Returns the finished simulation (``result().deadlock`` tells).
    """
    sim = Simulation(0, initial_partitions=4, layouts=(8, 4), producers=2, stable_producers=0,
                     records_per_producer=0, members=2, reverse_reads=reverse_reads,
                     producer_restarts=0, consumer_crashes=0, rebalances=0)
    k = next(k for k in sim.keys if sim.partition_of(1, k) == 2 and sim.partition_of(2, k) == 6)
    a, b = 0, 1
    for i in (a, b):  # both on epoch 1, one record of k each in partition 2
        sim.send(i, k)
        sim.register(i)
        sim.ack_all(i)
    sim.admin_step()  # epoch 2: 4 -> 8
    sim.observe(a, len(sim.log))
    sim.observe(b, len(sim.log))
    sim.send(a, k)  # 1. A registers 1 -> 2, writes k to 6
    sim.register(a)
    sim.ack_all(a)
    sim.send(b, k)  # 2. B registers 1 -> 2: first read group only
    sim.read_group(b)
    sim.send(a, k)  # 3. A writes k to 6 again
    sim.ack_all(a)
    sim.admin_step()  # 4. epoch 3: 8 -> 4; A registers 2 -> 3, writes k to 2
    sim.observe(a, len(sim.log))
    sim.send(a, k)
    sim.register(a)
    sim.ack_all(a)
    sim.register(b)  # 5. B's second read group, append, switch, write k to 6
    sim.ack_all(b)
    sim.finish()
    return sim


def find_seed(predicate: Any, seeds: Sequence[int], **knobs: Any) -> Optional[SimulationResult]:
    """The first result among ``seeds`` for which ``predicate(result)`` holds."""
    for s in seeds:
        r = run(s, **knobs)
        if predicate(r):
            return r
    return None
