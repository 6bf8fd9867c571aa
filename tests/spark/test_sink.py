"""The ``kafka_ordered`` sink: ``df.write``/``df.writeStream.format("kafka_ordered")``.

Rows land where the topic's layout puts them (through the real
``OrderedProducer``), columns and options are those of Spark's Kafka sink,
bad input fails the write with a clear error, producers are pooled per worker
process and register again at every task, and a key's rows of micro-batch N
are delivered before those of micro-batch N+1 across a layout change of the
sink topic between them (a layout-aware writer without registrations shows
the violation the oracle catches)."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition

from kafka_ordered.admin import LayoutAdmin
from kafka_ordered.errors import ConfigError, PartitionOverrideError
from kafka_ordered.tokens import strip
from spark_connector.options import parse_sink_options
from spark_connector.writing import NullTopicError, ProducerPool, write_batches

from .conftest import LayoutNaiveWriter, SeqProducers, read_ordered
from ..conftest import create_plain_topic

KEYS = [f"key-{i}".encode() for i in range(24)]


def _plain_read(bootstrap: str, topic: str, partitions: int, n: int, timeout: float = 30.0) -> List[Any]:
    """Every record of ``topic`` (``n`` expected) through a plain consumer."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "sink-check", "enable.auto.commit": False,
                  "enable.partition.eof": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: List[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            out.extend(m for m in c.consume(500, 0.5) if m.error() is None)
        return out
    finally:
        c.close()


@pytest.fixture
def managed(bootstrap: str, unique: Callable[[str], str], layout_topic: str) -> Iterator[Dict[str, Any]]:
    """A managed topic of 2 partitions (8 physical: the embedded broker cannot
    add partitions), already expanded to 3, and the sink options for it."""
    topic = unique("sink")
    conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
    with LayoutAdmin(conf) as admin:
        admin.create_topic(topic, 2, physical_partitions=8)
        admin.expand(topic, 3)
        layout = admin.layout(topic)
    yield {"topic": topic, "layout": layout, "conf": conf,
           "options": {"kafka.bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic, "topic": topic}}


# ------------------------------------------------------------ options (no broker)


def test_sink_options_are_the_built_in_sinks_plus_ordered_keys() -> None:
    opts = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.linger.ms": "20",
                               "ordered.transition.window.ms": "5000"})
    assert opts.topic == "t" and opts.require_managed
    conf = opts.producer_config
    assert conf["linger.ms"] == "20" and conf["acks"] == "all" and conf["enable.idempotence"] is True
    assert conf["ordered.transition.window.ms"] == 5000 and "ordered.producer.id" not in conf
    assert not parse_sink_options({"kafka.bootstrap.servers": "h:1", "ordered.require.managed": "false"}).require_managed
    for bad, match in [
        ({}, "kafka.bootstrap.servers is required"),
        ({"kafka.key.serializer": "x"}, "kafka.key.serializer is not supported"),
        ({"kafka.transactional.id": "x"}, "at-least-once"),
        ({"kafka.acks": "1"}, "kafka.acks='1' is not allowed"),
        ({"kafka.enable.idempotence": "false"}, "enable.idempotence"),
        ({"ordered.producer.id": "p"}, "shared by concurrent tasks"),
        ({"subscribe": "a", "startingOffsets": "earliest"}, "apply to reading"),
        ({"ordered.bogus": "1"}, "unknown option 'ordered.bogus'"),
        ({"ordered.require.managed": "perhaps"}, "true or false"),
    ]:
        with pytest.raises(ConfigError, match=match):
            parse_sink_options({"kafka.bootstrap.servers": "h:1", **bad} if bad else {})


# ------------------------------------------------------------ executor side, without Spark


def _batch(keys: List[Any], values: List[bytes], **cols: Any) -> pa.RecordBatch:
    arrays = {"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}
    for name, (vals, typ) in cols.items():
        arrays[name] = pa.array(vals, typ)
    return pa.RecordBatch.from_pydict(arrays)


def test_every_task_registers_again_inside_the_transition_window(managed: Dict[str, Any]) -> None:
    """The pooled producer is reused by the next task and registers again
    (gates waiting on what the earlier task wrote) while the topic's last
    layout change lies inside ``ordered.transition.window.ms``; outside it
    (window 0) it registers nothing."""
    pool = ProducerPool()
    try:
        opts = parse_sink_options(managed["options"])
        rows = _batch(KEYS, [b"v"] * len(KEYS))
        assert write_batches(opts, iter([rows]), pool) == len(KEYS)
        assert write_batches(opts, iter([rows]), pool) == len(KEYS)
        assert (pool.created, pool.reused) == (1, 1)
        producer = pool.take(pool_key_of(opts), lambda: None)  # type: ignore[arg-type,return-value]
        regs = [r for r in producer.registrations if r.gates]
        assert len(regs) == 2 and regs[1].offset > regs[0].offset
        # The second registration's waits cover the first task's rows on the sources.
        for p, (_, waits) in regs[1].gates.items():
            assert all(w > regs[0].gates[p][1][q] for q, w in waits.items()), (regs[0], regs[1])
        pool.give(pool_key_of(opts), producer, True)

        quiet = parse_sink_options({**managed["options"], "ordered.transition.window.ms": "0"})
        write_batches(quiet, iter([rows]), pool)
        write_batches(quiet, iter([rows]), pool)
        producer = pool.take(pool_key_of(quiet), lambda: None)  # type: ignore[arg-type,return-value]
        assert [r for r in producer.registrations if r.gates] == []
        pool.give(pool_key_of(quiet), producer, True)
    finally:
        pool.close_all()


def pool_key_of(opts: Any) -> Any:
    from spark_connector._pool import pool_key

    return pool_key(dict(opts.producer_config))


def test_a_full_client_queue_makes_the_task_wait_not_fail(managed: Dict[str, Any], bootstrap: str) -> None:
    """More rows than the client's queue holds (found by the sink benchmark:
    ``produce`` raised ``BufferError: Local: Queue full`` and failed the task)."""
    pool = ProducerPool()
    try:
        opts = parse_sink_options({**managed["options"], "kafka.queue.buffering.max.messages": "100"})
        n = 3000
        rows = _batch([f"k{i}".encode() for i in range(n)], [f"v{i}".encode() for i in range(n)])
        assert write_batches(opts, iter([rows]), pool) == n
        assert len(_plain_read(bootstrap, managed["topic"], 8, n)) == n
    finally:
        pool.close_all()


def test_bad_rows_fail_the_task_after_flushing_what_was_written(managed: Dict[str, Any], bootstrap: str) -> None:
    pool = ProducerPool()
    try:
        opts = parse_sink_options(managed["options"])
        good = _batch([b"a", b"b"], [b"1", b"2"])
        with pytest.raises(PartitionOverrideError, match="partition column to null"):
            write_batches(opts, iter([good, _batch([b"c"], [b"3"], partition=([1], pa.int32()))]), pool)
        assert pool.closed == 1  # a failed task's producer is closed, not pooled
        got = _plain_read(bootstrap, managed["topic"], 8, 2)
        assert sorted(m.value() for m in got) == [b"1", b"2"]  # flushed before the error was raised
        no_topic = parse_sink_options({k: v for k, v in managed["options"].items() if k != "topic"})
        with pytest.raises(NullTopicError, match="null topic"):
            write_batches(no_topic, iter([_batch([b"a"], [b"1"], topic=([None], pa.string()))]), pool)
    finally:
        pool.close_all()


# ------------------------------------------------------------ through Spark


def test_batch_write_partitions_like_the_layout_and_round_trips(spark: Any, managed: Dict[str, Any],
                                                               bootstrap: str) -> None:
    from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

    schema = StructType([
        StructField("key", StringType()), StructField("value", BinaryType()),
        StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                     StructField("value", BinaryType())]))),
        StructField("ignored", StringType()),
    ])
    rows = [(f"k{i}", f"v{i}".encode(), [("h", f"{i}".encode())], "x") for i in range(300)]
    rows += [(None, f"nokey{i}".encode(), None, "x") for i in range(20)]
    df = spark.createDataFrame(rows, schema).repartition(3)
    df.write.format("kafka_ordered").options(**managed["options"]).mode("append").save()

    got = _plain_read(bootstrap, managed["topic"], 8, len(rows))
    assert len(got) == len(rows)
    layout = managed["layout"]
    for m in got:
        if m.key() is None:
            assert m.partition() < layout.partitions  # unkeyed: any undeleted partition
            continue
        i = int(m.key()[1:])
        assert m.partition() == layout.partition_for(m.key()), m.key()
        assert m.value() == f"v{i}".encode()
        assert strip(m.headers()) == [("h", f"{i}".encode())]  # stamps aside, the row's own headers
    assert sorted(m.value() for m in got if m.key() is None) == sorted(f"nokey{i}".encode() for i in range(20))


