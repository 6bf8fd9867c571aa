"""An ordering oracle for tests and demos (pure).

Producers write per-key, per-producer sequence numbers (:func:`encode_value`);
the oracle is told what was acknowledged and what one consumer group
delivered, in delivery order. A *violation* is the first delivery of a
record whose sequence number is lower than one already delivered for the
same key and producer: the group saw B before A although A was produced
first. Re-deliveries (at-least-once replays after a crash or rebalance)
are duplicates, not violations. *Missing* records were acknowledged but
never delivered.
"""

from __future__ import annotations

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
    key: bytes
    producer: str
    seq: int
    after_seq: int
    where: Optional[str] = None


@dataclass(frozen=True)
class OracleReport:
    acknowledged: int
    delivered: int
    unique: int
    duplicates: int
    keys: int
    violations: Tuple[Violation, ...]
    missing: int
    unexpected: int = 0

    @property
    def ok(self) -> bool:
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

    def acknowledged(self, key: bytes, producer: str, seq: int) -> None:
        self._acked.add((key, producer, seq))

    def acknowledged_value(self, key: bytes, value: bytes) -> None:
        producer, seq = decode_value(value)
        self.acknowledged(key, producer, seq)

    def delivered(self, key: bytes, producer: str, seq: int, where: Optional[str] = None) -> bool:
        """Record one delivery; returns False when it is a violation."""
        self.delivered_count += 1
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

    def delivered_value(self, key: bytes, value: bytes, where: Optional[str] = None) -> bool:
        producer, seq = decode_value(value)
        return self.delivered(key, producer, seq, where)

    def missing(self) -> Set[Tuple[bytes, str, int]]:
        return self._acked - self._seen

    def report(self) -> OracleReport:
        return OracleReport(
            acknowledged=len(self._acked),
            delivered=self.delivered_count,
            unique=len(self._seen),
            duplicates=self.duplicates,
            keys=len({k for k, _, _ in self._acked | self._seen}),
            violations=tuple(self.violations),
            missing=len(self._acked - self._seen),
            unexpected=len(self._seen - self._acked),
        )
