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
  above it was another producer's and the two appends were in flight
  together: that record was sent before this one was acknowledged (without
  send times: acknowledged no later than :data:`CONCURRENT_NS` after it;
  acknowledgement order, measured in two processes whose callbacks may run
  late on a loaded machine, need not be the order the broker wrote them), and
- the group skipped it inside one returned batch: that batch holds the
  partition's offsets just below and just above it, with nothing between;
  or it lies below the lowest offset the group delivered of the partition
  (a tail reader of an empty partition handed offset 1 while offset 0 was
  being written: the log's start stands for the offset below; the
  embedded broker's logs start at 0).

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
#: count as concurrent (a tail hole's precondition) when the send time of
#: the record above is not known, in nanoseconds.
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
    # send time (ns) of acknowledged records that said so
    _sent: Dict[Tuple[bytes, str, int], int] = field(default_factory=dict)
    # (partition, batch) -> offsets delivered in that batch
    _batches: Dict[Tuple[int, str], List[int]] = field(default_factory=dict)

    def acknowledged(self, key: bytes, producer: str, seq: int, partition: Optional[int] = None,
                     offset: Optional[int] = None, at_ns: Optional[int] = None,
                     sent_ns: Optional[int] = None) -> None:
        """Record one acknowledged record; with ``partition``, ``offset`` and
        ``at_ns`` (acknowledgement time) it can be told apart as a tail hole,
        more precisely with ``sent_ns`` (when the producer was handed it)."""
        rec = (key, producer, seq)
        self._acked.add(rec)
        if partition is not None and offset is not None and at_ns is not None:
            self._placed[rec] = (partition, offset, at_ns)
            if sent_ns is not None:
                self._sent[rec] = sent_ns

    def acknowledged_value(self, key: bytes, value: bytes, partition: Optional[int] = None,
                           offset: Optional[int] = None, at_ns: Optional[int] = None,
                           sent_ns: Optional[int] = None) -> None:
        """:meth:`acknowledged` for a value made by :func:`encode_value`;
        ``ValueError`` for a foreign value."""
        producer, seq = decode_value(value)
        self.acknowledged(key, producer, seq, partition, offset, at_ns, sent_ns)

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
        lowest: Dict[int, int] = {}
        for (partition, _), offsets in self._batches.items():
            offsets = sorted(set(offsets))
            skipped.setdefault(partition, []).extend(
                (lo, hi) for lo, hi in zip(offsets, offsets[1:]) if hi > lo + 1)
            lowest[partition] = min(offsets[0], lowest.get(partition, offsets[0]))
        for partition, hi in lowest.items():  # the log's start (-1: before offset 0) stands for the offset below
            if hi > 0:
                skipped[partition].append((-1, hi))
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
        by_offset = self._by_offset()
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
                if acked_out_of_order or (above is not None and _in_flight_together(rec[1], acked_at, above)):
                    holes.add(rec)
                    break
        return holes

    def placed(self, key: bytes, producer: str, seq: int) -> Optional[Tuple[int, int]]:
        """The partition and offset the record was acknowledged at (None when
        it was acknowledged without them, or never)."""
        at = self._placed.get((key, producer, seq))
        return None if at is None else (at[0], at[1])

    def _by_offset(self) -> Dict[Tuple[int, int], Tuple[str, int, Optional[int]]]:
        """(partition, offset) -> (producer, ack time, send time or None) of placed records."""
        sent = self._sent
        return {(p, o): (rec[1], at, sent.get(rec)) for rec, (p, o, at) in self._placed.items()}

    def explain(self, key: bytes, producer: str, seq: int) -> str:
        """Why an acknowledged record that was never delivered does or does
        not show the broker's signature, for a failure message: the offsets
        delivered around it (each with the batches that held it), whether a
        higher offset was acknowledged before it, and when the record
        delivered right above it was sent and acknowledged."""
        rec = (key, producer, seq)
        placed = self._placed.get(rec)
        if placed is None:
            return "never acknowledged with its partition and offset"
        partition, offset, acked_at = placed
        held: Dict[int, List[str]] = {}
        for (p, batch), offsets in self._batches.items():
            if p == partition:
                for o in offsets:
                    held.setdefault(o, []).append(batch)
        below = max((o for o in held if o < offset), default=None)
        above = min((o for o in held if o > offset), default=None)

        def at(o: Optional[int]) -> str:
            if o is None:
                return "nothing"
            return f"p{partition}@{o} ({', '.join(sorted(set(held[o])))})"

        by_offset = self._by_offset()
        earlier = min(((a, o) for (p, o), (_, a, _s) in by_offset.items()
                       if p == partition and o > offset and a < acked_at), default=None)
        start = "the log's start" if below is None and above is not None else at(below)
        parts = [f"p{partition}@{offset}: delivered around it: {start} and {at(above)}",
                 (f"p{partition}@{earlier[1]} above it acknowledged {(acked_at - earlier[0]) / 1e6:.1f} ms before it"
                  if earlier is not None else "no higher offset acknowledged before it")]
        over = by_offset.get((partition, above)) if above is not None else None
        if over is not None:
            sent = "unknown" if over[2] is None else f"{(over[2] - acked_at) / 1e6:+.1f} ms"
            parts.append(f"p{partition}@{above} ({over[0]}) sent {sent}, acknowledged "
                         f"{(over[1] - acked_at) / 1e6:+.1f} ms after its acknowledgement")
        return "; ".join(parts)

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


def _in_flight_together(producer: str, acked_at: int, above: Tuple[str, int, Optional[int]]) -> bool:
    """Whether another producer's record above a hole was appended while the
    hole was (``above``: its producer, ack time, send time or None): sent
    before the hole was acknowledged, else (no send time) acknowledged
    within :data:`CONCURRENT_NS` after it. One producer's records are
    appended in order: never concurrent with each other."""
    other, above_acked, above_sent = above
    if other == producer:
        return False
    if above_sent is not None:
        return above_sent <= acked_at
    return above_acked <= acked_at + CONCURRENT_NS
