"""Executor side: read exactly ``[start, end)`` of one partition into Arrow
record batches (confluent-kafka, assign + seek, no group, no commits).

No Spark import here beyond what the caller passes (an Arrow schema), so the
reader is testable without a SparkSession.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kafka_ordered.errors import KafkaOrderedError

__all__ = ["KafkaRange", "read_range", "DataLossError", "reader_config", "ROWS_PER_BATCH"]

#: Rows per Arrow record batch handed to Spark.
ROWS_PER_BATCH = 20_000
_CONSUME_BATCH = 5_000


class DataLossError(KafkaOrderedError):
    """Records the query has not read yet are gone (retention, topic
    recreated); raised when ``failOnDataLoss`` is true (the default)."""


@dataclass(frozen=True)
class KafkaRange:
    """Offsets ``[start, end)`` of one topic partition (picklable)."""

    topic: str
    partition: int
    start: int
    end: int


def reader_config(conn: Mapping[str, Any]) -> Dict[str, Any]:
    """The librdkafka config of an executor's reading consumer: the user's
    ``kafka.*`` options plus what exact range reads need."""
    conf: Dict[str, Any] = {"isolation.level": "read_uncommitted", "log_level": 3}
    conf.update(conn)
    conf.update(
        {
            # assign() only: never joins this group, never commits.
            "group.id": f"kafka-ordered-spark-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }
    )
    conf.setdefault("fetch.wait.max.ms", 50)
    return conf


def _data_loss(fail: bool, msg: str) -> None:
    if fail:
        raise DataLossError(
            msg + ". Some data may have been lost (deleted by retention, or the topic was recreated). "
            "Set failOnDataLoss=false to skip it instead of failing the query."
        )


def read_range(
    conn: Mapping[str, Any],
    rng: KafkaRange,
    schema: pa.Schema,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    rows_per_batch: int = ROWS_PER_BATCH,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches with ``schema`` (the
    source's row schema). Stops at ``end`` without trusting ListOffsets: at
    the first record at or past ``end``, at a partition-EOF event at or past
    ``end``, or when the consumer's position reaches ``end`` (transaction
    markers and compacted gaps hold no records)."""
    if rng.end <= rng.start:
        return
    c = Consumer(reader_config(conn))
    try:
        yield from _read(c, rng, schema, include_headers, fail_on_data_loss, poll_timeout_ms, rows_per_batch)
    finally:
        c.close()


def _read(
    c: Consumer,
    rng: KafkaRange,
    schema: pa.Schema,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    rows_per_batch: int,
) -> Iterator[pa.RecordBatch]:
    topic, partition, end = rng.topic, rng.partition, rng.end
    tp = TopicPartition(topic, partition, rng.start)
    c.assign([tp])
    pos = rng.start
    keys: List[Optional[bytes]] = []
    values: List[Optional[bytes]] = []
    offsets: List[int] = []
    ts: List[int] = []
    ts_types: List[int] = []
    headers: List[Any] = []
    idle_deadline = time.monotonic() + poll_timeout_ms / 1000.0
    headers_type = schema.field("headers").type if include_headers else None
    eof_code = KafkaError._PARTITION_EOF

    def flush() -> pa.RecordBatch:
        n = len(offsets)
        arrays = [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(offsets, pa.int64()),
            pa.array([t * 1000 for t in ts], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            # confluent-kafka: 0 none, 1 create, 2 log-append; Spark/Java: -1, 0, 1
            pa.array([t - 1 for t in ts_types], pa.int32()),
        ]
        if include_headers:
            arrays.append(pa.array(headers, headers_type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        for lst in (keys, values, offsets, ts, ts_types, headers):
            lst.clear()
        return batch

    while pos < end:
        # Ask for no more than what is left (+1 for an EOF event): consume()
        # returns early only once it has that many messages.
        msgs = c.consume(min(_CONSUME_BATCH, end - pos + 1), 0.2)
        if not msgs:
            # Gaps (transaction markers, compaction) at the end hold no records.
            position = c.position([TopicPartition(topic, partition)])[0].offset
            if position >= end:
                break
            if time.monotonic() > idle_deadline:
                raise KafkaOrderedError(
                    f"reading {topic}[{partition}] offsets {rng.start}..{end - 1}: no record at or after "
                    f"offset {pos} within kafkaConsumer.pollTimeoutMs={poll_timeout_ms}"
                )
            continue
        idle_deadline = time.monotonic() + poll_timeout_ms / 1000.0
        done = False
        for m in msgs:
            err = m.error()
            if err is not None:
                code = err.code()
                if code == eof_code:
                    if m.offset() >= end:
                        done = True
                        break
                    continue
                if code in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                    _data_loss(fail_on_data_loss, f"offset {pos} of {topic}[{partition}] is out of range")
                    # failOnDataLoss=false: continue from the log start (the lost records are skipped).
                    c.assign([TopicPartition(topic, partition, -2)])  # OFFSET_BEGINNING
                    break
                raise KafkaException(err)
            off = m.offset()
            if off >= end:
                done = True
                break
            keys.append(m.key())
            values.append(m.value())
            offsets.append(off)
            tt, tv = m.timestamp()
            ts.append(tv)
            ts_types.append(tt)
            if include_headers:
                h = m.headers()
                headers.append(None if not h else [{"key": k, "value": v} for k, v in h])
            pos = off + 1
        if len(offsets) >= rows_per_batch:
            yield flush()
        if done:
            break
    if offsets:
        yield flush()
