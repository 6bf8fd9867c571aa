"""Behaviour parity with Spark's own Kafka connector (``spark-sql-kafka-0-10``,
loaded into the shared session when its jars are present; skipped, saying
how to get them, when not): each option both support runs through both
connectors on the same records and the rows must be equal (schema, key,
value, topic, partition, offset, timestamp, timestampType, headers); the
sinks must put the same DataFrame into the same partitions where the
layout equals Kafka's default partitioner. The table of every option is in
docs/spark.md ("Parity with Spark's Kafka connector")."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_ordered.admin import LayoutAdmin
from kafka_ordered.tokens import strip
from ..conftest import create_plain_topic

pytestmark = pytest.mark.usefixtures("builtin_kafka")

PARTITIONS = 3
RECORDS = 90
# The records carry fixed timestamps from 2023: Apache Kafka's time-based
# retention (7 days by default) would delete them at its first check, ~30 s
# after the broker starts.
KEEP_OLD_RECORDS = {"retention.ms": "-1"}
COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def _single_record_batches(embedded: bool) -> Dict[str, Any]:
    # Spark's own source trusts ListOffsets, which the embedded broker gets
    # wrong after multi-record batches (docs/testing.md).
    return {"batch.num.messages": 1} if embedded else {}


def _fill(bootstrap: str, topic: str, embedded: bool) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, **_single_record_batches(embedded)})
    for i in range(RECORDS):
        key = None if i % 10 == 9 else f"k{i % 17}".encode()
        value = None if i % 15 == 14 else f"v{i}".encode()
        headers = [("h", f"{i}".encode()), ("n", None)] if i % 3 == 0 else None
        p.produce(topic, value, key, i % PARTITIONS, headers=headers, timestamp=1_700_000_000_000 + i)
    assert p.flush(30) == 0


@pytest.fixture
def data(bootstrap: str, embedded: bool, unique: Callable[[str], str], layout_topic: str) -> Iterator[Dict[str, Any]]:
    """The same 90 records (keys, null keys and values, headers) in a managed
    topic and in a plain one, 3 partitions each."""
    conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
    managed, plain = unique("par-m"), unique("par-p")
    with LayoutAdmin(conf) as admin:
        admin.create_topic(managed, PARTITIONS, physical_partitions=PARTITIONS, config=KEEP_OLD_RECORDS)
    create_plain_topic(bootstrap, plain, PARTITIONS, 1, config=KEEP_OLD_RECORDS)
    _fill(bootstrap, managed, embedded)
    _fill(bootstrap, plain, embedded)
    yield {"managed": managed, "plain": plain, "bootstrap": bootstrap, "layout": layout_topic}


def _ours(d: Dict[str, Any]) -> Dict[str, str]:
    return {"ordered.layout.topic": d["layout"]}


def _rows(df: Any, columns: List[str]) -> List[Tuple[Any, ...]]:
    out = []
    for r in df.select(*columns).collect():
        row = []
        for c in columns:
            v = r[c]
            if c == "headers" and v is not None:
                v = tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in v)
            elif isinstance(v, (bytes, bytearray)):
                v = bytes(v)
            row.append(v)
        out.append(tuple(row))
    return sorted(out, key=repr)


def _both_batch(spark: Any, d: Dict[str, Any], options: Dict[str, str], columns: List[str] = COLUMNS,
                ours_only: Any = None) -> Tuple[List[Any], List[Any], Any, Any]:
    base = {"kafka.bootstrap.servers": d["bootstrap"], **options}
    theirs = spark.read.format("kafka").options(**base).load()
    ours = spark.read.format("kafka_ordered").options(**base, **_ours(d), **(ours_only or {})).load()
    return _rows(theirs, columns), _rows(ours, columns), theirs, ours


def _schema(df: Any) -> List[Tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]


# ------------------------------------------------------------------ the source


def test_schema_and_rows_with_headers(spark: Any, data: Dict[str, Any]) -> None:
    theirs, ours, tdf, odf = _both_batch(spark, data, {"subscribe": data["managed"], "includeHeaders": "true"},
                                         COLUMNS + ["headers"])
    assert _schema(tdf) == _schema(odf)
    assert len(theirs) == RECORDS and theirs == ours
    t, o, tdf, odf = _both_batch(spark, data, {"subscribe": data["managed"]})
    assert _schema(tdf) == _schema(odf) and t == o


@pytest.mark.parametrize("options", [
    {"startingOffsets": '{"%(t)s":{"0":2,"1":-2,"2":5}}', "endingOffsets": '{"%(t)s":{"0":20,"1":-1,"2":25}}'},
    {"startingOffsets": "earliest", "endingOffsets": "latest"},
    {"minPartitions": "7"},
    {"maxRecordsPerPartition": "8"},
    {"failOnDataLoss": "false", "kafkaConsumer.pollTimeoutMs": "20000", "fetchOffset.numRetries": "1",
     "fetchOffset.retryIntervalMs": "20", "groupIdPrefix": "parity"},
    {"kafka.group.id": "parity-acl-group"},
    {"kafka.isolation.level": "read_committed"},
], ids=["offset-json", "earliest-latest", "minPartitions", "maxRecordsPerPartition", "retries-and-ids",
        "kafka.group.id", "isolation"])
def test_batch_read_options(spark: Any, data: Dict[str, Any], options: Dict[str, str]) -> None:
    opts = {k: v % {"t": data["managed"]} for k, v in options.items()}
    theirs, ours, _, _ = _both_batch(spark, data, {"subscribe": data["managed"], **opts})
    assert theirs and theirs == ours


def test_assign_and_subscribe_pattern_on_a_plain_topic(spark: Any, data: Dict[str, Any]) -> None:
    plain = data["plain"]
    theirs, ours, _, _ = _both_batch(spark, data, {"assign": '{"%s":[0,2]}' % plain})
    assert theirs and theirs == ours and {r[3] for r in ours} == {0, 2}
    # ours reads an unmanaged topic only when told to (ordered.require.managed=false)
    theirs, ours, _, _ = _both_batch(spark, data, {"subscribePattern": plain[:-4] + ".*"},
                                     ours_only={"ordered.require.managed": "false"})
    assert len(theirs) == RECORDS and theirs == ours


def _stream_rows(spark: Any, fmt: str, options: Dict[str, str], tmp: str) -> Tuple[List[Any], int]:
    got: Dict[int, List[Any]] = {}

    def sink(df: Any, batch_id: int) -> None:
        got[batch_id] = _rows(df, COLUMNS)

    q = (spark.readStream.format(fmt).options(**options).load().writeStream.foreachBatch(sink)
         .option("checkpointLocation", tmp).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    return sorted((r for rows in got.values() for r in rows), key=repr), sum(1 for rows in got.values() if rows)


def test_stream_read_with_max_offsets_per_trigger(spark: Any, data: Dict[str, Any], tmp_path: Any) -> None:
    base = {"kafka.bootstrap.servers": data["bootstrap"], "subscribe": data["managed"],
            "startingOffsets": "earliest", "maxOffsetsPerTrigger": "20"}
    theirs, t_batches = _stream_rows(spark, "kafka", base, str(tmp_path / "a"))
    ours, o_batches = _stream_rows(spark, "kafka_ordered", {**base, **_ours(data)}, str(tmp_path / "b"))
    assert len(theirs) == RECORDS and theirs == ours
    assert t_batches >= RECORDS // 20 and o_batches >= RECORDS // 20


def test_starting_timestamp(spark: Any, data: Dict[str, Any], embedded: bool) -> None:
    if embedded:
        pytest.skip("the embedded broker's offsets_for_times returns offset 0 for every timestamp")
    theirs, ours, _, _ = _both_batch(spark, data, {"subscribe": data["managed"],
                                                   "startingTimestamp": str(1_700_000_000_000 + 45)})
    assert theirs and theirs == ours


# ------------------------------------------------------------------ the sink


def _read_back(bootstrap: str, topic: str, n: int) -> Dict[bytes, Tuple[int, Any, Any]]:
    """value -> (partition, key, headers without stamps) of every record."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "parity-check", "enable.auto.commit": False})
    out: Dict[bytes, Tuple[int, Any, Any]] = {}
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        c.assign([TopicPartition(topic, p, 0) for p in md.partitions])
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    out[m.value()] = (m.partition(), m.key(), strip(m.headers()) or None)
    finally:
        c.close()
    return out


