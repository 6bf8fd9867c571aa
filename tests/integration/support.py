"""Helpers shared by integration tests."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Tuple

from confluent_kafka import Consumer, KafkaError, TopicPartition


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
