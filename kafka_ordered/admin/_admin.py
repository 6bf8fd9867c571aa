""":class:`LayoutAdmin`: the layout operations (create, adopt, expand, plan,
shrink, retire, describe) and the physical-partition calls they need.

Every change is one record appended to the layout log; producers and
consumers follow the log. Physical partitions are only ever added (Kafka
cannot delete partitions): a *shrink* is a layout change that marks the
removed partitions draining, and a later expansion reuses them. Replica
placement, healing and leader elections are delegated to
:class:`~kafka_ordered.admin._replicas.ReplicaPlacement`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from types import TracebackType
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

from .. import _log
from .._kafka import (
    group_reader,
    partition_count,
    read_group_commits,
    to_controller,
    topic_exists,
    wait_for_partitions,
)
from ..config import internal_config, split_config
from ..errors import (
    BrokerUnavailableError,
    ConcurrentLayoutChangeError,
    HashDetectionError,
    KafkaOrderedError,
    ProtocolVersionError,
    TopicAlreadyManagedError,
    TopicInUseError,
    TopicNotManagedError,
    UnknownTopicError,
    UnsupportedBrokerApiError,
    translate,
)
from ..history import LayoutHistory, Registration, encode_layout
from ..records import PROTOCOL_VERSION, encode_protocol
from ..layout import HashName, Layout, matching_hashes
from ..placement import HealPlan, MinRequiredReplicationFactor, PartitionLimits, PlacementPlan
from . import _args, _cluster
from ._replicas import ReplicaPlacement
from ._results import (
    AdoptResult,
    ClusterState,
    ElectionResult,
    ExpansionPlan,
    ExpansionResult,
    GateSourceState,
    GroupGateState,
    GroupMembership,
    GroupPartitionState,
    HealResult,
    PartitionRole,
    RetireResult,
    TopicDescription,
)

__all__ = ["LayoutAdmin", "ADOPT_SAMPLE", "ADOPT_MIN_RECORDS"]

log = logging.getLogger("kafka_ordered.admin")

#: Keyed records sampled per partition to detect the hash of a topic to adopt.
ADOPT_SAMPLE = 200
#: Fewest keyed records from which ``adopt`` tells the hash.
ADOPT_MIN_RECORDS = 20

_ADMIN_OPTIONS = (
    "ordered.layout.topic",
    "ordered.layout.corrupt.policy",
    "ordered.metadata.timeout.ms",
)


class LayoutAdmin:
    """Creates managed topics and changes their layouts through the layout log.

    ``config`` is a librdkafka config dict (``bootstrap.servers``, security
    settings) plus optional ``ordered.layout.topic``,
    ``ordered.layout.corrupt.policy``, ``ordered.metadata.timeout.ms``.
    Constructing it connects and reads the layout log; raises
    :class:`BrokerUnavailableError` when no broker answers and
    :class:`LayoutLogError` when the log cannot be created or trusted.

    Whenever physical partitions are created (:meth:`create_topic`,
    :meth:`expand`) their replicas are planned by :mod:`kafka_ordered.placement`
    from the live brokers, their racks and replica counts, with the caller's
    ``max_partitions``, ``min_required_replication_factor`` and
    ``ignore_racks``; see ``docs/placement.md``. :attr:`last_placement` is the
    placement of the latest :meth:`create_topic` or :meth:`expand` that created
    partitions (its ``missing`` lists replicas a degraded creation lacks).
    """

    #: The :class:`~kafka_ordered.placement.PlacementPlan` of the latest
    #: create_topic/expand on this admin that created physical partitions.
    last_placement: Optional[PlacementPlan] = None

    def __init__(self, config: Mapping[str, Any]) -> None:
        opts, rest = split_config(config, _ADMIN_OPTIONS, "LayoutAdmin")
        self._conn = internal_config(rest, "producer")
        self._rest = dict(rest)
        self._group_readers: Dict[str, Consumer] = {}
        self.timeout = opts["ordered.metadata.timeout.ms"] / 1000.0
        self.layout_topic: str = opts["ordered.layout.topic"]
        self.admin_id = f"admin-{uuid.uuid4().hex[:12]}"
        # The process's layout-log resources, shared with its producers and
        # consumers. An unknown client key fails here with librdkafka's own error.
        self._shared = _log.acquire(
            rest,
            self.layout_topic,
            corrupt_policy=opts["ordered.layout.corrupt.policy"],
            timeout=self.timeout,
            require_protocol=False,  # upgrade_protocol() is how a protocol-1 log moves on
        )
        self._admin = self._shared.admin
        self._follower = self._shared.follower
        self._offsets = self._shared.offsets
        self.last_placement = None
        self._replicas = ReplicaPlacement(self._admin, self._conn, self.timeout)

    # -- reading

    @property
    def history(self) -> LayoutHistory:
        """The layout history as of the last sync."""
        return self._follower.history

    def sync(self) -> LayoutHistory:
        """Read the layout log up to its current end."""
        return self._follower.sync()

    def layout(self, topic: str) -> Layout:
        """The current layout of a managed topic. Raises :class:`UnknownTopicError`
        or :class:`TopicNotManagedError`; ``TypeError`` when ``topic`` is not a ``str``."""
        cur = self.sync().current(_args.topic_name(topic))
        if cur is None:
            if not topic_exists(self._admin, topic, self.timeout):
                raise UnknownTopicError(f"topic {topic} does not exist", code=KafkaError.UNKNOWN_TOPIC_OR_PART)
            raise TopicNotManagedError(
                f"topic {topic} is not managed by kafka-ordered (no layout in {self.layout_topic}); "
                f"use adopt({topic!r}) or `kafka-ordered adopt {topic}`"
            )
        return cur

    def topics(self) -> List[str]:
        """Every managed topic."""
        return self.sync().topics()

    # -- changing

    def _ensure_protocol(self) -> None:
        """Before the first layout record: a log without a protocol record gets
        one when it is empty; a protocol-1 log is refused (see :meth:`upgrade_protocol`)."""
        history = self._follower.history
        if history.protocol is not None:
            return
        history = self._follower.sync()
        problem = history.protocol_problem()
        if problem is not None:
            raise ProtocolVersionError(f"layout log {self.layout_topic}: {problem}", protocol=None)
        if history.protocol is None:
            self._shared.writer.append(*encode_protocol())
            self._follower.sync()

    def upgrade_protocol(self) -> Optional[int]:
        """Move a layout log written by protocol 1 clients (time-based settle
        pause) to this version's protocol (causal freshness tokens) by
        appending the protocol-version record; returns its offset, or
        ``None`` when the log already has one.

        Only after every producer, consumer and Spark query of an older
        kafka-ordered version has been stopped (docs/protocol.md): the record
        stops any that still run (they raise their "upgrade" error), and
        upgraded clients refuse the log until it is there. Nothing else in
        the log changes: gates registered before it still apply."""
        history = self._follower.sync()
        if history.protocol is not None:
            return None
        offset = self._shared.writer.append(*encode_protocol())
        self._follower.sync()
        self._follower.write_snapshot(self._shared.writer)
        log.info("layout log %s upgraded to ordering protocol %d at offset %d", self.layout_topic,
                 PROTOCOL_VERSION, offset)
        return offset

    @property
    def protocol(self) -> Optional[int]:
        """The ordering protocol the layout log carries (``None``: protocol 1, or empty)."""
        return self.sync().protocol

    def _append(self, layout: Layout, op: str) -> Layout:
        self._ensure_protocol()
        offset = self._shared.writer.append(*encode_layout(layout, op, self.admin_id))
        history = self._follower.sync()
        if history.find_change(layout.topic, offset) is None:
            first = next((c for c in history.changes(layout.topic) if c.layout.epoch == layout.epoch), None)
            if first is not None and first.admin_id == self.admin_id and first.layout == layout:
                return layout  # our own record, written twice by a client retry
            winner = history.current(layout.topic)
            raise ConcurrentLayoutChangeError(
                f"another admin changed {layout.topic} first (epoch {layout.epoch} is now "
                f"{winner.partitions if winner else '?'} partitions); this {op} was not applied. "
                "Re-read the layout and retry if it is still wanted."
            )
        self._follower.write_snapshot(self._shared.writer)
        return layout

    def create_topic(
        self,
        topic: str,
        initial_partitions: int,
        physical_partitions: Optional[int] = None,
        replication_factor: int = -1,
        *,
        hash: HashName = "murmur2",
        config: Optional[Mapping[str, str]] = None,
        max_partitions: Optional[PartitionLimits] = None,
        min_required_replication_factor: Optional[MinRequiredReplicationFactor] = None,
        ignore_racks: bool = False,
    ) -> Layout:
        """Create ``topic`` with ``physical_partitions`` (default: the initial
        count) and put it under management with ``initial_partitions``
        undeleted. Extra physical partitions are spares that expansions use
        without CreatePartitions (needed on brokers without that API).

        ``replication_factor=-1`` takes the broker default. Raises
        :class:`InvalidLayoutError` for bad counts,
        :class:`TopicAlreadyManagedError` if the topic exists (use :meth:`adopt`).

        Placement: the replicas are planned over the live brokers (rack-aware
        when every broker has a rack, ``ignore_racks=True`` to ignore racks)
        and sent as an explicit replica assignment when more than one broker
        is live; with one live broker the broker places them (the same
        result). ``max_partitions`` (one limit per broker, or broker id ->
        limit) caps the replicas each broker may host, counting what it hosts
        now: a topic that would exceed it raises :class:`GuardRailsError`
        before anything is created. When fewer brokers are live than the
        replication factor, :class:`PlacementError` is raised unless
        ``min_required_replication_factor`` (an int, or
        ``"min.insync.replicas"``) allows creating the partitions on the live
        brokers; the missing replicas are then in ``last_placement.missing``
        and :meth:`heal` adds them once brokers return.
        """
        _args.topic_name(topic)
        layout = Layout(topic, 1, initial_partitions, initial_partitions,
                        physical_partitions if physical_partitions is not None else initial_partitions,
                        hash=hash)
        if self.sync().current(topic) is not None:
            raise TopicAlreadyManagedError(f"topic {topic} is already managed")
        state = self._replicas.cluster_state()
        plan = self._replicas.plan_new_topic(
            topic, layout.physical_partitions, replication_factor, state, config=config,
            max_partitions=max_partitions, min_required_replication_factor=min_required_replication_factor,
            ignore_racks=ignore_racks,
        )
        exists = f"topic {topic} already exists; use adopt({topic!r}) to manage it"
        if self._replicas.explicit(state):
            try:
                _cluster.create_topic(self._admin, topic, plan.assignment, config=config, timeout=self.timeout)
            except TopicAlreadyManagedError as e:
                raise TopicAlreadyManagedError(exists, code=e.code) from e
            self._wait_partitions(topic, layout.physical_partitions)
        else:
            # One live broker: it places every replica there, as planned (and Tansu ignores explicit
            # assignments). Under-replicated creation asks for the replicas that can exist.
            sent_rf = len(plan.assignment[0]) if plan.missing else replication_factor
            new = NewTopic(topic, layout.physical_partitions, sent_rf, config=dict(config or {}))
            try:
                to_controller(self._admin, self.timeout,
                              lambda t: self._admin.create_topics([new], request_timeout=t)[topic].result())
            except KafkaException as e:
                err = translate(e, f"creating topic {topic}", api="CreateTopics")
                if isinstance(err, TopicAlreadyManagedError):
                    raise TopicAlreadyManagedError(exists, code=err.code) from e
                raise err from e
            self._wait_partitions(topic, layout.physical_partitions)
        self._placed(plan)
        return self._append(layout, "create")

    def adopt(self, topic: str, *, hash: Optional[HashName] = None) -> Layout:
        """Put an existing topic under management with ``initial = current
        partition count``, without moving a key; see :meth:`adopt_with_report`."""
        return self.adopt_with_report(topic, hash=hash).layout

    def adopt_with_report(self, topic: str, *, hash: Optional[HashName] = None,
                          sample: int = ADOPT_SAMPLE) -> AdoptResult:
        """:meth:`adopt`, returning what hash was used and from how many records.

        With ``hash=None`` the hash is detected from up to ``sample`` keyed
        records per partition: the one of murmur2 (Java clients, librdkafka
        ``murmur2_random``), crc32 (librdkafka's default ``consistent_random``)
        and murmur3 under which every sampled key sits where it is. Raises
        :class:`HashDetectionError` when fewer than :data:`ADOPT_MIN_RECORDS`
        keyed records exist, when several hashes fit, or when none does; an
        explicit ``hash`` skips detection (keys written with another hash then
        move). Raises :class:`TopicAlreadyManagedError`, :class:`UnknownTopicError`.
        """
        if self.sync().current(_args.topic_name(topic)) is not None:
            raise TopicAlreadyManagedError(f"topic {topic} is already managed")
        count = partition_count(self._admin, topic, self.timeout)
        records = 0
        detected = hash is None
        if hash is None:
            samples = _cluster.sample_keys(self._conn, topic, count, sample, self.timeout)
            records = len(samples)
            fits = matching_hashes(samples, count)
            if records < ADOPT_MIN_RECORDS or len(fits) > 1:
                raise HashDetectionError(
                    f"cannot tell which hash placed the keys of {topic}: {records} keyed record(s) sampled "
                    f"({'fit: ' + ', '.join(fits) if fits else 'no hash fits'}); at least {ADOPT_MIN_RECORDS} "
                    "are needed and exactly one hash must fit. Pass hash= (CLI: --hash) to choose.",
                    candidates=tuple(fits), records=records,
                )
            if not fits:
                raise HashDetectionError(
                    f"no known hash (murmur2, crc32, murmur3) places the {records} sampled keys of {topic} where "
                    "they are: it was written with a custom partitioner or explicit partitions. Adopting it moves "
                    "keys; pass hash= (CLI: --hash) to do so anyway.", records=records,
                )
            hash = fits[0]  # type: ignore[assignment]
            log.info("adopting %s: hash %s detected from %d keyed records", topic, hash, records)
        assert hash is not None
        lay = self._append(Layout(topic, 1, count, count, count, hash=hash), "adopt")
        return AdoptResult(lay, str(hash), detected, records)

    def expand(
        self,
        topic: str,
        partitions: int,
        *,
        max_partitions: Optional[PartitionLimits] = None,
        min_required_replication_factor: Optional[MinRequiredReplicationFactor] = None,
        ignore_racks: bool = False,
        elect_leaders: bool = False,
        expected_epoch: Optional[int] = None,
    ) -> Layout:
        """Grow the undeleted partition count to ``partitions``.

        Draining and spare partitions are reused first; CreatePartitions is
        called only when more physical partitions are needed. Allowed while
        partitions drain. Raises :class:`InvalidLayoutError` (not larger),
        :class:`UnsupportedBrokerApiError` (more partitions needed and the
        broker lacks CreatePartitions; nothing changed).

        New physical partitions are placed as in :meth:`create_topic` (same
        keyword options; :class:`GuardRailsError` before anything changes when
        a limit would be exceeded), with the topic's replication factor.
        ``elect_leaders=True`` elects the preferred leaders of the partitions
        that became undeleted afterwards; the results are in
        :meth:`expand_with_report`'s :class:`ExpansionResult` (this method
        returns only the layout).

        ``expected_epoch``: apply only if the topic's layout is still at this
        epoch (the one the caller decided on), else raise
        :class:`ConcurrentLayoutChangeError` before anything changes; two
        callers that expect the same epoch cannot both apply (the layout log's
        first claim of the next epoch wins). The same keyword on
        :meth:`shrink` and :meth:`retire`. It also makes a retry safe: when
        an expand failed without an acknowledgement (e.g. the layout log's
        leader failed) although its record was written, the same call with
        the same ``expected_epoch`` on the same admin finds its own change as
        the topic's latest and returns it without applying it again.
        """
        return self.expand_with_report(
            topic, partitions, max_partitions=max_partitions,
            min_required_replication_factor=min_required_replication_factor, ignore_racks=ignore_racks,
            elect_leaders=elect_leaders, expected_epoch=expected_epoch,
        ).layout

    def expand_with_report(
        self,
        topic: str,
        partitions: int,
        *,
        max_partitions: Optional[PartitionLimits] = None,
        min_required_replication_factor: Optional[MinRequiredReplicationFactor] = None,
        ignore_racks: bool = False,
        elect_leaders: bool = False,
        expected_epoch: Optional[int] = None,
    ) -> ExpansionResult:
        """:meth:`expand`, returning the layout with the :class:`ExpansionPlan`
        applied and, with ``elect_leaders=True``, one :class:`ElectionResult`
        per partition that became undeleted. An election that cannot run
        (e.g. the broker lacks ElectLeaders) is reported as failed results,
        not raised: the expansion was applied (``result.ok`` is False)."""
        done = self._own_retry(topic, expected_epoch, "expand", partitions)
        if done is not None:
            prev, layout = done
            xp = ExpansionPlan(topic=topic, current=prev, target=layout,
                               physical_partitions=layout.physical_partitions,
                               reused_draining=frozenset(), reused_spares=frozenset(), placement=None,
                               spares=frozenset(range(layout.partitions, layout.physical_partitions)) - layout.draining)
            elections = self._replicas.elect_reporting(topic, xp.undeleted) if elect_leaders else {}
            return ExpansionResult(layout, xp, elections)
        xp = self._plan_expansion(topic, partitions, max_partitions, min_required_replication_factor,
                                  ignore_racks, read_cluster=False)
        self._check_epoch(xp.current, expected_epoch, "expand")
        if xp.placement is not None:
            try:
                if xp.explicit_assignment:
                    _cluster.create_partitions(self._admin, topic, xp.placement.assignment, timeout=self.timeout)
                else:
                    self._create_partitions(topic, xp.target.physical_partitions)
            except UnsupportedBrokerApiError as e:
                if e.api == "CreatePartitions":
                    raise self._no_create_partitions(xp, e.code) from e
                raise
            self._placed(xp.placement)
        layout = self._append(xp.target, "expand")
        elections = self._replicas.elect_reporting(topic, xp.undeleted) if elect_leaders else {}
        return ExpansionResult(layout, xp, elections)

    def plan(
        self,
        topic: str,
        partitions: int,
        *,
        max_partitions: Optional[PartitionLimits] = None,
        min_required_replication_factor: Optional[MinRequiredReplicationFactor] = None,
        ignore_racks: bool = False,
    ) -> ExpansionPlan:
        """What ``expand(topic, partitions, ...)`` would do, changing nothing:
        the draining/spare partitions reused, the new physical partitions with
        their replicas and racks, the capacity left per broker, the spare
        partitions, and whether the broker accepts the CreatePartitions
        request (it is asked to validate it; nothing is created).

        Raises what :meth:`expand` raises before reading the cluster
        (:class:`InvalidLayoutError`, :class:`GuardRailsError`,
        :class:`PlacementError`, :class:`UnknownTopicError`). A broker that
        lacks CreatePartitions or refuses the new partitions does not raise:
        the plan says so (``create_partitions``, ``will_succeed`` False,
        ``problem`` holding what :meth:`expand` would raise), with the rest
        of the plan."""
        return self._check_create_partitions(self._plan_expansion(
            topic, partitions, max_partitions, min_required_replication_factor, ignore_racks, read_cluster=True))

    def shrink(self, topic: str, partitions: int, *, expected_epoch: Optional[int] = None) -> Layout:
        """Reduce the undeleted partition count to ``partitions`` (never below
        the initial count); the removed partitions become draining.
        ``expected_epoch`` as in :meth:`expand`."""
        cur = self.layout(topic)
        self._check_epoch(cur, expected_epoch, "shrink")
        return self._append(cur.shrunk(partitions), "shrink")

    def _own_retry(self, topic: str, expected: Optional[int], op: str,
                   partitions: int) -> Optional[Tuple[Layout, Layout]]:
        """When ``op`` to ``partitions`` from epoch ``expected`` is already the
        topic's latest change, written by this admin, returns (the layout it
        was decided on, the layout it made): a retry of a call whose append
        failed (no acknowledgement: the layout log's leader failed, or the
        timeout ran out) although its record was written. ``None`` otherwise."""
        if expected is None or isinstance(expected, bool) or not isinstance(expected, int):
            return None
        cur = self.layout(topic)
        if cur.epoch != expected + 1:
            return None
        last = self.history.changes(topic)[-1]
        if last.layout != cur or last.op != op or last.admin_id != self.admin_id or cur.partitions != partitions:
            return None
        log.info("%s of %s to %d partitions from epoch %d was already applied by this admin (layout-log offset %d; "
                 "its acknowledgement was lost): not applied again", op, topic, partitions, expected, last.offset)
        return self.history.layout(topic, expected), cur

    @staticmethod
    def _check_epoch(cur: Layout, expected: Optional[int], op: str) -> None:
        if expected is not None and (isinstance(expected, bool) or not isinstance(expected, int)):
            raise TypeError(f"expected_epoch must be an int, got {expected!r}")
        if expected is not None and cur.epoch != expected:
            raise ConcurrentLayoutChangeError(
                f"{op} of {cur.topic} was decided on layout epoch {expected} but the layout is now at epoch "
                f"{cur.epoch} ({cur.partitions} partitions); this {op} was not applied. Re-read the layout and "
                "decide again."
            )

    def retire(self, topic: str, groups: _args.GroupIds = (), *, delete_records: bool = False,
               expected_epoch: Optional[int] = None) -> RetireResult:
        """Turn draining partitions that are empty, or fully consumed by every
        group in ``groups``, into spares.

        ``groups`` is one consumer group id (a ``str``) or a sequence (or set)
        of them; anything else raises ``TypeError`` before anything is read.

        With ``delete_records=True`` the records of retired partitions are
        deleted (DeleteRecords; raises :class:`UnsupportedBrokerApiError` on
        brokers without it, before anything changes). ``expected_epoch`` as
        in :meth:`expand`.
        """
        wanted = _args.group_ids(groups)
        cur = self.layout(topic)
        self._check_epoch(cur, expected_epoch, "retire")
        draining = sorted(cur.draining)
        if not draining:
            return RetireResult(cur, frozenset(), {})
        tps = [(topic, q) for q in draining]
        ends = self._offsets.end_offsets(tps)
        starts = self._offsets.start_offsets(tps)
        committed = {g: self.committed(g, tps) for g in wanted}
        retired: List[int] = []
        still: Dict[int, str] = {}
        for q in draining:
            end, start = ends[(topic, q)], starts[(topic, q)]
            if start >= end:
                retired.append(q)
                continue
            if not wanted:
                still[q] = f"holds offsets {start}..{end - 1} and no consumer group was named"
                continue
            behind = {g: committed[g].get((topic, q), -1) for g in wanted if committed[g].get((topic, q), -1) < end}
            if behind:
                still[q] = "not fully consumed: " + ", ".join(
                    f"{g} at {off if off >= 0 else 'no commit'} of {end}" for g, off in sorted(behind.items())
                )
            else:
                retired.append(q)
        deleted: Dict[int, int] = {}
        if delete_records and retired:
            deleted = self._delete_records(topic, {q: ends[(topic, q)] for q in retired if starts[(topic, q)] < ends[(topic, q)]})
        if not retired:
            return RetireResult(cur, frozenset(), still)
        new = self._append(cur.retired(retired), "retire")
        return RetireResult(new, frozenset(retired), still, deleted)

    def unmanage(self, topic: str, groups: _args.GroupIds = (), *,
                 producers_idle_s: float = 600.0) -> Layout:
        """Take ``topic`` out of management: a layout-log record ends its
        layouts, registrations and gates (clients that start later treat it
        as a plain topic; a later create/adopt starts again at epoch 1).
        Returns the layout it ended.

        Refused with :class:`TopicInUseError`, saying why, while anything
        depends on the layout: partitions still draining; gates (from layout
        changes) while no consumer group is named, or any named group (one id
        or several, as for :meth:`retire`) that has not processed every
        gate's waits; a producer registration younger than
        ``producers_idle_s`` (a running ordered producer keeps partitioning by
        the layout; one started afterwards uses its client's partitioner).
        Groups not named are not gated afterwards."""
        wanted = _args.group_ids(groups)
        cur = self.layout(topic)
        why: List[str] = []
        if cur.draining:
            why.append(f"partition(s) {', '.join(map(str, sorted(cur.draining)))} still draining: groups may "
                       f"wait at gates on them; retire them first (kafka-ordered retire {topic} -g GROUP)")
        regs = self.history.registrations(topic)
        gates = [g for r in regs for g in r.gates]
        if gates and not wanted:
            why.append(f"{len(gates)} gate(s) from layout changes: name the consumer groups that read {topic} "
                       "(-g GROUP) so that none is left waiting at one")
        elif gates:
            sources = sorted({q for g in gates for q in g.wait})
            tps = [(topic, q) for q in sources]
            starts = self._offsets.start_offsets(tps)
            for group in wanted:
                committed = self.committed(group, tps)
                waiting = sorted({g.partition for g in gates for q, w in g.wait.items()
                                  if max(committed.get((topic, q), -1), starts.get((topic, q), 0)) < w})
                if waiting:
                    why.append(f"group {group} has not passed the gate(s) on partition(s) "
                               f"{', '.join(map(str, waiting))} yet")
        now_ms = time.time() * 1000
        recent = sorted({r.producer_id for r in regs if now_ms - r.timestamp_ms < producers_idle_s * 1000})
        if recent:
            why.append(f"producer(s) {', '.join(recent[:5])}{' ...' if len(recent) > 5 else ''} registered for "
                       f"it less than {producers_idle_s:g} s ago: stop the topic's ordered producers first")
        if why:
            raise TopicInUseError(f"cannot unmanage {topic}: " + "; ".join(why))
        self._ensure_protocol()
        self._shared.writer.append(*encode_layout(cur, "unmanage", self.admin_id))
        history = self._follower.sync()
        now = history.current(topic)
        if now is not None:
            raise ConcurrentLayoutChangeError(
                f"another admin changed {topic} first (it is at epoch {now.epoch}); it is still managed. "
                "Check its layout and retry if still wanted."
            )
        self._follower.write_snapshot(self._shared.writer)
        return cur

    # -- replicas and leaders

    def plan_heal(
        self,
        topic: str,
        *,
        replication_factor: Optional[int] = None,
        max_partitions: Optional[PartitionLimits] = None,
        ignore_racks: bool = False,
    ) -> HealPlan:
        """The replicas :meth:`heal` would add, changing nothing.

        ``replication_factor`` is the target; by default the one asked for
        when this admin created or expanded ``topic`` under-replicated, else
        the largest replica count among its partitions (pass it after a
        degraded creation made by another process).
        """
        return self._replicas.plan_heal(_args.topic_name(topic), replication_factor=replication_factor, max_partitions=max_partitions,
                                        ignore_racks=ignore_racks)

    def heal(
        self,
        topic: str,
        *,
        replication_factor: Optional[int] = None,
        max_partitions: Optional[PartitionLimits] = None,
        ignore_racks: bool = False,
        elect_leaders: bool = False,
        wait_s: float = 120.0,
    ) -> HealResult:
        """Add the replicas under-replicated partitions of ``topic`` lack
        (after a degraded creation, see :meth:`create_topic`) on the live
        brokers, through partition reassignment (KIP-455); the current
        replicas, and so the preferred leaders, stay first.

        The plan is :meth:`plan_heal`'s. Partitions that cannot be completed
        because too few brokers are live are left in
        ``result.plan.still_missing``; nothing to add is not an error.
        Reassignment needs kafka-python (confluent-kafka has no such call):
        without it, or when the broker lacks AlterPartitionReassignments,
        :class:`UnsupportedBrokerApiError` (api
        ``"AlterPartitionReassignments"``) carries the reassignment JSON for
        ``kafka-reassign-partitions.sh``. A partition the broker rejects
        raises :class:`KafkaOrderedError` naming accepted and rejected
        partitions. Then it waits (at most ``wait_s`` seconds; 0: not at all)
        until every reassigned partition has exactly its planned replicas,
        all in its ISR: ``result.in_sync`` says per partition whether it
        got there, and ``result.ok`` is False when one did not.
        ``elect_leaders=True`` then elects the preferred leaders of the
        reassigned partitions (results in ``result.elections``; an election
        that cannot run is reported as failed results).
        """
        return self._replicas.heal(_args.topic_name(topic), replication_factor=replication_factor, max_partitions=max_partitions,
                                   ignore_racks=ignore_racks, elect_leaders=elect_leaders, wait_s=wait_s)

    def elect_leaders(self, topic: str, partitions: Optional[Iterable[int]] = None) -> Dict[int, ElectionResult]:
        """Elect the preferred (first) replica as leader of ``partitions`` of
        ``topic`` (default: all of them), KIP-183. Returns partition ->
        :class:`~kafka_ordered.admin.ElectionResult` (``status``
        ``"elected"``, ``"not_needed"`` or ``"failed"`` with the broker's
        error). Raises :class:`UnsupportedBrokerApiError` (api
        ``"ElectLeaders"``) on brokers without the API,
        :class:`UnknownTopicError`, :class:`BrokerUnavailableError`;
        ``TypeError`` when ``partitions`` is not a sequence of ints.
        """
        _args.topic_name(topic)
        return self._replicas.elect_leaders(topic, None if partitions is None else _args.partition_ids(partitions))

    # -- placement

    def _placed(self, plan: PlacementPlan) -> None:
        self.last_placement = plan
        self._replicas.placed(plan)

    def _plan_expansion(
        self,
        topic: str,
        partitions: int,
        max_partitions: Optional[PartitionLimits],
        min_required: Optional[MinRequiredReplicationFactor],
        ignore_racks: bool,
        *,
        read_cluster: bool,
    ) -> ExpansionPlan:
        """The :class:`ExpansionPlan` of growing ``topic`` to ``partitions``
        undeleted partitions: reused draining/spare partitions, and the
        placement of new physical partitions (the cluster is read when some
        are needed, or always with ``read_cluster``)."""
        cur = self.layout(topic)
        physical = max(cur.physical_partitions, partition_count(self._admin, topic, self.timeout))
        new = cur.expanded(partitions, physical)
        reused = set(range(cur.partitions, min(new.partitions, physical)))
        state: Optional[ClusterState] = None
        placement: Optional[PlacementPlan] = None
        remaining: Mapping[int, Optional[int]] = {}
        if new.physical_partitions > physical or read_cluster:
            state = self._replicas.cluster_state()
        if new.physical_partitions > physical:
            assert state is not None
            placement = self._replicas.plan_growth(
                topic, new.physical_partitions, state, max_partitions=max_partitions,
                min_required_replication_factor=min_required, ignore_racks=ignore_racks,
            )
            remaining = placement.remaining
        elif state is not None:
            remaining = self._replicas.remaining(state, max_partitions)
        return ExpansionPlan(
            topic=topic,
            current=cur,
            target=new,
            physical_partitions=physical,
            reused_draining=frozenset(reused & cur.draining),
            reused_spares=frozenset(reused - cur.draining),
            placement=placement,
            remaining_capacity=dict(remaining),
            explicit_assignment=placement is not None and state is not None and self._replicas.explicit(state),
            spares=frozenset(range(cur.partitions, physical)) - cur.draining,
            create_partitions="not_needed" if placement is None else "not_checked",
        )

    # -- describing

    def committed(self, group: str, tps: Sequence[Tuple[str, int]]) -> Dict[Tuple[str, int], int]:
        """A group's committed offsets (``-1`` when none) of ``tps``
        (``(topic, partition)`` pairs); ``TypeError`` for other arguments;
        a :class:`KafkaOrderedError` when the read fails or a partition's
        commit cannot be read.

        Read by a consumer of the group that never joins it (one per group,
        kept until :meth:`close`), not by the admin client: librdkafka's
        admin ListConsumerGroupOffsets crashed the process (SIGABRT, or
        SIGSEGV on NOT_COORDINATOR: librdkafka issue 5040) in about half of
        the kills of the coordinator's broker, as the autoscaler's reads of
        lag every tick would meet."""
        gid = _args.group_id(group)
        want = [TopicPartition(t, p) for t, p in _args.topic_partitions(tps, "tps")]
        res = read_group_commits(self._group_reader(gid), group, want, self.timeout)
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else -1) for tp in res}

    def _group_reader(self, group: str) -> Consumer:
        reader = self._group_readers.get(group)
        if reader is None:
            # as the admin client read them: a pending transactional commit is not waited for
            reader = self._group_readers[group] = group_reader(self._rest, group,
                                                               **{"isolation.level": "read_uncommitted"})
        return reader

    def describe(self, topic: str, group: Optional[str] = None) -> TopicDescription:
        """The topic's layout, history, draining/spare partitions, lineage,
        registrations, and each physical partition's replicas and in-sync
        replicas (``degraded`` names the partitions lacking replicas, as after
        a degraded creation, or with replicas out of sync).

        With ``group``: every gate's state for that group (open, closed or
        holding records, closed since when in wall-clock time, and per source
        the wait offset, the group's committed offset, the lag to the wait and
        the member owning it), every physical partition's committed offset,
        log end, lag and owner (as ``kafka-consumer-groups --describe``), and
        the group's state and members. A broker that cannot tell the members
        (no DescribeGroups, or an active group reported without members)
        leaves owners unknown and says so in ``membership.note``; that is not
        an error. Raises ``TypeError`` when ``group`` is not a ``str``.
        """
        _args.optional_group_id(group)
        cur = self.layout(topic)
        h = self.history
        physical = max(cur.physical_partitions, partition_count(self._admin, topic, self.timeout))
        regs = tuple(h.registrations(topic))
        gates: Tuple[GroupGateState, ...] = ()
        membership: Optional[GroupMembership] = None
        partitions: Tuple[GroupPartitionState, ...] = ()
        if group is not None:
            membership, partitions, gates = self._group_view(topic, group, cur, physical, regs)
        problems = tuple(h.problems)
        rf, replication = self._replicas.replication(topic)
        return TopicDescription(
            topic=topic, layout=cur, history=tuple(h.changes(topic)), physical_partitions=physical,
            draining=cur.draining, spares=frozenset(range(cur.partitions, physical)) - cur.draining,
            lineage={p: cur.parent(p) for p in range(physical)}, registrations=regs, problems=problems,
            group=group, gates=gates, membership=membership, partitions=partitions,
            replication_factor=rf, replication=replication,
        )

    def _membership(self, topic: str, group: str) -> GroupMembership:
        try:
            state, members = _cluster.describe_group(self._admin, group, timeout=self.timeout)
        except KafkaOrderedError as e:
            return GroupMembership(group, None, owners_known=False,
                                   note=f"owners unknown: describing group {group} failed: {e}")
        assignments = {m.member_id: tuple(sorted(p for t, p in tps if t == topic)) for m, tps in members}
        if not members and state not in ("empty", "dead"):
            return GroupMembership(
                group, state, owners_known=False,
                note=f"owners unknown: the broker reports group {group} as {state} but lists no members "
                     "(some brokers, such as the embedded Tansu, do not report group membership)",
            )
        return GroupMembership(group, state, tuple(m for m, _ in members), assignments, True,
                               None if members else f"group {group} has no active members")

    def _group_view(
        self, topic: str, group: str, cur: Layout, physical: int, regs: Sequence[Registration]
    ) -> Tuple[GroupMembership, Tuple[GroupPartitionState, ...], Tuple[GroupGateState, ...]]:
        tps = [(topic, p) for p in range(physical)]
        committed = self.committed(group, tps)
        starts = self._offsets.start_offsets(tps)
        ends = self._offsets.end_offsets(tps)
        membership = self._membership(topic, group)
        owners = membership.owners
        partitions = []
        for t, p in tps:
            com = committed.get((t, p), -1)
            role: PartitionRole = "undeleted" if p < cur.partitions else "draining" if p in cur.draining else "spare"
            partitions.append(GroupPartitionState(p, role, com, starts.get((t, p), 0), ends.get((t, p), 0),
                                                  max(0, ends.get((t, p), 0) - com) if com >= 0 else None,
                                                  owners.get(p)))
        now_ms = time.time() * 1000
        short = {(topic, q) for r in regs for g in r.gates for q, w in g.wait.items()
                 if max(committed.get((topic, q), -1), starts.get((topic, q), 0)) < w}
        try:
            held_back = self._offsets.open_transactions(short) if short else {}
        except KafkaOrderedError as e:
            log.debug("last stable offsets of %s unknown: %s", topic, e)
            held_back = {}
        gates = []
        for r in regs:
            for g in r.gates:
                sources: Dict[int, GateSourceState] = {}
                for q, w in sorted(g.wait.items()):
                    com = committed.get((topic, q), -1)
                    done = max(com, starts.get((topic, q), 0))
                    lso = held_back.get((topic, q))
                    sources[q] = GateSourceState(q, w, com, done, max(0, w - done), owners.get(q),
                                                 lso if lso is not None and done < w and lso < w else None)
                waiting = {q: (s.wait, s.processed) for q, s in sources.items() if s.processed < s.wait}
                held = 0 if not waiting else max(0, ends.get((topic, g.partition), 0) - g.start)
                gates.append(GroupGateState(
                    g.partition, g.start, g.producer_id, g.epoch, not waiting, waiting,
                    0.0 if not waiting else max(0.0, (now_ms - r.timestamp_ms) / 1000.0),
                    state="open" if not waiting else "holding" if held else "closed",
                    held_since=None if not waiting else r.timestamp_ms / 1000.0,
                    held_records=held, sources=sources,
                ))
        return membership, tuple(partitions), tuple(gates)

    # -- physical partitions

    def _wait_partitions(self, topic: str, count: int) -> None:
        wait_for_partitions(self._admin, topic, count, self.timeout)

    @staticmethod
    def _no_create_partitions(xp: ExpansionPlan, code: Optional[int]) -> UnsupportedBrokerApiError:
        """What expand raises, and plan reports, when more physical partitions
        are needed and the broker lacks CreatePartitions."""
        total, physical = xp.target.physical_partitions, xp.physical_partitions
        return UnsupportedBrokerApiError(
            f"cannot expand {xp.topic} to {xp.target.partitions} partitions: that needs {total} physical "
            f"partitions, the topic has {physical} and the broker does not support the CreatePartitions API to "
            f"add more. Nothing was changed. Of the {physical}, {xp.current.partitions} are in use, "
            f"{len(xp.spares)} spare ({', '.join(map(str, sorted(xp.spares))) or 'none'})"
            + (f" and {len(xp.current.draining)} draining" if xp.current.draining else "")
            + f"; expand needs no broker support up to {physical} partitions. For more, pre-provision "
            f"spare partitions: create the topic with physical_partitions >= {total} "
            "(`kafka-ordered create TOPIC --partitions N --physical M`).",
            api="CreatePartitions",
            code=code,
        )

    def _create_partitions(self, topic: str, total: int, *, validate_only: bool = False) -> None:
        try:
            to_controller(self._admin, self.timeout, lambda t: self._admin.create_partitions(
                [NewPartitions(topic, total)], request_timeout=t, validate_only=validate_only)[topic].result())
        except KafkaException as e:
            raise translate(e, f"adding partitions to {topic}", api="CreatePartitions") from e
        if not validate_only:
            self._wait_partitions(topic, total)

    def _check_create_partitions(self, xp: ExpansionPlan) -> ExpansionPlan:
        """``xp`` with what the broker answers when asked to validate its
        CreatePartitions request (nothing is created)."""
        if xp.placement is None:
            return xp
        try:
            if xp.explicit_assignment:
                _cluster.create_partitions(self._admin, xp.topic, xp.placement.assignment, timeout=self.timeout,
                                           validate_only=True)
            else:
                self._create_partitions(xp.topic, xp.target.physical_partitions, validate_only=True)
        except UnsupportedBrokerApiError as e:
            if e.api != "CreatePartitions":
                raise
            return dataclasses.replace(xp, create_partitions="unsupported",
                                       problem=str(self._no_create_partitions(xp, e.code)))
        except (BrokerUnavailableError, UnknownTopicError):
            raise
        except KafkaOrderedError as e:
            return dataclasses.replace(xp, create_partitions="refused",
                                       problem=f"the broker refused to add partitions to {xp.topic} "
                                               f"(validated only, nothing was created): {e}")
        return dataclasses.replace(xp, create_partitions="supported")

    def _delete_records(self, topic: str, before: Mapping[int, int]) -> Dict[int, int]:
        if not before:
            return {}
        fs = self._admin.delete_records(
            [TopicPartition(topic, q, off) for q, off in before.items()], request_timeout=self.timeout
        )
        out: Dict[int, int] = {}
        for tp, f in fs.items():
            try:
                out[tp.partition] = f.result().low_watermark
            except KafkaException as e:
                raise translate(e, f"deleting records of {topic}[{tp.partition}]", api="DeleteRecords") from e
        return out

    # -- lifecycle

    def close(self) -> None:
        """Release the layout-log resources (closed with their last user in
        this process). Idempotent."""
        readers, self._group_readers = self._group_readers, {}
        for reader in readers.values():
            reader.close()
        shared, self._shared = self._shared, None  # type: ignore[assignment]
        if shared is not None:
            shared.release()

    def __enter__(self) -> "LayoutAdmin":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()
