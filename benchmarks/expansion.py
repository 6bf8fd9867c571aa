"""Gates during an expansion: that they hold, for how long, and what moved
keys pay for it.

    python benchmarks/expansion.py [--seconds 20] [--rate 3000]

A producer writes keyed records at a steady ``--rate`` (each value carries
its send time) to a managed topic of 8 partitions (12 physical) while a
group of two OrderedConsumers (subscribed, range assignment, auto-commit on,
``ordered.commit.interval.ms`` 200) keeps up with ``consume(500, 0.1)``,
the application spending 100 ms on each batch (so a member's position is a
batch behind the log's end, as with any real processing). The topic grows
8 -> 10 -> 12; the new partitions' gates wait on their parents, which the
other member owns, so a gate opens only when that member has processed its
parent up to the wait and committed.

Reported: every hold (partition, how long, records fetched and held back),
the delivery delay of records on partitions no gate involves (the baseline),
and the extra delay (delay minus the baseline's median) of moved keys'
records written after their producer switched, p50/p99 over at least 1,000
of them. Target: p99 < 2 x ordered.commit.interval.ms + one poll.
"""

from __future__ import annotations

import argparse
import os
import struct
import threading
import time
import uuid
from typing import Dict, List, Set, Tuple

from _common import bench, broker, machine, percentile

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer, transition_sources
from kafka_ordered.testing import BOOTSTRAP_ENV, group_config

