"""The ``kafka_ordered`` Spark source, gated vs ungated, same data, same run.

    python benchmarks/spark_source.py [--records 1000000] [--rounds 2] [--cores 2]
                                      [--max-offsets-per-trigger 250000]

Data: ``--records`` records (100-byte values, 10k keys) written by an
``OrderedProducer`` to a managed topic, half under 4 partitions and half
after an expansion to 6 (8 physical), so the gated query really waits:
partitions 4 and 5 hold gates on 0 and 1.

Each round runs the same streaming query twice, gated and with
``ordered.gating=false`` (order alternates between rounds): ``local[cores]``,
``startingOffsets=earliest``, ``maxOffsetsPerTrigger``, ``trigger(availableNow=True)``,
``noop`` sink. A warm-up query over the same data (not counted) starts the
Python workers and warms the JIT first.
Rates are records / wall time of the whole query (query start, planning and
every micro-batch included); each mode keeps its best round (the machine is
shared, so single runs are noisy). The in-batch rate (records / summed
``triggerExecution`` of the batches) is printed for information.

Rows/s per executor core are printed for information (the issue sets no
target for them), next to one plain confluent-kafka ``Consumer`` (``assign``,
``consume(5000)``) reading the same records on one thread.

Ends with one line per target::

    BENCH <name> value=<x> target=<op><y> PASS|MISS
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any, Dict

from _common import bench, broker

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
    began = time.perf_counter()
    q = (df.writeStream.format("noop").option("checkpointLocation", os.path.join(checkpoint_root, uuid.uuid4().hex))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    elapsed = time.perf_counter() - began
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    progress = q.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    in_batches = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000.0
    return {"rows": rows, "seconds": elapsed, "batch_seconds": in_batches,
            "batches": sum(1 for p in progress if p["numInputRows"] > 0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=250_000)
    args = ap.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_connector

    checkpoints = tempfile.mkdtemp(prefix="bench-spark-")
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
            # Warm-up (not counted): starts the Python workers and JIT-compiles the
            # row path, so neither mode pays for it in its first round.
            warm = run_query(spark, {**options, "ordered.gating": "false"}, checkpoints)
            print(f"warm-up query (ungated, not counted): {warm['seconds']:.1f}s", flush=True)

            best: Dict[str, Dict[str, Any]] = {}
            for r in range(args.rounds):
                order = ["gated", "ungated"] if r % 2 == 0 else ["ungated", "gated"]
                for mode in order:
                    opts = dict(options)
                    if mode == "ungated":
                        opts["ordered.gating"] = "false"
                    res = run_query(spark, opts, checkpoints)
                    if res["rows"] != args.records:
                        raise RuntimeError(f"{mode} query read {res['rows']} rows, expected {args.records}")
                    res["rate"] = res["rows"] / res["seconds"]
                    res["batch_rate"] = res["rows"] / res["batch_seconds"]
                    if mode not in best or res["rate"] > best[mode]["rate"]:
                        best[mode] = res
                    print(f"round {r} {mode:8s}: {res['rate']:,.0f} rows/s ({res['seconds']:.1f}s wall, "
                          f"{res['batches']} batches; in batches {res['batch_rate']:,.0f} rows/s)", flush=True)
            spark.stop()
    finally:
        shutil.rmtree(checkpoints, ignore_errors=True)

    gated, ungated = best["gated"]["rate"], best["ungated"]["rate"]
    print(f"best of {args.rounds}: gated {gated:,.0f} rows/s, ungated {ungated:,.0f} rows/s (wall); in batches "
          f"gated {best['gated']['batch_rate']:,.0f}, ungated {best['ungated']['batch_rate']:,.0f}; "
          f"{args.cores} executor cores; plain consumer {plain:,.0f} rows/s")
    print(f"rows/s per executor core (gated, {args.records} records, whole query): {gated / args.cores:,.0f}; "
          f"in batches {best['gated']['batch_rate'] / args.cores:,.0f}; one plain consumer thread {plain:,.0f}")
    print(bench("spark_source_gated_vs_ungated_ratio", gated / ungated, ">=", 0.9, "{:.3f}"))


if __name__ == "__main__":
    main()
