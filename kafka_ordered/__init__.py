"""kafka-ordered: per-key ordered delivery across Kafka partition expansion and shrinking."""

from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .layout import Layout, parent_partition, partition_for, partitions_for, sources, transition_sources
from .partitioner import LinearHashPartitioner

__version__ = "0.1.0"

__all__ = [
    "Layout",
    "partition_for",
    "partitions_for",
    "parent_partition",
    "sources",
    "transition_sources",
    "LinearHashPartitioner",
    *_errors_all,
]