POLL_S = 0.1
PROCESS_S = 0.1  # what the application spends on each batch
COMMIT_INTERVAL_MS = 200


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=int, default=3000, help="records per second")
    a = ap.parse_args()
    print(machine())
    with broker() as bootstrap:
        conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"}
        admin = LayoutAdmin(conf)
        topic = f"bench-expand-{uuid.uuid4().hex[:6]}"
        admin.create_topic(topic, 8, physical_partitions=12)
        keys = [f"key-{i:05d}".encode() for i in range(2000)]
        group = f"bench-expand-{uuid.uuid4().hex[:6]}"
        embedded = not os.environ.get(BOOTSTRAP_ENV)
        consumers = [OrderedConsumer({**conf, **group_config(embedded), "group.id": group,
                                      "auto.offset.reset": "earliest", "partition.assignment.strategy": "range",
                                      "ordered.commit.interval.ms": COMMIT_INTERVAL_MS}) for _ in range(2)]
        for c in consumers:
            c.subscribe([topic])
        delays: List[Tuple[int, float, float]] = []  # partition, sent, delivered
        stop = threading.Event()
        owned: Dict[int, Set[int]] = {0: set(), 1: set()}

        def consume(i: int, c: OrderedConsumer) -> None:
            # (assignment() is asked on the consuming thread: confluent-kafka's
            # assignment() from another thread while consume() waits can hang)
            while not stop.is_set():
                batch = c.consume(500, POLL_S)
                for m in batch:
                    if m.error() is None:
                        delays.append((m.partition(), struct.unpack("d", m.value()[:8])[0], time.time()))  # type: ignore[index]
                owned[i] = {tp.partition for tp in c.assignment()}
                if batch:
                    time.sleep(PROCESS_S)

        threads = [threading.Thread(target=consume, args=(i, c)) for i, c in enumerate(consumers)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while sum(len(o) for o in owned.values()) < 12:
            assert time.monotonic() < deadline, "the group never assigned all 12 partitions"
            time.sleep(0.1)
        print("assignment: " + ", ".join(f"member {i}: {sorted(o)}" for i, o in owned.items()), flush=True)
        producer = OrderedProducer({**conf, "linger.ms": 5})
        switched_at: Dict[int, float] = {}
        began = time.monotonic()
        changes = [(a.seconds * 0.3, 10), (a.seconds * 0.6, 12)]
        sent = 0
        while time.monotonic() - began < a.seconds:
            if changes and time.monotonic() - began >= changes[0][0]:
                admin.expand(topic, changes.pop(0)[1])
            due = int((time.monotonic() - began) * a.rate)
            while sent < due:
                producer.produce(topic, struct.pack("d", time.time()) + b"x" * 92, keys[sent % len(keys)])
                sent += 1
                for r in producer.registrations:
                    if r.gates and r.epoch not in switched_at:
                        switched_at[r.epoch] = time.time()
            producer.poll(0)
            time.sleep(0.002)
        producer.flush(30)
        time.sleep(3)
        stop.set()
        for t in threads:
            t.join()
        metrics = [c.ordered_metrics() for c in consumers]
        stalls = {p: s for c in consumers for (_, p), s in c.stall_seconds.items()}
        layouts = admin.sync().layouts(topic)
        gated: Set[int] = set()
        moved_from: Dict[int, Set[int]] = {}
        for before, after in zip(layouts, layouts[1:]):
            for p, qs in transition_sources(before, after).items():
                gated.add(p)
                moved_from.setdefault(p, set()).update(qs)
        regs = [(r.epoch, sorted(r.gates.items())) for r in producer.registrations if r.gates]
        for c in consumers:
            c.close()
        producer.close()
        admin.close()

    involved = gated | {q for qs in moved_from.values() for q in qs}
    baseline = [d - s for p, s, d in delays if p not in involved]
    base = percentile(baseline, 0.5)
    first_switch = min(switched_at.values()) if switched_at else float("inf")
    moved = [d - s - base for p, s, d in delays if p in gated and s >= first_switch]
    holds = sum(m.gate_waits.count for m in metrics)
    held_s = sum(m.gate_waits.sum_s for m in metrics)
    held_back = sum(m.records_held_back for m in metrics)
    # On a partition that was held (from before its first record: the gate's
    # start is its first offset), a record waited behind the gate when it was
    # written before the partition's first delivery (the release).
    waited: Dict[int, int] = {}
    for p in sorted(gated):
        got = [(s, d) for q, s, d in delays if q == p]
        if got and stalls.get(p, 0.0) > 0:
            opened = min(d for _, d in got)
            waited[p] = sum(1 for s, _ in got if s < opened)
    print(f"{sent} records sent; registrations with gates: {regs}")
    print(f"holds: {holds}, {held_s:.3f} s in all; per gated partition: "
          + ", ".join(f"{p}: held {stalls.get(p, 0.0):.3f} s, {waited.get(p, 0)} records waited behind it"
                      for p in sorted(gated))
          + f"; records fetched while held and dropped for a re-fetch: {held_back}")
    print(f"deliveries {len(delays)}; baseline delay (partitions no gate involves) p50 {base * 1000:.1f} ms, "
          f"p99 {percentile(baseline, 0.99) * 1000:.1f} ms")
    print(f"moved keys' records after the switch: {len(moved)}; extra delay p50 {percentile(moved, 0.5) * 1000:.1f} ms, "
          f"p99 {percentile(moved, 0.99) * 1000:.1f} ms, max {max(moved, default=float('nan')) * 1000:.1f} ms")
    unaffected_stall = sum(s for p, s in stalls.items() if p not in gated)
    if len(moved) < 1000:
        print(f"only {len(moved)} moved-key records (need 1,000): raise --seconds or --rate")
    target_ms = 2 * COMMIT_INTERVAL_MS + POLL_S * 1000
    n_gates = sum(len(gates) for _, gates in regs)
    print(bench("expansion_gates_held", holds, ">=", n_gates, "{:.0f}"))  # every registered gate held
    print(bench("expansion_unaffected_partition_stall_s", unaffected_stall, "<=", 0.0, "{:.3f}"))
    p99 = percentile(moved, 0.99) * 1000 if len(moved) >= 1000 else float("inf")
    print(bench("expansion_moved_key_extra_delay_p99_ms", p99, "<", target_ms, "{:.1f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
