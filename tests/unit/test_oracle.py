"""The ordering oracle (pure): violations, duplicates, missing records and
the embedded broker's tail holes kept apart from real losses."""

from __future__ import annotations

from kafka_ordered.testing import OrderingOracle
from kafka_ordered.testing._oracle import decode_value, encode_value


def test_values_round_trip() -> None:
    assert decode_value(encode_value("P1", 42)) == ("P1", 42)


def test_a_lower_sequence_after_a_higher_one_is_a_violation() -> None:
    o = OrderingOracle(broker_tail_holes=True)
    for seq in (0, 1):
        o.acknowledged(b"k", "P", seq)
    assert o.delivered(b"k", "P", 1)
    assert not o.delivered(b"k", "P", 0, where="c0 p1@7")
    rep = o.report()
    assert [(v.seq, v.after_seq, v.where) for v in rep.violations] == [(0, 1, "c0 p1@7")]
    assert not rep.ok


def test_a_replay_is_a_duplicate_not_a_violation() -> None:
    o = OrderingOracle(broker_tail_holes=True)
    for seq in (0, 1):
        o.acknowledged(b"k", "P", seq)
        o.delivered(b"k", "P", seq)
    o.delivered(b"k", "P", 0)
    rep = o.report()
    assert rep.duplicates == 1 and rep.violations == () and rep.ok


def _two_batches(o: OrderingOracle) -> None:
    """Offsets 10 (written last) and 11 acknowledged on partition 0."""
    o.acknowledged(b"a", "P", 0, partition=0, offset=9, at_ns=500)
    o.acknowledged(b"b", "P", 0, partition=0, offset=10, at_ns=3_000)
    o.acknowledged(b"c", "P", 0, partition=0, offset=11, at_ns=1_000)


def test_a_record_written_out_of_order_and_skipped_inside_one_batch_is_a_tail_hole() -> None:
    o = OrderingOracle(broker_tail_holes=True)
    _two_batches(o)
    o.delivered(b"a", "P", 0, partition=0, offset=9, batch="c0@1")
    o.delivered(b"c", "P", 0, partition=0, offset=11, batch="c0@1")
    rep = o.report()
    assert (rep.missing, rep.tail_holes) == (0, 1) and rep.ok


def test_a_record_skipped_between_two_batches_is_missing() -> None:
    """Between batches a client seeks, rewinds and commits: a skip there may be ours."""
    o = OrderingOracle(broker_tail_holes=True)
    _two_batches(o)
    o.delivered(b"a", "P", 0, partition=0, offset=9, batch="c0@1")
    o.delivered(b"c", "P", 0, partition=0, offset=11, batch="c0@2")
    rep = o.report()
    assert (rep.missing, rep.tail_holes) == (1, 0) and not rep.ok


def test_a_partitions_first_record_written_under_a_concurrent_append_is_a_tail_hole() -> None:
    """CI, autoscale failover: a tail reader of an empty partition was handed
    offset 1 (another producer's, acknowledged 0.6 ms after offset 0) while
    offset 0 was being written: the hole has no offset below it, the log's
    start (0) stands for the one delivered below."""
    o = OrderingOracle(broker_tail_holes=True)
    o.acknowledged(b"k", "P1", 0, partition=0, offset=0, at_ns=1_000_000)
    o.acknowledged(b"j", "P2", 0, partition=0, offset=1, at_ns=1_600_000)
    o.acknowledged(b"j", "P2", 1, partition=0, offset=2, at_ns=9_000_000)
    o.delivered(b"j", "P2", 0, partition=0, offset=1, batch="m1-11")
    o.delivered(b"j", "P2", 1, partition=0, offset=2, batch="m1-12")
    rep = o.report()
    assert (rep.missing, rep.tail_holes) == (0, 1) and rep.ok
    assert o.explain(b"k", "P1", 0).startswith("p0@0: delivered around it: the log's start and p0@1 (m1-11); ")


