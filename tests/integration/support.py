"""Helpers shared by integration tests."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Tuple

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ..conftest import spare

#: The keys :func:`one_split` writes.
SPLIT_KEYS = [f"key-{i:04d}".encode() for i in range(200)]


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 15.0,
             isolation: str = "read_committed") -> Dict[int, List[Any]]:
    """Every record of every partition (assign + EOF, no group), by partition;
    ``isolation="read_uncommitted"`` includes aborted transactions' records."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafka-ordered-tests-reader",
                  "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 10,
                  "isolation.level": isolation})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: Dict[int, List[Any]] = {p: [] for p in range(partitions)}
        eof: set = set()
        deadline = time.monotonic() + timeout
        while len(eof) < partitions and time.monotonic() < deadline:
            for m in c.consume(1000, 0.1):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                    continue
                out[m.partition()].append(m)
        assert len(eof) == partitions, f"did not reach the end of {topic} within {timeout} s"
        return out
    finally:
        c.close()


def produce_keys(producer: Any, topic: str, keys: List[bytes], start_seq: Dict[bytes, int],
                 acks: Optional[List[Tuple[bytes, int, int, int]]] = None, pid: str = "P") -> None:
    """Produce one record per key with the next sequence number (value ``pid:seq``)."""
    from kafka_ordered.testing import encode_value

    def cb(err: Any, msg: Any) -> None:
        assert err is None, err
        if acks is not None:
            acks.append((msg.key(), int(msg.value().decode().rpartition(":")[2]), msg.partition(), msg.offset()))

    for k in keys:
        seq = start_seq.get(k, 0)
        start_seq[k] = seq + 1
        producer.produce(topic, encode_value(pid, seq), k, on_delivery=cb)
        producer.poll(0)


def one_split(admin: Any, producer: Any, topic: str, before: int = 3, after: int = 3,
              embedded: bool = False) -> Tuple[int, int]:
    """Topic of 1 undeleted partition (2 physical); ``before`` rounds of every
    key through ``producer`` (an OrderedProducer), expand to 2, ``after``
    more rounds. Returns the gate on partition 1: (start, wait on 0).
    ``embedded``: the broker is an embedded one, which cannot add
    partitions (else the session broker's kind decides)."""
    admin.create_topic(topic, 1, physical_partitions=2 if embedded else spare(2))
    seqs: Dict[bytes, int] = {}
    for _ in range(before):
        produce_keys(producer, topic, SPLIT_KEYS, seqs)
    producer.flush(10)
    admin.expand(topic, 2)
    deadline = time.monotonic() + 10
    while producer.history.current(topic).epoch != 2:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for _ in range(after):
        produce_keys(producer, topic, SPLIT_KEYS, seqs)
    producer.flush(10)
    gates = [g for g in admin.sync().gates(topic) if g.partition == 1]
    assert len(gates) == 1 and set(gates[0].wait) == {0}
    return gates[0].start, gates[0].wait[0]


_COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                       KafkaError.COORDINATOR_LOAD_IN_PROGRESS)


def commit_as_group(bootstrap: str, group: str, topic: str, partition: int, offset: int) -> None:
    """Commit ``offset`` of ``topic``/``partition`` for ``group``, as another
    member of it would (again while the group's coordinator is not ready:
    the first group of a new Apache Kafka cluster waits for __consumer_offsets)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                c.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
                return
            except KafkaException as e:
                if e.args[0].code() not in _COORDINATOR_MOVING or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def answer_of(pending: Any) -> Any:
    """The answer of an offset reader's ``pending`` read, polled without
    blocking (as a gate's read is), within 10 s."""
    deadline = time.monotonic() + 10
    while not pending.done():
        assert time.monotonic() < deadline, "no answer within 10 s"
        time.sleep(0.001)
    return pending.result()
