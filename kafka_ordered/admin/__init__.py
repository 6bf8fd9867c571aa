"""Admin API: put topics under management and change their layouts.

:class:`LayoutAdmin` is the entry point; the other names are the frozen
result types its methods return. Every layout change is one record appended
to the layout log; producers and consumers follow the log. Physical
partitions are only ever added (Kafka cannot delete partitions): a *shrink*
is a layout change that marks the removed partitions draining, and a later
expansion reuses them.

Inside: ``_admin`` (layout operations), ``_results`` (result types),
``_replicas`` (replica placement orchestration over the pure
:mod:`kafka_ordered.placement`), ``_cluster`` (raw ``AdminClient`` I/O),
``_autoscaler`` (:class:`Autoscaler`: the pure :mod:`kafka_ordered.autoscale`
policy applied through :class:`LayoutAdmin`).
Nothing here prints; the CLI renders results.
"""

from ._admin import LayoutAdmin
from ._autoscaler import Autoscaler, AutoscalerStatus, autoscaler_status, coordination_topic_for
from ._results import (
    AdoptResult,
    ClusterState,
    ElectionResult,
    ExpansionPlan,
    ExpansionResult,
    GateSourceState,
    GroupGateState,
    GroupMember,
    GroupMembership,
    GroupPartitionState,
    HealResult,
    PartitionReplication,
    ReassignmentResult,
    RetireResult,
    TopicDescription,
)

__all__ = [
    "LayoutAdmin",
    "AdoptResult",
    "TopicDescription",
    "PartitionReplication",
    "RetireResult",
    "GroupGateState",
    "GateSourceState",
    "GroupMember",
    "GroupMembership",
    "GroupPartitionState",
    "ExpansionPlan",
    "ExpansionResult",
    "HealResult",
    "ElectionResult",
    "ReassignmentResult",
    "ClusterState",
    "Autoscaler",
    "AutoscalerStatus",
    "autoscaler_status",
    "coordination_topic_for",
]
