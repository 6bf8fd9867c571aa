"""Result types of :class:`~kafka_ordered.admin.LayoutAdmin` and the cluster
adapter: frozen dataclasses with machine-readable ``to_dict()`` (JSON-ready,
string keys). Pure: no I/O, no printing; the CLI renders them as text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Dict, FrozenSet, List, Literal, Mapping, Optional, Tuple

from ..history import LayoutChange, LogProblem, Registration
from ..layout import Layout
from ..placement import HealPlan, PlacementPlan

__all__ = [
    "AdoptResult",
    "elections_dict",
    "ClusterState",
    "ElectionStatus",
    "ElectionResult",
    "ReassignmentResult",
    "GroupMember",
    "GroupMembership",
    "GroupPartitionState",
    "GateSourceState",
    "GateState",
    "CreatePartitionsCheck",
    "PartitionRole",
    "GroupGateState",
    "TopicDescription",
    "RetireResult",
    "ExpansionPlan",
    "ExpansionResult",
    "HealResult",
]

ElectionStatus = Literal["elected", "not_needed", "failed"]
#: ``open``; ``closed`` (no record at or past its start yet); ``holding``
#: (records at or past its start wait behind it).
GateState = Literal["open", "closed", "holding"]
#: Whether expanding needs CreatePartitions and what the broker said when
#: :meth:`LayoutAdmin.plan` asked it to validate the request.
CreatePartitionsCheck = Literal["not_needed", "supported", "unsupported", "refused", "not_checked"]
#: What a physical partition is in the current layout.
PartitionRole = Literal["undeleted", "draining", "spare"]


@dataclass(frozen=True)
class ClusterState:
    """What placement needs to know about a cluster.

    ``racks`` covers the live brokers; ``replica_counts`` maps every broker
    that hosts replicas (live or not, live ones always present) to how many;
    ``offline`` are brokers named in replica lists that are not live.
    """

    cluster_id: Optional[str]
    controller: Optional[int]
    racks: Mapping[int, Optional[str]]
    replica_counts: Mapping[int, int]
    offline: FrozenSet[int]

    @property
    def live_replica_counts(self) -> Dict[int, int]:
        """``replica_counts`` restricted to live brokers (the planner's ``current_replicas``)."""
        return {b: self.replica_counts.get(b, 0) for b in self.racks}


@dataclass(frozen=True)
class ReassignmentResult:
    """The broker's answer to moving one partition to ``replicas``.

    ``ok`` is True when the reassignment was accepted (it then runs in the
    background until the new replicas catch up); otherwise ``code``,
    ``error`` and ``message`` carry the broker's error.
    """

    topic: str
    partition: int
    replicas: Tuple[int, ...]
    ok: bool
    code: int = 0
    error: Optional[str] = None
    message: Optional[str] = None


@dataclass(frozen=True)
class ElectionResult:
    """The outcome of a preferred leader election for one partition.

    ``status`` is ``"elected"``, ``"not_needed"`` (the preferred replica
    already leads) or ``"failed"``; ``code``/``error``/``message`` carry the
    broker's error (e.g. 3 UNKNOWN_TOPIC_OR_PART, 80
    PREFERRED_LEADER_NOT_AVAILABLE) and are 0/None on success.
    """

    topic: str
    partition: int
    status: ElectionStatus
    code: int = 0
    error: Optional[str] = None
    message: Optional[str] = None

    @property
    def ok(self) -> bool:
        """True when the preferred replica leads now."""
        return self.status != "failed"

    def to_dict(self) -> Dict[str, Any]:
        """``status``, ``code``, ``error``, ``message`` (JSON-ready)."""
        return {"status": self.status, "code": self.code, "error": self.error, "message": self.message}


def elections_dict(elections: Mapping[int, ElectionResult]) -> Dict[str, Any]:
    """Partition (as a string) -> :meth:`ElectionResult.to_dict`, ascending."""
    return {str(p): r.to_dict() for p, r in sorted(elections.items())}


@dataclass(frozen=True)
class GroupMember:
    """A consumer group member as the broker's DescribeGroups reports it (the
    CONSUMER-ID, HOST and CLIENT-ID columns of ``kafka-consumer-groups
    --describe``); ``group_instance_id`` for static members."""

    member_id: str
    client_id: str
    host: str
    group_instance_id: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        """``member_id``, ``client_id``, ``host``, ``group_instance_id``."""
        return {"member_id": self.member_id, "client_id": self.client_id, "host": self.host,
                "group_instance_id": self.group_instance_id}


@dataclass(frozen=True)
class GroupMembership:
    """Who consumes a topic in a group, from DescribeGroups.

    ``state`` is the group state in lower case (``"stable"``, ``"empty"``,
    ``"preparing_rebalancing"``, ``"completing_rebalancing"``, ``"dead"``,
    ``"unknown"``), ``None`` when the group could not be described.
    ``members`` are the group's members with, in ``assignments``, the
    partitions of the described topic each owns; ``owners`` maps those
    partitions to their member. ``owners_known`` is False when the broker did
    not tell who owns what (the describe call failed, or the broker reports an
    active group without members, as the embedded Tansu does); ``note`` then
    says why. Consumers that ``assign()`` partitions without subscribing are
    not group members and own nothing here (as in ``kafka-consumer-groups``).
    """

    group: str
    state: Optional[str]
    members: Tuple[GroupMember, ...] = ()
    assignments: Mapping[str, Tuple[int, ...]] = field(default_factory=dict)
    owners_known: bool = True
    note: Optional[str] = None

    @property
    def owners(self) -> Dict[int, GroupMember]:
        """Partition of the described topic -> the member that owns it."""
        by_id = {m.member_id: m for m in self.members}
        return {p: by_id[mid] for mid, ps in self.assignments.items() if mid in by_id for p in ps}

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready description; each member carries its ``partitions``."""
        return {
            "state": self.state,
            "members": [{**m.to_dict(), "partitions": sorted(self.assignments.get(m.member_id, ()))}
                        for m in self.members],
            "owners_known": self.owners_known,
            "note": self.note,
        }


@dataclass(frozen=True)
class GroupPartitionState:
    """One physical partition of a topic as a consumer group sees it (the rows
    of ``kafka-consumer-groups --describe``): ``committed`` offset (``-1``:
    none), ``log_start``/``log_end`` offsets, ``lag`` = ``log_end -
    committed`` (``None`` without a commit, shown as ``-``), ``owner`` (the
    member that owns it, ``None`` when none does or it is unknown) and its
    ``role`` in the current layout."""

    partition: int
    role: PartitionRole
    committed: int
    log_start: int
    log_end: int
    lag: Optional[int]
    owner: Optional[GroupMember] = None

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready description."""
        return {"partition": self.partition, "role": self.role, "committed": self.committed,
                "log_start": self.log_start, "log_end": self.log_end, "lag": self.lag,
                "owner": self.owner.to_dict() if self.owner is not None else None}


@dataclass(frozen=True)
class GateSourceState:
    """One source a gate waits on, for a group: the ``wait`` offset, the
    group's ``committed`` offset (``-1``: none), ``processed`` (the larger of
    committed and log start: what the gate compares), ``lag`` = records still
    to process before this wait is met (``max(0, wait - processed)``), and the
    member that owns the source (``None``: none, or unknown).
    ``open_transaction``: when an open transaction holds the source's last
    stable offset below ``wait``, that offset (a ``read_committed`` group
    cannot process past it until the transaction ends: the gate waits for
    it); else ``None``."""

    partition: int
    wait: int
    committed: int
    processed: int
    lag: int
    owner: Optional[GroupMember] = None
    open_transaction: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready description (without ``partition``, the key it is listed under)."""
        return {"wait": self.wait, "committed": self.committed, "processed": self.processed, "lag": self.lag,
                "owner": self.owner.to_dict() if self.owner is not None else None,
                "open_transaction": self.open_transaction}


@dataclass(frozen=True)
class GroupGateState:
    """One gate as a consumer group sees it: open, or waiting on sources
    (``waiting_on``: source -> (wait offset, group's processed offset)) for
    ``waiting_s`` seconds since the registration was written.

    ``state``: ``"open"``, ``"closed"`` (no record at or past ``start``
    yet), ``"holding"`` (``held_records`` records at or past ``start`` wait
    behind it). ``held_since``: wall-clock Unix seconds since when the gate is
    closed (the registration's timestamp; ``None`` once open). ``sources``:
    every source with the group's committed offset, lag and owner.
    """

    partition: int
    start: int
    producer_id: str
    epoch: int
    open: bool
    waiting_on: Mapping[int, Tuple[int, int]]
    waiting_s: float
    state: GateState = "open"
    held_since: Optional[float] = None
    held_records: int = 0
    sources: Mapping[int, GateSourceState] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionReplication:
    """One physical partition's replicas as the brokers report them (Metadata):
    the replica list (preferred leader first), the in-sync replicas, and how
    many replicas it lacks against the topic's replication factor (after a
    degraded creation, until :meth:`LayoutAdmin.heal`)."""

    partition: int
    replicas: Tuple[int, ...]
    isr: Tuple[int, ...]
    missing: int = 0

    @property
    def degraded(self) -> bool:
        """Fewer replicas than the replication factor, or some not in sync."""
        return self.missing > 0 or len(self.isr) < len(self.replicas)

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready description."""
        return {"partition": self.partition, "replicas": list(self.replicas), "isr": list(self.isr),
                "missing": self.missing, "degraded": self.degraded}


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
    membership: Optional[GroupMembership] = None
    partitions: Tuple[GroupPartitionState, ...] = ()
    replication_factor: Optional[int] = None
    replication: Tuple[PartitionReplication, ...] = ()

    @property
    def degraded(self) -> FrozenSet[int]:
        """Physical partitions with missing or out-of-sync replicas (empty: fully replicated)."""
        return frozenset(r.partition for r in self.replication if r.degraded)

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready description (string keys). The same keys with or
        without a group: ``group`` and ``membership`` are ``None`` and
        ``partitions`` and ``gates`` empty when not described for a group."""
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
            "replication_factor": self.replication_factor,
            "replication": [r.to_dict() for r in self.replication],
            "degraded": sorted(self.degraded),
        }
        d["group"] = self.group
        d["membership"] = None
        d["partitions"] = []
        d["gates"] = []
        if self.group is not None:
            d["membership"] = self.membership.to_dict() if self.membership is not None else None
            d["partitions"] = [p.to_dict() for p in self.partitions]
            d["gates"] = [
                {"partition": g.partition, "start": g.start, "producer": g.producer_id, "epoch": g.epoch,
                 "open": g.open, "state": g.state, "held_since": g.held_since, "held_records": g.held_records,
                 "waiting_s": round(g.waiting_s, 3),
                 "waiting_on": {str(q): {"wait": w, "processed": pr} for q, (w, pr) in g.waiting_on.items()},
                 "sources": {str(q): s.to_dict() for q, s in sorted(g.sources.items())}}
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

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready description (string keys)."""
        return {
            "layout": self.layout.to_dict(),
            "retired": sorted(self.retired),
            "still_draining": {str(k): v for k, v in sorted(self.still_draining.items())},
            "deleted_records": {str(k): v for k, v in sorted(self.deleted_records.items())},
        }


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

    ``spares`` are the topic's spare physical partitions now (neither
    undeleted nor draining). ``create_partitions`` says whether new physical
    partitions are needed and, for a plan from :meth:`LayoutAdmin.plan`,
    what the broker answered when asked to validate the CreatePartitions
    request (``"supported"``, ``"unsupported"``: it lacks the API,
    ``"refused"``: it rejected the request); ``"not_checked"`` for the plan
    :meth:`LayoutAdmin.expand` applies. ``problem`` is why ``expand`` would
    fail (``None``: it would succeed, see :attr:`will_succeed`).
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
    spares: FrozenSet[int] = frozenset()
    create_partitions: CreatePartitionsCheck = "not_needed"
    problem: Optional[str] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "reused_draining", frozenset(self.reused_draining))
        object.__setattr__(self, "reused_spares", frozenset(self.reused_spares))
        object.__setattr__(self, "spares", frozenset(self.spares))
        object.__setattr__(self, "remaining_capacity", MappingProxyType(dict(sorted(self.remaining_capacity.items()))))

    @property
    def new_partitions(self) -> List[int]:
        """The physical partitions to create, ascending."""
        return self.placement.partitions if self.placement is not None else []

    @property
    def undeleted(self) -> List[int]:
        """The partitions that become undeleted (reused and new)."""
        return list(range(self.current.partitions, self.target.partitions))

    @property
    def will_succeed(self) -> bool:
        """Whether :meth:`LayoutAdmin.expand` with the same arguments would
        succeed now (``problem`` says why not)."""
        return self.problem is None

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
            "spares": sorted(self.spares),
            "create_partitions": self.create_partitions,
            "will_succeed": self.will_succeed,
            "problem": self.problem,
        }


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
        """A JSON-ready description (string keys)."""
        return {"layout": self.layout.to_dict(), "plan": self.plan.to_dict(), "elections": elections_dict(self.elections)}


