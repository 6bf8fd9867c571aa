"""Executor side: read exactly ``[start, end)`` of one partition into Arrow
record batches (confluent-kafka, assign + seek, no group, no commits).

Consumers are pooled per worker process (:data:`POOL`), keyed by their
config, like the built-in source's consumer cache: a Python worker that runs
the tasks of several batches reuses one consumer per config instead of
connecting for every task. Idle consumers are closed after
:data:`POOL_IDLE_TIMEOUT_S`; a consumer whose read failed is closed, not
pooled.

No Spark import here beyond what the caller passes (an Arrow schema), so the
reader is testable without a SparkSession.
"""

from __future__ import annotations

import atexit
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

try:
    import pyarrow as pa
except ImportError as _e:  # pragma: no cover - depends on the installation
    from . import missing_extra

    raise missing_extra(_e) from _e
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kafka_ordered.errors import DataLossError, KafkaOrderedError, StaleLayoutViewError
from kafka_ordered.tokens import take_stamp
from kafka_ordered.tombstones import is_move_tombstone

from ._pool import IdlePool, PoolKey, pool_key

__all__ = [
    "KafkaRange",
    "read_range",
    "DataLossError",
    "StaleLayoutViewError",
    "reader_config",
    "ROWS_PER_BATCH",
    "ConsumerPool",
    "POOL",
    "POOL_IDLE_TIMEOUT_S",
    "POOL_CAPACITY",
    "POOL_STATS_ENV",
]

#: Idle pooled consumers are closed after this many seconds (the built-in
#: source's ``spark.kafka.consumer.cache.timeout`` default, 5 minutes).
POOL_IDLE_TIMEOUT_S = 300.0
#: Idle consumers kept per worker process at most (the built-in source's
#: ``spark.kafka.consumer.cache.capacity`` default); the oldest go first.
POOL_CAPACITY = 64
#: For tests: when this environment variable names a directory, every worker
#: process writes its pool counters to ``<dir>/<pool>-<pid>.json`` (``consumers``,
#: ``producers``) whenever a client goes back to its pool.
POOL_STATS_ENV = "KAFKA_ORDERED_SPARK_POOL_STATS"

#: Rows per Arrow record batch handed to Spark.
ROWS_PER_BATCH = 20_000
_CONSUME_BATCH = 5_000


@dataclass(frozen=True)
class KafkaRange:
    """Offsets ``[start, end)`` of one topic partition (picklable).

    ``log_id``/``view_end``: the layout log (its id in ``kafka-ordered.reg``
    stamps) and the offset the planner's view of it reached; a stamp in the
    range naming that log at or past ``view_end`` means the planning missed a
    registration, and the read fails (:class:`StaleLayoutViewError`) rather
    than deliver out of order. Empty ``log_id``: no check (batch reads)."""

    topic: str
    partition: int
    start: int
    end: int
    log_id: str = ""
    view_end: int = 0


