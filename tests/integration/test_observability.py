"""ordered_metrics() snapshots and the Prometheus collector (issue 14, item 1)."""

from __future__ import annotations

import time
from typing import Callable

from confluent_kafka import TopicPartition
from prometheus_client import CollectorRegistry, generate_latest

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer
from kafka_ordered.metrics import ConsumerMetrics, ProducerMetrics
from kafka_ordered.prometheus import OrderedCollector

KEYS = [f"key-{i:03d}".encode() for i in range(60)]


def test_metrics_show_a_held_gate_and_a_switch(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer],
    make_consumer: Callable[..., OrderedConsumer], topic: str,
) -> None:
    before = admin.create_topic(topic, 1, physical_partitions=2)
    producer = make_producer()
    for k in KEYS:
        producer.produce(topic, b"1", k)
    producer.flush(10)
    after = admin.expand(topic, 2)
    deadline = time.monotonic() + 10
    while producer.history.current(topic).epoch < 2:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    moved = [k for k in KEYS if before.partition_for(k) != after.partition_for(k)]
    for k in moved:
        producer.produce(topic, b"2", k)
    producer.flush(10)

    consumer = make_consumer()
    consumer.assign([TopicPartition(topic, 1)])  # nobody processes p0: p1 stays held
    deadline = time.monotonic() + 3
    delivered = []
    while time.monotonic() < deadline and not consumer.ordered_metrics().held_partitions:
        delivered += [m for m in consumer.consume(100, 0.1) if m.error() is None]

    cm = consumer.ordered_metrics()
    assert isinstance(cm, ConsumerMetrics)
    # p1 is at its gate from the start: held before anything of it is fetched
    # (records_held_back counts records fetched past a gate and dropped)
    assert cm.held_partitions == 1 and delivered == []
    [gate] = cm.closed_gates
    assert (gate.topic, gate.partition, gate.held) == (topic, 1, True)
    assert gate.held_since is not None and abs(gate.held_since - time.time()) < 60
    assert 0 in gate.waiting_on and cm.layout_epochs == {topic: 2}
    assert cm.layout_view.lag == 0

    pm = producer.ordered_metrics()
    assert isinstance(pm, ProducerMetrics)
    assert pm.switches >= 2 and pm.max_switch_pause_s is not None and pm.records_buffered == 0
    assert pm.layout_epochs == {topic: 2}

    registry = CollectorRegistry()
    OrderedCollector.register(consumer, producer, registry=registry)
    text = generate_latest(registry).decode()
    group, client = cm.group_id, cm.client_id
    assert client.startswith(f"consumer-{group}-")
    assert (f'kafka_ordered_gates_closed{{client_id="{client}",group="{group}",partition="1",topic="{topic}"}} 1.0'
            in text)
    assert "kafka_ordered_gate_wait_seconds_bucket" in text
    assert "kafka_ordered_switch_pause_seconds_count" in text
    assert f'kafka_ordered_layout_epoch{{client_id="{pm.client_id}",topic="{topic}"}} 2.0' in text
