"""The extra delay of moved keys through a Spark pipeline around an expansion of its output topic.

    python benchmarks/spark_pipeline.py [--seconds 24] [--rate 1500] [--cores 2]

A streaming query reads managed topic A (``format("kafka_ordered")``),
passes every record through and writes managed topic B with the
``kafka_ordered`` sink (trigger every 100 ms). An ``OrderedProducer``
writes A at ``--rate`` records/s (500 keys; the value is the send time);
an ``OrderedConsumer`` group reads B and records each record's end-to-end
latency (send to delivery, one clock). A third of the way in, B expands
from 2 to 3 partitions: the keys whose B partition changes are *moved*;
their first records after the change wait behind a gate until the group has
processed what earlier micro-batches wrote to their old partition.

A warm-up (one record per key, not counted) runs through the pipeline
first. Value: p99 latency of moved keys minus p99 latency of the other keys, over
the records sent in the ``--window`` seconds after the expansion
(``BENCH spark_pipeline_moved_key_delay_p99_ms``, target < 1000 ms).
Printed too: both p50/p99 before and after, and how many records each had.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
import uuid
from typing import List, Tuple

from _common import bench, broker, machine, percentile
from _spark import session

from kafka_ordered import OrderedConsumer, OrderedProducer
from kafka_ordered.admin import LayoutAdmin
from kafka_ordered.testing import BOOTSTRAP_ENV, group_config


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=24.0)
    ap.add_argument("--rate", type=int, default=1500)
    ap.add_argument("--window", type=float, default=6.0)
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args()
    print(machine())
    root = tempfile.mkdtemp(prefix="bench-spark-pipe-")
    keys = [f"key-{i:04d}".encode() for i in range(500)]
    samples: List[Tuple[int, bytes, float]] = []  # (send ns, key, latency ms)
    try:
        with broker() as bootstrap:
            layout_topic = f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"
            a, b = f"bench-pipe-a-{uuid.uuid4().hex[:6]}", f"bench-pipe-b-{uuid.uuid4().hex[:6]}"
            conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
            admin = LayoutAdmin(conf)
            admin.create_topic(a, 2)
            admin.create_topic(b, 2, physical_partitions=4)
            before_layout = admin.layout(b)
            spark = session("bench-spark-pipeline", args.cores)
            src = {"kafka.bootstrap.servers": bootstrap, "subscribe": a, "ordered.layout.topic": layout_topic,
                   "startingOffsets": "earliest"}
            dst = {"kafka.bootstrap.servers": bootstrap, "topic": b, "ordered.layout.topic": layout_topic}
            q = (spark.readStream.format("kafka_ordered").options(**src).load().select("key", "value")
                 .writeStream.format("kafka_ordered").options(**dst)
                 .option("checkpointLocation", os.path.join(root, "ck"))
                 .trigger(processingTime="100 milliseconds").start())
            stop = threading.Event()
            consumer = OrderedConsumer({**conf, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                                        "auto.offset.reset": "earliest",
                                        **group_config(not os.environ.get(BOOTSTRAP_ENV))})
            consumer.subscribe([b])

            def consume() -> None:
                while not stop.is_set():
                    for m in consumer.consume(500, 0.1):
                        if m.error() is None:
                            now = time.time_ns()
                            sent = int(m.value())
                            samples.append((sent, m.key(), (now - sent) / 1e6))

            t = threading.Thread(target=consume, daemon=True)
            t.start()
            producer = OrderedProducer({**conf, "linger.ms": 5})
            # Warm-up (not counted): the query's first batches start the Python workers.
            for i, k in enumerate(keys):
                producer.produce(a, value=str(time.time_ns()).encode(), key=k)
            producer.flush(30)
            deadline = time.monotonic() + 120
            while len(samples) < len(keys) and time.monotonic() < deadline:
                time.sleep(0.1)
            print(f"warm-up: {len(samples)} records through the pipeline", flush=True)
            del samples[:]
            began = time.monotonic()
            expand_ns = 0
            sent = 0
            while time.monotonic() - began < args.seconds:
                if not expand_ns and time.monotonic() - began > args.seconds / 3:
                    admin.expand(b, 3)
                    expand_ns = time.time_ns()
                    print(f"expanded {b} to 3 partitions at {time.monotonic() - began:.1f}s", flush=True)
                target = int((time.monotonic() - began) * args.rate)
                while sent < target:
                    producer.produce(a, value=str(time.time_ns()).encode(), key=keys[sent % len(keys)])
                    sent += 1
                producer.poll(0)
                time.sleep(0.005)
            producer.flush(30)
            deadline = time.monotonic() + 30
            while len({s[0] for s in samples}) < sent and time.monotonic() < deadline:
                time.sleep(0.2)
            stop.set()
            t.join()
            q.stop()
            consumer.close()
            producer.close()
            after_layout = admin.layout(b)
            admin.close()
            spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    moved = {k for k in keys if before_layout.partition_for(k) != after_layout.partition_for(k)}
    window_end = expand_ns + int(args.window * 1e9)

    def stats(sel: List[float]) -> str:
        return f"p50 {percentile(sel, 0.5):.0f} ms, p99 {percentile(sel, 0.99):.0f} ms, n={len(sel)}"

    pre = [lat for s, k, lat in samples if s < expand_ns]
    win_moved = [lat for s, k, lat in samples if expand_ns <= s < window_end and k in moved]
    win_other = [lat for s, k, lat in samples if expand_ns <= s < window_end and k not in moved]
    print(f"  records sent {sent}, delivered {len(samples)} (duplicates included); {len(moved)} of "
          f"{len(keys)} keys moved")
    print(f"  before the expansion, all keys: {stats(pre)}")
    print(f"  {args.window:.0f} s after it, moved keys: {stats(win_moved)}")
    print(f"  {args.window:.0f} s after it, other keys: {stats(win_other)}")
    extra = percentile(win_moved, 0.99) - percentile(win_other, 0.99)
    print(bench("spark_pipeline_moved_key_delay_p99_ms", extra, "<", 1000, "{:.0f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
