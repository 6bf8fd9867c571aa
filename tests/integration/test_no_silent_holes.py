"""Edges a user touches keep the guarantee or fail loudly (issue 10), and one
set of layout-log resources per process (issue 11). Each test here failed on
the code before the cores were composed over ports."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Optional

import pytest
from confluent_kafka import KafkaException

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer

KEYS = [f"key-{i:04d}".encode() for i in range(200)]


def _follower_threads() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kafka-ordered-follower")]


def _wait(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_refused_record_during_a_switch_fails_alone(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], topic: str
) -> None:
    """A record the client refuses (too large) while a switch buffers sends
    fails alone; the records after it are delivered and the switch completes."""
    admin.create_topic(topic, 2, physical_partitions=4)
    producer = make_producer(**{"message.max.bytes": 10_000})
    producer.produce(topic, b"v", KEYS[0])
    assert producer.flush(10) == 0
    admin.expand(topic, 3)
    _wait(lambda: producer.history.current(topic).epoch == 2)  # type: ignore[union-attr]
    with pytest.raises(KafkaException):
        producer.produce(topic, b"x" * 20_000, KEYS[1])  # starts the switch, refused by the client
    delivered: List[Optional[Any]] = []
    for k in KEYS[2:12]:
        producer.produce(topic, b"ok", k, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(10) == 0, "records after the refused one are stuck"
    assert delivered == [None] * 10
    assert len(producer) == 0


def test_failed_constructor_leaves_no_thread(ordered_config: Dict[str, Any], unique: Callable[[str], str]) -> None:
    before = len(_follower_threads())
    with pytest.raises(Exception):
        OrderedConsumer({**ordered_config, "group.id": unique("g"), "no.such.librdkafka.key": "x"})
    with pytest.raises(Exception):
        OrderedProducer({**ordered_config, "no.such.librdkafka.key": "x"})
    time.sleep(0.2)
    assert len(_follower_threads()) == before


def test_one_follower_thread_per_process(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer],
    make_consumer: Callable[..., OrderedConsumer], topic: str,
) -> None:
    """An idle producer and consumer on the same cluster share one layout-log follower."""
    admin.create_topic(topic, 2)
    before = len(_follower_threads())
    producer = make_producer()
    consumer = make_consumer()
    producer.produce(topic, b"v", KEYS[0])
    producer.flush(10)
    consumer.subscribe([topic])
    consumer.poll(0.5)
    assert len(_follower_threads()) - before <= 1
    producer.close()
    consumer.close()
    time.sleep(0.2)
    assert len(_follower_threads()) == before, "the last user closes the shared follower"