def test_a_partitions_first_record_is_missing_when_the_record_above_was_not_appended_with_it() -> None:
    """The same producer's record above it (appended in order), or another
    producer's acknowledged a second later: no excuse at the log's start either."""
    for above, acked_ns in (("P1", 1_600_000), ("P2", 1_001_000_000)):
        o = OrderingOracle(broker_tail_holes=True)
        o.acknowledged(b"k", "P1", 0, partition=0, offset=0, at_ns=1_000_000)
        o.acknowledged(b"j", above, 1, partition=0, offset=1, at_ns=acked_ns)
        o.delivered(b"j", above, 1, partition=0, offset=1, batch="m1-11")
        assert (o.report().missing, o.report().tail_holes) == (1, 0), above


def test_a_record_written_in_order_is_missing_even_when_skipped_inside_a_batch() -> None:
    o = OrderingOracle(broker_tail_holes=True)
    o.acknowledged(b"a", "P", 0, partition=0, offset=9, at_ns=500)
    o.acknowledged(b"b", "P", 0, partition=0, offset=10, at_ns=900)
    o.acknowledged(b"c", "P", 0, partition=0, offset=11, at_ns=1_000)
    o.delivered(b"a", "P", 0, partition=0, offset=9, batch="c0@1")
    o.delivered(b"c", "P", 0, partition=0, offset=11, batch="c0@1")
    rep = o.report()
    assert (rep.missing, rep.tail_holes) == (1, 0)


def _concurrent(o: OrderingOracle, above_producer: str, above_acked_ns: int) -> None:
    """Chaos seed 22: producer P1's batch took offsets 806-808 and was
    acknowledged at t; P0's record 809 was acknowledged 1.4 ms later, yet a
    tail reader was handed 805 and 809 in one batch (the broker wrote 809
    first: the two appends were in flight together)."""
    o.acknowledged(b"a", "P1", 0, partition=1, offset=805, at_ns=0)
    for i, off in enumerate((806, 807, 808)):
        o.acknowledged(b"h", "P1", i, partition=1, offset=off, at_ns=19_000_000)
    o.acknowledged(b"z", above_producer, 0, partition=1, offset=809, at_ns=above_acked_ns)
    o.delivered(b"a", "P1", 0, partition=1, offset=805, batch="c0@1")
    o.delivered(b"z", above_producer, 0, partition=1, offset=809, batch="c0@1")


def test_a_hole_under_another_producers_concurrent_append_is_a_tail_hole() -> None:
    o = OrderingOracle(broker_tail_holes=True)
    _concurrent(o, "P0", 20_400_000)
    rep = o.report()
    assert (rep.missing, rep.tail_holes) == (0, 3) and rep.ok


def test_a_hole_under_the_same_producers_later_record_is_missing() -> None:
    """One producer's records are appended in order: no concurrency excuse."""
    o = OrderingOracle(broker_tail_holes=True)
    _concurrent(o, "P1", 20_400_000)
    assert (o.report().missing, o.report().tail_holes) == (3, 0)


def test_a_hole_under_a_record_acknowledged_long_after_is_missing() -> None:
    """Another producer's record acknowledged a second later was not in flight together with the hole."""
    o = OrderingOracle(broker_tail_holes=True)
    _concurrent(o, "P0", 1_019_000_000)
    assert (o.report().missing, o.report().tail_holes) == (3, 0)


def _sent(o: OrderingOracle, above_sent_ns: int, above_acked_ns: int) -> None:
    """:func:`_concurrent` with send times: the hole's records were
    acknowledged at 19 ms, P0's record above them was sent at
    ``above_sent_ns`` and acknowledged at ``above_acked_ns``."""
    o.acknowledged(b"a", "P1", 0, partition=1, offset=805, at_ns=0, sent_ns=0)
    for i, off in enumerate((806, 807, 808)):
        o.acknowledged(b"h", "P1", i, partition=1, offset=off, at_ns=19_000_000, sent_ns=12_000_000)
    o.acknowledged(b"z", "P0", 0, partition=1, offset=809, at_ns=above_acked_ns, sent_ns=above_sent_ns)
    o.delivered(b"a", "P1", 0, partition=1, offset=805, batch="c0@1")
    o.delivered(b"z", "P0", 0, partition=1, offset=809, batch="c0@1")


