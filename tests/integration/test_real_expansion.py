"""The real expansion path on Apache Kafka (issue 22, part 3): topics with no
spare partitions grow through CreatePartitions with the placement planner's
replica assignment; retired partitions lose their records (DeleteRecords) and
become spares a later expansion reuses; ``adopt`` of a topic written by
Java's default partitioner and by librdkafka's ``murmur2_random`` moves no
key. Checked against what the brokers report and hold, not against computed
values. Apache Kafka only (``KAFKA_ORDERED_BROKER=kafka``)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Callable, Dict, List

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_ordered import LayoutAdmin, OrderedProducer
from kafka_ordered.admin import _cluster
from kafka_ordered.testing import KafkaCluster
from kafka_ordered.testing._cluster import kafka_classpath

from .support import read_all
from ..conftest import create_plain_topic

JAVA_PRODUCER = Path(__file__).with_name("java") / "DefaultPartitionerProducer.java"


def _watermarks(bootstrap: str, topic: str, partitions: List[int]) -> Dict[int, tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafka-ordered-tests-wm"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions}
    finally:
        c.close()


def _broker_partition_count(bootstrap: str, topic: str) -> int:
    return len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions)


def test_expand_without_spares_creates_exactly_the_planned_replicas(
        cluster_or_skip: KafkaCluster, admin: LayoutAdmin, topic: str, client_config: Dict[str, Any]) -> None:
    lay = admin.create_topic(topic, initial_partitions=4)
    assert (lay.partitions, lay.physical_partitions, lay.spares) == (4, 4, frozenset())
    plan = admin.plan(topic, 6)
    assert plan.explicit_assignment and plan.placement is not None and plan.placement.partitions == [4, 5]
    res = admin.expand_with_report(topic, 6)
    assert res.layout.partitions == 6 and res.layout.physical_partitions == 6
    assert res.plan.placement is not None
    assert dict(res.plan.placement.assignment) == dict(plan.placement.assignment)
    got = _cluster.topic_assignment(client_config, topic)  # the broker's own metadata
    assert {p: got[p] for p in (4, 5)} == {p: list(r) for p, r in plan.placement.assignment.items()}
    assert all(len(set(r)) == 3 for r in got.values())  # replication factor 3, distinct brokers


def test_retired_partitions_lose_their_records_and_a_later_expand_reuses_them(
        cluster_or_skip: KafkaCluster, admin: LayoutAdmin, bootstrap: str, topic: str,
        unique: Callable[[str], str], closing: Callable[[Any], Any], ordered_config: Dict[str, Any]) -> None:
    admin.create_topic(topic, 4)
    admin.expand(topic, 6)
    producer = closing(OrderedProducer({**ordered_config, "linger.ms": 5}))
    for i in range(300):
        producer.produce(topic, b"v", f"k{i}".encode())
    assert producer.flush(30) == 0
    shrunk = admin.shrink(topic, 4)
    assert shrunk.draining == {4, 5}
    ends = _watermarks(bootstrap, topic, [4, 5])
    assert all(hi > 0 for _, hi in ends.values())
    group = unique("drained")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, p, hi) for p, (_, hi) in ends.items()], asynchronous=False)
    c.close()
    res = admin.retire(topic, [group], delete_records=True)
    assert res.retired == {4, 5} and res.layout.spares == {4, 5}
    assert res.deleted_records == {p: hi for p, (_, hi) in ends.items()}
    for p, (lo, hi) in _watermarks(bootstrap, topic, [4, 5]).items():
        assert lo == hi == ends[p][1], f"partition {p} still holds records: earliest {lo}, latest {hi}"
    grown = admin.expand_with_report(topic, 6)
    assert grown.plan.reused_spares == {4, 5} and grown.plan.placement is None
    assert grown.layout.physical_partitions == 6 and _broker_partition_count(bootstrap, topic) == 6


def _where_the_broker_has_them(bootstrap: str, topic: str, partitions: int) -> Dict[bytes, int]:
    return {m.key(): p for p, msgs in read_all(bootstrap, topic, partitions, timeout=30).items() for m in msgs}


def test_adopt_of_a_topic_written_by_java_default_producers_moves_no_key(
        cluster_or_skip: KafkaCluster, admin: LayoutAdmin, bootstrap: str, topic: str,
        closing: Callable[[Any], Any], ordered_config: Dict[str, Any]) -> None:
    create_plain_topic(bootstrap, topic, 5)
    java = subprocess.run(["java", "-cp", kafka_classpath(), str(JAVA_PRODUCER), bootstrap, topic, "200"],
                          capture_output=True, text=True, timeout=180)
    assert java.returncode == 0, java.stderr[-2000:]
    written = {line.split("\t")[0].encode(): int(line.split("\t")[1]) for line in java.stdout.splitlines()
               if "\t" in line}
    assert len(written) == 200 and len(set(written.values())) == 5
    res = admin.adopt_with_report(topic)
    assert res.hash == "murmur2" and res.layout.partitions == 5
    _assert_ordered_producer_follows(bootstrap, topic, 5, ordered_config, closing)


def test_adopt_of_a_topic_written_by_murmur2_random_producers_moves_no_key(
        cluster_or_skip: KafkaCluster, admin: LayoutAdmin, bootstrap: str, topic: str,
        closing: Callable[[Any], Any], ordered_config: Dict[str, Any]) -> None:
    create_plain_topic(bootstrap, topic, 3)
    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for i in range(200):
        p.produce(topic, b"v", f"k{i}".encode())
    assert p.flush(30) == 0
    assert admin.adopt(topic).hash == "murmur2"
    _assert_ordered_producer_follows(bootstrap, topic, 3, ordered_config, closing)


def _assert_ordered_producer_follows(bootstrap: str, topic: str, partitions: int, ordered_config: Dict[str, Any],
                                     closing: Callable[[Any], Any]) -> None:
    """Every key the foreign producers wrote, written again by an
    OrderedProducer, lands in the partition the broker already holds it in."""
    before = _where_the_broker_has_them(bootstrap, topic, partitions)
    producer = closing(OrderedProducer({**ordered_config, "linger.ms": 5}))
    for key in before:
        producer.produce(topic, b"again", key)
    assert producer.flush(30) == 0
    moved: List[bytes] = []
    for p, msgs in read_all(bootstrap, topic, partitions, timeout=30).items():
        moved += [m.key() for m in msgs if m.value() == b"again" and before[m.key()] != p]
    assert moved == [], f"{len(moved)} of {len(before)} keys moved, e.g. {moved[:5]}"
