"""OrderedProducer vs plain confluent-kafka Producer, same broker, same run.

    python benchmarks/producer.py [--records 1000000] [--keys 10000] [--rounds 2] [--switches 20]

Steady state: records of 100 bytes over 10k keys to a managed topic. The
plain producer gets explicit partitions computed the same way (the topic's
``Layout.partition_for``) and the same settings (acks=all, idempotence,
linger.ms=5); rounds alternate the order (plain first, then ordered first) and
each side keeps its best: this machine's speed drifts by tens of percent.
Switching: while one producer writes continuously, the layout changes
``--switches`` times; each registration's pause (flush, two end-offset
reads and the layout-log append; no fixed pause since the causal-token
protocol) is recorded.

Ends with one line per target::

    BENCH <name> value=<x> target=<op><y> PASS|MISS
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from typing import Any, Callable, Dict, List

from _common import bench, broker, percentile

from confluent_kafka import Producer

from kafka_ordered import LayoutAdmin, OrderedProducer

SETTINGS = {"linger.ms": 5, "acks": "all", "enable.idempotence": True, "queue.buffering.max.messages": 500000}


def _run(send: Callable[[int], None], flush: Callable[[], Any], n: int) -> float:
    began = time.perf_counter()
    for i in range(n):
        send(i)
    flush()
    return n / (time.perf_counter() - began)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--switches", type=int, default=20)
    a = ap.parse_args()
    value = b"x" * 100
    keys = [f"key-{i:06d}".encode() for i in range(a.keys)]
    with broker() as bootstrap:
        conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"}
        admin = LayoutAdmin(conf)
        topic = f"bench-producer-{uuid.uuid4().hex[:6]}"
        layout = admin.create_topic(topic, 8, physical_partitions=16)
        plain = Producer({"bootstrap.servers": bootstrap, **SETTINGS})
        ordered = OrderedProducer({**conf, **SETTINGS})
        part = layout.partition_for
        nk = len(keys)

        def plain_send(i: int) -> None:
            k = keys[i % nk]
            while True:
                try:
                    plain.produce(topic, value, k, part(k))
                    return
                except BufferError:
                    plain.poll(0.01)

        def ordered_send(i: int) -> None:
            while True:
                try:
                    ordered.produce(topic, value, keys[i % nk])
                    return
                except BufferError:
                    ordered.poll(0.01)

        _run(ordered_send, ordered.flush, 1000)  # first registration, warm-up
        _run(plain_send, plain.flush, 1000)
        best = {"plain": 0.0, "ordered": 0.0}
        sides = [("plain", plain_send, plain.flush), ("ordered", ordered_send, ordered.flush)]
        for r in range(a.rounds):
            for name, send, flush in sides if r % 2 == 0 else sides[::-1]:  # ABBA: drift hits both
                rate = _run(send, flush, a.records)
                best[name] = max(best[name], rate)
                print(f"round {r + 1} {name:>8}: {rate:,.0f} records/s")
        ratio = best["ordered"] / best["plain"]

        # Layout switches under load.
        switcher = OrderedProducer({**conf, "linger.ms": 5})
        stop = threading.Event()
        slowest_call: List[float] = []

        def load() -> None:
            i = 0
            worst = 0.0
            while not stop.is_set():
                t = time.perf_counter()
                try:
                    switcher.produce(topic, value, keys[i % nk])
                except BufferError:
                    switcher.poll(0.01)
                worst = max(worst, time.perf_counter() - t)
                i += 1
                if i % 100 == 0:
                    switcher.poll(0)
                    time.sleep(0.001)  # a steady ~50-80k records/s, not a flood
            slowest_call.append(worst)

        t = threading.Thread(target=load)
        t.start()
        time.sleep(1.0)
        for s in range(a.switches):
            cur = admin.layout(topic)
            if cur.partitions < 16 and (s % 2 == 0 or cur.partitions == 8):
                admin.expand(topic, cur.partitions + 1)
            else:
                admin.shrink(topic, cur.partitions - 1)
            time.sleep(0.4)
        stop.set()
        t.join()
        switcher.flush(30)
        pauses = [r.pause_s * 1000 for r in switcher.registrations if r.gates]
        for r in switcher.registrations[-5:]:
            print(r)
        print(f"steady state: plain {best['plain']:,.0f}/s, ordered {best['ordered']:,.0f}/s, ratio {ratio:.3f}")
        print(f"switch pauses ({len(pauses)} registrations with gates, no settle pause): "
              f"p50 {percentile(pauses, 0.5):.1f} ms, p99 {percentile(pauses, 0.99):.1f} ms, "
              f"max {max(pauses):.1f} ms; slowest produce() call {max(slowest_call) * 1000:.1f} ms")
        for c in (ordered, switcher):
            c.close()
        plain.flush(30)
        admin.close()
    print(bench("producer_ordered_vs_plain_throughput", ratio, ">=", 0.95))
    print(bench("producer_switch_pause_p99_ms", percentile(pauses, 0.99), "<", 200, "{:.1f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
