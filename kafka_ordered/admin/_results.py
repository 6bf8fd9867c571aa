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
    "GroupGateState",
    "TopicDescription",
    "RetireResult",
    "ExpansionPlan",
    "ExpansionResult",
    "HealResult",
]

ElectionStatus = Literal["elected", "not_needed", "failed"]


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
        """A JSON-ready description (string keys); ``group`` and ``gates``
        only when described for a group."""
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
        """False when a reassignment or a requested election failed."""
        return all(r.ok for r in self.reassignments.values()) and all(r.ok for r in self.elections.values())

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready description (string keys)."""
        return {
            "plan": self.plan.to_dict(),
            "reassignments": {str(p): {"replicas": list(r.replicas), "ok": r.ok, "code": r.code, "error": r.error,
                                       "message": r.message} for p, r in sorted(self.reassignments.items())},
            "elections": elections_dict(self.elections),
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
