"""Key hashes: golden vectors, agreement with reference implementations, and
batch == scalar on awkward inputs (empty keys, every length and alignment,
chunk boundaries)."""

from __future__ import annotations

import random
import zlib

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kafka_ordered import _hashing, partition_for, partitions_for
from kafka_ordered.layout import HASHES

MASK = 0x7FFFFFFF
FAST = settings(deadline=None, max_examples=60)

keys_st = st.binary(min_size=0, max_size=70)
key_lists_st = st.lists(keys_st, min_size=0, max_size=60)

# Java UtilsTest.testMurmur2 (signed results of Utils.murmur2)
JAVA_MURMUR2 = [(b"21", -973932308), (b"foobar", -790332482), (b"abc", 479470107)]


@pytest.mark.parametrize("key,signed", JAVA_MURMUR2)
def test_murmur2_java_golden_vectors(key: bytes, signed: int) -> None:
    assert _hashing.murmur2(key) == signed & MASK
    assert int(_hashing.hash_batch([key], "murmur2")[0]) == signed & MASK


@pytest.mark.parametrize("key,signed", JAVA_MURMUR2)
@pytest.mark.parametrize("n", [1, 3, 6, 7, 16, 100])
def test_murmur2_golden_vectors_give_kafka_partitions(key: bytes, signed: int, n: int) -> None:
    expected = (signed & MASK) % n
    assert partition_for(key, n, n) == expected
    assert partitions_for([key, key], n, n).tolist() == [expected, expected]


@FAST
@given(keys_st)
def test_murmur2_matches_kafka_python(key: bytes) -> None:
    assert _hashing.murmur2(key) == kafka_python_murmur2(key) & MASK


@FAST
@given(keys_st)
def test_murmur3_matches_mmh3(key: bytes) -> None:
    assert _hashing.murmur3(key) == mmh3.hash(key) & MASK


@FAST
@given(keys_st)
def test_crc32_matches_zlib(key: bytes) -> None:
    assert _hashing.crc32(key) == zlib.crc32(key)


@pytest.mark.parametrize("name", HASHES)
def test_scalar_hashes_are_nonnegative_31_bit(name: str) -> None:
    fn = _hashing.SCALAR[name]
    rnd = random.Random(7)
    values = [fn(rnd.randbytes(rnd.randrange(0, 40))) for _ in range(2000)]
    assert all(0 <= v <= (MASK if name != "crc32" else 0xFFFFFFFF) for v in values)
    # the high bit of crc32 is kept (librdkafka takes the unsigned value mod n)
    if name == "crc32":
        assert any(v > MASK for v in values)


@settings(deadline=None, max_examples=80)
@given(key_lists_st, st.sampled_from(HASHES))
def test_batch_equals_scalar(keys: list, name: str) -> None:
    got = _hashing.hash_batch(keys, name)
    assert got.dtype == np.int64
    assert got.shape == (len(keys),)
    assert got.tolist() == [_hashing.SCALAR[name](k) for k in keys]


@pytest.mark.parametrize("name", HASHES)
def test_batch_every_length_and_alignment(name: str) -> None:
    # every length 0..70 starting at every byte offset mod 4 of the joined buffer
    rnd = random.Random(11)
    keys = []
    for shift in range(4):
        keys.append(rnd.randbytes(shift))
        keys.extend(rnd.randbytes(n) for n in range(71))
        keys.extend(rnd.randbytes(n) for n in range(70, -1, -1))
    got = _hashing.hash_batch(keys, name).tolist()
    assert got == [_hashing.SCALAR[name](k) for k in keys]


@pytest.mark.parametrize("name", HASHES)
@pytest.mark.parametrize("length", [0, 1, 3, 4, 5, 8, 13])
def test_batch_uniform_lengths(name: str, length: int) -> None:
    rnd = random.Random(length)
    keys = [rnd.randbytes(length) for _ in range(300)]
    assert _hashing.hash_batch(keys, name).tolist() == [_hashing.SCALAR[name](k) for k in keys]


@pytest.mark.parametrize("name", HASHES)
def test_batch_high_bytes_and_zero_bytes(name: str) -> None:
    keys = [b"\xff" * n for n in range(12)] + [b"\x00" * n for n in range(12)] + [b"\x80\x00\xff"]
    assert _hashing.hash_batch(keys, name).tolist() == [_hashing.SCALAR[name](k) for k in keys]


def test_batch_empty_input() -> None:
    for name in HASHES:
        out = _hashing.hash_batch([], name)
        assert out.dtype == np.int64 and out.shape == (0,)


def test_batch_across_chunk_boundaries() -> None:
    rnd = random.Random(3)
    n = 2 * _hashing._CHUNK + 3
    assert n > 65536
    keys = []
    for i in range(n):
        r = i % 5
        if r == 0:
            keys.append(b"user-%d" % rnd.randrange(10**9))
        elif r == 1:
            keys.append(rnd.randbytes(rnd.randrange(0, 71)))
        elif r == 2:
            keys.append(b"")
        elif r == 3:
            keys.append(b"order-%08d" % i)
        else:
            keys.append(rnd.randbytes(rnd.randrange(0, 5)))
    for name in HASHES:
        got = _hashing.hash_batch(keys, name)
        assert got.shape == (n,)
        expected = np.fromiter((_hashing.SCALAR[name](k) for k in keys), dtype=np.int64, count=n)
        mismatch = np.flatnonzero(got != expected)
        assert mismatch.size == 0, (name, mismatch[:5], [keys[i] for i in mismatch[:5]])
    # the partition path goes through the same chunking
    parts = partitions_for(keys, 5, 13)
    assert parts.tolist() == [partition_for(k, 5, 13) for k in keys]


@pytest.mark.parametrize("name", HASHES)
def test_batch_long_keys(name: str) -> None:
    # lengths of 256 bytes and more take a different length-gathering path
    rnd = random.Random(13)
    lengths = [255, 256, 257, 300, 1000, 4099, 0, 3, 70]
    keys = [rnd.randbytes(n) for n in lengths] + [b"k-%d" % i for i in range(50)]
    assert _hashing.hash_batch(keys, name).tolist() == [_hashing.SCALAR[name](k) for k in keys]
    assert _hashing.hash_batch(keys[:1], name).tolist() == [_hashing.SCALAR[name](keys[0])]
