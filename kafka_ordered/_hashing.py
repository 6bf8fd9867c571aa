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


def _word_table(keys: Sequence[bytes], total: int) -> "tuple[np.ndarray, int]":
    """The keys' concatenation (zero padded) as little-endian uint32 words at
    every byte offset: row ``a`` of the table holds the words starting at
    offsets ``a, a + 4, a + 8, ...``, so the word at offset ``j`` is entry
    ``(j & 3) * stride + (j >> 2)`` of the flattened table. Returns (table, stride)."""
    buf = b"".join(keys) + b"\0" * 8
    stride = total // 4 + 1
    table = np.empty((4, stride), dtype=np.uint32)
    for a in range(4):
        table[a] = np.frombuffer(buf, dtype="<u4", offset=a, count=stride)
    return table.ravel(), stride


def _lengths(keys: Sequence[bytes]) -> np.ndarray:
    try:  # one byte per length is the fastest C path; keys are usually short
        return np.frombuffer(bytes(map(len, keys)), dtype=np.uint8).astype(np.int64)
    except ValueError:  # a key of 256 bytes or more
        return np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))


def _murmur2_chunk(keys: Sequence[bytes]) -> np.ndarray:
    # Keys are processed in order of their block count, so that block ``i``
    # touches a contiguous suffix of still-active keys (no masking); each
    # 4-byte block is gathered straight from the joined key bytes.
    n = len(keys)
    lens = _lengths(keys)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    table, stride = _word_table(keys, int(starts[-1] + lens[-1]))
    nblocks = lens >> 2
    top = int(nblocks.max())
    # small unsigned ints get numpy's radix sort
    order = np.argsort(nblocks.astype(np.uint16) if top < 1 << 16 else nblocks, kind="stable")
    nb = nblocks[order]
    slens = lens[order]
    s = starts[order]
    pos = (s & 3) * stride + (s >> 2)
    m = np.uint32(0x5BD1E995)
    h = slens.astype(np.uint32) ^ np.uint32(_SEED)
    # block i applies to the suffix of keys with more than i blocks; pos
    # advances one word per block, and ends at each key's tail word
    firsts = np.searchsorted(nb, np.arange(top), side="right")
    kbuf = np.empty(n, dtype=np.uint32)
    tbuf = np.empty(n, dtype=np.uint32)
    s24 = np.uint32(24)
    with np.errstate(over="ignore"):
        for lo in firsts.tolist():
            k, t, p, hs = kbuf[lo:], tbuf[lo:], pos[lo:], h[lo:]
            np.take(table, p, out=k)
            p += 1
            np.multiply(k, m, out=k)
            np.right_shift(k, s24, out=t)
            np.bitwise_xor(k, t, out=k)
            np.multiply(k, m, out=k)
            np.multiply(hs, m, out=hs)
            np.bitwise_xor(hs, k, out=hs)
        rem = (slens & 3).astype(np.uint32)
        idx = np.flatnonzero(rem)
        if idx.size:
            tail = table[pos[idx]] & ((np.uint32(1) << (rem[idx] << np.uint32(3))) - np.uint32(1))
            h[idx] = (h[idx] ^ tail) * m
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
    h &= np.uint32(_MASK)
    out = np.empty(n, dtype=np.int64)
    out[order] = h
    return out


def _murmur3_chunk(keys: Sequence[bytes]) -> np.ndarray:
    # mmh3's C function through map beats any numpy formulation here.
    out = np.fromiter(map(_m3, keys), dtype=np.int64, count=len(keys))
    out &= _MASK
    return out


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
