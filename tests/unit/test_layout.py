"""Layout math: linear hashing properties, exact transition sources, layout
transitions and input validation.

The expected values come from independent reference code written here from
the design's formula (not from the module's helpers)."""

from __future__ import annotations

import random
from typing import Dict, FrozenSet, List, Set

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kafka_ordered import (
    InvalidKeyError,
    InvalidLayoutError,
    KafkaOrderedError,
    Layout,
    parent_partition,
    partition_for,
    partitions_for,
    sources,
    transition_sources,
)
from kafka_ordered import _hashing

MASK = 0x7FFFFFFF
FAST = settings(deadline=None, max_examples=50)

keys_st = st.binary(min_size=0, max_size=40)
hash_st = st.sampled_from(["murmur2", "murmur3", "crc32"])


@st.composite
def counts(draw: st.DrawFn, max_initial: int = 7, max_extra: int = 40) -> tuple:
    n0 = draw(st.integers(1, max_initial))
    n = draw(st.integers(n0, n0 + max_extra))
    return n0, n


def ref_bucket(h: int, n0: int, n: int) -> int:
    """The design's formula, spelt out."""
    level = 0
    while n0 * 2 ** (level + 1) <= n:
        level += 1
    split = n - n0 * 2**level
    b = h % (n0 * 2**level)
    if b < split:
        b = h % (n0 * 2 ** (level + 1))
    return b


def ref_hash(key: bytes, name: str) -> int:
    if name == "murmur2":
        return kafka_python_murmur2(key) & MASK
    return _hashing.SCALAR[name](key)


def sample_keys(seed: int, count: int = 400) -> List[bytes]:
    rnd = random.Random(seed)
    out = [b""]
    for i in range(count):
        if i % 3 == 0:
            out.append(b"user-%d" % rnd.randrange(10**6))
        else:
            out.append(rnd.randbytes(rnd.randrange(0, 24)))
    return out


# -- the mapping ------------------------------------------------------------


@FAST
@given(keys_st, counts(), hash_st)
def test_partition_in_range_and_matches_formula(key: bytes, nn: tuple, name: str) -> None:
    n0, n = nn
    p = partition_for(key, n0, n, name)
    assert 0 <= p < n
    assert p == ref_bucket(ref_hash(key, name), n0, n)
    layout = Layout("t", 0, n0, n, n, name)
    assert layout.partition_for(key) == p
    assert layout.partition_for(bytearray(key)) == p
    assert layout.partition_for(memoryview(key)) == p


@FAST
@given(st.lists(keys_st, max_size=50), counts(), hash_st)
def test_batch_equals_scalar(keys: List[bytes], nn: tuple, name: str) -> None:
    n0, n = nn
    got = partitions_for(keys, n0, n, name)
    assert got.dtype == np.int64
    assert got.tolist() == [partition_for(k, n0, n, name) for k in keys]
    assert Layout("t", 3, n0, n, n + 2, name).partitions_for(keys).tolist() == got.tolist()
    # non-bytes buffers are accepted by the batch path too
    assert partitions_for([bytearray(k) for k in keys], n0, n, name).tolist() == got.tolist()


@FAST
@given(keys_st, st.integers(1, 200))
def test_initial_layout_is_kafka_default_partitioner(key: bytes, n: int) -> None:
    expected = (kafka_python_murmur2(key) & MASK) % n
    assert partition_for(key, n, n) == expected
    assert Layout("t", 0, n, n, n).partition_for(key) == expected


def test_initial_layout_is_kafka_default_partitioner_many_keys() -> None:
    keys = sample_keys(1, 3000)
    for n in (1, 2, 3, 6, 12, 50):
        expected = [(kafka_python_murmur2(k) & MASK) % n for k in keys]
        assert partitions_for(keys, n, n).tolist() == expected