def _sink_frame(spark: Any) -> Any:
    rows = [(f"k{i % 40}" if i % 11 else None, f"v{i}".encode(), [("h", f"{i}".encode())] if i % 2 else None)
            for i in range(200)]
    return spark.createDataFrame(rows, "key string, value binary, headers array<struct<key:string,value:binary>>")


def test_sinks_put_keyed_rows_where_kafkas_default_partitioner_does(
        spark: Any, bootstrap: str, unique: Callable[[str], str], layout_topic: str) -> None:
    """On a managed topic whose layout has not changed (N == N0 == P) the
    layout is Kafka's default partitioner: both sinks agree row for row."""
    conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
    theirs_t, ours_t = unique("sink-k"), unique("sink-o")
    with LayoutAdmin(conf) as admin:
        admin.create_topic(theirs_t, 4, physical_partitions=4)
        admin.create_topic(ours_t, 4, physical_partitions=4)
    df = _sink_frame(spark)
    df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", theirs_t).save()
    df.write.format("kafka_ordered").option("kafka.bootstrap.servers", bootstrap).option("topic", ours_t) \
        .option("ordered.layout.topic", layout_topic).mode("append").save()
    theirs, ours = _read_back(bootstrap, theirs_t, 200), _read_back(bootstrap, ours_t, 200)
    assert len(theirs) == len(ours) == 200
    for v, (part, key, headers) in theirs.items():
        o_part, o_key, o_headers = ours[v]
        assert (o_key, o_headers) == (key, headers)
        if key is not None:  # unkeyed rows: any partition, in both
            assert o_part == part, (v, key)


