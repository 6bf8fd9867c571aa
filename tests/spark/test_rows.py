"""Rows and schema of the ``kafka_ordered`` source equal a plain
confluent-kafka read of the same records (streaming and batch)."""

from __future__ import annotations

import json
import uuid
from typing import Any, Callable, Dict, List, Tuple

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from kafka_ordered.admin import LayoutAdmin
from spark_connector.source import kafka_schema

from ..conftest import spare
from .conftest import BatchSink

PARTITIONS = 3


def _plain_read(bootstrap: str, topic: str, partitions: int) -> List[Tuple[Any, ...]]:
    """Every record of ``topic`` through an assign-only confluent consumer."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"plain-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_uncommitted", "log_level": 3})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: List[Tuple[Any, ...]] = []
    eof = set()
    while len(eof) < partitions:
        for m in c.consume(1000, 1.0):
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                eof.add(m.partition())
                continue
            tt, ts = m.timestamp()
            h = m.headers()
            out.append((m.key(), m.value(), m.topic(), m.partition(), m.offset(), ts, tt - 1,
                        None if not h else [(k, v) for k, v in h]))
    c.close()
    return sorted(out, key=lambda r: (r[3], r[4]))


def _spark_rows(rows: List[Any]) -> List[Tuple[Any, ...]]:
    out = []
    for r in rows:
        h = r["headers"] if "headers" in r else None
        out.append((None if r["key"] is None else bytes(r["key"]), None if r["value"] is None else bytes(r["value"]),
                    r["topic"], r["partition"], r["offset"], r["ts"], r["timestampType"],
                    None if h is None else [(x["key"], None if x["value"] is None else bytes(x["value"])) for x in h]))
    return sorted(out, key=lambda r: (r[3], r[4]))


@pytest.fixture
def data_topic(bootstrap: str, unique: Callable[[str], str], layout_topic: str) -> str:
    """A managed topic with keyed and unkeyed records, empty and null values,
    headers, explicit timestamps, and a committed transaction at the end of
    partition 0 (its commit marker is a gap no record fills)."""
    topic = unique("rows")
    with LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}) as admin:
        # Infinite retention: the records' fixed timestamps from 2023 are older than Apache
        # Kafka's default retention, which deletes them at its first check.
        admin.create_topic(topic, PARTITIONS, physical_partitions=spare(PARTITIONS + 1),
                           config={"retention.ms": "-1"})
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for i in range(300):
        headers = [("h", f"v{i}".encode()), ("n", None)] if i % 3 == 0 else None
        p.produce(topic, key=None if i % 7 == 0 else f"k{i}".encode(),
                  value=None if i % 11 == 0 else (b"" if i % 13 == 0 else f"value-{i}".encode()),
                  partition=i % PARTITIONS, headers=headers, timestamp=1_700_000_000_000 + i)
    assert p.flush(30) == 0
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}", "log_level": 3})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(5):
        tx.produce(topic, key=b"tx", value=f"tx-{i}".encode(), partition=0)
    tx.commit_transaction(30)
    return topic


def _options(bootstrap: str, topic: str, layout_topic: str, **extra: str) -> Dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "ordered.layout.topic": layout_topic,
            "startingOffsets": "earliest", **extra}


SELECT = ["key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "timestampType"]


def test_stream_rows_equal_plain_read(spark: Any, bootstrap: str, data_topic: str, layout_topic: str,
                                      tmp_path: Any) -> None:
    expected = _plain_read(bootstrap, data_topic, spare(PARTITIONS + 1) or PARTITIONS)
    assert len(expected) >= 305 and any(r[7] for r in expected)
    df = spark.readStream.format("kafka_ordered").options(**_options(bootstrap, data_topic, layout_topic)).load()
    assert df.schema == kafka_schema(False)
    sink: BatchSink = BatchSink()
    q = (df.selectExpr(*SELECT).writeStream.foreachBatch(sink)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    got = _spark_rows(sink.rows())
    assert got == [r[:7] + (None,) for r in expected]


def test_headers_and_batch_read(spark: Any, bootstrap: str, data_topic: str, layout_topic: str) -> None:
    expected = _plain_read(bootstrap, data_topic, spare(PARTITIONS + 1) or PARTITIONS)
    df = (spark.read.format("kafka_ordered")
          .options(**_options(bootstrap, data_topic, layout_topic, includeHeaders="true")).load())
    assert df.schema == kafka_schema(True)
    got = _spark_rows(df.selectExpr(*SELECT, "headers").collect())
    assert got == expected
    assert any(r[7] == [("h", b"v0"), ("n", None)] for r in got)

    # subscribePattern (full match) finds the same records.
    pattern_options = {k: v for k, v in _options(bootstrap, data_topic, layout_topic).items() if k != "subscribe"}
    by_pattern = (spark.read.format("kafka_ordered")
                  .options(**pattern_options, subscribePattern=data_topic[:-3] + "...").load())
    assert by_pattern.count() == len(expected)

    # startingOffsets/endingOffsets JSON (-2 = earliest) select exact ranges
    # (every physical partition named: a spare one too on the embedded broker).
    ends = {"0": 20, "1": 5, **{str(p): 0 for p in range(2, spare(PARTITIONS + 1) or PARTITIONS)}}
    ranged = (spark.read.format("kafka_ordered")
              .options(**_options(bootstrap, data_topic, layout_topic,
                                  startingOffsets=f'{{"{data_topic}":{{"0":10,"1":-2}}}}',
                                  endingOffsets=json.dumps({data_topic: ends}))).load())
    offsets = sorted((r["partition"], r["offset"]) for r in ranged.select("partition", "offset").collect())
    assert offsets == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]


def test_the_stamp_never_reaches_spark_rows(spark: Any, bootstrap: str, unique: Callable[[str], str],
                                             layout_topic: str, tmp_path: Any) -> None:
    """Records written after a registration carry kafka-ordered.reg (a plain
    read shows it); the source's rows do not, and keep the application's headers."""
    from kafka_ordered import OrderedProducer, partition_for
    from kafka_ordered.tokens import HEADER

    topic = unique("stamped")
    conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
    with LayoutAdmin(conf) as admin:
        admin.create_topic(topic, 2, physical_partitions=spare(4))
        producer = OrderedProducer({**conf, "linger.ms": 5})
        keys = [f"k{i}".encode() for i in range(100)]
        for k in keys:
            producer.produce(topic, b"before", k, headers=[("app", b"1")])
        producer.flush(10)
        admin.expand(topic, 4)
        for k in keys:
            producer.produce(topic, b"after", k, headers=[("app", b"1")])
        assert producer.flush(10) == 0
        producer.close()
    plain = _plain_read(bootstrap, topic, 4)
    stamped = [r for r in plain if r[7] and any(k == HEADER for k, _ in r[7])]
    assert stamped and {r[3] for r in stamped} == {2, 3}
    assert any(partition_for(k, 2, 4) >= 2 for k in keys)
    df = (spark.readStream.format("kafka_ordered")
          .options(**_options(bootstrap, topic, layout_topic, includeHeaders="true")).load())
    sink: BatchSink = BatchSink()
    q = (df.selectExpr(*SELECT, "headers").writeStream.foreachBatch(sink)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    got = _spark_rows(sink.rows())
    assert len(got) == len(plain) == 200
    assert all(r[7] == [("app", b"1")] for r in got)


def test_a_reader_refuses_a_stamp_beyond_the_planned_view(bootstrap: str, unique: Callable[[str], str]) -> None:
    """Executors check every stamp against the planning's view: a stamp of the
    log at or past it fails the task instead of delivering out of order; a
    stamp of another log is only removed."""
    import pyarrow as pa

    from kafka_ordered.errors import StaleLayoutViewError
    from kafka_ordered.tokens import HEADER
    from spark_connector.reading import KafkaRange, read_range

    topic = unique("stamps")
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    p.produce(topic, b"a", b"k", partition=0, headers=[(HEADER, b"thislog:7"), ("app", b"1")])
    p.produce(topic, b"b", b"k", partition=0, headers=[(HEADER, b"otherlog:900")])
    assert p.flush(10) == 0
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(kafka_schema(True), timezone="UTC")
    conn = {"bootstrap.servers": bootstrap}

    def read(view_end: int) -> List[Any]:
        rng = KafkaRange(topic, 0, 0, 2, "thislog", view_end)
        return [b for b in read_range(conn, rng, schema, include_headers=True, fail_on_data_loss=True,
                                      poll_timeout_ms=10000)]

    with pytest.raises(StaleLayoutViewError, match="beyond the planning's view"):
        read(7)
    rows = pa.Table.from_batches(read(8)).to_pylist()
    assert [r["value"] for r in rows] == [b"a", b"b"]
    assert [r["headers"] for r in rows] == [[{"key": "app", "value": b"1"}], None]
