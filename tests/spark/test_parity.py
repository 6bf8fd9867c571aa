"""Parity with Spark's built-in Kafka source ("Operability"): options it
accepts, its fixed schema, its consumer pool, minOffsetsPerTrigger's first
trigger, CREATE TABLE."""

from __future__ import annotations

import glob
import json
import os
import time
from typing import Any, Callable, Dict, Iterator, List

import pytest
from confluent_kafka import Producer

from kafka_ordered.admin import LayoutAdmin
from kafka_ordered.errors import KafkaOrderedError
from spark_connector.options import parse_options
from spark_connector.reading import ConsumerPool, KafkaRange, read_range, reader_config
from spark_connector.source import kafka_schema

from .conftest import BatchSink


@pytest.fixture
def filled(bootstrap: str, unique: Callable[[str], str], layout_topic: str) -> Iterator[Dict[str, Any]]:
    """A managed topic of 2 partitions with 100 records on each."""
    topic = unique("parity")
    conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
    with LayoutAdmin(conf) as admin:
        admin.create_topic(topic, 2, physical_partitions=2)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(200):
        p.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    yield {"topic": topic, "options": {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                       "ordered.layout.topic": layout_topic, "startingOffsets": "earliest"}}


# ------------------------------------------------------------------ options


def test_group_id_options_have_the_built_in_meaning() -> None:
    base = {"kafka.bootstrap.servers": "x:1", "subscribe": "a"}
    opts = parse_options(base, streaming=True)
    assert opts.group_id is None and opts.group_id_prefix == "kafka-ordered-spark"
    assert reader_config(opts.conn, opts.group_id, opts.group_id_prefix)["group.id"].startswith("kafka-ordered-spark-")
    opts = parse_options({**base, "groupIdPrefix": "etl"}, streaming=True)
    assert reader_config(opts.conn, opts.group_id, opts.group_id_prefix)["group.id"].startswith("etl-")
    # kafka.group.id wins over groupIdPrefix and is used as is (never joined, never committed).
    opts = parse_options({**base, "groupIdPrefix": "etl", "kafka.group.id": "acl-group"}, streaming=True)
    assert "group.id" not in opts.conn
    conf = reader_config(opts.conn, opts.group_id, opts.group_id_prefix)
    assert conf["group.id"] == "acl-group" and conf["enable.auto.commit"] is False


def test_fetch_offset_retry_options() -> None:
    base = {"kafka.bootstrap.servers": "x:1", "subscribe": "a"}
    opts = parse_options(base, streaming=True)
    assert (opts.fetch_offset_retries, opts.fetch_offset_retry_interval_ms) == (3, 10)  # Spark's defaults
    opts = parse_options({**base, "fetchOffset.numRetries": "0", "fetchOffset.retryIntervalMs": "250"},
                         streaming=False)
    assert (opts.fetch_offset_retries, opts.fetch_offset_retry_interval_ms) == (0, 250)


def test_fetch_offset_retries_apply_to_driver_offset_reads(filled: Dict[str, Any]) -> None:
    from spark_connector.source import _Runtime

    opts = parse_options({**filled["options"], "fetchOffset.numRetries": "2", "fetchOffset.retryIntervalMs": "1"},
                         streaming=True)
    rt = _Runtime(opts)
    try:
        calls: List[int] = []
        real = rt.offsets.end_offsets

        def flaky(tps: Any, timeout: Any = None) -> Any:
            calls.append(1)
            if len(calls) <= 2:
                raise KafkaOrderedError("transient")
            return real(tps)

        rt.offsets.end_offsets = flaky  # type: ignore[method-assign]
        tp = (filled["topic"], 0)
        assert rt.ends([tp])[tp] == 100 and len(calls) == 3  # failed twice, then read

        def broken(tps: Any, timeout: Any = None) -> Any:
            calls.append(1)
            raise KafkaOrderedError("still down")

        calls.clear()
        rt.offsets.end_offsets = broken  # type: ignore[method-assign]
        with pytest.raises(KafkaOrderedError, match="still down"):
            rt.ends([tp])
        assert len(calls) == 3  # the read and its 2 retries
    finally:
        vars(rt.offsets).pop("end_offsets", None)  # the reader is shared with the process's other clients
        rt.close()


def _start(spark: Any, df: Any, tmp_path: Any, sink: Any = None, **trigger: Any) -> Any:
    w = df.writeStream.option("checkpointLocation", str(tmp_path / "ck"))
    w = w.foreachBatch(sink) if sink is not None else w.format("noop")
    return w.trigger(**(trigger or {"availableNow": True})).start()


def test_ending_offsets_on_a_stream_fail_with_the_reason(spark: Any, filled: Dict[str, Any], tmp_path: Any) -> None:
    # PySpark does not tell the data source at load() whether it is read as a
    # stream (schema() gets the same options for spark.read and readStream), so
    # the refusal comes when the query starts, before any batch.
    for name, value in (("endingOffsets", "latest"), ("endingTimestamp", "1")):
        df = spark.readStream.format("kafka_ordered").options(**filled["options"], **{name: value}).load()
        q = _start(spark, df, tmp_path / name)
        with pytest.raises(Exception, match=f"{name} is not allowed for a streaming query"):
            q.awaitTermination(60)


def test_user_schema_is_refused_with_the_reason(spark: Any, filled: Dict[str, Any], tmp_path: Any) -> None:
    message = "fixed schema .*cannot be set with .schema"
    df = spark.readStream.format("kafka_ordered").schema("key binary, value binary").options(
        **filled["options"]).load()
    q = _start(spark, df, tmp_path)
    with pytest.raises(Exception, match=message):
        q.awaitTermination(60)
    with pytest.raises(Exception, match=message):
        spark.read.format("kafka_ordered").schema("value string").options(**filled["options"]).load().collect()
    # The source's own schema given explicitly is accepted.
    rows = spark.read.format("kafka_ordered").schema(kafka_schema()).options(**filled["options"]).load().count()
    assert rows == 200


