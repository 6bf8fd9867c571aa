"""OrderedProducer.produce vs the raw confluent-kafka Producer.produce, paired.

    python benchmarks/producer.py [--records 300000] [--rounds 7] [--switches 10]

Baseline: ``Producer.produce(topic, value, key)`` as its users call it, with
librdkafka's own partitioner (``partitioner=murmur2_random``, Kafka's Java
partitioner, which a managed topic at its initial count equals). Both
producers get the same delivery settings (acks=all, idempotence, linger.ms=5,
a queue large enough never to fill) and the same loop, ``p.produce(topic,
value, key)`` over 10k keys with 100-byte values to a managed topic of 8
partitions. Timed: the produce() calls (librdkafka sends in the background
meanwhile); the queue is purged after each run, untimed. Rounds alternate
which arm runs first; each pair gives a ratio.

Second comparison: the same with one busy application thread running
pure-Python work during both arms (a per-record path that releases the GIL
waits a switch interval per record there).

Also: the pause of each registration while one producer writes and the
layout changes ``--switches`` times (flush, two end-offset reads, the
layout-log append; no fixed pause since the causal-token protocol).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from typing import Any, Callable, List

from _common import BusyThread, bench, broker, machine, paired, percentile

from confluent_kafka import Producer

from kafka_ordered import LayoutAdmin, OrderedProducer

SETTINGS = {"linger.ms": 5, "acks": "all", "enable.idempotence": True,
            "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_000_000}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--switches", type=int, default=10)
    a = ap.parse_args()
    print(machine())
    value = b"x" * 100
    keys = [f"key-{i:06d}".encode() for i in range(a.keys)]
    nk = len(keys)
    n = a.records
    with broker() as bootstrap:
        conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"}
        admin = LayoutAdmin(conf)
        topic = f"bench-producer-{uuid.uuid4().hex[:6]}"
        admin.create_topic(topic, 8, physical_partitions=16)
        raw = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", **SETTINGS})
        ordered = OrderedProducer({**conf, **SETTINGS})

        def rate_of(p: Any, inner: Producer) -> Callable[[], float]:
            def run() -> float:
                began = time.perf_counter()
                for i in range(n):
                    p.produce(topic, value, keys[i % nk])
                elapsed = time.perf_counter() - began
                inner.purge(in_queue=True, in_flight=False)
                inner.flush(30)
                return n / elapsed
            return run

        raw_run, ordered_run = rate_of(raw, raw), rate_of(ordered, ordered.producer)
        ordered.produce(topic, value, keys[0])  # the first keyed send registers
        ordered.flush(30)
        raw_run(), ordered_run()  # warm-up, not counted
        print(f"produce() calls, {n} records per run:")
        alone = paired("alone", ("raw", raw_run), ("ordered", ordered_run), a.rounds, "calls/s")
        with BusyThread():
            busy = paired("busy thread", ("raw", raw_run), ("ordered", ordered_run), a.rounds, "calls/s")

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
        print(f"switch pauses ({len(pauses)} registrations with gates, no settle pause): "
              f"p50 {percentile(pauses, 0.5):.1f} ms, p99 {percentile(pauses, 0.99):.1f} ms, "
              f"max {max(pauses):.1f} ms; slowest produce() call {max(slowest_call) * 1000:.1f} ms")
        for c in (ordered, switcher):
            c.close()
        raw.flush(30)
        admin.close()
    print(bench("producer_vs_raw", statistics.median(alone), ">=", 0.95))
    print(bench("producer_busy_thread_vs_raw", statistics.median(busy), ">=", 0.90))
    print(bench("producer_switch_pause_p99_ms", percentile(pauses, 0.99), "<", 200, "{:.1f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
