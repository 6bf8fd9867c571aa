"""LinearHashPartitioner: kafka-python 3.x and 2.x entry points against a
fake cluster-metadata object (pure logic), unkeyed records, pickling."""

from __future__ import annotations

import pickle
import random
from typing import Iterable, List, Optional, Set

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner import DefaultPartitioner, Partitioner

from kafka_ordered import InvalidKeyError, InvalidLayoutError, LinearHashPartitioner, partition_for

FAST = settings(deadline=None, max_examples=50)


class FakeCluster:
    """The three methods of kafka-python's ClusterMetadata a partitioner uses."""

    def __init__(self, partitions: Iterable[int], available: Optional[Iterable[int]] = None, topic: str = "t") -> None:
        self.topic = topic
        self.all: Set[int] = set(partitions)
        self.available = None if available is None else set(available)

    def topics(self) -> Set[str]:
        return {self.topic}

    def partitions_for_topic(self, topic: str) -> Optional[Set[int]]:
        return set(self.all) if topic == self.topic else None

    def available_partitions_for_topic(self, topic: str) -> Optional[Set[int]]:
        if topic != self.topic:
            return None
        return set(self.all if self.available is None else self.available)


def keys(seed: int, n: int = 300) -> List[bytes]:
    rnd = random.Random(seed)
    return [b""] + [b"user-%d" % rnd.randrange(10**6) if i % 2 else rnd.randbytes(rnd.randrange(1, 30)) for i in range(n)]


def test_is_a_kafka_python_partitioner() -> None:
    assert isinstance(LinearHashPartitioner(4, 4), Partitioner)


@FAST
@given(st.integers(1, 8), st.integers(0, 20), st.integers(0, 6), st.sampled_from(["murmur2", "murmur3", "crc32"]))
def test_kafka_python_3x_keyed(n0: int, extra: int, spare: int, name: str) -> None:
    n = n0 + extra
    part = LinearHashPartitioner(n0, partitions=n, hash=name)
    cluster = FakeCluster(range(n + spare))
    for key in keys(n0 * 100 + extra, 60):
        p = part.partition("t", key.decode("latin-1"), key, "v", b"v", cluster)
        assert p == partition_for(key, n0, n, name)
        assert p == part.partition_for(key)
        assert 0 <= p < n


def test_initial_count_alone_is_refused() -> None:
    """Following the topic's physical count would put keys on draining and
    spare partitions (issue 10, item 7)."""
    with pytest.raises(InvalidLayoutError, match="undeleted partition count") as info:
        LinearHashPartitioner(4)
    assert "from_layout" in str(info.value)


def test_equal_counts_are_kafkas_default_partitioner() -> None:
    part = LinearHashPartitioner(4, 4)
    small = FakeCluster(range(4))
    spares = FakeCluster(range(7))
    default = DefaultPartitioner()
    for key in keys(1):
        assert part.partition("t", None, key, None, None, small) == default.partition("t", None, key, None, None, small)
        assert part.partition("t", None, key, None, None, spares) == partition_for(key, 4, 4)
        assert part.partition_for(key, partitions=7) == partition_for(key, 4, 7)


def test_from_layout() -> None:
    from kafka_ordered.layout import Layout

    lay = Layout("t", 3, 4, 6, 8, hash="murmur3")
    part = LinearHashPartitioner.from_layout(lay)
    assert (part.initial_partitions, part.partitions, part.hash) == (4, 6, "murmur3")
    for key in keys(5):
        assert part.partition("t", None, key, None, None, FakeCluster(range(8))) == lay.partition_for(key)


def test_kafka_python_2x_callable() -> None:
    part = LinearHashPartitioner(3, partitions=5)
    all_partitions = [7, 0, 1, 2, 3, 4, 5, 6]  # unordered, with spares
    for key in keys(2):
        assert part(key, all_partitions, all_partitions) == partition_for(key, 3, 5)


