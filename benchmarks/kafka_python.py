"""The kafka-python wrappers vs raw kafka-python, paired, same records.

    python benchmarks/kafka_python.py [--records 40000] [--sends 15000] [--rounds 7]

1. ``for record in consumer``: OrderedKafkaConsumer vs KafkaConsumer, each
   ``assign``ing every partition of a managed topic whose layout changes are
   passed (its group committed past them) and iterating over ``--records``
   new records; timed from ``assign`` to the last record. Both:
   ``enable_auto_commit=False``, ``fetch_max_wait_ms=100``.
2. ``send(topic, value, key)``: OrderedKafkaProducer vs KafkaProducer (its
   default partitioner, Kafka's murmur2), both with acks='all', idempotence
   and linger_ms=5; after one untimed send and flush (metadata, and the
   wrapper's registration), ``--sends`` records, timed through the final
   flush (kafka-python's sender thread shares the GIL with the sender).

Rounds alternate which arm runs first; each pair gives a ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any, Callable, List

from _common import bench, broker, machine, paired
from _data import VALUE, changed_topic, fill, keys

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP
from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import TopicPartition

from kafka_ordered import LayoutAdmin
from kafka_ordered.kafka_python import OrderedKafkaConsumer, OrderedKafkaProducer

CONSUMER = {"enable_auto_commit": False, "fetch_max_wait_ms": 100, "consumer_timeout_ms": 20000}
PRODUCER = {"acks": "all", "enable_idempotence": True, "linger_ms": 5}


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> List[CTP]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([CTP(topic, p) for p in range(partitions)], timeout=10)
    finally:
        c.close()
    return [CTP(topic, tp.partition, max(tp.offset, 0)) for tp in got]


def iterate(make: Callable[[], Any], start: List[CTP], n: int) -> Callable[[], float]:
    def run() -> float:
        c = make()
        try:
            began = time.perf_counter()
            c.assign([TopicPartition(tp.topic, tp.partition) for tp in start])
            for tp in start:
                c.seek(TopicPartition(tp.topic, tp.partition), tp.offset)
            got = 0
            for _ in c:
                got += 1
                if got == n:
                    break
            if got < n:
                raise RuntimeError(f"only {got} of {n} records arrived")
            return n / (time.perf_counter() - began)
        finally:
            c.close(autocommit=False)
    return run


def send(make: Callable[[], Any], topic: str, n: int, ks: List[bytes]) -> Callable[[], float]:
    def run() -> float:
        p = make()
        try:
            p.send(topic, VALUE, ks[0])  # metadata, and the wrapper's first registration: not timed
            p.flush(30)
            began = time.perf_counter()
            for i in range(n):
                p.send(topic, VALUE, ks[i % len(ks)])
            p.flush(60)
            return n / (time.perf_counter() - began)
        finally:
            p.close()
    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=40_000)
    ap.add_argument("--sends", type=int, default=15_000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    print(machine())
    with broker() as bootstrap:
        layout_topic = f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"
        conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
        admin = LayoutAdmin(conf)
        topic, group, final = changed_topic(bootstrap, conf, admin, 2)
        start = committed(bootstrap, group, topic, 16)
        ks = keys()
        fill(bootstrap, topic, final, a.records, ks)

        def raw_consumer() -> KafkaConsumer:
            return KafkaConsumer(bootstrap_servers=bootstrap, group_id=f"bench-raw-{uuid.uuid4().hex[:6]}", **CONSUMER)

        def ordered_consumer() -> OrderedKafkaConsumer:
            return OrderedKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                        **{"ordered.layout.topic": layout_topic}, **CONSUMER)

        print(f"for record in consumer, {a.records} records per run:")
        iterator = paired("iterator", ("raw", iterate(raw_consumer, start, a.records)),
                          ("ordered", iterate(ordered_consumer, start, a.records)), a.rounds)

        def raw_producer() -> KafkaProducer:
            return KafkaProducer(bootstrap_servers=bootstrap, **PRODUCER)

        def ordered_producer() -> OrderedKafkaProducer:
            return OrderedKafkaProducer(bootstrap_servers=bootstrap, **{"ordered.layout.topic": layout_topic},
                                        **PRODUCER)

        sends = a.sends
        print(f"send(topic, value, key) and flush, {sends} records per run:")
        sent = paired("send", ("raw", send(raw_producer, topic, sends, ks)),
                      ("ordered", send(ordered_producer, topic, sends, ks)), a.rounds)
        admin.close()
    print(bench("kafka_python_iterator_vs_raw", statistics.median(iterator), ">=", 0.95))
    print(bench("kafka_python_send_vs_raw", statistics.median(sent), ">=", 0.95))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
