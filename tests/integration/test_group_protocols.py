"""The confluent-kafka wrapper under both consumer group protocols (issue 22,
part 6): the classic protocol and KIP-848's ``group.protocol=consumer``
(server-side assignment, incremental callbacks; librdkafka refuses
``partition.assignment.strategy`` and the session settings there). A group
of two members subscribed to a topic that expands while they read keeps
every key in order and loses nothing. The control: a plain consumer that
reads the same records in an order plain Kafka clients may (the partitions
the expansion created first, as a member that is assigned them first
would) shows violations. KIP-848 needs Apache Kafka 4.x:
it skips on the embedded broker, which never assigns under it."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict

import pytest

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer
from kafka_ordered.testing import OrderingOracle

from ..conftest import spare
from .support import produce_keys, read_all

KEYS = [b"key-%03d" % i for i in range(60)]
PROTOCOLS = {"classic": {}, "consumer": {"group.protocol": "consumer"}}


def _group_conf(protocol: str, group_settings: Dict[str, Any]) -> Dict[str, Any]:
    # KIP-848 moves assignment and session timing to the broker: librdkafka refuses them in the client.
    return dict(PROTOCOLS[protocol]) if protocol == "consumer" else dict(group_settings)


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_a_group_keeps_order_across_an_expansion_under_each_protocol(
        protocol: str, embedded: bool, admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer],
        ordered_config: Dict[str, Any], group_settings: Dict[str, Any], topic: str,
        unique: Callable[[str], str], closing: Callable[[Any], Any], bootstrap: str) -> None:
    if protocol == "consumer" and embedded:
        pytest.skip("the embedded broker never assigns partitions under KIP-848 (group.protocol=consumer)")
    admin.create_topic(topic, 2, physical_partitions=spare(4))
    producer = make_producer()
    seqs: Dict[bytes, int] = {}
    for _ in range(3):
        produce_keys(producer, topic, KEYS, seqs)
    assert producer.flush(30) == 0
    group = unique("g")
    conf = {**ordered_config, **_group_conf(protocol, group_settings), "group.id": group,
            "auto.offset.reset": "earliest"}
    members = [closing(OrderedConsumer(dict(conf))) for _ in range(2)]
    for c in members:
        c.subscribe([topic])
    ordered, plain = OrderingOracle(), OrderingOracle()

    def poll(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for c in members:
                for m in c.consume(50, 0.02):
                    assert m.error() is None, m.error()
                    ordered.delivered_value(m.key(), m.value(), f"p{m.partition()}@{m.offset()}")

    poll(1.0)  # the groups form and read part of the backlog
    admin.expand(topic, 4)
    deadline = time.monotonic() + 15
    while producer.history.current(topic).epoch != 2:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for _ in range(3):
        produce_keys(producer, topic, KEYS, seqs)
    assert producer.flush(30) == 0
    total = 6 * len(KEYS)
    deadline = time.monotonic() + 60
    while ordered.report().unique < total and time.monotonic() < deadline:
        poll(0.5)
    poll(1.0)
    rep = ordered.report()
    assert rep.unique == total, f"{protocol}: delivered {rep.unique} of {total}"
    assert rep.violations == (), f"{protocol}: {rep.violations[:3]}"
    # The control: the partitions the expansion created read first, then the old ones.
    physical = admin.layout(topic).physical_partitions
    for m in [m for p in (2, 3) for m in read_all(bootstrap, topic, physical)[p]] + \
            [m for p in (0, 1) for m in read_all(bootstrap, topic, physical)[p]]:
        plain.delivered_value(m.key(), m.value(), f"p{m.partition()}@{m.offset()}")
    assert plain.report().unique == total and plain.report().violations, (
        f"{protocol}: the plain reading order showed no violation (the test cannot fail)")
