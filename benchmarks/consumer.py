"""OrderedConsumer vs plain confluent-kafka Consumer, same broker, same run.

    python benchmarks/consumer.py [--records 1000000] [--rounds 2] [--expansion-seconds 12]

Steady state: the same records (100 bytes, 10k keys, 8 partitions of a
managed topic) consumed by a plain ``Consumer`` and by ``OrderedConsumer``
(both ``assign`` from offset 0, ``consume(500)``, timed from ``assign``);
rounds alternate the order and each side keeps its best.

During an expansion: a producer writes at a steady rate (records carry their
send time) while a group of two ordered consumers keeps up; the topic grows
8 -> 10 -> 12. For every record, delivery delay = delivery time - send time.
Reported: extra delay of moved keys' records written after their producer
switched (p50/p99 over the baseline p50 of unaffected partitions), and the
stall of partitions no gate involves (time held at a gate: target zero).
Target for moved keys: p99 extra delay < 2 x ordered.commit.interval.ms +
one poll (the consumers poll with a 100 ms timeout).

Ends with one line per target::

    BENCH <name> value=<x> target=<op><y> PASS|MISS
"""

from __future__ import annotations

import argparse
import os
import struct
import threading
import time
import uuid
from typing import Any, Dict, List, Set, Tuple

from _common import bench, broker, percentile

from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer, transition_sources
from kafka_ordered.testing import BOOTSTRAP_ENV, group_config

POLL_S = 0.1