def test_write_errors_are_clear(spark: Any, managed: Dict[str, Any], bootstrap: str,
                               unique: Callable[[str], str]) -> None:
    opts = managed["options"]
    df = spark.createDataFrame([("a", "1", 1)], "key string, value string, partition int")
    with pytest.raises(Exception, match="partition=1 for topic .*kafka-ordered manages"):
        df.write.format("kafka_ordered").options(**opts).mode("append").save()
    # null partitions: the layout decides
    nulls = spark.createDataFrame([("a", "1", None)], "key string, value string, partition int")
    nulls.write.format("kafka_ordered").options(**opts).mode("append").save()
    # Unlike Spark's Kafka sink, the default save mode is refused: PySpark refuses it for every Python data source.
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        nulls.write.format("kafka_ordered").options(**opts).save()
    with pytest.raises(Exception, match="needs a value column"):
        spark.createDataFrame([("a",)], "key string").write.format("kafka_ordered").options(**opts) \
            .mode("append").save()
    with pytest.raises(Exception, match="column key must be binary or string"):
        spark.createDataFrame([(1, "v")], "key int, value string").write.format("kafka_ordered") \
            .options(**opts).mode("append").save()
    with pytest.raises(Exception, match="Overwrite is not allowed"):
        spark.createDataFrame([("a", "v")], "key string, value string").write.format("kafka_ordered") \
            .options(**opts).mode("overwrite").save()

    plain = unique("plain")
    create_plain_topic(bootstrap, plain, 4, 1)
    unmanaged = {**opts, "topic": plain}
    two = spark.createDataFrame([("a", "1", 3), ("b", "2", None)], "key string, value string, partition int")
    with pytest.raises(Exception, match=f"topic {plain} is not managed by kafka-ordered"):
        two.write.format("kafka_ordered").options(**unmanaged).mode("append").save()
    two.write.format("kafka_ordered").options(**unmanaged, **{"ordered.require.managed": "false"}) \
        .mode("append").save()
    got = _plain_read(bootstrap, plain, 4, 2)
    assert {m.value(): m.partition() for m in got}[b"1"] == 3  # as the raw client: the partition column is used
    with pytest.raises(Exception, match="layout log topic .* does not exist"):
        two.write.format("kafka_ordered").options(**{**opts, "ordered.layout.topic": unique("_nolog")}) \
            .mode("append").save()


