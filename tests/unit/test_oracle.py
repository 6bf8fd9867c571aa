"""The ordering oracle (pure): violations, duplicates, missing records and
the embedded broker's tail holes kept apart from real losses."""

from __future__ import annotations

from kafka_ordered.testing import OrderingOracle
from kafka_ordered.testing._oracle import decode_value, encode_value


def test_values_round_trip() -> None:
    assert decode_value(encode_value("P1", 42)) == ("P1", 42)


def test_a_lower_sequence_after_a_higher_one_is_a_violation() -> None:
    o = OrderingOracle()
    for seq in (0, 1):
        o.acknowledged(b"k", "P", seq)
    assert o.delivered(b"k", "P", 1)
    assert not o.delivered(b"k", "P", 0, where="c0 p1@7")
    rep = o.report()
    assert [(v.seq, v.after_seq, v.where) for v in rep.violations] == [(0, 1, "c0 p1@7")]
    assert not rep.ok


def test_a_replay_is_a_duplicate_not_a_violation() -> None:
    o = OrderingOracle()
    for seq in (0, 1):
        o.acknowledged(b"k", "P", seq)
        o.delivered(b"k", "P", seq)
    o.delivered(b"k", "P", 0)
    rep = o.report()
    assert rep.duplicates == 1 and rep.violations == () and rep.ok


def test_a_record_acknowledged_before_the_group_read_past_it_is_missing() -> None:
    """A client that skips a written record loses it: that is never a hole."""
    o = OrderingOracle()
    o.acknowledged(b"a", "P", 0, partition=0, offset=10, at_ns=1_000)
    o.acknowledged(b"b", "P", 0, partition=0, offset=11, at_ns=1_000)
    o.delivered(b"b", "P", 0, partition=0, offset=11, at_ns=2_000)
    rep = o.report()
    assert (rep.missing, rep.tail_holes) == (1, 0) and not rep.ok


def test_a_record_the_group_read_past_before_it_was_acknowledged_is_a_tail_hole() -> None:
    o = OrderingOracle()
    o.acknowledged(b"a", "P", 0, partition=0, offset=10, at_ns=3_000)  # written late
    o.acknowledged(b"b", "P", 0, partition=0, offset=11, at_ns=1_000)
    o.delivered(b"b", "P", 0, partition=0, offset=11, at_ns=2_000)
    rep = o.report()
    assert (rep.missing, rep.tail_holes) == (0, 1) and rep.ok


def test_a_read_past_on_another_partition_or_below_the_offset_is_no_excuse() -> None:
    o = OrderingOracle()
    o.acknowledged(b"a", "P", 0, partition=0, offset=10, at_ns=3_000)
    o.acknowledged(b"b", "P", 0, partition=1, offset=50, at_ns=1_000)
    o.acknowledged(b"c", "P", 0, partition=0, offset=9, at_ns=1_000)
    o.delivered(b"b", "P", 0, partition=1, offset=50, at_ns=2_000)
    o.delivered(b"c", "P", 0, partition=0, offset=9, at_ns=2_000)
    rep = o.report()
    assert (rep.missing, rep.tail_holes) == (1, 0)


def test_without_positions_every_undelivered_record_is_missing() -> None:
    o = OrderingOracle()
    o.acknowledged(b"a", "P", 0)
    assert o.report().missing == 1
