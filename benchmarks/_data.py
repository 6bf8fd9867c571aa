"""Topics for the consumer benchmarks, filled through the public API."""

from __future__ import annotations

import time
import uuid
from typing import Any, Dict, List, Tuple

from confluent_kafka import Producer, TopicPartition

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer

VALUE = b"x" * 100


def keys(n: int = 10_000) -> List[bytes]:
    return [f"key-{i:06d}".encode() for i in range(n)]


def fill(bootstrap: str, topic: str, layout: Any, n: int, ks: List[bytes],
         partitions: Any = None) -> None:
    """``n`` keyed records partitioned by ``layout`` (a fast plain producer;
    only the partitions in ``partitions`` when given)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 1_000_000})
    allowed = None if partitions is None else set(partitions)
    sent = i = 0
    while sent < n:
        k = ks[i % len(ks)]
        i += 1
        part = layout.partition_for(k)
        if allowed is not None and part not in allowed:
            continue
        while True:
            try:
                p.produce(topic, VALUE, k, part)
                break
            except BufferError:
                p.poll(0.05)
        sent += 1
    assert p.flush(120) == 0


def end_offsets(bootstrap: str, topic: str, partitions: int) -> Dict[int, int]:
    """True end offsets (the Fetch high watermark: ListOffsets is wrong on the
    embedded broker after multi-record batches)."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    ends: Dict[int, int] = {}
    try:
        for p in range(partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = hi
        # confirm through a fetch at the reported end (EOF carries the true end)
        c.assign([TopicPartition(topic, p, max(0, ends[p] - 1)) for p in range(partitions)])
        pending = set(range(partitions))
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is not None and m.error().code() == -191:  # _PARTITION_EOF
                    ends[m.partition()] = max(ends[m.partition()], m.offset())
                    pending.discard(m.partition())
                elif m.error() is None:
                    ends[m.partition()] = max(ends[m.partition()], m.offset() + 1)
    finally:
        c.close()
    return ends


def changed_topic(bootstrap: str, conf: Dict[str, Any], admin: LayoutAdmin, changes: int,
                  per_change: int = 2000, linger_ms: int = 5) -> Tuple[str, str, Any]:
    """A topic that went through ``changes`` layout changes (8 -> up to 16
    partitions and back) while an OrderedProducer wrote keyed records, and a
    group whose commits have passed every transition. Returns (topic, group,
    final layout)."""
    topic = f"bench-changed-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, 8, physical_partitions=16)
    ks = keys(2000)
    producer = OrderedProducer({**conf, "linger.ms": linger_ms})
    i = 0

    def write(n: int) -> None:
        nonlocal i
        for _ in range(n):
            while True:
                try:
                    producer.produce(topic, VALUE, ks[i % len(ks)])
                    break
                except BufferError:
                    producer.poll(0.05)
            i += 1
        producer.flush(60)

    write(per_change)
    for c in range(changes):
        cur = admin.layout(topic)
        if cur.partitions < 16 and (c < changes - 2 or cur.partitions == 8):
            admin.expand(topic, cur.partitions + 1)
        else:
            admin.shrink(topic, cur.partitions - 1)
        deadline = time.monotonic() + 10
        while producer.history.current(topic).epoch < cur.epoch + 1:  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the producer never saw the layout change"
            time.sleep(0.01)
        write(per_change)
    gates = sum(len(r.gates) for r in producer.registrations)
    producer.close()
    # A group reads everything written so far (its gates open as it goes) and commits.
    group = f"bench-passed-{uuid.uuid4().hex[:6]}"
    total = per_change * (changes + 1)
    c = OrderedConsumer({**conf, "group.id": group, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(16)])
    got = 0
    deadline = time.monotonic() + 120
    while got < total:
        assert time.monotonic() < deadline, f"only {got} of {total} records delivered"
        got += sum(1 for m in c.consume(500, 0.5) if m.error() is None)
    c.commit(asynchronous=False)
    c.close()
    final = admin.layout(topic)
    print(f"topic {topic}: {changes} layout changes (now {final.partitions} of 16 partitions), {gates} gates, "
          f"{total} records before them; group {group} committed past every transition", flush=True)
    return topic, group, final
