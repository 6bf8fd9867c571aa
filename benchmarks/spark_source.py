"""The ``kafka_ordered`` Spark source, gated vs ungated, paired, same data.

    python benchmarks/spark_source.py [--records 100000] [--rounds 7] [--cores 2]
                                      [--max-offsets-per-trigger 20000]

Data: ``--records`` records (100-byte values, 10k keys) written by an
``OrderedProducer`` to a managed topic, half under 4 partitions and half
after an expansion to 6 (8 physical), so the gated query really waits:
partitions 4 and 5 hold gates on 0 and 1.

Each round runs the same streaming query twice, gated and with
``ordered.gating=false`` (the order alternates between rounds):
``local[cores]``, ``startingOffsets=earliest``, ``maxOffsetsPerTrigger`` (at
least 5 batches), ``trigger(availableNow=True)``, ``noop`` sink. A warm-up
query (not counted) starts the Python workers first.

Rate: rows / the summed ``addBatch`` time of the query's batches (executing
them: reading and writing rows). Planning is reported separately per batch:
``latestOffset`` (where the gated source reads the layout log and caps
partitions at their gates) and ``queryPlanning``. A plain confluent-kafka
``Consumer`` reading the same records on one thread is printed for scale.
"""

from __future__ import annotations

import argparse
import os
import statistics
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any, Dict, List

from _common import bench, broker, machine, percentile, spread

from confluent_kafka import Consumer, TopicPartition

from kafka_ordered.admin import LayoutAdmin
from kafka_ordered import OrderedProducer


def fill(bootstrap: str, layout_topic: str, topic: str, records: int) -> int:
    admin = LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic})
    admin.create_topic(topic, 4, physical_partitions=8)
    p = OrderedProducer({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic,
                         "linger.ms": 20, "batch.num.messages": 10000})
    keys = [f"key-{i:06d}".encode() for i in range(10_000)]
    value = b"x" * 100
    half = records // 2
    for i in range(records):
        if i == half:
            p.flush(60)
            admin.expand(topic, 6)
            deadline = time.monotonic() + 10
            while p.history.current(topic).epoch < 2:  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "producer never saw the expansion"
                time.sleep(0.01)
        while True:
            try:
                p.produce(topic, value=value, key=keys[i % len(keys)])
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    gates = admin.sync().gates(topic)
    p.close()
    admin.close()
    return len(gates)


def plain_rate(bootstrap: str, topic: str, records: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "log_level": 3})
    c.assign([TopicPartition(topic, p, 0) for p in range(8)])
    got = 0
    began = time.perf_counter()
    while got < records:
        got += sum(1 for m in c.consume(5000, 1.0) if m.error() is None)
    rate = records / (time.perf_counter() - began)
    c.close()
    return rate


def run_query(spark: Any, options: Dict[str, str], checkpoint_root: str) -> Dict[str, Any]:
    df = spark.readStream.format("kafka_ordered").options(**options).load()
    q = (df.writeStream.format("noop").option("checkpointLocation", os.path.join(checkpoint_root, uuid.uuid4().hex))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in batches)
    run_s = sum(p["durationMs"].get("addBatch", 0) for p in batches) / 1000.0
    return {"rows": rows, "rate": rows / run_s if run_s else 0.0, "batches": len(batches),
            "latest_ms": [p["durationMs"].get("latestOffset", 0) for p in batches],
            "planning_ms": [p["durationMs"].get("queryPlanning", 0) for p in batches]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=20_000)
    args = ap.parse_args()
    print(machine())

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_connector

    checkpoints = tempfile.mkdtemp(prefix="bench-spark-")
    ratios: List[float] = []
    latest: Dict[str, List[float]] = {"gated": [], "ungated": []}
    planning: Dict[str, List[float]] = {"gated": [], "ungated": []}
    try:
        with broker() as bootstrap:
            layout_topic = f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"
            topic = f"bench-spark-{uuid.uuid4().hex[:6]}"
            t = time.perf_counter()
            n_gates = fill(bootstrap, layout_topic, topic, args.records)
            print(f"filled {args.records} records in {time.perf_counter() - t:.1f}s; {n_gates} gates", flush=True)
            plain = plain_rate(bootstrap, topic, args.records)
            print(f"plain confluent-kafka consumer, one thread: {plain:,.0f} rows/s", flush=True)

            spark = (SparkSession.builder.master(f"local[{args.cores}]").appName("bench-spark-source")
                     .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                     .config("spark.driver.host", "127.0.0.1")
                     .config("spark.sql.shuffle.partitions", str(args.cores)).getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            spark_connector.register(spark)
            options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                       "ordered.layout.topic": layout_topic, "startingOffsets": "earliest",
                       "maxOffsetsPerTrigger": str(args.max_offsets_per_trigger)}
            warm = run_query(spark, {**options, "ordered.gating": "false"}, checkpoints)
            print(f"warm-up query (ungated, not counted): {warm['batches']} batches", flush=True)
            for r in range(args.rounds):
                order = ["gated", "ungated"] if r % 2 == 0 else ["ungated", "gated"]
                res: Dict[str, Dict[str, Any]] = {}
                for mode in order:
                    opts = dict(options)
                    if mode == "ungated":
                        opts["ordered.gating"] = "false"
                    res[mode] = run_query(spark, opts, checkpoints)
                    if res[mode]["rows"] != args.records:
                        raise RuntimeError(f"{mode} query read {res[mode]['rows']} rows, expected {args.records}")
                    latest[mode] += res[mode]["latest_ms"]
                    planning[mode] += res[mode]["planning_ms"]
                ratios.append(res["gated"]["rate"] / res["ungated"]["rate"])
                print(f"  pair {r + 1}: gated {res['gated']['rate']:,.0f} rows/s in {res['gated']['batches']} batches, "
                      f"ungated {res['ungated']['rate']:,.0f} rows/s in {res['ungated']['batches']} batches, "
                      f"ratio {ratios[-1]:.3f}", flush=True)
            spark.stop()
    finally:
        shutil.rmtree(checkpoints, ignore_errors=True)

    print(f"  gated vs ungated rows/s: {spread(ratios)} over {args.rounds} pairs")
    for mode in ("gated", "ungated"):
        print(f"  planning per batch, {mode}: latestOffset p50 {percentile(latest[mode], 0.5):.0f} ms "
              f"(p90 {percentile(latest[mode], 0.9):.0f} ms), queryPlanning p50 {percentile(planning[mode], 0.5):.0f} ms; "
              f"{len(latest[mode])} batches")
    print(bench("spark_source_gated_vs_ungated", statistics.median(ratios), ">=", 0.9, "{:.3f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
