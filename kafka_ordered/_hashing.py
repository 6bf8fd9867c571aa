"""Key hashes, scalar and vectorised.

Every function returns the *positive* hash ``h`` that the partition formula
takes modulo a partition count:

- ``murmur2``: Kafka's Java ``Utils.toPositive(Utils.murmur2(key))`` (seed
  0x9747b28c), which librdkafka's ``murmur2``/``murmur2_random`` also use.
- ``murmur3``: ``mmh3.hash(key) & 0x7fffffff`` (x86 32-bit, seed 0).
- ``crc32``: the unsigned CRC-32 that librdkafka's default ``consistent`` and
  ``consistent_random`` partitioners take modulo the partition count.
"""

from __future__ import annotations

import zlib
from typing import Callable, Dict, Sequence

import mmh3
import murmurhash2 as _mm2
import numpy as np

_SEED = 0x9747B28C
_MASK = 0x7FFFFFFF
_CHUNK = 1 << 16

_m2 = _mm2.murmurhash2
_m3 = mmh3.hash
_crc = zlib.crc32


def murmur2(key: bytes) -> int:
    return _m2(key, _SEED) & _MASK


def murmur3(key: bytes) -> int:
    return _m3(key) & _MASK


def crc32(key: bytes) -> int:
    return _crc(key)


SCALAR: Dict[str, Callable[[bytes], int]] = {"murmur2": murmur2, "murmur3": murmur3, "crc32": crc32}


def _padded_words(keys: Sequence[bytes], lens: np.ndarray) -> np.ndarray:
    """The keys as little-endian uint32 words, one row per key, zero padded so
    that every row has at least one word past its last full block."""
    lo, hi = int(lens.min()), int(lens.max())
    width = (hi // 4 + 1) * 4
    n = len(keys)
    if lo == hi:
        mat = np.zeros((n, width), dtype=np.uint8)
        mat[:, :hi] = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(n, hi)
    else:
        buf = np.frombuffer(b"".join(keys) + b"\0" * width, dtype=np.uint8)
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        cols = np.arange(width, dtype=np.int64)
        mat = buf[starts[:, None] + cols[None, :]]
        mat[cols[None, :] >= lens[:, None]] = 0
    return mat.view("<u4")


def _murmur2_chunk(keys: Sequence[bytes]) -> np.ndarray:
    lens = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    words = _padded_words(keys, lens)
    m = np.uint32(0x5BD1E995)
    nblocks = lens // 4
    h = np.uint32(_SEED) ^ lens.astype(np.uint32)
    with np.errstate(over="ignore"):
        for i in range(int(nblocks.max())):
            k = words[:, i] * m
            k ^= k >> np.uint32(24)
            k *= m
            h = np.where(i < nblocks, (h * m) ^ k, h)
        rows = np.arange(len(keys))
        tail = words[rows, nblocks]
        has_tail = (lens % 4) != 0
        h = np.where(has_tail, (h ^ tail) * m, h)
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
    return (h & np.uint32(_MASK)).astype(np.int64)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _murmur3_chunk(keys: Sequence[bytes]) -> np.ndarray:
    lens = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    words = _padded_words(keys, lens)
    c1, c2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)
    nblocks = lens // 4
    h = np.zeros(len(keys), dtype=np.uint32)
    with np.errstate(over="ignore"):
        for i in range(int(nblocks.max())):
            k = words[:, i] * c1
            k = _rotl(k, 15) * c2
            hn = _rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
            h = np.where(i < nblocks, hn, h)
        tail = words[np.arange(len(keys)), nblocks]
        k = _rotl(tail * c1, 15) * c2
        h = np.where((lens % 4) != 0, h ^ k, h)
        h ^= lens.astype(np.uint32)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return (h & np.uint32(_MASK)).astype(np.int64)


def _crc32_chunk(keys: Sequence[bytes]) -> np.ndarray:
    return np.fromiter(map(_crc, keys), dtype=np.int64, count=len(keys))


_BATCH = {"murmur2": _murmur2_chunk, "murmur3": _murmur3_chunk, "crc32": _crc32_chunk}


def hash_batch(keys: Sequence[bytes], hash: str) -> np.ndarray:
    """Positive hashes of ``keys`` as an int64 array (same values as the scalar
    functions). Keys must already be validated as ``bytes``."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    fn = _BATCH[hash]
    if n <= _CHUNK:
        return fn(keys)
    out = np.empty(n, dtype=np.int64)
    for lo in range(0, n, _CHUNK):
        part = keys[lo : lo + _CHUNK]
        out[lo : lo + len(part)] = fn(part)
    return out
