"""``OrderedConsumer.poll`` fetches records in batches (kafka_ordered._pollbatch):
what an application sees between two ``poll()`` calls stays the raw
client's (positions, commits, pause, seek, consume)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

import pytest
from confluent_kafka import TopicPartition

from kafka_ordered import ConfigError, LayoutAdmin, OrderedConsumer, OrderedProducer

PER_PARTITION = 1500


def _fill(admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], topic: str) -> Dict[int, int]:
    admin.create_topic(topic, 2)
    producer = make_producer()
    for p in (0, 1):
        for i in range(PER_PARTITION):
            producer.produce(topic, value=b"%d" % i, partition=p)
    assert producer.flush(30) == 0
    return {0: PER_PARTITION, 1: PER_PARTITION}


def _start(c: OrderedConsumer, topic: str) -> None:
    c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])


def _batched(admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], consumer: OrderedConsumer,
             topic: str) -> Tuple[Dict[int, int], Dict[int, List[int]]]:
    """Fill the topic, start ``consumer`` and poll until it keeps records of
    partition 0 back: the ends of both partitions and the offsets returned."""
    ends = _fill(admin, make_producer, topic)
    _start(consumer, topic)
    got: Dict[int, List[int]] = {0: [], 1: []}
    _poll_until_batched(consumer, got)
    return ends, got


def _poll_until_batched(c: OrderedConsumer, got: Dict[int, List[int]], partition: int = 0) -> None:
    """Poll until poll() keeps back records of ``partition`` (the premise of these tests)."""
    for _ in range(2 * PER_PARTITION):
        m = c.poll(10.0)
        assert m is not None and m.error() is None
        got[m.partition()].append(m.offset())
        if any(r.partition() == partition for r in c._batch.records):
            return
    pytest.fail(f"poll() never kept back records of partition {partition}")


def _poll_rest(c: OrderedConsumer, got: Dict[int, List[int]], until: Callable[[], bool]) -> None:
    for _ in range(4 * PER_PARTITION):
        if until():
            return
        m = c.poll(2.0)
        if m is not None:
            assert m.error() is None
            got[m.partition()].append(m.offset())
    assert until(), {p: len(v) for p, v in got.items()}


def test_pause_mid_batch_returns_nothing_more_of_the_partition_and_resume_loses_nothing(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str,
) -> None:
    c = make_consumer()
    ends, got = _batched(admin, make_producer, c, topic)
    for p in (0, 1):
        want = got[p][-1] + 1 if got[p] else 0
        assert c.position([TopicPartition(topic, p)])[0].offset == want, "position counts only returned records"
    c.pause([TopicPartition(topic, 0)])
    paused_at = len(got[0])
    _poll_rest(c, got, lambda: len(got[1]) == ends[1])
    assert len(got[0]) == paused_at, "a paused partition's fetched records were returned"
    c.resume([TopicPartition(topic, 0)])
    _poll_rest(c, got, lambda: len(got[0]) == ends[0])
    assert got == {p: list(range(ends[p])) for p in (0, 1)}


def test_seek_mid_batch_and_consume_after_poll_continue_where_asked(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str,
) -> None:
    c = make_consumer()
    ends, got = _batched(admin, make_producer, c, topic)
    c.seek(TopicPartition(topic, 0, 7))
    got[0] = list(range(7))
    batch = c.consume(PER_PARTITION, 10.0)  # the rest of the batch first, then the client's
    assert batch
    for m in batch:
        got[m.partition()].append(m.offset())
    _poll_rest(c, got, lambda: all(len(got[p]) >= ends[p] for p in (0, 1)))
    assert got == {p: list(range(ends[p])) for p in (0, 1)}


def test_commit_and_close_mid_batch_commit_only_returned_records(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str, unique: Callable[[str], str],
) -> None:
    group = unique("g")
    c = make_consumer(group)
    _, got = _batched(admin, make_producer, c, topic)
    kept = len(c._batch.records)
    want = {p: (got[p][-1] + 1 if got[p] else 0) for p in (0, 1)}
    c.commit(asynchronous=False)
    c.close()
    assert kept > 0
    with pytest.raises(RuntimeError, match="closed"):
        c.poll(0)  # nothing kept back is returned after close
    after = make_consumer(group)
    committed = {t.partition: t.offset for t in after.committed([TopicPartition(topic, p) for p in (0, 1)],
                                                                  timeout=10)}
    for p, off in want.items():
        assert committed[p] == off or (off == 0 and committed[p] < 0), (committed, want)


def test_one_record_per_fetch_when_asked_and_bad_values_refused(
    make_consumer: Callable[..., OrderedConsumer], ordered_config: Dict[str, Any],
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], topic: str,
) -> None:
    ends = _fill(admin, make_producer, topic)
    c = make_consumer(**{"ordered.poll.batch.records": 1})
    _start(c, topic)
    got: Dict[int, List[int]] = {0: [], 1: []}
    held = 0

    def done() -> bool:
        nonlocal held
        held = max(held, len(c._batch.records))
        return all(len(got[p]) == ends[p] for p in (0, 1))

    _poll_rest(c, got, done)
    assert held == 0 and got == {p: list(range(ends[p])) for p in (0, 1)}
    for bad in (0, -3, "many"):
        with pytest.raises(ConfigError, match="ordered.poll.batch.records"):
            OrderedConsumer({**ordered_config, "group.id": "g", "ordered.poll.batch.records": bad})