@dataclass(frozen=True)
class HealResult:
    """Outcome of :meth:`LayoutAdmin.heal`: the plan, the broker's answer per
    reassigned partition, per reassigned partition whether its new replicas
    were in sync when heal returned (``in_sync``), and requested preferred
    leader elections."""

    plan: HealPlan
    reassignments: Mapping[int, ReassignmentResult] = field(default_factory=dict)
    elections: Mapping[int, ElectionResult] = field(default_factory=dict)
    in_sync: Mapping[int, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reassignments", MappingProxyType(dict(sorted(self.reassignments.items()))))
        object.__setattr__(self, "elections", MappingProxyType(dict(sorted(self.elections.items()))))
        object.__setattr__(self, "in_sync", MappingProxyType(dict(sorted(self.in_sync.items()))))

    @property
    def ok(self) -> bool:
        """False when a reassignment or a requested election failed, or a
        reassigned partition's new replicas did not join its ISR in time."""
        return (all(r.ok for r in self.reassignments.values()) and all(r.ok for r in self.elections.values())
                and all(self.in_sync.values()))

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready description (string keys)."""
        return {
            "plan": self.plan.to_dict(),
            "reassignments": {str(p): {"replicas": list(r.replicas), "ok": r.ok, "code": r.code, "error": r.error,
                                       "message": r.message} for p, r in sorted(self.reassignments.items())},
            "elections": elections_dict(self.elections),
            "in_sync": {str(p): ok for p, ok in sorted(self.in_sync.items())},
        }


@dataclass(frozen=True)
class AdoptResult:
    """What :meth:`LayoutAdmin.adopt_with_report` did: the layout written,
    the hash used, whether it was detected from the topic's records, and from
    how many keyed records."""

    layout: Layout
    hash: str
    detected: bool
    records: int

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready description (string keys): the layout, the hash, whether
        it was detected, and ``records_sampled``."""
        return {"layout": self.layout.to_dict(), "hash": self.hash, "detected": self.detected,
                "records_sampled": self.records}
