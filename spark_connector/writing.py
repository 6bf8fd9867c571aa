"""Executor side of the ``kafka_ordered`` sink: write Arrow record batches
through a pooled :class:`~kafka_ordered.OrderedProducer`.

Rows are partitioned by the producer itself (the topic's layout, the same
hash, registrations and stamps at a layout change, ``acks=all`` and
idempotence): this module only turns columns into ``produce()`` calls.

Producers are pooled per worker process (:data:`PRODUCERS`), keyed by their
config, like the built-in sink's producer cache: one producer per config and
worker process serves every task and micro-batch that process runs, and is
closed after :data:`PRODUCER_IDLE_TIMEOUT_S` unused. Every task starts with
:meth:`OrderedProducer.reregister` (the argument for the order across
micro-batches is in docs/spark.md) and ends with a flush: it reports success
only when every row was acknowledged.

No Spark import here, so the writer is testable without a SparkSession.
"""

from __future__ import annotations

import atexit
from typing import Any, Callable, Dict, Iterator, List, Optional

try:
    import pyarrow as pa
except ImportError as _e:  # pragma: no cover - depends on the installation
    from . import missing_extra

    raise missing_extra(_e) from _e

from kafka_ordered import OrderedProducer
from kafka_ordered.errors import DeliveryError, NullTopicError, PartitionOverrideError, TopicNotManagedError

from ._pool import IdlePool, pool_key
from .options import REQUIRE_MANAGED, SinkOptions

__all__ = [
    "write_batches",
    "ProducerPool",
    "PRODUCERS",
    "PRODUCER_IDLE_TIMEOUT_S",
    "PRODUCER_POOL_CAPACITY",
    "DeliveryError",
    "NullTopicError",
    "not_managed",
]

#: Idle pooled producers are closed after this many seconds (the built-in
#: sink's ``spark.kafka.producer.cache.timeout`` default, 10 minutes).
PRODUCER_IDLE_TIMEOUT_S = 600.0
#: Idle producers kept per worker process at most; the oldest go first.
PRODUCER_POOL_CAPACITY = 16


def _close(p: OrderedProducer) -> None:
    p.close(30)


class ProducerPool(IdlePool[OrderedProducer]):
    """Idle :class:`~kafka_ordered.OrderedProducer` instances of one process,
    keyed by their config (:class:`spark_connector._pool.IdlePool`; counters
    written to ``producers-<pid>.json`` under
    :data:`spark_connector.reading.POOL_STATS_ENV`). :meth:`acquire` hands a
    producer to one task at a time; :meth:`release` pools it, or closes it
    (flushing) when the task failed."""

    def __init__(self, idle_timeout_s: float = PRODUCER_IDLE_TIMEOUT_S,
                 capacity: int = PRODUCER_POOL_CAPACITY) -> None:
        from .reading import POOL_STATS_ENV

        super().__init__(_close, idle_timeout_s, capacity, "producers", POOL_STATS_ENV)

    def acquire(self, config: Dict[str, Any]) -> OrderedProducer:
        """A producer for ``config`` (pooled or new). Raises what
        :class:`~kafka_ordered.OrderedProducer` raises for a bad config."""
        return self.take(pool_key(config), lambda: OrderedProducer(config))

    def release(self, config: Dict[str, Any], producer: OrderedProducer, ok: bool) -> None:
        """Give ``producer`` back: pooled when ``ok``, else closed."""
        self.give(pool_key(config), producer, ok)


#: The producer pool of this process.
PRODUCERS = ProducerPool()
atexit.register(PRODUCERS.close_all)


def _column(batch: pa.RecordBatch, name: str) -> Optional[List[Any]]:
    # Spark resolves column names case-insensitively, and so does the driver's schema check.
    for i, field in enumerate(batch.schema):
        if field.name.lower() == name:
            return batch.column(i).to_pylist()  # type: ignore[no-any-return]
    return None


def not_managed(topic: str, layout_topic: str) -> TopicNotManagedError:
    """The error for a write to ``topic``, which has no layout in ``layout_topic``."""
    return TopicNotManagedError(
        f"topic {topic} is not managed by kafka-ordered (no layout in the layout log {layout_topic}, option "
        "ordered.layout.topic), so the kafka_ordered sink cannot keep per-key order across partition changes. "
        f"Adopt it (`kafka-ordered adopt {topic} --layout-topic {layout_topic}`), check ordered.layout.topic, "
        f"or set {REQUIRE_MANAGED}=false to write unmanaged topics on purpose, partitioned like the raw client."
    )