def test_create_table_using_kafka_ordered(spark: Any, filled: Dict[str, Any]) -> None:
    name = "t_" + filled["topic"].replace("-", "_")
    opts = ", ".join(f"`{k}` '{v}'" for k, v in filled["options"].items())
    # PySpark 4.3 drops a catalog table's OPTIONS on the way to a Python data
    # source (PythonDataSourceV2.getTable ignores them): reading the table must
    # say so, not just "kafka.bootstrap.servers is required".
    spark.sql(f"CREATE TABLE {name} USING kafka_ordered OPTIONS ({opts})")
    try:
        with pytest.raises(Exception, match="CREATE TABLE ... USING kafka_ordered OPTIONS .* does not pass"):
            spark.sql(f"SELECT count(*) AS n FROM {name}").collect()
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")
    # The SQL form that works: a temporary view.
    spark.sql(f"CREATE TEMPORARY VIEW {name} USING kafka_ordered OPTIONS ({opts})")
    try:
        assert spark.table(name).columns == kafka_schema().fieldNames()
        assert spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0]["n"] == 200
    finally:
        spark.sql(f"DROP VIEW IF EXISTS {name}")


# ------------------------------------------------------- minOffsetsPerTrigger


def test_first_batch_under_min_offsets_does_not_wait_for_max_trigger_delay(
        spark: Any, filled: Dict[str, Any], tmp_path: Any, wait_until: Callable[..., None]) -> None:
    sink = BatchSink(["offset"])
    df = (spark.readStream.format("kafka_ordered").options(**filled["options"])
          .option("minOffsetsPerTrigger", "100000").option("maxTriggerDelay", "120s").load())
    began = time.monotonic()
    q = _start(spark, df, tmp_path, sink, processingTime="200 milliseconds")
    try:
        wait_until(lambda: sink.count() == 200, 60, "the first batch", q)
        assert time.monotonic() - began < 60  # well under maxTriggerDelay (120 s)
        time.sleep(1.5)
        assert len(sink.batches) == 1  # later triggers do wait for the minimum
    finally:
        q.stop()


# ------------------------------------------------------------ consumer pool


def test_pool_reuses_one_consumer_per_config(filled: Dict[str, Any]) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    opts = parse_options(filled["options"], streaming=True)
    schema = to_arrow_schema(kafka_schema(), timezone="UTC")
    pool = ConsumerPool(idle_timeout_s=0.5)
    kw: Dict[str, Any] = dict(include_headers=False, fail_on_data_loss=True, poll_timeout_ms=10_000, pool=pool)
    topic = filled["topic"]
    got = []
    for p, s, e in ((0, 0, 50), (0, 50, 100), (1, 0, 100), (0, 10, 20)):  # the last one re-reads
        got.append([o for b in read_range(opts.conn, KafkaRange(topic, p, s, e), schema, **kw)
                    for o in b.column("offset").to_pylist()])
    assert got == [list(range(50)), list(range(50, 100)), list(range(100)), list(range(10, 20))]
    assert (pool.created, pool.reused, pool.idle()) == (1, 3, 1)
    # Another config (another group id) gets its own consumer.
    list(read_range(opts.conn, KafkaRange(topic, 0, 0, 5), schema, group_id="g2", **kw))
    assert (pool.created, pool.idle()) == (2, 2)
    # Idle consumers expire.
    time.sleep(1.2)
    assert pool.idle() == 0 and pool.closed == 2
    # A failed read closes its consumer instead of pooling it.
    with pytest.raises(KafkaOrderedError, match="no record at or after"):
        list(read_range(opts.conn, KafkaRange(topic, 0, 100, 101), schema, **{**kw, "poll_timeout_ms": 300}))
    assert pool.idle() == 0 and pool.closed == 3


def test_spark_workers_reuse_their_consumers_across_batches(
        spark: Any, filled: Dict[str, Any], tmp_path: Any, pool_stats_dir: str,
        wait_until: Callable[..., None]) -> None:
    prefix = "pooltest"
    sink = BatchSink(["offset"])
    df = (spark.readStream.format("kafka_ordered").options(**filled["options"])
          .option("maxOffsetsPerTrigger", "20").option("groupIdPrefix", prefix).load())
    before = _pool_stats(pool_stats_dir, "consumers")
    q = _start(spark, df, tmp_path, sink, availableNow=True)
    q.awaitTermination(120)
    assert q.exception() is None
    assert sink.count() == 200 and len(sink.batches) >= 10
    after = _pool_stats(pool_stats_dir, "consumers")
    created = sum(s["created"] - before.get(pid, {}).get("created", 0) for pid, s in after.items())
    reused = sum(s["reused"] - before.get(pid, {}).get("reused", 0) for pid, s in after.items())
    processes = sum(1 for pid, s in after.items() if s != before.get(pid))
    # >= 10 batches of 1-2 tasks each, read by at most 2 long-lived workers: one
    # consumer per worker process, every later task of that process reuses it.
    assert created <= processes, (created, processes, after)
    assert reused >= 10 - processes, (reused, after)


def _pool_stats(where: str, pool: str) -> Dict[str, Dict[str, int]]:
    out = {}
    for path in glob.glob(os.path.join(where, f"{pool}-*.json")):
        with open(path) as f:
            out[os.path.basename(path)] = json.load(f)
    return out
