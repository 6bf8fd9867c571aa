"""The layout math against real clients on a real broker: records written by
librdkafka's own partitioners, and by kafka-python with LinearHashPartitioner,
land where ``partition_for`` says."""

from __future__ import annotations

import random
import time
from typing import Any, Callable, Dict, List, Tuple

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_ordered import LinearHashPartitioner, partition_for

RECORDS = 3000


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)], operation_timeout=30)
    fs[topic].result(timeout=30)
    # wait until the metadata shows every partition
    deadline = time.monotonic() + 30
    while True:
        md = admin.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic} never showed {partitions} partitions: {t}")
        time.sleep(0.1)


def make_keys(seed: int, n: int = RECORDS, empty: bool = True) -> List[bytes]:
    rnd = random.Random(seed)
    out: List[bytes] = [b""] if empty else []
    while len(out) < n:
        r = len(out) % 3
        if r == 0:
            out.append(b"user-%d" % rnd.randrange(10**6))
        elif r == 1:
            out.append(b"order-%08d" % len(out))
        else:
            out.append(rnd.randbytes(rnd.randrange(1, 40)))
    return out


def consume_all(bootstrap: str, topic: str, physical: int, expected: int, unique: Callable[[str], str]) -> List[Tuple[int, bytes, bytes]]:
    """(partition, key, value) of every record, read by assign + seek (no group)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(physical)])
        out: List[Tuple[int, bytes, bytes]] = []
        deadline = time.monotonic() + 60
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error():
                    raise AssertionError(f"consume error: {msg.error()}")
                out.append((msg.partition(), msg.key(), msg.value()))
        # nothing extra shows up
        for msg in consumer.consume(num_messages=1000, timeout=0.5):
            out.append((msg.partition(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def produce_librdkafka(bootstrap: str, topic: str, keys: List[bytes], partitioner: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": partitioner, "linger.ms": 5})
    errors: List[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for i, key in enumerate(keys):
        producer.produce(topic, key=key, value=b"%d" % i, on_delivery=report)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors[:3]


def check_placement(records: List[Tuple[int, bytes, bytes]], keys: List[bytes], where: Callable[[bytes], int]) -> Dict[int, int]:
    assert len(records) == len(keys)
    assert sorted(int(v) for _, _, v in records) == list(range(len(keys)))
    per_partition: Dict[int, int] = {}
    wrong = []
    for partition, key, value in records:
        key = key or b""  # librdkafka may hand back an empty key as None
        assert key == keys[int(value)]
        if partition != where(key):
            wrong.append((key, partition, where(key)))
        per_partition[partition] = per_partition.get(partition, 0) + 1
    assert not wrong, f"{len(wrong)} records misplaced, e.g. {wrong[:5]}"
    return per_partition


@pytest.mark.parametrize("n", [6, 7])
def test_librdkafka_murmur2_random_matches_initial_layout(bootstrap: str, unique: Callable[[str], str], n: int) -> None:
    topic = unique("m2")
    create_topic(bootstrap, topic, n)
    # librdkafka hashes an empty (non-null) key like Java does
    keys = make_keys(n)
    produce_librdkafka(bootstrap, topic, keys, "murmur2_random")
    records = consume_all(bootstrap, topic, n, len(keys), unique)
    spread = check_placement(records, keys, lambda k: partition_for(k, n, n))
    assert set(spread) == set(range(n))


def test_librdkafka_consistent_random_matches_crc32(bootstrap: str, unique: Callable[[str], str]) -> None:
    n = 5
    topic = unique("crc")
    create_topic(bootstrap, topic, n)
    # consistent_random partitions empty keys randomly: only non-empty keys
    keys = make_keys(21, empty=False)
    produce_librdkafka(bootstrap, topic, keys, "consistent_random")
    records = consume_all(bootstrap, topic, n, len(keys), unique)
    spread = check_placement(records, keys, lambda k: partition_for(k, n, n, "crc32"))
    assert set(spread) == set(range(n))
    # and the murmur2 mapping would have put many of them elsewhere
    assert sum(partition_for(k, n, n) != partition_for(k, n, n, "crc32") for k in keys) > len(keys) // 2


@pytest.mark.parametrize("n0,n,physical", [(3, 5, 8), (4, 4, 6), (2, 7, 7)])
def test_kafka_python_linear_hash_partitioner(
    bootstrap: str, unique: Callable[[str], str], n0: int, n: int, physical: int
) -> None:
    from kafka import KafkaProducer

    topic = unique("kp")
    create_topic(bootstrap, topic, physical)
    keys = make_keys(n0 * 10 + n)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        partitioner=LinearHashPartitioner(n0, partitions=n),
        linger_ms=5,
    )
    try:
        futures = [producer.send(topic, key=key, value=b"%d" % i) for i, key in enumerate(keys)]
        producer.flush(timeout=60)
        acked = [f.get(timeout=30) for f in futures]
    finally:
        producer.close(timeout=10)
    # the broker's acknowledgements agree
    assert [md.partition for md in acked] == [partition_for(k, n0, n) for k in keys]
    records = consume_all(bootstrap, topic, physical, len(keys), unique)
    spread = check_placement(records, keys, lambda k: partition_for(k, n0, n))
    assert set(spread) == set(range(n))  # every undeleted partition used, no spare touched


def test_kafka_python_partitioner_from_layout_keeps_keys_off_spares(bootstrap: str, unique: Callable[[str], str]) -> None:
    """A topic with spare physical partitions: keys stay inside the layout."""
    from kafka import KafkaProducer

    from kafka_ordered import Layout

    topic = unique("kpn")
    create_topic(bootstrap, topic, 8)
    keys = make_keys(99, 1000)
    part = LinearHashPartitioner.from_layout(Layout(topic, 2, 4, 6, 8))
    producer = KafkaProducer(bootstrap_servers=bootstrap, partitioner=part, linger_ms=5)
    try:
        futures = [producer.send(topic, key=key, value=b"%d" % i) for i, key in enumerate(keys)]
        producer.flush(timeout=60)
        got = [f.get(timeout=30).partition for f in futures]
    finally:
        producer.close(timeout=10)
    assert got == [partition_for(k, 4, 6) for k in keys]
    assert max(got) < 6
    records = consume_all(bootstrap, topic, 8, len(keys), unique)
    check_placement(records, keys, lambda k: partition_for(k, 4, 6))
