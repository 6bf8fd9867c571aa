"""The ordering oracle on streaming queries: per-key per-producer sequence
numbers never go back across micro-batches and every acknowledged record
arrives exactly once, through expansion, shrink and expansion while a
partition drains, and across a query restart from its checkpoint."""

from __future__ import annotations

import collections
from typing import Any, Callable, Dict, Iterator, Tuple

import pytest

from kafka_ordered.admin import LayoutAdmin

from ..conftest import spare
from .conftest import BatchSink, SeqProducers, delivered, order_violations

KEYS = [f"key-{i}".encode() for i in range(24)]
COLUMNS = ["key", "value", "partition", "offset"]
MAX_PER_TRIGGER = "700"


@pytest.fixture
def scenario(bootstrap: str, unique: Callable[[str], str], layout_topic: str) -> Iterator[Tuple[Any, ...]]:
    """Topic of 2 partitions (8 physical). Before the query: a backlog on
    partitions 0/1, then an expansion to 3 with more records (so, without
    gates, records of partition 2 would be read while their keys' older
    records still wait in partition 0's backlog)."""
    topic = unique("order")
    conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
    admin = LayoutAdmin(conf)
    admin.create_topic(topic, 2, physical_partitions=spare(8))
    prod = SeqProducers(conf, topic, 2, KEYS)
    prod.phase(60)  # 2880 records on partitions 0/1
    admin.expand(topic, 3)
    prod.await_epoch(2)
    prod.phase(10)
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "ordered.layout.topic": layout_topic,
               "startingOffsets": "earliest", "maxOffsetsPerTrigger": MAX_PER_TRIGGER}
    yield topic, options, admin, prod
    prod.close()
    admin.close()


def _start(spark: Any, options: Dict[str, str], sink: BatchSink, checkpoint: str) -> Any:
    df = spark.readStream.format("kafka_ordered").options(**options).load()
    return (df.select(*COLUMNS).writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
            .trigger(processingTime="100 milliseconds").start())


def _transitions_during_query(admin: LayoutAdmin, prod: SeqProducers, topic: str, sink: BatchSink) -> int:
    """Shrink 3 -> 2 (partition 2 drains back into 0), then expand 2 -> 4 while
    partition 2 still drains (it is reused, 3 is added). Returns how many rows
    of partition 2 the query had delivered when the expansion was made."""
    admin.shrink(topic, 2)
    prod.await_epoch(3)
    prod.phase(8)
    p2_read = sum(1 for r in sink.rows() if r["partition"] == 2)
    admin.expand(topic, 4)
    prod.await_epoch(4)
    prod.phase(8)
    return p2_read


def _partition_rows(sink: BatchSink, batch: int, partition: int) -> int:
    return sum(1 for r in sink.batches[batch] if r["partition"] == partition)


def _check_complete(sink: BatchSink, prod: SeqProducers) -> None:
    got = delivered(sink.batches)
    dups = [r for r, n in collections.Counter(got).items() if n > 1]
    assert not dups, f"{len(dups)} records delivered twice, e.g. {dups[:3]}"
    missing = prod.acked - set(got)
    assert not missing, f"{len(missing)} acknowledged records never arrived, e.g. {sorted(missing)[:3]}"
    assert len(got) == len(prod.acked)


def test_gated_query_keeps_order_through_transitions(spark: Any, scenario: Tuple[Any, ...], tmp_path: Any,
                                                      wait_until: Callable[..., None]) -> None:
    topic, options, admin, prod = scenario
    sink = BatchSink(COLUMNS)
    q = _start(spark, options, sink, str(tmp_path / "ck"))
    try:
        wait_until(lambda: len(sink.batches) >= 1, 120, "the first batch", q)
        p2_read_at_expand = _transitions_during_query(admin, prod, topic, sink)
        total = len(prod.acked)
        wait_until(lambda: sink.count() >= total, 120, f"{total} records", q)
        q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None
    # Partition 2 was held behind its gate while partition 0's backlog was
    # read, and was still draining when it was reused by the second expansion.
    assert _partition_rows(sink, 0, 2) == 0 and _partition_rows(sink, 0, 0) > 0
    assert p2_read_at_expand == 0
    assert len(sink.batches) >= 5
    assert order_violations(sink.batches) == []
    _check_complete(sink, prod)


def test_ungated_query_shows_violation(spark: Any, scenario: Tuple[Any, ...], tmp_path: Any,
                                       wait_until: Callable[..., None]) -> None:
    """The same scenario with gating off: the oracle must catch reordering
    (proof that it can fail)."""
    topic, options, admin, prod = scenario
    sink = BatchSink(COLUMNS)
    q = _start(spark, {**options, "ordered.gating": "false"}, sink, str(tmp_path / "ck"))
    try:
        total = len(prod.acked)
        wait_until(lambda: sink.count() >= total, 120, f"{total} records", q)
    finally:
        q.stop()
    assert _partition_rows(sink, 0, 2) > 0  # read in the first batch, ahead of its keys' backlog
    violations = order_violations(sink.batches)
    assert violations, "gating off should have reordered keys that moved to partition 2"
    _check_complete(sink, prod)  # nothing lost either way


def test_restart_from_checkpoint_mid_transition(spark: Any, scenario: Tuple[Any, ...], tmp_path: Any,
                                                wait_until: Callable[..., None]) -> None:
    """Batch 2 fails after Spark planned it (offsets logged, not committed) while
    partition 2 is still held by its gate; the restarted query replays it with
    the same offsets and continues; the sink (idempotent by batch id) ends with
    every record once, in order."""
    topic, options, admin, prod = scenario
    admin.shrink(topic, 2)  # a second transition before the query
    prod.await_epoch(3)
    prod.phase(5)
    checkpoint = str(tmp_path / "ck")
    sink = BatchSink(COLUMNS, fail_at=2)
    q = _start(spark, options, sink, checkpoint)
    with pytest.raises(Exception, match="injected failure"):
        q.awaitTermination(120)
    assert sorted(sink.batches) == [0, 1]
    # Mid-transition: partition 2 is still held by its gate.
    assert _partition_rows(sink, 0, 2) == _partition_rows(sink, 1, 2) == 0
    first_two = sum(len(r) for r in sink.batches.values())
    assert first_two < len(prod.acked)  # stopped mid-backlog

    q = _start(spark, options, sink, checkpoint)
    try:
        wait_until(lambda: 2 in sink.batches, 120, "the replayed batch 2", q)
        admin.expand(topic, 4)  # and one more transition after the restart
        prod.await_epoch(4)
        prod.phase(6)
        total = len(prod.acked)
        wait_until(lambda: sink.count() >= total, 120, f"{total} records", q)
        q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None
    assert order_violations(sink.batches) == []
    _check_complete(sink, prod)
