"""Key hashes, scalar and vectorised.

Every function returns the *positive* hash ``h`` that the partition formula
takes modulo a partition count:

- ``murmur2``: Kafka's Java ``Utils.toPositive(Utils.murmur2(key))`` (seed
  0x9747b28c), which librdkafka's ``murmur2``/``murmur2_random`` also use.
- ``murmur3``: ``mmh3.hash(key) & 0x7fffffff`` (x86 32-bit, seed 0).
- ``crc32``: the unsigned CRC-32 that librdkafka's default ``consistent`` and
  ``consistent_random`` partitioners take modulo the partition count.

The scalar functions are those of the C extension ``kafka_ordered._speedups``
when it is built (it keeps the GIL, so a busy Python thread does not stall
every call), else the pure-Python ``*_py`` versions below; both give the same
values. ``KAFKA_ORDERED_NO_SPEEDUPS=1`` in the environment (read at import)
forces the pure-Python ones. Keys are ``bytes``; callers validate them.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from types import ModuleType
from typing import Callable, Dict, List, Optional, Sequence

import mmh3
import numpy as np

__all__ = ["murmur2", "murmur3", "crc32", "SCALAR", "PY_SCALAR", "hash_batch", "speedups_enabled", "NO_SPEEDUPS_ENV"]

NO_SPEEDUPS_ENV = "KAFKA_ORDERED_NO_SPEEDUPS"

#: The interface of ``kafka_ordered._speedups`` this code needs (its ``API``):
#: 1 hashes and LinearPartitioner; 2 also the per-record paths (_fastpath).
SPEEDUPS_API = 5

_log = logging.getLogger("kafka_ordered")

_SEED = 0x9747B28C
_MASK = 0x7FFFFFFF
_U32 = 0xFFFFFFFF
_M = 0x5BD1E995
_CHUNK = 1 << 16

_m3 = mmh3.hash
_crc = zlib.crc32

# little-endian uint32 unpackers for keys of up to 64 blocks (longer keys build one)
_BLOCKS: List[Callable[[bytes], tuple]] = [struct.Struct(f"<{i}I").unpack_from for i in range(65)]


def murmur2_py(key: bytes) -> int:
    """Kafka's Java ``Utils.murmur2`` (seed 0x9747b28c) ``& 0x7fffffff``, in pure
    Python (a port of the Java code, as kafka-python's is)."""
    n = len(key)
    h = _SEED ^ n
    nb = n >> 2
    if nb:
        for k in (_BLOCKS[nb] if nb <= 64 else struct.Struct(f"<{nb}I").unpack_from)(key):
            k = (k * _M) & _U32
            k ^= k >> 24
            h = ((h * _M) & _U32) ^ ((k * _M) & _U32)
    rem = n & 3
    if rem:
        h = ((h ^ int.from_bytes(key[n - rem :], "little")) * _M) & _U32
    h ^= h >> 13
    h = (h * _M) & _U32
    h ^= h >> 15
    return h & _MASK


def murmur3_py(key: bytes) -> int:
    """MurmurHash3 x86_32 (seed 0) ``& 0x7fffffff``, through ``mmh3``."""
    return _m3(key) & _MASK


def crc32_py(key: bytes) -> int:
    """The unsigned CRC-32 of ``key`` (``zlib.crc32``)."""
    return _crc(key)


PY_SCALAR: Dict[str, Callable[[bytes], int]] = {"murmur2": murmur2_py, "murmur3": murmur3_py, "crc32": crc32_py}


def _load_speedups() -> Optional[ModuleType]:
    """The C extension, or None: not built or switched off (logged once, at
    DEBUG, on ``kafka_ordered``), or built from older sources (a WARNING)."""
    if os.environ.get(NO_SPEEDUPS_ENV, "").strip() not in ("", "0"):
        _log.debug("C speed-ups disabled by %s, using pure Python", NO_SPEEDUPS_ENV)
        return None
    try:
        from . import _speedups  # type: ignore[attr-defined]
    except ImportError:
        _log.debug("C speed-ups unavailable, using pure Python")
        return None
    built = getattr(_speedups, "API", 1)
    if built != SPEEDUPS_API:
        _log.warning("C speed-ups out of date (%s has API %s, this kafka_ordered needs %s): using pure Python; "
                     "rebuild them (make ext, or reinstall kafka-ordered)", _speedups.__file__, built, SPEEDUPS_API)
        return None
    return _speedups


_C: Optional[ModuleType] = _load_speedups()


def speedups_enabled() -> bool:
    """True when the C extension ``kafka_ordered._speedups`` is in use: it was
    built (``pip install`` compiles it when a C compiler is available) and
    ``KAFKA_ORDERED_NO_SPEEDUPS`` was not set when kafka_ordered was imported.
    Results are identical either way; only speed differs."""
    return _C is not None


if _C is not None:
    murmur2: Callable[[bytes], int] = _C.murmur2
    murmur3: Callable[[bytes], int] = _C.murmur3
    crc32: Callable[[bytes], int] = _C.crc32
else:
    murmur2 = murmur2_py
    murmur3 = murmur3_py
    crc32 = crc32_py

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