def _stream(spark: Any, source: Dict[str, str], writer: Any, checkpoint: str) -> Any:
    df = spark.readStream.format("kafka_ordered").options(**source).load().select("key", "value")
    w = df.writeStream.option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds")
    if callable(writer):
        return w.foreachBatch(writer).start()
    return w.format("kafka_ordered").options(**writer).start()


def _across_a_layout_change(spark: Any, bootstrap: str, unique: Callable[[str], str], layout_topic: str,
                            writer: Callable[[str], Any], tmp_path: Any) -> Tuple[Any, SeqProducers, str]:
    """A (1 partition) -> query -> B (2 of 8 partitions). Micro-batches write
    a backlog of every key to B; then B expands to 3 between micro-batches and
    the next micro-batches write more of every key. Returns the acknowledged
    records of A and B's name."""
    conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
    a, b = unique("a"), unique("b")
    admin = LayoutAdmin(conf)
    admin.create_topic(a, 1)
    admin.create_topic(b, 2, physical_partitions=8)
    prod = SeqProducers(conf, a, 1, KEYS)
    source = {"kafka.bootstrap.servers": bootstrap, "subscribe": a, "ordered.layout.topic": layout_topic,
              "startingOffsets": "earliest", "maxOffsetsPerTrigger": "600"}
    q = _stream(spark, source, writer(b), str(tmp_path / "ck"))
    try:
        prod.phase(80)  # 1,920 rows: several micro-batches onto B's partitions 0 and 1
        q.processAllAvailable()
        admin.expand(b, 3)
        prod.phase(6)
        q.processAllAvailable()
    finally:
        q.stop()
        prod.close()
        admin.close()
    assert q.exception() is None
    return q, prod, b


def test_stream_sink_keeps_key_order_across_a_layout_change_between_micro_batches(
        spark: Any, bootstrap: str, unique: Callable[[str], str], layout_topic: str, tmp_path: Any,
        group_settings: Dict[str, Any]) -> None:
    def sink(b: str) -> Dict[str, str]:
        return {"kafka.bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic, "topic": b,
                "kafka.batch.num.messages": "100"}

    _, prod, b = _across_a_layout_change(spark, bootstrap, unique, layout_topic, sink, tmp_path)
    oracle = read_ordered(bootstrap, layout_topic, b, 8, {"group.id": unique("g"), **group_settings}, prod.acked)
    assert oracle.violations == [], oracle.violations[:3]
    assert oracle.missing() == set()


def test_layout_aware_writer_without_registrations_shows_the_violation(
        spark: Any, bootstrap: str, unique: Callable[[str], str], layout_topic: str, tmp_path: Any,
        group_settings: Dict[str, Any]) -> None:
    """Proof that the test above can fail: the same pipeline through a writer
    that partitions by B's current layout but never registers."""
    def naive(b: str) -> LayoutNaiveWriter:
        return LayoutNaiveWriter(bootstrap, layout_topic, b, {"batch.num.messages": 100, "linger.ms": 5})

    _, prod, b = _across_a_layout_change(spark, bootstrap, unique, layout_topic, naive, tmp_path)
    oracle = read_ordered(bootstrap, layout_topic, b, 8, {"group.id": unique("g"), **group_settings}, prod.acked)
    assert oracle.missing() == set()
    assert oracle.violations, "a writer without registrations should have let moved keys overtake their backlog"