def test_keyed_records_ignore_availability() -> None:
    # a keyed record keeps its partition even when that leader is unknown
    part = LinearHashPartitioner(2, partitions=4)
    cluster = FakeCluster(range(6), available=[0])
    for key in keys(4):
        assert part.partition("t", None, key, None, None, cluster) == partition_for(key, 2, 4)


def test_unkeyed_go_to_available_undeleted_partitions() -> None:
    random.seed(5)
    part = LinearHashPartitioner(2, partitions=4)
    cluster = FakeCluster(range(8), available=[1, 3, 5, 6])
    seen = {part.partition("t", None, None, "v", b"v", cluster) for _ in range(300)}
    assert seen == {1, 3}
    seen2 = {part(None, list(range(8)), [0, 2, 7]) for _ in range(300)}
    assert seen2 == {0, 2}


def test_unkeyed_fall_back_when_no_undeleted_partition_is_available() -> None:
    random.seed(6)
    part = LinearHashPartitioner(2, partitions=3)
    for available in ([], [4, 5], None):
        cluster = FakeCluster(range(6), available=available)
        if available is None:
            cluster.available_partitions_for_topic = lambda topic: None  # type: ignore[method-assign]
        seen = {part.partition("t", None, None, None, None, cluster) for _ in range(200)}
        assert seen == {0, 1, 2}


def test_unkeyed_never_raise_with_stale_metadata() -> None:
    # the layout says 6 partitions but the client still knows only 4
    random.seed(7)
    part = LinearHashPartitioner(4, partitions=6)
    cluster = FakeCluster(range(4))
    seen = {part.partition("t", None, None, None, None, cluster) for _ in range(200)}
    assert seen == {0, 1, 2, 3}
    # a keyed record cannot be placed without its partition: that is an error
    with pytest.raises(ValueError, match="the layout has 6 partitions but the client only knows 4"):
        part.partition("t", None, b"k", None, None, cluster)


def test_unknown_topic() -> None:
    part = LinearHashPartitioner(2, 2)
    with pytest.raises(ValueError, match="topic nope not found"):
        part.partition("nope", None, b"k", None, None, FakeCluster(range(2)))


def test_non_bytes_keys_raise_type_error() -> None:
    part = LinearHashPartitioner(2, partitions=3)
    with pytest.raises(InvalidKeyError, match="got str"):
        part.partition_for("key")  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError, match="got int"):
        part.partition("t", 5, 5, None, None, FakeCluster(range(3)))
    with pytest.raises(TypeError):
        part(1.5, [0, 1, 2], [0, 1, 2])


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        ((0, 1), {}, "initial_partitions must be >= 1"),
        ((True, 1), {}, "initial_partitions must be an int, got bool"),
        ((2.0, 2), {}, "initial_partitions must be an int, got float"),
        ((4,), {}, "undeleted partition count"),
        ((4,), {"partitions": 3}, r"partitions \(3\) must be >= initial_partitions \(4\)"),
        ((4,), {"partitions": 5.0}, "partitions must be an int, got float"),
        ((4, 4), {"hash": "fnv"}, "unknown hash 'fnv'"),
    ],
)
def test_constructor_validation(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidLayoutError, match=match) as info:
        LinearHashPartitioner(*args, **kwargs)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("partitions", [4, 7])
def test_picklable(partitions: int) -> None:
    part = LinearHashPartitioner(4, partitions=partitions, hash="murmur3")
    part.partition_for(b"warm", partitions=7)  # populate the compiled cache
    clone = pickle.loads(pickle.dumps(part))
    assert isinstance(clone, LinearHashPartitioner)
    assert (clone.initial_partitions, clone.partitions, clone.hash) == (4, partitions, "murmur3")
    cluster = FakeCluster(range(9))
    for key in keys(8, 100):
        assert clone.partition("t", None, key, None, None, cluster) == part.partition("t", None, key, None, None, cluster)
    assert repr(clone) == repr(part) == f"LinearHashPartitioner(initial_partitions=4, partitions={partitions}, hash='murmur3')"