def test_crc32_initial_layout_is_librdkafka_consistent() -> None:
    import zlib

    keys = sample_keys(2, 1000)
    for n in (1, 5, 12):
        assert partitions_for(keys, n, n, "crc32").tolist() == [zlib.crc32(k) % n for k in keys]


# -- minimal movement ---------------------------------------------------------


@FAST
@given(counts(max_extra=30), hash_st, st.integers(0, 10**6))
def test_grow_by_one_moves_only_parent_into_new(nn: tuple, name: str, seed: int) -> None:
    n0, n = nn
    parent = parent_partition(n, n0)
    assert parent is not None and 0 <= parent < n
    # exact, over every residue class of the hash
    modulus = n0 * 2 ** ((n + 1) // n0).bit_length()
    moved_any = False
    for h in range(modulus):
        old, new = ref_bucket(h, n0, n), ref_bucket(h, n0, n + 1)
        if old != new:
            moved_any = True
            assert (old, new) == (parent, n)
    assert moved_any
    # and on real keys through the public API
    keys = sample_keys(seed, 200)
    before = partitions_for(keys, n0, n, name)
    after = partitions_for(keys, n0, n + 1, name)
    moved = before != after
    assert set(before[moved].tolist()) <= {parent}
    assert set(after[moved].tolist()) <= {n}
    # keys that land on the new partition all came from the parent
    assert set(before[after == n].tolist()) <= {parent}


@FAST
@given(counts(max_extra=30), hash_st, st.integers(0, 10**6))
def test_shrink_by_one_moves_only_removed_into_parent(nn: tuple, name: str, seed: int) -> None:
    n0, n = nn
    assume(n > n0)
    removed = n - 1
    parent = parent_partition(removed, n0)
    keys = sample_keys(seed, 200)
    before = partitions_for(keys, n0, n, name)
    after = partitions_for(keys, n0, n - 1, name)
    moved = before != after
    assert set(before[moved].tolist()) <= {removed}
    assert set(after[moved].tolist()) <= {parent}
    # every key of the removed partition moves
    assert (after[before == removed] == parent).all()


@FAST
@given(counts(max_extra=30), st.integers(1, 12), hash_st, st.integers(0, 10**6))
def test_shrink_then_grow_restores_every_key(nn: tuple, k: int, name: str, seed: int) -> None:
    n0, n = nn
    low = max(n0, n - k)
    keys = sample_keys(seed, 200)
    original = partitions_for(keys, n0, n, name)
    mid = partitions_for(keys, n0, low, name)
    assert (mid < low).all()
    assert partitions_for(keys, n0, n, name).tolist() == original.tolist()
    # one partition at a time, through the Layout transitions
    layout = Layout("t", 0, n0, n, n, name)
    while layout.partitions > low:
        layout = layout.shrunk(layout.partitions - 1)
    assert layout.partitions_for(keys).tolist() == mid.tolist()
    while layout.partitions < n:
        layout = layout.expanded(layout.partitions + 1)
    assert layout.physical_partitions == n and not layout.draining
    assert layout.partitions_for(keys).tolist() == original.tolist()
    assert [layout.partition_for(key) for key in keys] == original.tolist()


def test_parent_partition() -> None:
    assert [parent_partition(p, 4) for p in range(4)] == [None] * 4
    assert [parent_partition(p, 4) for p in range(4, 16)] == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7]
    assert [parent_partition(p, 3) for p in range(3, 12)] == [0, 1, 2, 0, 1, 2, 3, 4, 5]
    assert [parent_partition(p, 1) for p in range(1, 8)] == [0, 0, 1, 0, 1, 2, 3]
    layout = Layout("t", 0, 4, 9, 9)
    assert layout.parent(8) == 0 and layout.parent(3) is None