def reader_config(
    conn: Mapping[str, Any], group_id: Optional[str] = None, group_id_prefix: str = "kafka-ordered-spark"
) -> Dict[str, Any]:
    """The librdkafka config of an executor's reading consumer: the user's
    ``kafka.*`` options plus what exact range reads need. Its group id is
    ``group_id`` (``kafka.group.id``) when given, else
    ``<group_id_prefix>-<random>`` (``groupIdPrefix``); the consumer only
    assigns partitions, so it never joins that group nor commits to it."""
    conf: Dict[str, Any] = {"isolation.level": "read_uncommitted", "log_level": 3}
    conf.update(conn)
    conf.update(
        {
            # assign() only: never joins this group, never commits.
            "group.id": group_id or f"{group_id_prefix}-{uuid.uuid4().hex[:8]}",
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


class ConsumerPool(IdlePool[Consumer]):
    """Idle reading consumers of one process, keyed by config
    (:class:`spark_connector._pool.IdlePool`).

    Contract: :meth:`acquire` hands a consumer to one reader at a time (a
    pooled one when an idle consumer with that config exists, else a new
    one); :meth:`release` either pools it (unassigned, so nothing of the old
    range stays queued) or, with ``ok=False``, closes it. Consumers idle
    longer than ``idle_timeout_s`` are closed, so are the oldest beyond
    ``capacity`` and all of them at interpreter exit. Thread-safe.
    ``created``/``reused``/``closed`` count what happened (for tests and
    logs; written to ``consumers-<pid>.json`` under :data:`POOL_STATS_ENV`)."""

    def __init__(self, idle_timeout_s: float = POOL_IDLE_TIMEOUT_S, capacity: int = POOL_CAPACITY) -> None:
        super().__init__(Consumer.close, idle_timeout_s, capacity, "consumers", POOL_STATS_ENV)

    @staticmethod
    def key(conf: Mapping[str, Any]) -> PoolKey:
        """The pool key of a consumer config (:func:`~spark_connector._pool.pool_key`)."""
        return pool_key(conf)

    def acquire(self, conn: Mapping[str, Any], group_id: Optional[str], group_id_prefix: str) -> Tuple[PoolKey, Consumer]:
        """A consumer for ``reader_config(conn, group_id, group_id_prefix)``
        and the key to release it under."""
        key = pool_key({**conn, "\0group.id": group_id or "", "\0prefix": group_id_prefix})
        return key, self.take(key, lambda: Consumer(reader_config(conn, group_id, group_id_prefix)))

    def release(self, key: PoolKey, consumer: Consumer, ok: bool) -> None:
        """Give ``consumer`` back: pooled when ``ok``, else closed."""
        if ok:
            try:
                consumer.unassign()
            except Exception:
                ok = False
        self.give(key, consumer, ok)


#: The pool of this process.
POOL = ConsumerPool()
atexit.register(POOL.close_all)


def read_range(
    conn: Mapping[str, Any],
    rng: KafkaRange,
    schema: pa.Schema,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    rows_per_batch: int = ROWS_PER_BATCH,
    group_id: Optional[str] = None,
    group_id_prefix: str = "kafka-ordered-spark",
    pool: Optional[ConsumerPool] = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches with ``schema`` (the
    source's row schema). Stops at ``end`` without trusting ListOffsets: at
    the first record at or past ``end``, at a partition-EOF event at or past
    ``end``, or when the consumer's position reaches ``end`` (transaction
    markers and compacted gaps hold no records).

    The consumer comes from ``pool`` (default :data:`POOL`) and goes back to
    it when the range was read completely; a failed or abandoned read closes
    it."""
    if rng.end <= rng.start:
        return
    pool = POOL if pool is None else pool
    key, c = pool.acquire(conn, group_id, group_id_prefix)
    ok = False
    try:
        yield from _read(c, rng, schema, include_headers, fail_on_data_loss, poll_timeout_ms, rows_per_batch)
        ok = True
    finally:
        pool.release(key, c, ok)


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
            if m.topic() is not None and (m.partition() != partition or m.topic() != topic):
                continue  # nothing of an earlier range survives unassign(); be safe anyway
            err = m.error()
            if err is not None:
                code = err.code()
                if code == eof_code:
                    if (m.offset() or 0) >= end:
                        done = True
                        break
                    continue
                if code in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                    _data_loss(fail_on_data_loss, f"offset {pos} of {topic}[{partition}] is out of range "
                                                  f"({err.str()}; event offset {m.offset()}, range {rng.start}..{end - 1})")
                    # failOnDataLoss=false: continue from the log start (the lost records are skipped).
                    c.assign([TopicPartition(topic, partition, -2)])  # OFFSET_BEGINNING
                    break
                raise KafkaException(err)
            off = m.offset()
            if off is None or off < pos:
                continue
            if off >= end:
                done = True
                break
            h = m.headers()
            if h and is_move_tombstone(m.value(), h):
                pos = off + 1  # consumed, never a row (see kafka_ordered.tombstones)
                continue
            keys.append(m.key())  # type: ignore[arg-type]  # bytes: no deserializer configured
            values.append(m.value())  # type: ignore[arg-type]
            offsets.append(off)
            tt, tv = m.timestamp()
            ts.append(tv)
            ts_types.append(tt)
            taken = take_stamp(h, rng.log_id) if h else None
            if taken is not None:
                # The causal-token stamp never reaches the application.
                stamp, h = taken
                if stamp is not None and stamp >= rng.view_end:
                    raise StaleLayoutViewError(
                        f"{topic}[{partition}] offset {off} is stamped with layout-log registration {stamp}, "
                        f"beyond the planning's view ({rng.view_end}): refusing to deliver it out of order"
                    )
            if include_headers:
                headers.append(None if not h else [{"key": k, "value": v} for k, v in h])  # type: ignore[str-unpack]
            pos = off + 1
        if len(offsets) >= rows_per_batch:
            yield flush()
        if done:
            break
    if offsets:
        yield flush()
