"""An ordering oracle for tests and demos (pure).

Producers write per-key, per-producer sequence numbers (:func:`encode_value`);
the oracle is told what was acknowledged and what one consumer group
delivered, in delivery order. A *violation* is the first delivery of a
record whose sequence number is lower than one already delivered for the
same key and producer: the group saw B before A although A was produced
first. Re-deliveries (at-least-once replays after a crash or rebalance)
are duplicates, not violations. *Missing* records were acknowledged but
never delivered.

When acknowledgements carry their partition, offset and time, and
deliveries their partition, offset and batch (one ``consume``/``poll``
result of one member), a missing record is reported as a *tail hole*, not
as missing, when both hold:

- it was written out of order: a record at a higher offset of the same
  partition was acknowledged before it, or the record the batch holds right
  above it was another producer's, acknowledged no later than
  :data:`CONCURRENT_NS` after it (the two appends were in flight together;
  acknowledgement order, measured in two processes, need not be the order
  the broker wrote them), and
- the group skipped it inside one returned batch: that batch holds the
  partition's offsets just below and just above it, with nothing between.

This is the embedded broker's signature (Tansu 0.6 reserves a batch's
offsets before it writes the batch and serves a reader at the end of a
partition whatever lies above the fetch offset; see ``docs/testing.md``).
The wrappers never drop records from the middle of a batch they return
(gating holds a partition's suffix), so a loss of theirs stays *missing*.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

__all__ = ["encode_value", "decode_value", "Violation", "OracleReport", "OrderingOracle", "CONCURRENT_NS"]

#: How close two producers' acknowledgements must be for their appends to
#: count as concurrent (a tail hole's precondition), in nanoseconds.
CONCURRENT_NS = 50_000_000


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
    """Checks one consumer group's deliveries against acknowledged records.

    ``broker_tail_holes=True`` only for the embedded broker: it lets an
    acknowledged record that shows that broker's signature (module
    docstring) count as a tail hole instead of missing. Apache Kafka never
    leaves such holes, so by default every acknowledged record never
    delivered is missing."""

    broker_tail_holes: bool = False
    _acked: Set[Tuple[bytes, str, int]] = field(default_factory=set)
    _seen: Set[Tuple[bytes, str, int]] = field(default_factory=set)
    _high: Dict[Tuple[bytes, str], int] = field(default_factory=dict)
    violations: List[Violation] = field(default_factory=list)
    delivered_count: int = 0
    duplicates: int = 0
    # (partition, offset, ack time ns) of acknowledged records that said so
    _placed: Dict[Tuple[bytes, str, int], Tuple[int, int, int]] = field(default_factory=dict)
    # (partition, batch) -> offsets delivered in that batch
    _batches: Dict[Tuple[int, str], List[int]] = field(default_factory=dict)

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
                  batch: Optional[str] = None) -> bool:
        """Record one delivery (in the group's delivery order); returns False
        when it is a violation. ``batch`` names the member's poll result it
        came in."""
        self.delivered_count += 1
        if partition is not None and offset is not None and batch is not None:
            self._batches.setdefault((partition, batch), []).append(offset)
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
                        batch: Optional[str] = None) -> bool:
        """:meth:`delivered` for a value made by :func:`encode_value`; returns
        False for a violation, ``ValueError`` for a foreign value."""
        producer, seq = decode_value(value)
        return self.delivered(key, producer, seq, where, partition, offset, batch)

    def missing(self) -> Set[Tuple[bytes, str, int]]:
        """Acknowledged, never delivered, and not a tail hole."""
        holes = self.tail_holes()
        return {r for r in self._acked - self._seen if r not in holes}

    def tail_holes(self) -> Set[Tuple[bytes, str, int]]:
        """Acknowledged records never delivered that show the broker's
        signature (see the module docstring); always empty unless
        ``broker_tail_holes``."""
        if not self.broker_tail_holes:
            return set()
        skipped: Dict[int, List[Tuple[int, int]]] = {}  # partition -> (below, above) skipped inside a batch
        for (partition, _), offsets in self._batches.items():
            offsets = sorted(set(offsets))
            skipped.setdefault(partition, []).extend(
                (lo, hi) for lo, hi in zip(offsets, offsets[1:]) if hi > lo + 1)
        acks: Dict[int, List[Tuple[int, int]]] = {}  # partition -> (offset, ack time), by offset
        for partition, offset, at in self._placed.values():
            acks.setdefault(partition, []).append((offset, at))
        earliest_above: Dict[int, Tuple[List[int], List[int]]] = {}
        for partition, placed in acks.items():
            placed.sort()
            offsets = [o for o, _ in placed]
            lows = [t for _, t in placed]
            for i in range(len(lows) - 2, -1, -1):
                lows[i] = min(lows[i], lows[i + 1])
            earliest_above[partition] = (offsets, lows)
        by_offset = {(p, o): (rec[1], at) for rec, (p, o, at) in self._placed.items()}
        holes = set()
        for rec in self._acked - self._seen:
            placed_at = self._placed.get(rec)
            if placed_at is None:
                continue
            partition, offset, acked_at = placed_at
            offsets, lows = earliest_above[partition]
            i = bisect.bisect_right(offsets, offset)
            acked_out_of_order = i < len(offsets) and lows[i] < acked_at
            for lo, hi in skipped.get(partition, ()):
                if not lo < offset < hi:
                    continue
                above = by_offset.get((partition, hi))
                concurrent = above is not None and above[0] != rec[1] and above[1] <= acked_at + CONCURRENT_NS
                if acked_out_of_order or concurrent:
                    holes.add(rec)
                    break
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