@FAST
@given(counts(max_extra=60))
def test_parent_is_where_new_partition_keys_lived(nn: tuple) -> None:
    n0, n = nn
    assume(n > n0)
    p = n - 1
    modulus = n0 * 2 ** (n // n0).bit_length()
    lived = {ref_bucket(h, n0, p) for h in range(modulus) if ref_bucket(h, n0, n) == p}
    assert lived == {parent_partition(p, n0)}


# -- sources -----------------------------------------------------------------


def brute_sources(before: List[Layout], after: Layout) -> Dict[int, FrozenSet[int]]:
    n0 = after.initial_partitions
    top = max(lay.partitions for lay in [after, *before])
    modulus = n0 * 2 ** ((top // n0).bit_length() + 1)
    out: Dict[int, Set[int]] = {}
    for h in range(modulus):
        p = ref_bucket(h, n0, after.partitions)
        for lay in before:
            q = ref_bucket(h, n0, lay.partitions)
            if q != p:
                out.setdefault(p, set()).add(q)
    return {p: frozenset(qs) for p, qs in out.items()}


@st.composite
def histories(draw: st.DrawFn) -> List[Layout]:
    n0 = draw(st.integers(1, 6))
    name = draw(hash_st)
    first = draw(st.integers(n0, n0 + 12))
    layout = Layout("orders", 0, n0, first, first, name)
    out = [layout]
    for _ in range(draw(st.integers(1, 7))):
        grow = layout.partitions == n0 or draw(st.booleans())
        if grow:
            layout = layout.expanded(layout.partitions + draw(st.integers(1, 9)))
        else:
            layout = layout.shrunk(draw(st.integers(n0, layout.partitions - 1)))
        out.append(layout)
    return out


@settings(deadline=None, max_examples=80)
@given(histories(), st.data())
def test_transition_sources_exact_over_histories(history: List[Layout], data: st.DataObject) -> None:
    b = data.draw(st.integers(1, len(history) - 1))
    a = data.draw(st.integers(0, b - 1))
    before, after = history[a:b], history[b]
    got = transition_sources(before, after)
    assert got == brute_sources(before, after)
    for p, qs in got.items():
        assert 0 <= p < after.partitions
        assert qs and p not in qs
    for p in range(after.physical_partitions + 2):
        assert sources(p, before, after) == got.get(p, frozenset())
    # the one-layout form is the same as a one-element list
    assert transition_sources(history[b - 1], after) == transition_sources([history[b - 1]], after)
    # every move of a real key is covered
    keys = sample_keys(b * 31 + a, 300)
    new = after.partitions_for(keys)
    for lay in before:
        old = lay.partitions_for(keys)
        for o, n in zip(old.tolist(), new.tolist()):
            if o != n:
                assert o in got[n]


def test_sources_examples() -> None:
    a = Layout("t", 0, 4, 4, 4)
    b = a.expanded(5)
    assert transition_sources(a, b) == {4: frozenset({0})}
    assert sources(4, a, b) == {0}
    assert sources(0, a, b) == frozenset()  # partition 0 only loses keys
    c = b.shrunk(4)
    assert transition_sources(b, c) == {0: frozenset({4})}
    # non-consecutive: 4 -> 6 through 5 gives each new partition its parent
    d = a.expanded(6)
    assert transition_sources([a, b], b.expanded(6)) == {4: frozenset({0}), 5: frozenset({1})}
    assert transition_sources(a, d) == {4: frozenset({0}), 5: frozenset({1})}
    # no change in counts: nothing moves
    assert transition_sources(b, b.retired([])) == {}
    assert transition_sources([c, b], b.retired([])) == {4: frozenset({0})}
    assert transition_sources([], b) == {}


def test_transition_sources_rejects_mismatched_layouts() -> None:
    a = Layout("t", 0, 4, 4, 4)
    with pytest.raises(InvalidLayoutError, match="initial_partitions and hash"):
        transition_sources(a, Layout("t", 1, 3, 5, 5))
    with pytest.raises(InvalidLayoutError, match="initial_partitions and hash"):
        transition_sources(a, Layout("t", 1, 4, 5, 5, "murmur3"))


# -- Layout values and transitions -----------------------------------------------


def test_layout_expand_shrink_retire_cycle() -> None:
    a = Layout("orders", 0, 4, 4, 4)
    assert a.spares == frozenset() and a.draining == frozenset()
    b = a.expanded(6)
    assert (b.epoch, b.partitions, b.physical_partitions) == (1, 6, 6)
    assert b.initial_partitions == 4 and b.hash == a.hash
    c = b.shrunk(4)
    assert (c.epoch, c.partitions, c.physical_partitions) == (2, 4, 6)
    assert c.draining == {4, 5} and c.spares == frozenset()
    d = c.retired([5])
    assert d.epoch == 3 and d.draining == {4} and d.spares == {5}
    # an expansion reuses draining and spare partitions before growing
    e = d.expanded(6)
    assert (e.epoch, e.partitions, e.physical_partitions) == (4, 6, 6)
    assert e.draining == frozenset() and e.spares == frozenset()
    f = e.expanded(9, physical_partitions=12)
    assert (f.partitions, f.physical_partitions) == (9, 12) and f.spares == {9, 10, 11}
    g = f.shrunk(7)
    assert g.draining == {7, 8} and g.spares == {9, 10, 11}
    h = g.expanded(8)
    assert h.draining == {8} and h.physical_partitions == 12
    # the original values are untouched (frozen)
    assert a.partitions == 4 and a.epoch == 0


def test_layout_round_trips_through_dict() -> None:
    lay = Layout("orders", 5, 3, 7, 10, "murmur3", draining=frozenset({8}))
    d = lay.to_dict()
    assert d["draining"] == [8] and d["hash"] == "murmur3"
    back = Layout.from_dict(d)
    assert back == lay
    assert back.partition_for(b"k") == lay.partition_for(b"k")


def test_layout_from_dict_errors() -> None:
    d = Layout("orders", 0, 3, 3, 3).to_dict()
    del d["partitions"]
    with pytest.raises(InvalidLayoutError, match="missing field 'partitions'"):
        Layout.from_dict(d)
    bad = {**Layout("orders", 0, 3, 3, 3).to_dict(), "draining": 5}
    with pytest.raises(InvalidLayoutError, match="wrong type"):
        Layout.from_dict(bad)
    with pytest.raises(InvalidLayoutError, match="partitions must be an int"):
        Layout.from_dict({**Layout("orders", 0, 3, 3, 3).to_dict(), "partitions": "3"})


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda a: a.expanded(4), "already has 4"),
        (lambda a: a.expanded(2), "already has 4"),
        (lambda a: a.expanded(6).shrunk(2), "initial partition count is 3"),
        (lambda a: a.shrunk(4), "use expand"),
        (lambda a: a.shrunk(5), "use expand"),
        (lambda a: a.expanded(6).shrunk(4).retired([3]), r"\[3\].*not draining"),
        (lambda a: a.retired([7]), r"\[7\].*not draining"),
        (lambda a: a.expanded(True), "must be an int"),
        (lambda a: a.expanded(5.0), "must be an int"),
        (lambda a: a.shrunk(0), "must be >= 1"),
    ],
)
def test_layout_transition_validation(make, match: str) -> None:
    a = Layout("orders", 0, 3, 4, 4)
    with pytest.raises(InvalidLayoutError, match=match):
        make(a)