def test_sinks_on_a_plain_topic_with_topic_and_partition_columns(
        spark: Any, bootstrap: str, unique: Callable[[str], str], layout_topic: str, data: Dict[str, Any]) -> None:
    """``ordered.require.managed=false``: the topic column and the partition
    column are used as by Spark's sink; keyed rows without a partition land
    where Java's partitioner puts them when the producer is told to hash
    like it (``kafka.partitioner=murmur2_random``; librdkafka's default is
    ``consistent_random``). The layout log must exist all the same
    (``data`` creates it)."""
    theirs_t, ours_t = unique("plain-k"), unique("plain-o")
    for t in (theirs_t, ours_t):
        create_plain_topic(bootstrap, t, 4, 1)
    rows = [(f"k{i}", f"v{i}".encode(), i % 4 if i % 3 == 0 else None) for i in range(120)]
    df = spark.createDataFrame(rows, "key string, value binary, partition int")
    df.selectExpr("*", f"'{theirs_t}' AS topic").write.format("kafka") \
        .option("kafka.bootstrap.servers", bootstrap).save()
    df.selectExpr("*", f"'{ours_t}' AS topic").write.format("kafka_ordered") \
        .option("kafka.bootstrap.servers", bootstrap).option("ordered.layout.topic", layout_topic) \
        .option("ordered.require.managed", "false").option("kafka.partitioner", "murmur2_random") \
        .mode("append").save()
    theirs, ours = _read_back(bootstrap, theirs_t, 120), _read_back(bootstrap, ours_t, 120)
    assert len(theirs) == len(ours) == 120
    assert {v: p for v, (p, _, _) in theirs.items()} == {v: p for v, (p, _, _) in ours.items()}
    assert all(theirs[f"v{i}".encode()][0] == i % 4 for i in range(0, 120, 3))
