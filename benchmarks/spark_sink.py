"""The ``kafka_ordered`` sink against Spark's own Kafka sink, paired, same DataFrame.

    python benchmarks/spark_sink.py [--rows 200000] [--rounds 3] [--cores 2]

One cached DataFrame (``--rows`` rows: 10k distinct string keys, 100-byte
binary values, ``cores`` partitions) is written in each round with
``df.write.format("kafka").save()`` and
``df.write.format("kafka_ordered").mode("append").save()`` to the same
managed topic (4 partitions, layout expanded once so that registrations are
real), the order alternating. Rate: rows / wall time of ``save()``.

Where the time goes, in the same run: a third arm writes the same DataFrame
through a Python data source whose Arrow writer only counts the rows (the
cost of PySpark's Python write path: JVM -> Arrow -> Python worker), and a
plain confluent-kafka ``Producer`` loop writing the same rows from this
process, one thread (the client's own cost per row).

``BENCH spark_sink_vs_builtin``: median ratio kafka_ordered / built-in rows/s
(target >= 0.6).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any, Dict, List

from _common import bench, broker, machine, spread
from _spark import session

from confluent_kafka import Producer

from kafka_ordered.admin import LayoutAdmin

PARTITIONS = 4


def count_only_sink() -> Any:
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class CountWriter(DataSourceArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            n = 0
            for batch in iterator:
                n += batch.num_rows
            return WriterCommitMessage()

    class CountSink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_count_only"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            return CountWriter()

    return CountSink


def plain_rate(bootstrap: str, topic: str, rows: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": True})
    keys = [f"key-{i % 10_000:06d}" for i in range(rows)]
    value = b"x" * 100
    began = time.perf_counter()
    for k in keys:
        while True:
            try:
                p.produce(topic, value, k)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    return rows / (time.perf_counter() - began)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args()
    print(machine())
    ratios: List[float] = []
    count_vs_builtin: List[float] = []
    with broker() as bootstrap:
        layout_topic = f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"
        topic = f"bench-sink-{uuid.uuid4().hex[:6]}"
        with LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}) as admin:
            admin.create_topic(topic, PARTITIONS - 1, physical_partitions=PARTITIONS)
            admin.expand(topic, PARTITIONS)
        spark = session("bench-spark-sink", args.cores)
        spark.dataSource.register(count_only_sink())
        df = (spark.range(args.rows, numPartitions=args.cores)
              .selectExpr("format_string('key-%06d', id % 10000) AS key",
                          "CAST(repeat('x', 100) AS BINARY) AS value").cache())
        assert df.count() == args.rows

        def builtin() -> None:
            df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()

        def ours() -> None:
            (df.write.format("kafka_ordered").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
             .option("ordered.layout.topic", layout_topic).mode("append").save())

        def count_only() -> None:
            df.write.format("bench_count_only").mode("append").save()

        arms = {"builtin": builtin, "kafka_ordered": ours, "count_only": count_only}
        for run in arms.values():  # warm-up: JVM classes, producers, Python workers
            run()
        print("warm-up writes done (not counted)", flush=True)
        for r in range(args.rounds):
            order = list(arms) if r % 2 == 0 else list(reversed(arms))
            rates: Dict[str, float] = {}
            for name in order:
                began = time.perf_counter()
                arms[name]()
                rates[name] = args.rows / (time.perf_counter() - began)
            ratios.append(rates["kafka_ordered"] / rates["builtin"])
            count_vs_builtin.append(rates["count_only"] / rates["builtin"])
            print("  round %d: " % (r + 1) + ", ".join(f"{n} {rates[n]:,.0f} rows/s" for n in order)
                  + f"; kafka_ordered/builtin {ratios[-1]:.3f}", flush=True)
        spark.stop()
        plain = plain_rate(bootstrap, topic, args.rows)
    print(f"  plain confluent-kafka Producer loop in one Python thread (acks=all, idempotent): {plain:,.0f} rows/s")
    print(f"  kafka_ordered vs built-in rows/s: {spread(ratios)} over {args.rounds} rounds")
    print(f"  count-only Python writer vs built-in (PySpark's Python write path alone): {spread(count_vs_builtin)}")
    print(bench("spark_sink_vs_builtin", statistics.median(ratios), ">=", 0.6, "{:.3f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