# -- bad input -----------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(initial_partitions=4, partitions=3), r"partitions \(3\) must be >= initial_partitions \(4\)"),
        (dict(initial_partitions=0, partitions=3), "initial_partitions must be >= 1, got 0"),
        (dict(initial_partitions=-2, partitions=3), "initial_partitions must be >= 1, got -2"),
        (dict(initial_partitions=2, partitions=0), "partitions must be >= 1, got 0"),
        (dict(initial_partitions=True, partitions=3), "initial_partitions must be an int, got bool"),
        (dict(initial_partitions=2, partitions=3.0), "partitions must be an int, got float"),
        (dict(initial_partitions=2, partitions="3"), "partitions must be an int, got str"),
        (dict(initial_partitions=2, partitions=3, hash="md5"), "unknown hash 'md5'"),
        (dict(initial_partitions=2, partitions=3, hash="MURMUR2"), "unknown hash"),
    ],
)
def test_bad_counts_and_hash(kwargs: dict, match: str) -> None:
    for call in (
        lambda: partition_for(b"k", **kwargs),
        lambda: partitions_for([b"k"], **kwargs),
    ):
        with pytest.raises(InvalidLayoutError, match=match) as info:
            call()
        assert isinstance(info.value, ValueError) and isinstance(info.value, KafkaOrderedError)