def test_a_hole_under_an_append_sent_before_it_was_acknowledged_is_a_tail_hole_however_late_its_ack() -> None:
    """On a loaded machine an acknowledgement callback can run long after
    the broker answered: the record above was in flight together with the
    hole (sent before the hole was acknowledged) though acknowledged 80 ms
    after it."""
    o = OrderingOracle(broker_tail_holes=True)
    _sent(o, 15_000_000, 99_000_000)
    rep = o.report()
    assert (rep.missing, rep.tail_holes) == (0, 3) and rep.ok


def test_a_hole_under_an_append_sent_after_it_was_acknowledged_is_missing() -> None:
    """Send times known, the append above came after the hole was written
    (sent after its acknowledgement): no concurrency, however close the
    acknowledgements."""
    o = OrderingOracle(broker_tail_holes=True)
    _sent(o, 20_000_000, 21_000_000)
    rep = o.report()
    assert (rep.missing, rep.tail_holes) == (3, 0) and not rep.ok


def test_explain_names_the_deliveries_around_a_missing_record_and_the_appends_above_it() -> None:
    o = OrderingOracle(broker_tail_holes=True)
    _sent(o, 20_000_000, 21_000_000)
    o.delivered(b"z", "P0", 0, partition=1, offset=809, batch="c1@7")
    why = o.explain(b"h", "P1", 1)
    assert why.startswith("p1@807: delivered around it: p1@805 (c0@1) and p1@809 (c0@1, c1@7); ")
    assert "no higher offset acknowledged before it" in why
    assert "p1@809 (P0) sent +1.0 ms, acknowledged +2.0 ms after its acknowledgement" in why
    assert o.explain(b"nope", "P1", 0) == "never acknowledged with its partition and offset"


def test_a_skip_on_another_partition_is_no_excuse() -> None:
    o = OrderingOracle(broker_tail_holes=True)
    _two_batches(o)
    o.acknowledged(b"d", "P", 0, partition=1, offset=5, at_ns=100)
    o.acknowledged(b"e", "P", 0, partition=1, offset=50, at_ns=100)
    o.delivered(b"d", "P", 0, partition=1, offset=5, batch="c0@1")
    o.delivered(b"e", "P", 0, partition=1, offset=50, batch="c0@1")
    o.delivered(b"a", "P", 0, partition=0, offset=9, batch="c0@1")
    rep = o.report()
    assert (rep.missing, rep.tail_holes) == (2, 0)


def test_without_positions_every_undelivered_record_is_missing() -> None:
    o = OrderingOracle(broker_tail_holes=True)
    o.acknowledged(b"a", "P", 0)
    assert o.report().missing == 1


def test_without_broker_tail_holes_every_missing_record_is_lost() -> None:
    """The default (Apache Kafka): the embedded broker's signature is no
    excuse; the same deliveries that make a tail hole above count as missing."""
    for holes in (True, False):
        o = OrderingOracle(broker_tail_holes=holes)
        o.acknowledged(b"k", "P1", 0, partition=0, offset=5, at_ns=2_000)
        o.acknowledged(b"j", "P0", 0, partition=0, offset=6, at_ns=1_000)  # above it, acknowledged first
        o.delivered(b"i", "P0", 0, partition=0, offset=4, batch="b1")
        o.delivered(b"j", "P0", 0, partition=0, offset=6, batch="b1")
        rep = o.report()
        assert (rep.missing, rep.tail_holes) == ((0, 1) if holes else (1, 0))
