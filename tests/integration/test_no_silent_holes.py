"""Edges a user touches keep the guarantee or fail loudly (issue 10), and one
set of layout-log resources per process (issue 11). Each test here failed on
the code before the cores were composed over ports."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Optional

import pytest
from confluent_kafka import KafkaException

from kafka_ordered import BrokerUnavailableError, LayoutAdmin, OrderedConsumer, OrderedProducer
from ..conftest import spare

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
    admin.create_topic(topic, 2, physical_partitions=spare(4))
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
    with pytest.raises(BrokerUnavailableError):
        OrderedConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": unique("g"),
                         "ordered.metadata.timeout.ms": 1000})
    from kafka_ordered.kafka_python import OrderedKafkaConsumer, OrderedKafkaProducer

    bootstrap = ordered_config["bootstrap.servers"]
    layout = ordered_config["ordered.layout.topic"]
    with pytest.raises(Exception):
        OrderedKafkaConsumer(bootstrap_servers=bootstrap, group_id=unique("g"), no_such_option=1,
                             **{"ordered.layout.topic": layout})
    with pytest.raises(Exception):
        OrderedKafkaProducer(bootstrap_servers=bootstrap, no_such_option=1, **{"ordered.layout.topic": layout})
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
    layout_topic = admin.layout_topic
    mine = [t for t in _follower_threads() if t.name.endswith(layout_topic)]
    assert len(mine) == 1, "the admin, the producer and the consumer share one follower"
    producer.close()
    consumer.close()
    admin.close()
    time.sleep(0.2)
    assert not [t for t in _follower_threads() if t.name.endswith(layout_topic)], \
        "the last user closes the shared follower"


def test_a_key_that_moves_twice_cannot_overtake_itself(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer],
    make_consumer: Callable[..., OrderedConsumer], topic: str, unique: Callable[[str], str],
) -> None:
    """Layouts 2 -> 3 -> 7 move key-2 p0 -> p2 -> p6. The producer writes A
    to p0, registers for 3 without writing to p2, registers for 7 and writes
    B to p6. B waits on p2, which is empty: without the waits inherited from
    the producer's own gate on p2, B was delivered while A still waited on p0."""
    from confluent_kafka import TopicPartition

    admin.create_topic(topic, 2, physical_partitions=spare(8))
    producer = make_producer(**{"ordered.producer.id": unique("p")})
    producer.produce(topic, b"A", b"key-2")  # p0
    assert producer.flush(10) == 0
    admin.expand(topic, 3)
    _wait(lambda: producer.history.current(topic).epoch == 2)  # type: ignore[union-attr]
    producer.produce(topic, b"other", b"key-0")  # p1: registers for epoch 2, nothing to p2
    assert producer.flush(10) == 0 and producer.registrations[-1].epoch == 2
    assert set(producer.registrations[-1].gates) == {2}
    admin.expand(topic, 7)
    _wait(lambda: producer.history.current(topic).epoch == 3)  # type: ignore[union-attr]
    producer.produce(topic, b"B", b"key-2")  # p6
    assert producer.flush(10) == 0

    group = unique("g")
    waiter = make_consumer(group)
    waiter.assign([TopicPartition(topic, 2), TopicPartition(topic, 6)])
    got: List[bytes] = []
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        got += [m.value() for m in waiter.consume(100, 0.1) if m.error() is None]
    assert b"B" not in got, "B was delivered while A had not been processed"
    source = make_consumer(group)
    source.assign([TopicPartition(topic, 0)])
    seen: List[bytes] = []
    deadline = time.monotonic() + 15
    while b"B" not in got and time.monotonic() < deadline:
        seen += [m.value() for m in source.consume(100, 0.1) if m.error() is None]
        got += [m.value() for m in waiter.consume(100, 0.1) if m.error() is None]
    assert b"A" in seen and b"B" in got
    gate6 = producer.registrations[-1].gates[6]
    assert gate6[1].get(0, -1) >= 1, f"the gate on p6 also waits for p0 (A): {gate6}"


def test_internal_clients_get_the_whole_config(ordered_config: Dict[str, Any], topic: str,
                                               admin: LayoutAdmin) -> None:
    """``debug`` and ``logger`` (and every other client-level key) reach the
    internal layout-log clients too, not only the application's client."""
    import logging

    admin.create_topic(topic, 2)
    records: List[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger(f"test.librdkafka.{topic}")
    logger.addHandler(Collect())
    logger.setLevel(logging.DEBUG)
    with OrderedProducer({**ordered_config, "debug": "metadata", "logger": logger}) as producer:
        producer.produce(topic, b"v", KEYS[0])
        producer.flush(10)
        time.sleep(0.5)
    assert any("rdkafka#consumer" in r.getMessage() for r in records), \
        "the layout-log follower's consumer did not use the application's debug/logger settings"


def test_librdkafka_logs_go_through_logging_and_closed_clients_are_silent(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, unique: Callable[[str], str]
) -> None:
    import logging

    from kafka_ordered.testing import EmbeddedBroker

    broker = EmbeddedBroker().start()
    conf = {"bootstrap.servers": broker.bootstrap_servers, "ordered.metadata.timeout.ms": 3000}
    with caplog.at_level(logging.INFO, logger="kafka_ordered"):
        admin = LayoutAdmin(conf)
        admin.create_topic(unique("t"), 2)
        producer = OrderedProducer(conf)
        consumer = OrderedConsumer({**conf, "group.id": unique("g")})
        broker.stop()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            producer.poll(0.1)
            consumer.poll(0.1)
        producer.close(0)
        consumer.close()
        admin.close()
    assert any(r.name.startswith("kafka_ordered.librdkafka") for r in caplog.records), \
        "librdkafka's log did not reach the kafka_ordered loggers"
    capfd.readouterr()
    time.sleep(1.5)
    assert "rdkafka#" not in capfd.readouterr().err, "a closed client still writes to stderr"


def test_unknown_client_key_is_refused_by_the_admin_too(ordered_config: Dict[str, Any]) -> None:
    """``LayoutAdmin`` passes every key to its clients, so a typo fails with
    librdkafka's own error instead of being dropped silently."""
    with pytest.raises(KafkaException, match="foo"):
        LayoutAdmin({**ordered_config, "foo": "bar"})


def test_cli_rejects_an_unknown_setting_in_one_line(bootstrap: str, layout_topic: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from kafka_ordered.cli import main

    code = main(["describe", "some-topic", "--bootstrap", bootstrap, "--layout-topic", layout_topic,
                 "-X", "foo=bar", "-X", "sasl.password=hunter2"])
    err = capsys.readouterr().err
    assert code == 2
    assert "foo" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "hunter2" not in err, "a secret leaked into the error"
