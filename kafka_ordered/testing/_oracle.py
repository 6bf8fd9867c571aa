"""An ordering oracle for tests and demos (pure).

Producers write per-key, per-producer sequence numbers (:func:`encode_value`);
the oracle is told what was acknowledged and what one consumer group
delivered, in delivery order. A *violation* is the first delivery of a
record whose sequence number is lower than one already delivered for the
same key and producer: the group saw B before A although A was produced
first. Re-deliveries (at-least-once replays after a crash or rebalance)
are duplicates, not violations. *Missing* records were acknowledged but
never delivered.

When acknowledgements and deliveries carry their partition, offset and
time, a missing record that the group had already read past (a delivery
from the same partition at a higher offset, made before the record was
acknowledged) is reported as a *tail hole*, not as missing: the embedded
broker (Tansu 0.6) reserves a batch's offsets before it writes the batch and
serves a reader at the end of a partition whatever lies above the fetch
offset, so such a reader can skip a record that lands a moment later (see
``docs/testing.md``). No client can skip a record that was not yet
written; a record lost by a client was written before the client read past
it, and stays *missing*.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

__all__ = ["encode_value", "decode_value", "Violation", "OracleReport", "OrderingOracle"]


def encode_value(producer: str, seq: int) -> bytes:
    """The record value carrying ``producer`` and ``seq``."""
    return f"{producer}:{seq}".encode()


def decode_value(value: bytes) -> Tuple[str, int]:
    """Inverse of :func:`encode_value`; ``ValueError`` for foreign values."""
    producer, _, seq = value.decode().rpartition(":")
    if not producer:
        raise ValueError(f"not an oracle value: {value!r}")
    return producer, int(seq)


@dataclass(frozen=True)
class Violation:
    """One record delivered after a later record of the same key and
    producer: ``seq`` arrived after ``after_seq`` had been delivered;
    ``where`` is the caller's note (e.g. which consumer)."""
    key: bytes
    producer: str
    seq: int
    after_seq: int
    where: Optional[str] = None


@dataclass(frozen=True)
class OracleReport:
    """The verdict over one group's deliveries: counts of acknowledged,
    delivered (replays included), unique and duplicate records and of keys;
    every violation; ``missing`` acknowledged records never delivered;
    ``unexpected`` records delivered but never acknowledged; ``tail_holes``
    acknowledged records never delivered that the group had read past before
    they were acknowledged (the embedded broker's holes, see the module
    docstring; not counted as missing)."""
    acknowledged: int
    delivered: int
    unique: int
    duplicates: int
    keys: int
    violations: Tuple[Violation, ...]
    missing: int
    unexpected: int = 0
    tail_holes: int = 0

    @property
    def ok(self) -> bool:
        """No violation and nothing missing (duplicates are allowed:
        at-least-once)."""
        return not self.violations and self.missing == 0


@dataclass
class OrderingOracle:
    """Checks one consumer group's deliveries against acknowledged records."""

    _acked: Set[Tuple[bytes, str, int]] = field(default_factory=set)
    _seen: Set[Tuple[bytes, str, int]] = field(default_factory=set)
    _high: Dict[Tuple[bytes, str], int] = field(default_factory=dict)
    violations: List[Violation] = field(default_factory=list)
    delivered_count: int = 0
    duplicates: int = 0
    # (partition, offset, ack time ns) of acknowledged records that said so
    _placed: Dict[Tuple[bytes, str, int], Tuple[int, int, int]] = field(default_factory=dict)
    # partition -> [(delivery time ns, offset)]
    _reads: Dict[int, List[Tuple[int, int]]] = field(default_factory=dict)

    def acknowledged(self, key: bytes, producer: str, seq: int, partition: Optional[int] = None,
                     offset: Optional[int] = None, at_ns: Optional[int] = None) -> None:
        """Record one acknowledged record; with ``partition``, ``offset`` and
        ``at_ns`` (acknowledgement time) it can be told apart as a tail hole."""
        rec = (key, producer, seq)
        self._acked.add(rec)
        if partition is not None and offset is not None and at_ns is not None:
            self._placed[rec] = (partition, offset, at_ns)

    def acknowledged_value(self, key: bytes, value: bytes, partition: Optional[int] = None,
                           offset: Optional[int] = None, at_ns: Optional[int] = None) -> None:
        """:meth:`acknowledged` for a value made by :func:`encode_value`;
        ``ValueError`` for a foreign value."""
        producer, seq = decode_value(value)
        self.acknowledged(key, producer, seq, partition, offset, at_ns)

    def delivered(self, key: bytes, producer: str, seq: int, where: Optional[str] = None,
                  partition: Optional[int] = None, offset: Optional[int] = None,
                  at_ns: Optional[int] = None) -> bool:
        """Record one delivery (in the group's delivery order); returns False
        when it is a violation."""
        self.delivered_count += 1
        if partition is not None and offset is not None and at_ns is not None:
            self._reads.setdefault(partition, []).append((at_ns, offset))
        rec = (key, producer, seq)
        if rec in self._seen:
            self.duplicates += 1
            return True
        self._seen.add(rec)
        high = self._high.get((key, producer), -1)
        if seq < high:
            self.violations.append(Violation(key, producer, seq, high, where))
            return False
        self._high[(key, producer)] = seq
        return True

    def delivered_value(self, key: bytes, value: bytes, where: Optional[str] = None,
                        partition: Optional[int] = None, offset: Optional[int] = None,
                        at_ns: Optional[int] = None) -> bool:
        """:meth:`delivered` for a value made by :func:`encode_value`; returns
        False for a violation, ``ValueError`` for a foreign value."""
        producer, seq = decode_value(value)
        return self.delivered(key, producer, seq, where, partition, offset, at_ns)

    def missing(self) -> Set[Tuple[bytes, str, int]]:
        """Acknowledged, never delivered, and not a tail hole."""
        holes = self.tail_holes()
        return {r for r in self._acked - self._seen if r not in holes}

    def tail_holes(self) -> Set[Tuple[bytes, str, int]]:
        """Acknowledged records never delivered that the group had read past
        before they were acknowledged (see the module docstring)."""
        reach: Dict[int, Tuple[List[int], List[int]]] = {}
        for partition, reads in self._reads.items():
            times, highest, top = [], [], -1
            for at, offset in sorted(reads):
                top = max(top, offset)
                times.append(at)
                highest.append(top)
            reach[partition] = (times, highest)
        holes = set()
        for rec in self._acked - self._seen:
            placed = self._placed.get(rec)
            if placed is None or placed[0] not in reach:
                continue
            partition, offset, acked_at = placed
            times, highest = reach[partition]
            i = bisect.bisect_left(times, acked_at)
            if i and highest[i - 1] > offset:
                holes.add(rec)
        return holes

    def report(self) -> OracleReport:
        """The :class:`OracleReport` of everything recorded so far."""
        holes = len(self.tail_holes())
        return OracleReport(
            acknowledged=len(self._acked),
            delivered=self.delivered_count,
            unique=len(self._seen),
            duplicates=self.duplicates,
            keys=len({k for k, _, _ in self._acked | self._seen}),
            violations=tuple(self.violations),
            missing=len(self._acked - self._seen) - holes,
            unexpected=len(self._seen - self._acked),
            tail_holes=holes,
        )
