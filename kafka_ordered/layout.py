"""Layout math: linear hashing over a topic's initial and undeleted partition counts.

Pure functions and values, no I/O. With ``partitions == initial_partitions``
and ``hash="murmur2"`` the mapping is exactly Kafka's Java default
partitioner (and librdkafka's ``murmur2_random`` for keyed records); with
``hash="crc32"`` it is librdkafka's ``consistent``/``consistent_random``.
Adding one partition moves keys out of exactly one partition (its *parent*);
removing it moves them back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Literal, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _hashing
from .errors import InvalidKeyError, InvalidLayoutError

__all__ = [
    "HashName",
    "Strategy",
    "HASHES",
    "matching_hashes",
    "Layout",
    "partition_for",
    "partitions_for",
    "parent_partition",
    "sources",
    "transition_sources",
]

#: The key hash of a layout: ``murmur2`` (Kafka's Java default partitioner, librdkafka's
#: ``murmur2_random``), ``crc32`` (librdkafka's default ``consistent_random``) or ``murmur3``.
HashName = Literal["murmur2", "murmur3", "crc32"]
#: How keys map to partitions: ``linear`` (KIP-253 linear hashing).
Strategy = Literal["linear"]
#: Every :data:`HashName`.
HASHES: Tuple[str, ...] = ("murmur2", "murmur3", "crc32")
#: Every :data:`Strategy`.
STRATEGIES: Tuple[str, ...] = ("linear",)

KeyLike = Union[bytes, bytearray, memoryview]


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidLayoutError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise InvalidLayoutError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_counts(initial_partitions: Any, partitions: Any) -> Tuple[int, int]:
    n0 = _check_int("initial_partitions", initial_partitions, 1)
    n = _check_int("partitions", partitions, 1)
    if n < n0:
        raise InvalidLayoutError(
            f"partitions ({n}) must be >= initial_partitions ({n0}): linear hashing cannot "
            f"shrink a topic below the partition count it was put under management with"
        )
    return n0, n


def _check_hash(hash: Any) -> str:
    if hash not in HASHES:
        raise InvalidLayoutError(f"unknown hash {hash!r}: expected one of {', '.join(HASHES)}")
    return str(hash)


def _as_bytes(key: Any) -> bytes:
    if type(key) is bytes:
        return key
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, str):
        raise InvalidKeyError(
            "key must be bytes, got str: encode it first (key.encode('utf-8') is what "
            "Kafka clients hash)"
        )
    raise InvalidKeyError(f"key must be bytes, got {type(key).__name__}")


def _level(initial: int, partitions: int) -> int:
    """Largest L with initial * 2**L <= partitions."""
    return (partitions // initial).bit_length() - 1


def _bucket(h: int, initial: int, partitions: int) -> int:
    m = initial << _level(initial, partitions)
    b = h % m
    return h % (m << 1) if b < partitions - m else b


def _compile_py(initial: int, partitions: int, hash: str) -> Callable[[Any], int]:
    """The pure-Python ``key -> partition`` function for fixed counts."""
    m = initial << _level(initial, partitions)
    split = partitions - m
    m2 = m << 1
    hf = _hashing.PY_SCALAR[hash]

    def linear(key: Any) -> int:
        if type(key) is not bytes:
            key = _as_bytes(key)
        h = hf(key)
        b = h % m
        return h % m2 if b < split else b

    return linear


def _compile(initial: int, partitions: int, hash: str) -> Callable[[Any], int]:
    """A fast ``key -> partition`` function for fixed counts (the per-record path).

    The C ``LinearPartitioner`` when the speed-ups are enabled, else
    :func:`_compile_py`; same values and errors (non-bytes keys go through
    ``_as_bytes``, so bytearray/memoryview work and others raise ``InvalidKeyError``)."""
    if _hashing._C is not None:
        try:
            return _hashing._C.LinearPartitioner(hash, initial, partitions, _as_bytes)  # type: ignore[no-any-return]
        except OverflowError:  # counts beyond a C ssize_t: keep Python's big ints
            pass
    return _compile_py(initial, partitions, hash)


def _bucket_array(h: np.ndarray, initial: int, partitions: int) -> np.ndarray:
    m = initial << _level(initial, partitions)
    b = h % m
    split = partitions - m
    if split:
        low = b < split
        b[low] = h[low] % (m << 1)
    return b


def partition_for(key: KeyLike, initial_partitions: int, partitions: int, hash: HashName = "murmur2") -> int:
    """The partition of ``key`` under linear hashing with the given counts.

    Raises ``InvalidLayoutError`` (a ``ValueError``) for bad counts or hash
    names and ``InvalidKeyError`` (a ``TypeError``) for keys that are not bytes.
    """
    n0, n = _check_counts(initial_partitions, partitions)
    return _bucket(_hashing.SCALAR[_check_hash(hash)](_as_bytes(key)), n0, n)


def partitions_for(
    keys: Sequence[KeyLike], initial_partitions: int, partitions: int, hash: HashName = "murmur2"
) -> np.ndarray:
    """The partitions of many keys at once, as an int64 numpy array in key order.

    Same values as :func:`partition_for`; this is the throughput path.
    """
    n0, n = _check_counts(initial_partitions, partitions)
    hname = _check_hash(hash)
    if not all(type(k) is bytes for k in keys):
        keys = [_as_bytes(k) for k in keys]
    return _bucket_array(_hashing.hash_batch(keys, hname), n0, n)  # type: ignore[arg-type]


def parent_partition(partition: int, initial_partitions: int) -> Optional[int]:
    """The partition that ``partition`` split from under linear hashing, or
    ``None`` for one of the initial partitions."""
    p = _check_int("partition", partition, 0)
    n0 = _check_int("initial_partitions", initial_partitions, 1)
    if p < n0:
        return None
    return p - (n0 << _level(n0, p))


@dataclass(frozen=True)
class Layout:
    """One epoch of a managed topic's partitioning.

    ``partitions`` (the undeleted count) receive keyed records; physical
    partitions ``partitions .. physical_partitions - 1`` are either
    ``draining`` (removed by a shrink, may still hold unconsumed records) or
    spares (empty or fully consumed, reused by the next expansion).
    """

    topic: str
    epoch: int
    initial_partitions: int
    partitions: int
    physical_partitions: int
    hash: HashName = "murmur2"
    strategy: Strategy = "linear"
    draining: FrozenSet[int] = frozenset()
    _fn: Callable[[Any], int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise InvalidLayoutError(f"topic must be a non-empty string, got {self.topic!r}")
        _check_int("epoch", self.epoch, 0)
        n0, n = _check_counts(self.initial_partitions, self.partitions)
        phys = _check_int("physical_partitions", self.physical_partitions, 1)
        if phys < n:
            raise InvalidLayoutError(f"physical_partitions ({phys}) must be >= partitions ({n})")
        _check_hash(self.hash)
        if self.strategy not in STRATEGIES:
            raise InvalidLayoutError(f"unknown strategy {self.strategy!r}: expected one of {', '.join(STRATEGIES)}")
        draining = frozenset(int(p) for p in self.draining)
        bad = sorted(p for p in draining if not n <= p < phys)
        if bad:
            raise InvalidLayoutError(
                f"draining partitions {bad} are outside the removed range [{n}, {phys})"
            )
        object.__setattr__(self, "draining", draining)
        object.__setattr__(self, "_fn", _compile(n0, n, self.hash))

    @property
    def spares(self) -> FrozenSet[int]:
        """Physical partitions beyond ``partitions`` that hold nothing left to consume."""
        return frozenset(range(self.partitions, self.physical_partitions)) - self.draining

    def partition_for(self, key: KeyLike) -> int:
        """The partition of ``key`` under this layout. Raises ``InvalidKeyError``
        for non-bytes keys."""
        return self._fn(key)

    def partitions_for(self, keys: Sequence[KeyLike]) -> np.ndarray:
        """Batch form of :meth:`partition_for` (int64 numpy array)."""
        return partitions_for(keys, self.initial_partitions, self.partitions, self.hash)

    def parent(self, partition: int) -> Optional[int]:
        """The linear-hashing parent of ``partition`` (``None`` for initial ones)."""
        return parent_partition(partition, self.initial_partitions)

    # -- transitions (each returns the next epoch; validation raises InvalidLayoutError)

    def expanded(self, partitions: int, physical_partitions: Optional[int] = None) -> "Layout":
        """The layout after growing the undeleted count to ``partitions``.

        Reuses draining and spare physical partitions first; the physical count
        grows only to what is needed (or to ``physical_partitions``).
        """
        n = _check_int("partitions", partitions, 1)
        if n <= self.partitions:
            raise InvalidLayoutError(
                f"cannot expand {self.topic} to {n} partitions: it already has {self.partitions} "
                f"(use shrink to reduce)"
            )
        phys = max(self.physical_partitions, n, physical_partitions or 0)
        draining = frozenset(p for p in self.draining if p >= n)
        return replace(self, epoch=self.epoch + 1, partitions=n, physical_partitions=phys, draining=draining)

    def shrunk(self, partitions: int) -> "Layout":
        """The layout after reducing the undeleted count to ``partitions``; the
        removed partitions become draining."""
        n = _check_int("partitions", partitions, 1)
        if n < self.initial_partitions:
            raise InvalidLayoutError(
                f"cannot shrink {self.topic} to {n} partitions: its initial partition count is "
                f"{self.initial_partitions} and linear hashing never goes below it"
            )
        if n >= self.partitions:
            raise InvalidLayoutError(
                f"cannot shrink {self.topic} to {n} partitions: it has {self.partitions} (use expand to grow)"
            )
        draining = self.draining | frozenset(range(n, self.partitions))
        return replace(self, epoch=self.epoch + 1, partitions=n, draining=draining)

    def retired(self, partitions: Iterable[int]) -> "Layout":
        """The layout after turning the given draining partitions into spares."""
        ps = frozenset(int(p) for p in partitions)
        not_draining = sorted(ps - self.draining)
        if not_draining:
            raise InvalidLayoutError(f"partitions {not_draining} of {self.topic} are not draining")
        return replace(self, epoch=self.epoch + 1, draining=self.draining - ps)

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict of every field (``draining`` as a sorted list);
        :meth:`from_dict` reads it back."""
        return {
            "topic": self.topic,
            "epoch": self.epoch,
            "initial_partitions": self.initial_partitions,
            "partitions": self.partitions,
            "physical_partitions": self.physical_partitions,
            "hash": self.hash,
            "strategy": self.strategy,
            "draining": sorted(self.draining),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Layout":
        """Inverse of :meth:`to_dict`; raises ``InvalidLayoutError`` on bad fields.
        (``settle_ms``, written by protocol 1 clients, is ignored.)"""
        try:
            return cls(
                topic=d["topic"],
                epoch=d["epoch"],
                initial_partitions=d["initial_partitions"],
                partitions=d["partitions"],
                physical_partitions=d["physical_partitions"],
                hash=d.get("hash", "murmur2"),
                strategy=d.get("strategy", "linear"),
                draining=frozenset(d.get("draining", ())),
            )
        except KeyError as e:
            raise InvalidLayoutError(f"layout is missing field {e.args[0]!r}") from e
        except TypeError as e:
            raise InvalidLayoutError(f"layout has a field of the wrong type: {e}") from e


def _residue_buckets(modulus: int, initial: int, partitions: int) -> np.ndarray:
    return _bucket_array(np.arange(modulus, dtype=np.int64), initial, partitions)


def transition_sources(before: Union[Layout, Sequence[Layout]], after: Layout) -> Dict[int, FrozenSet[int]]:
    """For every partition ``p`` of ``after`` that gains keys, the partitions
    ``q != p`` that held some of ``p``'s keys under any of the ``before`` layouts.

    Partitions that gain no keys are absent. Exact: it enumerates every hash
    residue class, so a partition is a source iff some possible key moved
    from it. All layouts must share ``initial_partitions`` and ``hash``.
    """
    olds: List[Layout] = [before] if isinstance(before, Layout) else list(before)
    for lay in olds:
        if lay.initial_partitions != after.initial_partitions or lay.hash != after.hash:
            raise InvalidLayoutError(
                "layouts of one transition must share initial_partitions and hash: "
                f"{lay.initial_partitions}/{lay.hash} vs {after.initial_partitions}/{after.hash}"
            )
    if not olds:
        return {}
    n0 = after.initial_partitions
    top = max(_level(n0, lay.partitions) for lay in [after, *olds])
    modulus = n0 << (top + 1)
    new = _residue_buckets(modulus, n0, after.partitions)
    out: Dict[int, set] = {}
    width = max(lay.physical_partitions for lay in [after, *olds]) + 1
    for counts in sorted({lay.partitions for lay in olds}):
        old = _residue_buckets(modulus, n0, counts)
        moved = new != old
        if moved.any():
            for code in np.unique(new[moved] * width + old[moved]).tolist():
                out.setdefault(code // width, set()).add(code % width)
    return {p: frozenset(qs) for p, qs in sorted(out.items())}


def sources(partition: int, before: Union[Layout, Sequence[Layout]], after: Layout) -> FrozenSet[int]:
    """The partitions that held some of ``partition``'s keys (under ``after``)
    under any of the ``before`` layouts; empty when it gains no keys."""
    p = _check_int("partition", partition, 0)
    if p >= after.partitions:
        return frozenset()
    return transition_sources(before, after).get(p, frozenset())


def matching_hashes(samples: Sequence[Tuple[int, bytes]], partitions: int) -> List[str]:
    """The hashes (of :data:`HASHES`) under which every sampled ``(partition,
    key)`` sits where Kafka's default mapping over ``partitions`` puts it:
    the candidates for adopting a topic without moving a key."""
    out = []
    for name in HASHES:
        if all(partition_for(key, partitions, partitions, name) == p  # type: ignore[arg-type]
               for p, key in samples):
            out.append(name)
    return out
