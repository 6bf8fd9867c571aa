"""A consume-transform-produce application for test_exactly_once.py (run as
a process, so that the test can SIGKILL it).

``python eos_app.py CONFIG_JSON``: reads the input topic read_committed
(assigned every physical partition, group offsets), writes every record to
the output topic in a transaction with the consumed offsets, aborts every
``abort_every``-th transaction (and rewinds to the group's committed
offsets), prints ``committed <n>`` per committed transaction, pauses
``pause_s`` after each, and exits after ``idle_s`` seconds without input. ``mode``
``ordered`` uses the ordered wrappers; ``plain`` the plain clients, with the
output partition computed from the output's current layout (what an
application that follows resizes without the protocol does).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Dict, List

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer, partition_for


# (librdkafka does not flag these retriable on committed()'s error)
_COORDINATOR_MOVING = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                       KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._TIMED_OUT, KafkaError._TRANSPORT}


def _committed(consumer: Any, parts: List[TopicPartition]) -> List[TopicPartition]:
    """The group's committed offsets, asked again while the answer is
    retriable (NOT_COORDINATOR while the group's coordinator moves), as
    any application must."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return list(consumer.committed(parts, 10))
        except KafkaException as e:
            if e.args[0].code() not in _COORDINATOR_MOVING or time.monotonic() > deadline:
                raise
            print(f"committed() again after {e.args[0].str()}", flush=True)
            time.sleep(0.5)


def main(cfg: Dict[str, Any]) -> None:
    ordered = cfg["mode"] == "ordered"
    bs, src, dst = cfg["bootstrap"], cfg["input"], cfg["output"]
    cconf = {"bootstrap.servers": bs, "group.id": cfg["group"], "isolation.level": "read_committed",
             "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    pconf = {"bootstrap.servers": bs, "transactional.id": cfg["txid"], "linger.ms": 5}
    layout = {"ordered.layout.topic": cfg["layout_topic"]}
    admin = LayoutAdmin({"bootstrap.servers": bs, **layout})
    if ordered:
        consumer: Any = OrderedConsumer({**cconf, **layout})
        producer: Any = OrderedProducer({**pconf, **layout, "ordered.producer.id": cfg["txid"]})
    else:
        consumer = Consumer(cconf)
        producer = Producer({**pconf, "enable.idempotence": True})
    producer.init_transactions(30)
    parts = [TopicPartition(src, p) for p in range(cfg["input_physical"])]
    consumer.assign(parts)
    n = 0
    last = time.monotonic()
    while time.monotonic() - last < cfg["idle_s"]:
        msgs: List[Any] = [m for m in consumer.consume(cfg["batch"], 0.2) if m.error() is None]
        if not msgs:
            continue
        last = time.monotonic()
        n += 1
        producer.begin_transaction()
        count = admin.layout(dst).partitions
        for m in msgs:
            if ordered:
                producer.produce(dst, m.value(), m.key())
            else:
                producer.produce(dst, m.value(), m.key(), partition_for(m.key(), 2, count))
        if cfg["abort_every"] and n % cfg["abort_every"] == 0:
            producer.abort_transaction(30)
            rewind = [TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                      for tp in _committed(consumer, parts)]
            try:
                for tp in rewind:
                    consumer.seek(tp)
            except KafkaException as e:
                # librdkafka refuses to seek a partition not yet fetching
                # (its start still being looked up): assign them all anew.
                if e.args[0].code() != KafkaError._STATE:
                    raise
                consumer.assign(rewind)
            continue
        producer.send_offsets_to_transaction(consumer.position(parts), consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        print(f"committed {len(msgs)}", flush=True)
        time.sleep(cfg["pause_s"])  # (a slow application: the test kills it in the middle of its backlog)
    producer.flush(30)
    consumer.close()
    admin.close()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
