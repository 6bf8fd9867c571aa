"""The fault suite's producer lines (pure): every acknowledged record is
read, also one whose offset the client could not tell."""

from __future__ import annotations

from kafka_ordered.testing.demo import _acknowledgement


def test_a_placed_acknowledgement_is_read_whole() -> None:
    assert _acknowledgement("key-1\tP0:3\t2\t17\t200\t100") == ("key-1", "P0:3", 2, 17, 200, 100)


def test_an_acknowledgement_without_an_offset_still_counts() -> None:
    """librdkafka's idempotent producer acknowledges a batch whose answer was
    lost, once a later answer proves it written, without an offset
    (``msg.offset()`` is None): seen in the Apache Kafka fault suite, seed
    21, when a broker was killed."""
    assert _acknowledgement("key-1\tP1:5\t0\tNone\t200\t100") == ("key-1", "P1:5", 0, None, 200, 100)
