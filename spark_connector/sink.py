"""The ``kafka_ordered`` sink: ``df.write.format("kafka_ordered")`` (batch)
and ``df.writeStream.format("kafka_ordered")`` (micro-batches).

Columns and options are those of Spark's built-in Kafka sink (``value``
required; ``key``, ``topic``, ``partition``, ``headers`` optional; the
``topic`` option overrides the column; every ``kafka.*`` option reaches the
producer) plus the producer's ``ordered.*`` keys and
``ordered.require.managed``. Each task writes its rows through a pooled
:class:`~kafka_ordered.OrderedProducer` (:mod:`spark_connector.writing`),
which partitions keyed rows by the topic's layout; a task reports success
only after every row was acknowledged. At least once, like the built-in
sink: a failed task or micro-batch is written again.

The guarantee (argued in docs/spark.md): within a task, a key's rows are
delivered in row order; a key's rows written by micro-batch N are delivered
before its rows written by micro-batch N+1, also across layout changes of the
sink topic between them and across a restart from the checkpoint.

Checked when the write starts, on the driver (the query fails to start):
the options (:func:`~spark_connector.options.parse_sink_options`), the
DataFrame's columns (:func:`check_sink_schema`), a batch write in overwrite
mode, the layout log's existence
(:class:`~kafka_ordered.errors.LayoutTopicNotFoundError`) and, for the
``topic`` option, that the topic exists and is managed
(:class:`~kafka_ordered.errors.TopicNotManagedError`, unless
``ordered.require.managed=false``). Rows whose topic comes from the
``topic`` column are checked by the tasks.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional

try:
    from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructField,
        StructType,
    )

    from ._discovery import reduce_by_import
except ImportError as _e:  # pragma: no cover - depends on the installation
    if (_e.name or "").split(".")[0] not in ("pyspark", "pyarrow"):
        raise
    from . import missing_extra

    raise missing_extra(_e) from _e

from kafka_ordered import resources
from kafka_ordered.config import DEFAULT_LAYOUT_TOPIC
from kafka_ordered.errors import ConfigError, LayoutTopicNotFoundError, UnknownTopicError

from .options import SinkOptions, parse_sink_options

__all__ = [
    "KafkaOrderedWriter",
    "KafkaOrderedStreamWriter",
    "SinkCommitMessage",
    "check_sink_schema",
    "check_topic",
    "make_writer",
    "HEADERS_TYPE",
]

#: The type of the ``headers`` column (as in Spark's Kafka source and sink).
HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))

_KEY_VALUE = (BinaryType(), StringType())


def check_sink_schema(schema: StructType, opts: SinkOptions) -> None:
    """Raise :class:`~kafka_ordered.errors.ConfigError` unless ``schema``
    has what Spark's Kafka sink needs: a ``value`` column of type binary or
    string; ``key`` binary or string; ``topic`` string (required when there
    is no ``topic`` option); ``partition`` int; ``headers``
    ``array<struct<key:string,value:binary>>``. Other columns are ignored, as
    by the built-in sink."""
    fields = {f.name.lower(): f for f in schema.fields}

    def typed(name: str, allowed: tuple, what: str) -> None:
        f = fields.get(name)
        if f is not None and f.dataType not in allowed:
            raise ConfigError(f"the kafka_ordered sink: column {name} must be {what}, got {f.dataType.simpleString()}")

    if "value" not in fields:
        raise ConfigError(
            "the kafka_ordered sink needs a value column (binary or string); columns given: "
            f"{', '.join(schema.names) or 'none'}"
        )
    typed("value", _KEY_VALUE, "binary or string")
    typed("key", _KEY_VALUE, "binary or string")
    typed("topic", (StringType(),), "a string")
    typed("partition", (IntegerType(),), "an int")
    typed("headers", (HEADERS_TYPE,), HEADERS_TYPE.simpleString())
    if opts.topic is None and "topic" not in fields:
        raise ConfigError(
            "the kafka_ordered sink needs a topic: set the topic option or add a topic column (a string)"
        )


def check_topic(opts: SinkOptions) -> None:
    """On the driver: the layout log must exist and, for the ``topic``
    option, the topic must exist and (``ordered.require.managed``) be
    managed. Raises :class:`~kafka_ordered.errors.LayoutTopicNotFoundError`,
    :class:`~kafka_ordered.errors.UnknownTopicError`,
    :class:`~kafka_ordered.errors.TopicNotManagedError`."""
    from .writing import not_managed

    conn = {k: v for k, v in opts.producer_config.items() if not str(k).startswith("ordered.")}
    try:
        shared = resources.acquire(conn, opts.layout_topic, corrupt_policy=opts.corrupt_policy,  # type: ignore[arg-type]
                                   timeout=opts.timeout_s, create=False, require_protocol=True)
    except UnknownTopicError as e:
        raise LayoutTopicNotFoundError(
            f"option ordered.layout.topic={opts.layout_topic!r}: the layout log topic {opts.layout_topic} does not "
            f"exist (bootstrap {conn.get('bootstrap.servers')}). The kafka_ordered sink never creates topics: set "
            f"ordered.layout.topic to the layout log your topics are managed in (default {DEFAULT_LAYOUT_TOPIC})."
        ) from e
    try:
        if opts.topic is None:
            return
        md = shared.admin.list_topics(topic=opts.topic, timeout=opts.timeout_s)
        tm = md.topics.get(opts.topic)
        if tm is None or tm.error is not None or not tm.partitions:
            raise UnknownTopicError(
                f"option topic: topic {opts.topic} does not exist (bootstrap {conn.get('bootstrap.servers')}); "
                "the kafka_ordered sink never creates topics"
            )
        if opts.require_managed and shared.follower.sync().current(opts.topic) is None:
            raise not_managed(opts.topic, opts.layout_topic)
    finally:
        shared.release()


class SinkCommitMessage(WriterCommitMessage):
    """What a task reports: ``rows`` written and acknowledged."""

    def __init__(self, rows: int) -> None:
        self.rows = rows


class _Writing:
    """``write()`` shared by the batch and stream writers (executor side)."""

    opts: SinkOptions

    def __reduce__(self) -> Any:
        # As the source's readers: a worker without kafka-ordered gets the
        # PYSPARK_PYTHON hint, not a bare ModuleNotFoundError.
        return reduce_by_import(self, dict(self.__dict__))

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        """Write the task's rows; returns once all were acknowledged (see
        :func:`spark_connector.writing.write_batches` for the errors)."""
        from .writing import write_batches

        return SinkCommitMessage(write_batches(self.opts, iterator))


class KafkaOrderedWriter(_Writing, DataSourceArrowWriter):
    """``df.write.format("kafka_ordered")``: every task writes and flushes
    its rows; nothing to do at commit (the rows are in Kafka), nothing to
    undo at abort (at least once, like the built-in sink)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        """Nothing to do: every task flushed before it reported success."""

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        """Nothing to undo: rows already written stay (at least once)."""


class KafkaOrderedStreamWriter(_Writing, DataSourceStreamArrowWriter):
    """``df.writeStream.format("kafka_ordered")``: as :class:`KafkaOrderedWriter`,
    per micro-batch. Spark starts micro-batch N+1 only after N committed,
    and N committed only after every task of N flushed: the order across
    micro-batches rests on that and on :meth:`OrderedProducer.reregister`
    at every task (docs/spark.md)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        """Nothing to do: every task flushed before it reported success."""

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        """Nothing to undo: rows already written stay, and the micro-batch
        is written again when the query restarts (at least once)."""


def make_writer(options: Dict[str, Any], schema: StructType, overwrite: bool, streaming: bool) -> _Writing:
    """The writer for ``options`` after every driver-side check (see the
    module docstring)."""
    opts = parse_sink_options(options)
    check_sink_schema(schema, opts)
    if overwrite and not streaming:
        raise ConfigError(
            "save mode Overwrite is not allowed for the kafka_ordered sink (as for Spark's Kafka sink: a topic "
            "cannot be overwritten); use mode('append')"
        )
    check_topic(opts)
    return KafkaOrderedStreamWriter(opts) if streaming else KafkaOrderedWriter(opts)
