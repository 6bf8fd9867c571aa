"""Admin API: put topics under management and change their layouts.

Every change is one record appended to the layout log; producers and
consumers follow the log. Physical partitions are only ever added (Kafka
cannot delete partitions): a *shrink* is a layout change that marks the
removed partitions draining, and a later expansion reuses them.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple, Type

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

from . import _cluster
from ._cluster import ClusterState, ElectionResult, ReassignmentResult
from ._kafka import OffsetReader, new_admin, partition_count, topic_exists
from .config import connection_config, split_config
from .errors import (
    ConcurrentLayoutChangeError,
    InvalidLayoutError,
    KafkaOrderedError,
    PlacementError,
    TopicAlreadyManagedError,
    TopicNotManagedError,
    UnknownTopicError,
    UnsupportedBrokerApiError,
    translate,
)
from .gates import GateStatus, gate_open
from .history import Gate, LayoutChange, LayoutHistory, LogProblem, Registration, encode_layout
from .layout import DEFAULT_SETTLE_MS, HashName, Layout
from .layout_log import LayoutFollower, LayoutLog
from .placement import (
    MIN_INSYNC_REPLICAS,
    HealPlan,
    MinRequiredReplicationFactor,
    PartitionLimits,
    PlacementPlan,
    plan_heal,
    plan_partitions,
    remaining_capacity,
)

__all__ = [
    "LayoutAdmin",
    "TopicDescription",
    "RetireResult",
    "GroupGateState",
    "ExpansionPlan",
    "ExpansionResult",
    "HealResult",
]

_logger = logging.getLogger(__name__)

_ADMIN_OPTIONS = (
    "ordered.layout.topic",
    "ordered.layout.corrupt.policy",
    "ordered.metadata.timeout.ms",
    "ordered.follower.poll.interval.ms",
)


@dataclass(frozen=True)
class GroupGateState:
    """One gate as a consumer group sees it: open, or waiting on sources
    (``waiting_on``: source -> (wait offset, group's processed offset)) for
    ``waiting_s`` seconds since the registration was written."""

    partition: int
    start: int
    producer_id: str
    epoch: int
    open: bool
    waiting_on: Mapping[int, Tuple[int, int]]
    waiting_s: float


@dataclass(frozen=True)
class TopicDescription:
    """Everything the layout log knows about one managed topic."""

    topic: str
    layout: Layout
    history: Tuple[LayoutChange, ...]
    physical_partitions: int
    draining: FrozenSet[int]
    spares: FrozenSet[int]
    lineage: Mapping[int, Optional[int]]
    registrations: Tuple[Registration, ...]
    problems: Tuple[LogProblem, ...] = ()
    group: Optional[str] = None
    gates: Tuple[GroupGateState, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {
            "topic": self.topic,
            "layout": self.layout.to_dict(),
            "physical_partitions": self.physical_partitions,
            "draining": sorted(self.draining),
            "spares": sorted(self.spares),
            "lineage": {str(p): parent for p, parent in sorted(self.lineage.items())},
            "history": [
                {"epoch": c.layout.epoch, "op": c.op, "partitions": c.layout.partitions,
                 "physical_partitions": c.layout.physical_partitions, "draining": sorted(c.layout.draining),
                 "offset": c.offset, "timestamp_ms": c.timestamp_ms}
                for c in self.history
            ],
            "registrations": [
                {"producer": r.producer_id, "stable": r.stable, "epoch": r.epoch, "from_epoch": r.from_epoch,
                 "offset": r.offset, "timestamp_ms": r.timestamp_ms,
                 "gates": {str(g.partition): {"start": g.start, "wait": {str(q): w for q, w in g.wait.items()}}
                           for g in r.gates}}
                for r in self.registrations
            ],
            "problems": [{"offset": p.offset, "reason": p.reason} for p in self.problems],
        }
        if self.group is not None:
            d["group"] = self.group
            d["gates"] = [
                {"partition": g.partition, "start": g.start, "producer": g.producer_id, "epoch": g.epoch,
                 "open": g.open, "waiting_s": round(g.waiting_s, 3),
                 "waiting_on": {str(q): {"wait": w, "processed": pr} for q, (w, pr) in g.waiting_on.items()}}
                for g in self.gates
            ]
        return d


@dataclass(frozen=True)
class RetireResult:
    """Outcome of :meth:`LayoutAdmin.retire`: the partitions that became spares,
    those still draining with the reason, and the new layout (unchanged when
    nothing was retired)."""

    layout: Layout
    retired: FrozenSet[int]
    still_draining: Mapping[int, str]
    deleted_records: Mapping[int, int] = field(default_factory=dict)


def _ids(ps: Iterable[int]) -> str:
    ps = sorted(ps)
    return ", ".join(map(str, ps)) if ps else "-"


def _capacity_text(cap: Mapping[int, Optional[int]]) -> str:
    return ", ".join(f"{b}: {'unlimited' if c is None else c}" for b, c in sorted(cap.items())) or "not read"


def _elections_dict(elections: Mapping[int, ElectionResult]) -> Dict[str, Any]:
    return {str(p): {"status": r.status, "code": r.code, "error": r.error, "message": r.message}
            for p, r in sorted(elections.items())}


@dataclass(frozen=True)
class ExpansionPlan:
    """What :meth:`LayoutAdmin.expand` would do, computed by :meth:`LayoutAdmin.plan`
    without changing anything.

    ``reused_draining`` and ``reused_spares`` are existing physical partitions
    that become undeleted again (no broker call); ``placement`` places the
    physical partitions that must be created (``None`` when none are needed):
    replicas leader first, their racks, replicas still missing in degraded mode.
    ``remaining_capacity`` is what each live broker can still take after the
    plan (``None``: unlimited; empty when the cluster was not read).
    ``explicit_assignment`` is True when the new partitions are created with the
    placement's replica lists (more than one live broker), False when the
    broker places them (one live broker: the same placement).
    """

    topic: str
    current: Layout
    target: Layout
    physical_partitions: int
    reused_draining: FrozenSet[int]
    reused_spares: FrozenSet[int]
    placement: Optional[PlacementPlan]
    remaining_capacity: Mapping[int, Optional[int]] = field(default_factory=dict)
    explicit_assignment: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "reused_draining", frozenset(self.reused_draining))
        object.__setattr__(self, "reused_spares", frozenset(self.reused_spares))
        object.__setattr__(self, "remaining_capacity", MappingProxyType(dict(sorted(self.remaining_capacity.items()))))

    @property
    def new_partitions(self) -> List[int]:
        """The physical partitions to create, ascending."""
        return self.placement.partitions if self.placement is not None else []

    @property
    def undeleted(self) -> List[int]:
        """The partitions that become undeleted (reused and new)."""
        return list(range(self.current.partitions, self.target.partitions))

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready description (string keys)."""
        return {
            "topic": self.topic,
            "from_partitions": self.current.partitions,
            "to_partitions": self.target.partitions,
            "physical_partitions": self.physical_partitions,
            "target_physical_partitions": self.target.physical_partitions,
            "reused_draining": sorted(self.reused_draining),
            "reused_spares": sorted(self.reused_spares),
            "new_partitions": self.new_partitions,
            "placement": self.placement.to_dict() if self.placement is not None else None,
            "explicit_assignment": self.explicit_assignment,
            "remaining_capacity": {str(b): c for b, c in sorted(self.remaining_capacity.items())},
            "layout": self.target.to_dict(),
        }

    def describe(self) -> str:
        """A human-readable summary."""
        lines = [
            f"{self.topic}: expand {self.current.partitions} -> {self.target.partitions} undeleted partitions, "
            f"physical {self.physical_partitions} -> {self.target.physical_partitions}",
            f"reuses draining partitions: {_ids(self.reused_draining)}",
            f"reuses spare partitions: {_ids(self.reused_spares)}",
        ]
        if self.placement is None:
            lines.append("creates no physical partitions")
        else:
            how = "explicit replica assignment" if self.explicit_assignment else "placed by the broker (one live broker)"
            lines.append(f"creates partitions {_ids(self.new_partitions)} ({how}):")
            lines += ["  " + line for line in self.placement.describe().splitlines()]
        lines.append(f"capacity left per broker: {_capacity_text(self.remaining_capacity)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class ExpansionResult:
    """Outcome of :meth:`LayoutAdmin.expand_with_report`: the new layout, the
    plan that was applied, and with ``elect_leaders=True`` one preferred
    leader election result per partition that became undeleted."""

    layout: Layout
    plan: ExpansionPlan
    elections: Mapping[int, ElectionResult] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "elections", MappingProxyType(dict(sorted(self.elections.items()))))

    @property
    def ok(self) -> bool:
        """False when a requested election failed (the expansion itself was applied)."""
        return all(r.ok for r in self.elections.values())

    def to_dict(self) -> Dict[str, Any]:
        return {"layout": self.layout.to_dict(), "plan": self.plan.to_dict(), "elections": _elections_dict(self.elections)}


@dataclass(frozen=True)
class HealResult:
    """Outcome of :meth:`LayoutAdmin.heal`: the plan, the broker's answer per
    reassigned partition (reassignments then run in the background until the
    new replicas catch up), and requested preferred leader elections."""

    plan: HealPlan
    reassignments: Mapping[int, ReassignmentResult] = field(default_factory=dict)
    elections: Mapping[int, ElectionResult] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reassignments", MappingProxyType(dict(sorted(self.reassignments.items()))))
        object.__setattr__(self, "elections", MappingProxyType(dict(sorted(self.elections.items()))))

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.reassignments.values()) and all(r.ok for r in self.elections.values())

    def to_dict(self) -> Dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "reassignments": {str(p): {"replicas": list(r.replicas), "ok": r.ok, "code": r.code, "error": r.error,
                                       "message": r.message} for p, r in sorted(self.reassignments.items())},
            "elections": _elections_dict(self.elections),
        }


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
        self._conn = connection_config(rest)
        self.timeout = opts["ordered.metadata.timeout.ms"] / 1000.0
        self.layout_topic: str = opts["ordered.layout.topic"]
        self.admin_id = f"admin-{uuid.uuid4().hex[:12]}"
        self._admin = new_admin(self._conn)
        self._log = LayoutLog(self._conn, self.layout_topic, timeout=self.timeout)
        self._follower = LayoutFollower(
            self._conn,
            self.layout_topic,
            poll_interval_ms=opts["ordered.follower.poll.interval.ms"],
            corrupt_policy=opts["ordered.layout.corrupt.policy"],
            timeout=self.timeout,
        )
        self._follower.start()
        self._offsets = OffsetReader(self._conn, self.timeout)
        self.last_placement = None
        # topic -> replication factor asked for when it was created/expanded under-replicated here.
        self._intended_rf: Dict[str, int] = {}

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
        or :class:`TopicNotManagedError`."""
        cur = self.sync().current(topic)
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

    def _append(self, layout: Layout, op: str) -> Layout:
        offset = self._log.append(*encode_layout(layout, op, self.admin_id))
        history = self._follower.sync()
        if history.find_change(layout.topic, offset) is None:
            winner = history.current(layout.topic)
            raise ConcurrentLayoutChangeError(
                f"another admin changed {layout.topic} first (epoch {layout.epoch} is now "
                f"{winner.partitions if winner else '?'} partitions); this {op} was not applied. "
                "Re-read the layout and retry if it is still wanted."
            )
        return layout

    def create_topic(
        self,
        topic: str,
        initial_partitions: int,
        physical_partitions: Optional[int] = None,
        replication_factor: int = -1,
        *,
        hash: HashName = "murmur2",
        settle_ms: int = DEFAULT_SETTLE_MS,
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
        layout = Layout(topic, 1, initial_partitions, initial_partitions,
                        physical_partitions if physical_partitions is not None else initial_partitions,
                        hash=hash, settle_ms=settle_ms)
        if self.sync().current(topic) is not None:
            raise TopicAlreadyManagedError(f"topic {topic} is already managed")
        state = self._cluster_state()
        rf = self._replication_factor(replication_factor, state)
        plan = plan_partitions(
            state.racks, layout.physical_partitions, rf, topic=topic,
            min_required_replication_factor=min_required_replication_factor,
            min_insync_replicas=self._min_insync(min_required_replication_factor, state, config=config),
            max_partitions=self._limits(max_partitions, state),
            current_replicas=state.live_replica_counts, ignore_racks=ignore_racks,
        )
        exists = f"topic {topic} already exists; use adopt({topic!r}) to manage it"
        if self._explicit(state):
            try:
                _cluster.create_topic(self._admin, topic, plan.assignment, config=config, timeout=self.timeout)
            except TopicAlreadyManagedError as e:
                raise TopicAlreadyManagedError(exists, code=e.code) from e
        else:
            # One live broker: it places every replica there, as planned (and Tansu ignores explicit
            # assignments). Under-replicated creation asks for the replicas that can exist.
            sent_rf = len(plan.assignment[0]) if plan.missing else replication_factor
            fs = self._admin.create_topics(
                [NewTopic(topic, layout.physical_partitions, sent_rf, config=dict(config or {}))],
                request_timeout=self.timeout,
            )
            try:
                fs[topic].result()
            except KafkaException as e:
                if e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    raise TopicAlreadyManagedError(exists, code=e.args[0].code()) from e
                raise translate(e, f"creating topic {topic}", api="CreateTopics") from e
            self._wait_partitions(topic, layout.physical_partitions)
        self._placed(plan)
        return self._append(layout, "create")

    def adopt(self, topic: str, *, hash: HashName = "murmur2", settle_ms: int = DEFAULT_SETTLE_MS) -> Layout:
        """Put an existing topic under management with ``initial = current
        partition count``. With ``hash="murmur2"`` (Java clients, librdkafka
        ``murmur2_random``) or ``"crc32"`` (librdkafka's default
        ``consistent_random``) no key moves."""
        if self.sync().current(topic) is not None:
            raise TopicAlreadyManagedError(f"topic {topic} is already managed")
        count = partition_count(self._admin, topic, self.timeout)
        return self._append(Layout(topic, 1, count, count, count, hash=hash, settle_ms=settle_ms), "adopt")

    def expand(
        self,
        topic: str,
        partitions: int,
        *,
        max_partitions: Optional[PartitionLimits] = None,
        min_required_replication_factor: Optional[MinRequiredReplicationFactor] = None,
        ignore_racks: bool = False,
        elect_leaders: bool = False,
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
        """
        return self.expand_with_report(
            topic, partitions, max_partitions=max_partitions,
            min_required_replication_factor=min_required_replication_factor, ignore_racks=ignore_racks,
            elect_leaders=elect_leaders,
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
    ) -> ExpansionResult:
        """:meth:`expand`, returning the layout with the :class:`ExpansionPlan`
        applied and, with ``elect_leaders=True``, one :class:`ElectionResult`
        per partition that became undeleted. An election that cannot run
        (e.g. the broker lacks ElectLeaders) is reported as failed results,
        not raised: the expansion was applied (``result.ok`` is False)."""
        xp = self._plan_expansion(topic, partitions, max_partitions, min_required_replication_factor,
                                  ignore_racks, read_cluster=False)
        if xp.placement is not None:
            if xp.explicit_assignment:
                self._create_planned_partitions(topic, xp.placement)
            else:
                self._create_partitions(topic, xp.target.physical_partitions)
            self._placed(xp.placement)
        layout = self._append(xp.target, "expand")
        elections = self._elect_reporting(topic, xp.undeleted) if elect_leaders else {}
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
        their replicas and racks, and the capacity left per broker. Raises
        what :meth:`expand` raises before changing anything
        (:class:`InvalidLayoutError`, :class:`GuardRailsError`,
        :class:`PlacementError`)."""
        return self._plan_expansion(topic, partitions, max_partitions, min_required_replication_factor,
                                    ignore_racks, read_cluster=True)

    def shrink(self, topic: str, partitions: int) -> Layout:
        """Reduce the undeleted partition count to ``partitions`` (never below
        the initial count); the removed partitions become draining."""
        return self._append(self.layout(topic).shrunk(partitions), "shrink")

    def retire(self, topic: str, groups: Iterable[str] = (), *, delete_records: bool = False) -> RetireResult:
        """Turn draining partitions that are empty, or fully consumed by every
        group in ``groups``, into spares.

        With ``delete_records=True`` the records of retired partitions are
        deleted (DeleteRecords; raises :class:`UnsupportedBrokerApiError` on
        brokers without it, before anything changes).
        """
        cur = self.layout(topic)
        groups = list(groups)
        draining = sorted(cur.draining)
        if not draining:
            return RetireResult(cur, frozenset(), {})
        tps = [(topic, q) for q in draining]
        ends = self._offsets.end_offsets(tps)
        starts = self._offsets.start_offsets(tps)
        committed = {g: self.committed(g, tps) for g in groups}
        retired: List[int] = []
        still: Dict[int, str] = {}
        for q in draining:
            end, start = ends[(topic, q)], starts[(topic, q)]
            if start >= end:
                retired.append(q)
                continue
            if not groups:
                still[q] = f"holds offsets {start}..{end - 1} and no consumer group was named"
                continue
            behind = {g: committed[g].get((topic, q), -1) for g in groups if committed[g].get((topic, q), -1) < end}
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
        state = self._cluster_state()
        current = _cluster.topic_assignment(self._admin, topic, timeout=self.timeout)
        rf = replication_factor
        if rf is None:
            rf = max([self._intended_rf.get(topic, 0)] + [len(r) for r in current.values()])
        return plan_heal(
            current, state.racks, rf, topic=topic, max_partitions=self._limits(max_partitions, state),
            current_replicas=state.live_replica_counts, ignore_racks=ignore_racks,
        )

    def heal(
        self,
        topic: str,
        *,
        replication_factor: Optional[int] = None,
        max_partitions: Optional[PartitionLimits] = None,
        ignore_racks: bool = False,
        elect_leaders: bool = False,
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
        partitions. ``elect_leaders=True`` then elects the preferred leaders of
        the reassigned partitions (results in ``result.elections``; an
        election that cannot run is reported as failed results).
        """
        plan = self.plan_heal(topic, replication_factor=replication_factor, max_partitions=max_partitions,
                              ignore_racks=ignore_racks)
        if not plan.target:
            return HealResult(plan)
        results = _cluster.alter_partition_reassignments(self._conn, topic, plan.target, timeout=max(self.timeout, 30.0))
        rejected = {p: r for p, r in results.items() if not r.ok}
        if rejected:
            accepted = sorted(p for p, r in results.items() if r.ok)
            first = next(iter(rejected.values()))
            raise KafkaOrderedError(
                f"healing {topic}: the broker rejected the reassignment of "
                + "; ".join(f"partition {p} to {list(r.replicas)} ({r.error}: {r.message})" for p, r in rejected.items())
                + f". Accepted (in progress): {_ids(accepted)}",
                code=first.code,
            )
        if topic in self._intended_rf and plan.complete:
            del self._intended_rf[topic]
        elections = self._elect_reporting(topic, sorted(plan.target)) if elect_leaders else {}
        return HealResult(plan, results, elections)

    def elect_leaders(self, topic: str, partitions: Optional[Iterable[int]] = None) -> Dict[int, ElectionResult]:
        """Elect the preferred (first) replica as leader of ``partitions`` of
        ``topic`` (default: all of them), KIP-183. Returns partition ->
        :class:`~kafka_ordered._cluster.ElectionResult` (``status``
        ``"elected"``, ``"not_needed"`` or ``"failed"`` with the broker's
        error). Raises :class:`UnsupportedBrokerApiError` (api
        ``"ElectLeaders"``) on brokers without the API,
        :class:`UnknownTopicError`, :class:`BrokerUnavailableError`.
        """
        if partitions is None:
            ps = sorted(_cluster.topic_assignment(self._admin, topic, timeout=self.timeout))
        else:
            ps = []
            for p in partitions:
                if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                    raise PlacementError(f"partition ids must be ints >= 0, got {p!r}")
                ps.append(int(p))
        got = _cluster.elect_preferred_leaders(self._admin, [(topic, p) for p in sorted(set(ps))],
                                               timeout=max(self.timeout, 30.0))
        return {p: r for (t, p), r in got.items() if t == topic}

    def _elect_reporting(self, topic: str, partitions: Sequence[int]) -> Dict[int, ElectionResult]:
        """:meth:`elect_leaders` after a change that was applied: a request that
        fails as a whole becomes one failed result per partition."""
        if not partitions:
            return {}
        try:
            return self.elect_leaders(topic, partitions)
        except KafkaOrderedError as e:
            code = e.code if e.code is not None else -1
            return {p: ElectionResult(topic, p, "failed", code, type(e).__name__, str(e)) for p in partitions}

    # -- placement inputs

    def _cluster_state(self) -> ClusterState:
        return _cluster.read_cluster(self._admin, timeout=self.timeout)

    @staticmethod
    def _explicit(state: ClusterState) -> bool:
        """Send explicit replica assignments only when they carry information:
        with one live broker every replica goes there whatever is asked (and
        the embedded Tansu ignores explicit assignments)."""
        return len(state.racks) > 1

    def _placed(self, plan: PlacementPlan) -> None:
        self.last_placement = plan
        if plan.missing and plan.topic is not None:
            self._intended_rf[plan.topic] = plan.replication_factor
            _logger.warning(
                "%s: created partitions %s under-replicated (%d of %d replicas, too few live brokers); "
                "heal(%r) adds the missing replicas once brokers return",
                plan.topic, sorted(plan.missing), plan.replication_factor - max(plan.missing.values()),
                plan.replication_factor, plan.topic,
            )

    def _limits(self, max_partitions: Optional[PartitionLimits], state: ClusterState) -> Optional[PartitionLimits]:
        """Per-broker limits without the brokers known to be offline (they get
        no replicas); unknown ids stay, so the planner reports typos."""
        if isinstance(max_partitions, Mapping):
            return {b: v for b, v in max_partitions.items() if b not in state.offline}
        return max_partitions

    def _replication_factor(self, requested: int, state: ClusterState) -> int:
        if requested != -1:
            return requested
        broker = state.controller if state.controller is not None and state.controller in state.racks else min(state.racks)
        try:
            value = _cluster.broker_config(self._admin, broker, timeout=self.timeout).get("default.replication.factor")
        except KafkaOrderedError:
            value = None
        if value is not None:
            return int(value)
        if len(state.racks) == 1:
            return 1
        raise PlacementError(
            f"broker {broker} does not report default.replication.factor: pass replication_factor explicitly"
        )

    def _min_insync(
        self,
        min_required: Optional[MinRequiredReplicationFactor],
        state: ClusterState,
        *,
        config: Optional[Mapping[str, str]] = None,
        topic: Optional[str] = None,
    ) -> Optional[int]:
        """``min.insync.replicas`` of the topic (its config, else the broker
        default), read only when ``min_required`` asks for it."""
        if min_required != MIN_INSYNC_REPLICAS:
            return None
        value = (config or {}).get("min.insync.replicas")
        try:
            if value is None and topic is not None:
                value = _cluster.topic_config(self._admin, topic, timeout=self.timeout).get("min.insync.replicas")
            if value is None:
                broker = (state.controller if state.controller is not None and state.controller in state.racks
                          else min(state.racks))
                value = _cluster.broker_config(self._admin, broker, timeout=self.timeout).get("min.insync.replicas")
        except KafkaOrderedError as e:
            raise PlacementError(
                f"cannot read min.insync.replicas ({e}); pass an int min_required_replication_factor"
            ) from e
        if value is None:
            raise PlacementError(
                "the cluster does not report min.insync.replicas; pass an int min_required_replication_factor "
                "(or set min.insync.replicas in the topic config)"
            )
        return int(value)

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
        cur = self.layout(topic)
        physical = max(cur.physical_partitions, partition_count(self._admin, topic, self.timeout))
        new = cur.expanded(partitions, physical)
        reused = set(range(cur.partitions, min(new.partitions, physical)))
        state: Optional[ClusterState] = None
        placement: Optional[PlacementPlan] = None
        remaining: Mapping[int, Optional[int]] = {}
        if new.physical_partitions > physical or read_cluster:
            state = self._cluster_state()
        if new.physical_partitions > physical:
            assert state is not None
            existing = _cluster.topic_assignment(self._admin, topic, timeout=self.timeout)
            rf = max([self._intended_rf.get(topic, 0)] + [len(r) for r in existing.values()])
            placement = plan_partitions(
                state.racks, new.physical_partitions - len(existing), rf, topic=topic, existing=existing,
                min_required_replication_factor=min_required,
                min_insync_replicas=self._min_insync(min_required, state, topic=topic),
                max_partitions=self._limits(max_partitions, state),
                current_replicas=state.live_replica_counts, ignore_racks=ignore_racks,
            )
            remaining = placement.remaining
        elif state is not None:
            remaining = remaining_capacity(state.racks, self._limits(max_partitions, state), state.live_replica_counts)
        return ExpansionPlan(
            topic=topic,
            current=cur,
            target=new,
            physical_partitions=physical,
            reused_draining=frozenset(reused & cur.draining),
            reused_spares=frozenset(reused - cur.draining),
            placement=placement,
            remaining_capacity=dict(remaining),
            explicit_assignment=placement is not None and state is not None and self._explicit(state),
        )

    # -- describing

    def committed(self, group: str, tps: Sequence[Tuple[str, int]]) -> Dict[Tuple[str, int], int]:
        """A group's committed offsets (``-1`` when none)."""
        req = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in tps])]
        try:
            res = self._admin.list_consumer_group_offsets(req, request_timeout=self.timeout)[group].result()
        except KafkaException as e:
            raise translate(e, f"reading committed offsets of group {group}", api="OffsetFetch") from e
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else -1) for tp in res.topic_partitions}

    def describe(self, topic: str, group: Optional[str] = None) -> TopicDescription:
        """The topic's layout, history, draining/spare partitions, lineage and
        registrations; with ``group``, every gate's state for that group."""
        cur = self.layout(topic)
        h = self.history
        physical = max(cur.physical_partitions, partition_count(self._admin, topic, self.timeout))
        regs = tuple(h.registrations(topic))
        gates: Tuple[GroupGateState, ...] = ()
        if group is not None:
            gates = self._group_gates(topic, group, regs)
        problems = tuple(h.problems)
        return TopicDescription(
            topic, cur, tuple(h.changes(topic)), physical, cur.draining,
            frozenset(range(cur.partitions, physical)) - cur.draining,
            {p: cur.parent(p) for p in range(physical)}, regs, problems, group, gates,
        )

    def _group_gates(self, topic: str, group: str, regs: Sequence[Registration]) -> Tuple[GroupGateState, ...]:
        all_gates: List[Tuple[Gate, int]] = [(g, r.timestamp_ms) for r in regs for g in r.gates]
        sources = sorted({(topic, q) for g, _ in all_gates for q in g.wait})
        if not sources:
            return ()
        committed = self.committed(group, sources)
        starts = self._offsets.start_offsets(sources)
        processed = {q: max(committed.get((topic, q), -1), starts.get((topic, q), 0)) for _, q in sources}
        now_ms = time.time() * 1000
        out = []
        for g, ts in all_gates:
            waiting = {q: (w, processed.get(q, -1)) for q, w in sorted(g.wait.items()) if processed.get(q, -1) < w}
            out.append(GroupGateState(g.partition, g.start, g.producer_id, g.epoch, not waiting, waiting,
                                      0.0 if not waiting else max(0.0, (now_ms - ts) / 1000.0)))
        return tuple(out)

    # -- physical partitions

    def _wait_partitions(self, topic: str, count: int) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                if partition_count(self._admin, topic, self.timeout) >= count:
                    return
            except UnknownTopicError:
                pass
            time.sleep(0.05)
        raise KafkaOrderedError(f"topic {topic} did not show {count} partitions in metadata within the timeout")

    @staticmethod
    def _no_create_partitions(topic: str, total: int, code: Optional[int]) -> UnsupportedBrokerApiError:
        return UnsupportedBrokerApiError(
            f"cannot expand {topic} to {total} physical partitions: the broker does not support "
            "the CreatePartitions API. Nothing was changed. Pre-provision spare partitions instead: "
            f"create the topic with physical_partitions >= {total} "
            "(`kafka-ordered create TOPIC --partitions N --physical M`); expansions up to that count "
            "need no broker support.",
            api="CreatePartitions",
            code=code,
        )

    def _create_partitions(self, topic: str, total: int) -> None:
        fs = self._admin.create_partitions([NewPartitions(topic, total)], request_timeout=self.timeout)
        try:
            fs[topic].result()
        except KafkaException as e:
            err = translate(e, f"adding partitions to {topic}", api="CreatePartitions")
            if isinstance(err, UnsupportedBrokerApiError):
                raise self._no_create_partitions(topic, total, err.code) from e
            raise err from e
        self._wait_partitions(topic, total)

    def _create_planned_partitions(self, topic: str, plan: PlacementPlan) -> None:
        try:
            _cluster.create_partitions(self._admin, topic, plan.assignment, timeout=self.timeout)
        except UnsupportedBrokerApiError as e:
            if e.api == "CreatePartitions":
                raise self._no_create_partitions(topic, plan.total_partitions, e.code) from e
            raise

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
        """Stop following the layout log and release every client."""
        self._follower.close()
        self._offsets.close()
        self._log.close()
        self._admin = None  # type: ignore[assignment]

    def __enter__(self) -> "LayoutAdmin":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()
