"""kafka-ordered: per-key ordered delivery across Kafka partition expansion
and shrinking, on unmodified brokers (KIP-253 from the client side).

Start with :class:`LayoutAdmin` (create/adopt/expand/shrink/retire/describe)
or :class:`Autoscaler` (the topic sizes itself under an :class:`AutoscalePolicy`),
:class:`OrderedProducer` and :class:`OrderedConsumer` (drop-in wrappers of
confluent-kafka's clients); kafka-python users import
``kafka_ordered.kafka_python``; Spark users ``spark_connector``. The embedded
broker, ordering oracle, simulation and demo used by tests live in
:mod:`kafka_ordered.testing` (not imported by this package).
"""

from .admin import (
    Autoscaler,
    ExpansionPlan,
    ExpansionResult,
    GroupGateState,
    HealResult,
    PartitionReplication,
    LayoutAdmin,
    RetireResult,
    TopicDescription,
)
from .autoscale import AutoscalePolicy, Decision
from .confluent import OrderedConsumer, OrderedProducer
from .errors import (
    AuthenticationError,
    BrokerUnavailableError,
    ConcurrentLayoutChangeError,
    ConfigError,
    CorruptLayoutRecordError,
    DataLossError,
    DeliveryError,
    GuardRailsError,
    HashDetectionError,
    InvalidKeyError,
    InvalidLayoutError,
    KafkaOrderedError,
    LayoutLogError,
    LayoutLogUnwritableError,
    LayoutTopicNotFoundError,
    NullTopicError,
    PartitionOverrideError,
    PlacementError,
    ProtocolVersionError,
    RegistrationError,
    SparkExtraMissingError,
    StaleLayoutViewError,
    SwitchTimeoutError,
    TopicAlreadyManagedError,
    TopicInUseError,
    TopicNotManagedError,
    UnknownTopicError,
    UnsafeLayoutLogError,
    UnstableOffsetCommitError,
    UnsupportedBrokerApiError,
    UnsupportedLayoutVersionError,
    WorkerEnvironmentError,
)
from ._hashing import speedups_enabled
from .gates import GateStatus
from .history import Gate, LayoutChange, LayoutHistory, Registration
from .layout import Layout, parent_partition, partition_for, partitions_for, sources, transition_sources
from .layout_log import LayoutFollower, LayoutLog
from .listener import PartitionKeyRebalanceListener
from .partitioner import LinearHashPartitioner
from .placement import HealPlan, PlacementPlan, assign_replicas, plan_heal, plan_partitions, rack_alternated_brokers

__version__ = "0.1.0"

__all__ = [
    # layouts and partitioning
    "Layout",
    "partition_for",
    "partitions_for",
    "parent_partition",
    "sources",
    "transition_sources",
    "LinearHashPartitioner",
    "speedups_enabled",
    # admin and the layout log
    "LayoutAdmin",
    "TopicDescription",
    "RetireResult",
    "GroupGateState",
    "ExpansionPlan",
    "ExpansionResult",
    "HealResult",
    "PartitionReplication",
    "Autoscaler",
    "AutoscalePolicy",
    "Decision",
    "LayoutLog",
    "LayoutFollower",
    "LayoutHistory",
    "LayoutChange",
    "Registration",
    "Gate",
    # clients
    "OrderedProducer",
    "OrderedConsumer",
    "PartitionKeyRebalanceListener",
    "GateStatus",
    # placement
    "rack_alternated_brokers",
    "assign_replicas",
    "plan_partitions",
    "plan_heal",
    "PlacementPlan",
    "HealPlan",
    # errors
    "KafkaOrderedError",
    "ConfigError",
    "InvalidLayoutError",
    "InvalidKeyError",
    "UnknownTopicError",
    "TopicNotManagedError",
    "TopicInUseError",
    "TopicAlreadyManagedError",
    "UnstableOffsetCommitError",
    "AuthenticationError",
    "BrokerUnavailableError",
    "UnsupportedBrokerApiError",
    "LayoutLogError",
    "LayoutLogUnwritableError",
    "UnsafeLayoutLogError",
    "CorruptLayoutRecordError",
    "UnsupportedLayoutVersionError",
    "ProtocolVersionError",
    "StaleLayoutViewError",
    "ConcurrentLayoutChangeError",
    "RegistrationError",
    "SwitchTimeoutError",
    "PartitionOverrideError",
    "PlacementError",
    "GuardRailsError",
    "HashDetectionError",
    # errors of the Spark connector (spark_connector re-exports them)
    "LayoutTopicNotFoundError",
    "DataLossError",
    "DeliveryError",
    "NullTopicError",
    "SparkExtraMissingError",
    "WorkerEnvironmentError",
]
