"""Reading never creates topics, and a wrong layout topic or an unmanaged
topic is an error at query start, not a silent ungated read.

``ordered.require.managed=false`` reads unmanaged topics on purpose, in
offset order like Spark's built-in Kafka source."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.streaming.datasource import ReadAllAvailable

from kafka_ordered.admin import LayoutAdmin
from kafka_ordered.errors import TopicNotManagedError
from spark_connector.options import parse_options
from spark_connector.planning import from_json
from spark_connector.source import KafkaOrderedStreamReader, kafka_schema

from ..conftest import create_plain_topic, spare
from .conftest import BatchSink

PLAIN_PARTITIONS = 3
PLAIN_RECORDS = 90


def _topics(bootstrap: str) -> List[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    return list(admin.list_topics(timeout=10).topics)


@pytest.fixture
def managed(bootstrap: str, unique: Callable[[str], str], layout_topic: str) -> Iterator[str]:
    """A managed topic (so the layout log ``layout_topic`` exists) with a few records."""
    topic = unique("managed")
    with LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}) as admin:
        admin.create_topic(topic, 2, physical_partitions=spare(3))
    p = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for i in range(10):
        p.produce(topic, key=f"k{i}".encode(), value=b"v", partition=i % 2)
    assert p.flush(30) == 0
    yield topic


@pytest.fixture
def plain(bootstrap: str, unique: Callable[[str], str], managed: str) -> str:
    """An unmanaged topic (created with a plain AdminClient next to a layout
    log that does not know it), ``PLAIN_RECORDS`` records spread over its
    partitions, values ``b"<partition>:<n>"`` numbered per partition."""
    topic = unique("plain")
    create_plain_topic(bootstrap, topic, PLAIN_PARTITIONS, 1)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    for i in range(PLAIN_RECORDS):
        part = i % PLAIN_PARTITIONS
        p.produce(topic, key=f"k{i}".encode(), value=f"{part}:{i // PLAIN_PARTITIONS}".encode(), partition=part)
    assert p.flush(30) == 0
    return topic


def _options(bootstrap: str, layout_topic: str, **extra: str) -> Dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic,
            "startingOffsets": "earliest", **extra}


def _run(spark: Any, options: Dict[str, str], checkpoint: str) -> Tuple[Any, BatchSink]:
    """An availableNow streaming query over ``options``; returns (query, sink)
    once it has terminated (or failed)."""
    sink = BatchSink(["topic", "partition", "offset", "value"])
    df = spark.readStream.format("kafka_ordered").options(**options).load()
    q = (df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination(120)
    except Exception:
        pass
    return q, sink


def _start_fails(spark: Any, options: Dict[str, str], checkpoint: str, *messages: str) -> None:
    q, sink = _run(spark, options, checkpoint)
    assert not q.isActive
    err = q.exception()
    assert err is not None, f"the query read {sink.count()} rows instead of failing"
    text = str(err)
    for m in messages:
        assert m in text, f"{m!r} not in the query's error: {text[:2000]}"
    assert sink.count() == 0


# ------------------------------------------------------------ wrong layout topic


def test_misspelt_layout_topic_fails_and_creates_nothing(spark: Any, bootstrap: str, layout_topic: str,
                                                         managed: str, tmp_path: Any) -> None:
    wrong = layout_topic + "-typo"
    options = _options(bootstrap, wrong, subscribe=managed)
    _start_fails(spark, options, str(tmp_path / "ck"), "ordered.layout.topic", wrong)
    with pytest.raises(Exception, match="ordered.layout.topic") as info:
        spark.read.format("kafka_ordered").options(**options).load().collect()
    assert wrong in str(info.value)
    assert wrong not in _topics(bootstrap), "reading created the layout topic"


# ------------------------------------------------------------ unmanaged topics


def test_unmanaged_topic_fails_by_default(spark: Any, bootstrap: str, layout_topic: str, plain: str,
                                          tmp_path: Any) -> None:
    options = _options(bootstrap, layout_topic, subscribe=plain)
    _start_fails(spark, options, str(tmp_path / "ck"), plain, "kafka-ordered adopt",
                 "ordered.require.managed=false")
    with pytest.raises(Exception, match="ordered.require.managed=false") as info:
        spark.read.format("kafka_ordered").options(**options).load().collect()
    assert plain in str(info.value)


def test_unmanaged_topic_matching_a_pattern_fails_by_default(spark: Any, bootstrap: str, layout_topic: str,
                                                             managed: str, plain: str, tmp_path: Any) -> None:
    options = _options(bootstrap, layout_topic, subscribePattern=f"{managed}|{plain}")
    _start_fails(spark, options, str(tmp_path / "ck"), plain, "kafka-ordered adopt")


def test_unmanaged_topic_is_read_in_offset_order_when_allowed(spark: Any, bootstrap: str, layout_topic: str,
                                                              managed: str, plain: str, tmp_path: Any) -> None:
    options = _options(bootstrap, layout_topic, subscribe=f"{plain},{managed}",
                       maxOffsetsPerTrigger="25", **{"ordered.require.managed": "false"})
    q, sink = _run(spark, options, str(tmp_path / "ck"))
    assert q.exception() is None
    rows = [r for r in sink.rows() if r["topic"] == plain]
    assert len(rows) == PLAIN_RECORDS
    assert len(sink.batches) > 1
    for part in range(PLAIN_PARTITIONS):
        mine = [r for r in rows if r["partition"] == part]  # batch order, then row order inside a batch
        by_batch: Dict[int, List[int]] = {}
        for b, batch in sink.batches.items():
            by_batch[b] = sorted(r["offset"] for r in batch if r["topic"] == plain and r["partition"] == part)
        flat = [o for b in sorted(by_batch) for o in by_batch[b]]
        assert flat == list(range(PLAIN_RECORDS // PLAIN_PARTITIONS)), f"partition {part}: {flat}"
        assert sorted(bytes(r["value"]).decode() for r in mine) == sorted(
            f"{part}:{n}" for n in range(PLAIN_RECORDS // PLAIN_PARTITIONS))
    assert sum(1 for r in sink.rows() if r["topic"] == managed) == 10


def test_topic_matching_the_pattern_later_gets_a_grace_then_fails(bootstrap: str, layout_topic: str,
                                                                  managed: str, unique: Callable[[str], str]) -> None:
    """A topic that starts matching ``subscribePattern`` while the query runs
    is held out (its layout may be appended just after the topic is created):
    read once adopted, an error once ``ordered.metadata.timeout.ms`` passed
    without a layout."""
    prefix = unique("grace")
    options = _options(bootstrap, layout_topic, subscribePattern=f"{managed}|{prefix}-.*",
                       **{"ordered.metadata.timeout.ms": "3000"})
    reader = KafkaOrderedStreamReader(parse_options(options, streaming=True), kafka_schema())
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    try:
        start = reader.initialOffset()
        adopted, never = f"{prefix}-adopted", f"{prefix}-never"
        fs = admin.create_topics([NewTopic(t, 1, 1) for t in (adopted, never)], request_timeout=10)
        for t in (adopted, never):
            fs[t].result()
        end = from_json(reader.latestOffset(start, ReadAllAvailable()))
        assert {t for t, _ in end} == {managed}, "unmanaged topics must be held out during their grace"
        with LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}) as la:
            la.adopt(adopted, hash="murmur2")  # empty: nothing to detect the hash from
        end = from_json(reader.latestOffset(start, ReadAllAvailable()))
        assert {t for t, _ in end} == {managed, adopted}
        time.sleep(3.1)
        with pytest.raises(TopicNotManagedError, match=f"topic {never} is not managed.*kafka-ordered adopt {never}"):
            reader.latestOffset(start, ReadAllAvailable())
    finally:
        reader.stop()
