"""The ``kafka_ordered`` source against Spark's own Kafka source, paired, same data.

    python benchmarks/spark_source_builtin.py [--records 60000] [--rounds 3] [--cores 2]
                                              [--max-offsets-per-trigger 20000]

Data: ``--records`` records (100-byte values, 10k keys) on a managed topic
of 4 partitions, written once (on the embedded broker in single-record
batches: the built-in source trusts ListOffsets, which that broker gets
wrong otherwise). Each round runs the same streaming query (``local[cores]``,
``startingOffsets=earliest``, ``maxOffsetsPerTrigger``,
``trigger(availableNow=True)``, ``noop`` sink) through ``format("kafka")``
and ``format("kafka_ordered")``, the order alternating, plus a third arm:
a plain Python streaming source that yields the same number of rows as
Arrow batches of the same schema from memory, with the same batch sizes
(the bound the Python Data Source API itself sets). Rate: rows / the summed
``addBatch`` time of the query's batches.

``BENCH spark_source_vs_builtin``: median of the per-round ratios
kafka_ordered / built-in (target >= 0.6). Also printed: the memory source
against the built-in (where the Python Data Source API bounds it), and
ours against the memory source (what our read loop costs on top of it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import uuid
from typing import Any, Dict, Iterator, List

from _common import bench, broker, machine, spread
from _spark import readable_by_builtin, session

from kafka_ordered import OrderedProducer
from kafka_ordered.admin import LayoutAdmin

PARTITIONS = 4


def fill(bootstrap: str, layout_topic: str, topic: str, records: int) -> None:
    admin = LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic})
    admin.create_topic(topic, PARTITIONS)
    admin.close()
    p = OrderedProducer({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic, "linger.ms": 5,
                         **readable_by_builtin()})
    keys = [f"key-{i:06d}".encode() for i in range(10_000)]
    value = b"x" * 100
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=value, key=keys[i % len(keys)])
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(300) == 0
    p.close()


def memory_source(records: int, partitions: int) -> Any:
    """A streaming Python data source yielding ``records`` rows of the Kafka
    source's schema (100-byte values) as Arrow batches built in memory."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

    from spark_connector.source import kafka_schema

    class MemReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, max_rows: int) -> None:
            self.max_rows = max_rows

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def initialOffset(self) -> dict:
            return {"i": 0}

        def getDefaultReadLimit(self) -> Any:
            return ReadMaxRows(self.max_rows)

        def latestOffset(self, start: dict, limit: Any) -> dict:
            n = records if isinstance(limit, ReadAllAvailable) else min(records, start["i"] + limit.max_rows)
            return {"i": n}

        def partitions(self, start: dict, end: dict) -> List[InputPartition]:
            lo, hi = start["i"], end["i"]
            step = max(1, -(-(hi - lo) // partitions))
            return [InputPartition((a, min(hi, a + step))) for a in range(lo, hi, step)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import pyarrow as pa

            a, b = partition.value
            n = b - a
            for s in range(0, n, 20_000):
                m = min(20_000, n - s)
                yield pa.RecordBatch.from_arrays([
                    pa.array([b"key-%06d" % ((a + s + i) % 10_000) for i in range(m)], pa.binary()),
                    pa.array([b"x" * 100] * m, pa.binary()),
                    pa.array(["mem"] * m, pa.string()),
                    pa.array([0] * m, pa.int32()),
                    pa.array(range(a + s, a + s + m), pa.int64()),
                    pa.array([1_700_000_000_000_000] * m, pa.timestamp("us", tz="UTC")),
                    pa.array([0] * m, pa.int32()),
                ], names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"])

        def commit(self, end: dict) -> None:
            pass

    class MemSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_memory_kafka_rows"

        def schema(self) -> Any:
            return kafka_schema(False)

        def streamReader(self, schema: Any) -> Any:
            return MemReader(int(self.options.get("maxRows", records)))

    return MemSource


def run_query(spark: Any, fmt: str, options: Dict[str, str], root: str) -> Dict[str, Any]:
    df = spark.readStream.format(fmt).options(**options).load()
    q = (df.writeStream.format("noop").option("checkpointLocation", os.path.join(root, uuid.uuid4().hex))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(str(q.exception()))
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in batches)
    run_s = sum(p["durationMs"].get("addBatch", 0) for p in batches) / 1000.0
    return {"rows": rows, "rate": rows / run_s if run_s else 0.0, "batches": len(batches)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=20_000)
    args = ap.parse_args()
    print(machine())
    root = tempfile.mkdtemp(prefix="bench-spark-src-")
    ratios: List[float] = []
    mem_vs_builtin: List[float] = []
    ours_vs_mem: List[float] = []
    try:
        with broker() as bootstrap:
            layout_topic = f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"
            topic = f"bench-src-{uuid.uuid4().hex[:6]}"
            t = time.perf_counter()
            fill(bootstrap, layout_topic, topic, args.records)
            print(f"filled {args.records} records in {time.perf_counter() - t:.1f}s", flush=True)
            spark = session("bench-spark-source-builtin", args.cores)
            spark.dataSource.register(memory_source(args.records, PARTITIONS))
            common = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
                      "maxOffsetsPerTrigger": str(args.max_offsets_per_trigger)}
            arms = {
                "builtin": ("kafka", common),
                "kafka_ordered": ("kafka_ordered", {**common, "ordered.layout.topic": layout_topic}),
                "memory": ("bench_memory_kafka_rows", {"maxRows": str(args.max_offsets_per_trigger)}),
            }
            for name, (fmt, opts) in arms.items():  # warm-up: JVM classes, Python workers
                run_query(spark, fmt, opts, root)
            print("warm-up queries done (not counted)", flush=True)
            for r in range(args.rounds):
                order = list(arms) if r % 2 == 0 else list(reversed(arms))
                res = {}
                for name in order:
                    fmt, opts = arms[name]
                    res[name] = run_query(spark, fmt, opts, root)
                    if res[name]["rows"] != args.records:
                        raise RuntimeError(f"{name} read {res[name]['rows']} rows, expected {args.records}")
                ratios.append(res["kafka_ordered"]["rate"] / res["builtin"]["rate"])
                mem_vs_builtin.append(res["memory"]["rate"] / res["builtin"]["rate"])
                ours_vs_mem.append(res["kafka_ordered"]["rate"] / res["memory"]["rate"])
                print("  round %d: " % (r + 1) + ", ".join(
                    f"{n} {res[n]['rate']:,.0f} rows/s ({res[n]['batches']} batches)" for n in order)
                    + f"; kafka_ordered/builtin {ratios[-1]:.3f}", flush=True)
            spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"  kafka_ordered vs built-in rows/s: {spread(ratios)} over {args.rounds} rounds")
    print(f"  memory Python source vs built-in (the Python Data Source API's bound): {spread(mem_vs_builtin)}")
    print(f"  kafka_ordered vs memory Python source (our read loop on top of it): {spread(ours_vs_mem)}")
    print(bench("spark_source_vs_builtin", statistics.median(ratios), ">=", 0.6, "{:.3f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