def test_numpy_integer_counts_are_accepted() -> None:
    assert partition_for(b"abc", np.int64(3), np.int32(5)) == partition_for(b"abc", 3, 5)


@pytest.mark.parametrize("key,match", [("abc", "got str: encode it"), (5, "got int"), (None, "got NoneType"), (1.5, "got float")])
def test_non_bytes_keys(key: object, match: str) -> None:
    layout = Layout("t", 0, 2, 3, 3)
    calls = [
        lambda: partition_for(key, 2, 3),
        lambda: partitions_for([b"ok", key], 2, 3),
        lambda: layout.partition_for(key),
        lambda: layout.partitions_for([key]),
    ]
    for call in calls:
        with pytest.raises(InvalidKeyError, match=match) as info:
            call()
        assert isinstance(info.value, TypeError)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(topic="", epoch=0, initial_partitions=2, partitions=2, physical_partitions=2), "topic must be a non-empty string"),
        (dict(topic=None, epoch=0, initial_partitions=2, partitions=2, physical_partitions=2), "topic must be a non-empty string"),
        (dict(topic="t", epoch=-1, initial_partitions=2, partitions=2, physical_partitions=2), "epoch must be >= 0"),
        (dict(topic="t", epoch=0, initial_partitions=3, partitions=2, physical_partitions=3), r"partitions \(2\) must be >= initial_partitions \(3\)"),
        (dict(topic="t", epoch=0, initial_partitions=2, partitions=4, physical_partitions=3), r"physical_partitions \(3\) must be >= partitions \(4\)"),
        (dict(topic="t", epoch=0, initial_partitions=2, partitions=2, physical_partitions=2, hash="sha1"), "unknown hash 'sha1'"),
        (dict(topic="t", epoch=0, initial_partitions=2, partitions=2, physical_partitions=2, strategy="range"), "unknown strategy 'range'"),
        (dict(topic="t", epoch=0, initial_partitions=2, partitions=3, physical_partitions=5, draining=frozenset({2})), r"draining partitions \[2\] are outside the removed range \[3, 5\)"),
        (dict(topic="t", epoch=0, initial_partitions=2, partitions=3, physical_partitions=5, draining=frozenset({5, 4})), r"draining partitions \[5\]"),
        (dict(topic="t", epoch=False, initial_partitions=2, partitions=2, physical_partitions=2), "epoch must be an int, got bool"),
        (dict(topic="t", epoch=0, initial_partitions=2, partitions=2, physical_partitions=2.5), "physical_partitions must be an int, got float"),
    ],
)
def test_bad_layouts(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidLayoutError, match=match) as info:
        Layout(**kwargs)
    assert isinstance(info.value, ValueError)


def test_parent_partition_validation() -> None:
    with pytest.raises(InvalidLayoutError, match="partition must be >= 0"):
        parent_partition(-1, 4)
    with pytest.raises(InvalidLayoutError, match="initial_partitions must be >= 1"):
        parent_partition(3, 0)
    with pytest.raises(InvalidLayoutError, match="partition must be an int, got bool"):
        sources(True, Layout("t", 0, 2, 2, 2), Layout("t", 1, 2, 3, 3))
