"""Drop-in linear-hashing partitioner for kafka-python, and the same mapping
for confluent-kafka's ``produce(partition=...)``.

This is the *stateless* half of the project: it maps keys with fixed counts
and does not register with the layout log. Use it to write to a topic whose
layout you manage yourself, or to adopt an existing topic without moving a
key. For ordering across layout changes use :class:`kafka_ordered.OrderedProducer`.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from .errors import InvalidLayoutError
from .layout import HashName, KeyLike, Layout, _check_counts, _check_hash, _check_int, _compile

try:  # kafka-python 3.x dispatches on this base class
    from kafka.partitioner.abc import Partitioner as _KafkaPythonPartitioner
except ImportError:  # kafka-python 2.x, or not installed
    _KafkaPythonPartitioner = object  # type: ignore[assignment,misc]

__all__ = ["LinearHashPartitioner"]


class LinearHashPartitioner(_KafkaPythonPartitioner):  # type: ignore[misc,valid-type]
    """Linear hashing on ``initial_partitions`` and ``partitions`` (the
    layout's undeleted count).

    Both counts are required (or use :meth:`from_layout`): with only the
    initial count a partitioner would have to follow the topic's physical
    partition count, which includes draining and spare partitions, and would
    put keys outside the layout. With ``partitions == initial_partitions``
    the mapping is Kafka's default partitioner.

    kafka-python 3.x::

        KafkaProducer(partitioner=LinearHashPartitioner.from_layout(admin.layout("orders")))

    kafka-python 2.x calls the instance as ``(key_bytes, all_partitions,
    available_partitions)``, which also works. confluent-kafka has no Python
    partitioner hook; compute the partition yourself::

        part = LinearHashPartitioner(4, partitions=6)
        producer.produce(topic, key=k, value=v, partition=part.partition_for(k))

    Unkeyed records go to a random available partition below the undeleted
    count, never raising. Keys must be bytes (``InvalidKeyError`` otherwise).
    Raises :class:`InvalidLayoutError` for bad or missing counts.
    """

    def __init__(self, initial_partitions: int, partitions: Optional[int] = None, hash: HashName = "murmur2") -> None:
        self.initial_partitions = _check_int("initial_partitions", initial_partitions, 1)
        if partitions is None:
            raise InvalidLayoutError(
                "LinearHashPartitioner needs the layout's undeleted partition count too: "
                f"LinearHashPartitioner({initial_partitions}, partitions=N) or "
                "LinearHashPartitioner.from_layout(layout). With only the initial count it would follow the "
                "topic's physical partitions, draining and spare ones included, and put keys outside the layout."
            )
        _check_counts(initial_partitions, partitions)
        self.partitions = partitions
        self.hash = _check_hash(hash)
        self._fns: Dict[int, Callable[[Any], int]] = {}

    @classmethod
    def from_layout(cls, layout: Layout) -> "LinearHashPartitioner":
        """The partitioner of ``layout`` (its initial and undeleted counts and hash)."""
        return cls(layout.initial_partitions, layout.partitions, layout.hash)

    def _fn(self, count: int) -> Callable[[Any], int]:
        fn = self._fns.get(count)
        if fn is None:
            n0, n = _check_counts(self.initial_partitions, count)
            fn = self._fns[count] = _compile(n0, n, self.hash)
        return fn

    def partition_for(self, key: KeyLike, partitions: Optional[int] = None) -> int:
        """The partition of a non-null ``key``; ``partitions`` overrides the
        configured undeleted count."""
        return self._fn(partitions if partitions is not None else self.partitions)(key)

    def _choose(self, key: Optional[bytes], all_partitions: Sequence[int], available: Sequence[int]) -> int:
        ordered = sorted(all_partitions)
        count = self.partitions
        if key is not None:
            if count > len(ordered):
                raise ValueError(
                    f"the layout has {count} partitions but the client only knows {len(ordered)}: "
                    "refresh metadata or create the partitions first"
                )
            return ordered[self._fn(count)(key)]
        # unkeyed: never raise, also while the client's metadata is stale
        count = min(count, len(ordered))
        usable = set(ordered[:count])
        pool = [p for p in available if p in usable] or ordered[:count]
        return random.choice(pool)

    def partition(
        self, topic: str, key: Any, serialized_key: Optional[bytes], value: Any, serialized_value: Any, cluster: Any
    ) -> int:
        """kafka-python 3.x entry point."""
        all_partitions = cluster.partitions_for_topic(topic)
        if not all_partitions:
            raise ValueError(f"topic {topic} not found in cluster metadata")
        available = list(cluster.available_partitions_for_topic(topic) or ())
        return self._choose(serialized_key, list(all_partitions), available)

    def __call__(self, key: Optional[bytes], all_partitions: Sequence[int], available: Sequence[int]) -> int:
        """kafka-python 2.x entry point."""
        return self._choose(key, all_partitions, available)

    def __repr__(self) -> str:
        return (
            f"LinearHashPartitioner(initial_partitions={self.initial_partitions}, "
            f"partitions={self.partitions}, hash={self.hash!r})"
        )

    def __reduce__(self) -> Tuple[Any, ...]:
        return (LinearHashPartitioner, (self.initial_partitions, self.partitions, self.hash))