def write_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch],
                  pool: Optional[ProducerPool] = None) -> int:
    """Write every row of ``batches`` (columns as Spark's Kafka sink:
    ``value``, optional ``key``, ``topic``, ``partition``, ``headers``) and
    return how many were written, all acknowledged.

    Per row: the topic is the ``topic`` option, else the ``topic`` column;
    keyed rows of a managed topic go where its layout says, rows without a
    key as the raw client writes them. Raises :class:`NullTopicError` for a
    row without a topic, :class:`~kafka_ordered.errors.PartitionOverrideError`
    for a non-null ``partition`` on a managed topic,
    :class:`~kafka_ordered.errors.TopicNotManagedError` for an unmanaged
    topic (unless ``ordered.require.managed=false``), :class:`DeliveryError`
    when rows were not acknowledged. Whatever it raises, the rows already
    handed to the producer are flushed first (at least once)."""
    pool = PRODUCERS if pool is None else pool
    config = dict(opts.producer_config)
    producer = pool.acquire(config)
    errors: List[Any] = []
    ok = False
    try:
        producer.reregister(opts.timeout_s)
        written = _produce_all(producer, opts, batches, errors.append)
        producer.flush()
        if errors:
            raise DeliveryError(f"{len(errors)} of {written} row(s) were not acknowledged, first: {errors[0]}")
        ok = True
        return written
    finally:
        if not ok:
            try:
                producer.flush(30)
            except Exception:  # the original error is the one to report
                pass
        pool.release(config, producer, ok)


def _produce_all(producer: OrderedProducer, opts: SinkOptions, batches: Iterator[pa.RecordBatch],
                 failed: Callable[[Any], None]) -> int:
    history = producer.history
    managed: Dict[str, bool] = {}

    def is_managed(topic: str) -> bool:
        got = managed.get(topic)
        if got is None:
            got = managed[topic] = history.current(topic) is not None
            if not got and opts.require_managed:
                raise not_managed(topic, opts.layout_topic)
        return got

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed(err)

    produce = producer.produce
    written = 0
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        values = _column(batch, "value")
        assert values is not None  # checked against the schema on the driver
        keys = _column(batch, "key") or [None] * n
        topics = None if opts.topic is not None else _column(batch, "topic")
        parts = _column(batch, "partition")
        headers = _column(batch, "headers")
        if topics is None and parts is None and headers is None:
            topic = opts.topic
            if topic is None:
                raise NullTopicError(
                    "no topic: set the topic option or add a topic column (a string) to the DataFrame"
                )
            is_managed(topic)
            for k, v in zip(keys, values):
                try:
                    produce(topic, v, k, on_delivery=delivered)
                except BufferError:  # the client's queue is full: wait for room, as Spark's sink blocks
                    _when_room(producer, lambda: produce(topic, v, k, on_delivery=delivered))
        else:
            for i in range(n):
                topic = opts.topic if topics is None else topics[i]
                if topic is None:
                    raise NullTopicError(
                        "null topic present in the data: set the topic option for a default topic, or fill the "
                        "topic column"
                    )
                p = parts[i] if parts is not None else None
                if is_managed(topic):
                    if p is not None:
                        raise PartitionOverrideError(
                            f"a row has partition={p} for topic {topic}, which kafka-ordered manages: the topic's "
                            "layout decides the partition of every row (that is what keeps per-key order across "
                            "partition changes). Set the partition column to null or drop it."
                        )
                    p = -1
                elif p is None:
                    p = -1
                h = headers[i] if headers is not None else None
                hs = [(x["key"], x["value"]) for x in h] if h else None
                try:
                    produce(topic, values[i], keys[i], p, delivered, headers=hs)
                except BufferError:
                    _when_room(producer, lambda: produce(topic, values[i], keys[i], p, delivered, headers=hs))
        written += n
    return written


def _when_room(producer: OrderedProducer, send: Callable[[], None]) -> None:
    """``send()`` once the client's queue has room (serving delivery reports
    meanwhile): a full queue makes the task wait, never drops the row."""
    while True:
        producer.poll(0.05)
        try:
            send()
            return
        except BufferError:
            continue