def _fill(bootstrap: str, topic: str, layout: Any, n: int, keys: List[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    value = b"x" * 100
    for i in range(n):
        k = keys[i % len(keys)]
        while True:
            try:
                p.produce(topic, value, k, layout.partition_for(k))
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)


def _drain(consumer: Any, n: int, began: float) -> float:
    got = 0
    while got < n:
        got += sum(1 for m in consumer.consume(500, 1.0) if m.error() is None)
    return n / (time.perf_counter() - began)


def steady_state(bootstrap: str, conf: Dict[str, Any], admin: LayoutAdmin, records: int, rounds: int) -> float:
    topic = f"bench-consumer-{uuid.uuid4().hex[:6]}"
    layout = admin.create_topic(topic, 8, physical_partitions=8)
    keys = [f"key-{i:06d}".encode() for i in range(10_000)]
    _fill(bootstrap, topic, layout, records, keys)
    best = {"plain": 0.0, "ordered": 0.0}
    for r in range(rounds):
        for name in ("plain", "ordered") if r % 2 == 0 else ("ordered", "plain"):  # ABBA
            group = {"group.id": f"bench-{name}-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False}
            if name == "plain":
                c: Any = Consumer({"bootstrap.servers": bootstrap, **group})
            else:
                c = OrderedConsumer({**conf, **group})
            began = time.perf_counter()  # from assign: prefetching counts for both
            c.assign([TopicPartition(topic, p, 0) for p in range(8)])
            rate = _drain(c, records, began)
            c.close()
            best[name] = max(best[name], rate)
            print(f"round {r + 1} {name:>8}: {rate:,.0f} records/s")
    ratio = best["ordered"] / best["plain"]
    print(f"steady state: plain {best['plain']:,.0f}/s, ordered {best['ordered']:,.0f}/s, ratio {ratio:.3f}")
    return ratio


def expansion(bootstrap: str, conf: Dict[str, Any], admin: LayoutAdmin, seconds: float) -> Tuple[float, float, float, float]:
    topic = f"bench-expand-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, 8, physical_partitions=12)
    keys = [f"key-{i:05d}".encode() for i in range(2000)]
    group = f"bench-expand-{uuid.uuid4().hex[:6]}"
    consumers = [OrderedConsumer({**conf, **group_config(not os.environ.get(BOOTSTRAP_ENV)), "group.id": group, "auto.offset.reset": "earliest"})
                 for _ in range(2)]
    for c in consumers:
        c.subscribe([topic])
    delays: List[Tuple[int, bytes, float, float]] = []  # partition, key, sent, delivered
    stop = threading.Event()

    def consume(c: OrderedConsumer) -> None:
        while not stop.is_set():
            for m in c.consume(500, POLL_S):
                if m.error() is None:
                    delays.append((m.partition(), m.key(), struct.unpack("d", m.value()[:8])[0], time.time()))

    threads = [threading.Thread(target=consume, args=(c,)) for c in consumers]
    for t in threads:
        t.start()
    producer = OrderedProducer({**conf, "linger.ms": 5})
    switched_at: Dict[int, float] = {}
    epochs_seen: Set[int] = set()
    began = time.monotonic()
    i = 0
    changes = [(seconds * 0.35, 10), (seconds * 0.65, 12)]
    while time.monotonic() - began < seconds:
        if changes and time.monotonic() - began >= changes[0][0]:
            admin.expand(topic, changes.pop(0)[1])
        k = keys[i % len(keys)]
        producer.produce(topic, struct.pack("d", time.time()) + b"x" * 92, k)
        for r in producer.registrations:
            if r.gates and r.epoch not in epochs_seen:
                epochs_seen.add(r.epoch)
                switched_at[r.epoch] = time.time()
        i += 1
        if i % 50 == 0:
            producer.poll(0)
            time.sleep(0.01)  # ~5k records/s: the group keeps up
    producer.flush(30)
    time.sleep(3)
    stop.set()
    for t in threads:
        t.join()
    history = admin.sync()
    layouts = history.layouts(topic)
    gated: Set[int] = set()
    moved_from: Dict[int, Set[int]] = {}
    for before, after in zip(layouts, layouts[1:]):
        for p, qs in transition_sources(before, after).items():
            gated.add(p)
            moved_from.setdefault(p, set()).update(qs)
    involved = gated | {q for qs in moved_from.values() for q in qs}
    unaffected = [d - s for p, _, s, d in delays if p not in involved]
    base = percentile(unaffected, 0.5)
    first_switch = min(switched_at.values()) if switched_at else float("inf")
    moved = [d - s - base for p, _, s, d in delays if p in gated and s >= first_switch]
    stall_unaffected = sum(sec for c in consumers for (t, p), sec in c.stall_seconds.items() if p not in gated)
    stall_moved = sum(sec for c in consumers for (t, p), sec in c.stall_seconds.items() if p in gated)
    for c in consumers:
        c.close()
    producer.close()
    print(f"expansion: {len(delays)} deliveries, baseline delay p50 {base * 1000:.1f} ms (unaffected partitions); "
          f"moved keys after the switch: {len(moved)} records, extra delay p50 {percentile(moved, 0.5) * 1000:.1f} ms, "
          f"p99 {percentile(moved, 0.99) * 1000:.1f} ms; held time: gated partitions {stall_moved:.2f} s, "
          f"unaffected partitions {stall_unaffected:.3f} s")
    return percentile(moved, 0.5), percentile(moved, 0.99), stall_unaffected, stall_moved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--expansion-seconds", type=float, default=12.0)
    a = ap.parse_args()
    with broker() as bootstrap:
        conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"}
        admin = LayoutAdmin(conf)
        ratio = steady_state(bootstrap, conf, admin, a.records, a.rounds)
        p50, p99, stall_unaffected, _ = expansion(bootstrap, conf, admin, a.expansion_seconds)
        admin.close()
    commit_ms = 200
    print(bench("consumer_ordered_vs_plain_throughput", ratio, ">=", 0.90))
    print(bench("consumer_unaffected_partition_stall_s", stall_unaffected, "<=", 0.0, "{:.3f}"))
    print(bench("consumer_moved_key_extra_delay_p99_ms", p99 * 1000, "<", 2 * commit_ms + POLL_S * 1000, "{:.1f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
