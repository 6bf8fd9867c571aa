"""The ``kafka_ordered`` PySpark data source (streaming and batch).

``spark.readStream.format("kafka_ordered")`` plans micro-batches from the
layout log: a batch's end offset for partition ``p`` stops at the first gate
on ``p`` whose sources the query has not processed yet (processed = the
batch's start offsets, which Spark hands to ``latestOffset`` only after the
previous batch committed). Records gated on a source therefore land in a
later batch than the source records they wait for. Data end offsets are read
before the layout log is caught up (freshness: every registration a planned
record depends on was appended before that record, hence before the sync).

Everything driver-side lives in a lazily created runtime that is never
pickled: it shares the process's layout-log resources (one follower, admin
client and offset reader per cluster and layout log, with every other query,
producer and consumer of the driver process, :mod:`kafka_ordered.resources`);
executors read their range with their own consumer.

The source never creates a topic, and never falls back to reading ungated
without being told to. Both checks need the broker, so they run when the
query starts (a streaming query's first planning, which fails the query; a
batch read's action such as ``collect()``), not at ``load()``:

- the layout log named by ``ordered.layout.topic`` must exist, else
  :class:`~kafka_ordered.errors.LayoutTopicNotFoundError` (a ``ConfigError`` and a
  ``LayoutLogError``) naming the option and its value;
- every topic read through ``subscribe``/``subscribePattern`` must have a
  layout in that log, else :class:`~kafka_ordered.errors.TopicNotManagedError`
  naming the topic and the fixes (``kafka-ordered adopt``, or
  ``ordered.require.managed=false`` to read it in offset order like Spark's
  built-in source). A topic that starts matching ``subscribePattern`` while
  the query runs is held out of the batches for up to
  ``ordered.metadata.timeout.ms`` (its layout may be appended just after the
  topic is created) before the error is raised.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, TypeVar

from confluent_kafka import Consumer, KafkaException, TopicPartition

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
        InputPartition,
    )
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from ._discovery import reduce_by_import
except ImportError as _e:  # pragma: no cover - depends on the installation
    if (_e.name or "").split(".")[0] not in ("pyspark", "pyarrow"):
        raise
    from . import missing_extra

    raise missing_extra(_e) from _e

from kafka_ordered.config import DEFAULT_LAYOUT_TOPIC
from kafka_ordered.errors import (
    BrokerUnavailableError,
    ConfigError,
    DataLossError,
    KafkaOrderedError,
    LayoutTopicNotFoundError,
    TopicNotManagedError,
    UnknownTopicError,
)
from kafka_ordered import resources
from kafka_ordered.history import Gate

from .options import EARLIEST, LATEST, OffsetSpec, SourceOptions, parse_options
from .planning import (
    TP,
    available,
    extend_target,
    from_json,
    gated_ends,
    pending_sources,
    rate_limit,
    split_range,
    to_json,
)
from .reading import KafkaRange, read_range, reader_config

__all__ = [
    "KafkaOrderedDataSource",
    "KafkaOrderedStreamReader",
    "KafkaOrderedBatchReader",
    "LayoutTopicNotFoundError",
    "kafka_schema",
    "check_schema",
]

_T = TypeVar("_T")

#: The source's short name: ``format("kafka_ordered")``.
NAME = "kafka_ordered"


def kafka_schema(include_headers: bool = False) -> StructType:
    """The row schema of Spark's built-in Kafka source."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(
            StructField(
                "headers",
                ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
            )
        )
    return StructType(fields)


def check_schema(schema: StructType, include_headers: bool) -> None:
    """Raise :class:`ConfigError` unless ``schema`` is the source's row schema
    (field names and types; nullability aside): the schema is fixed, as in
    Spark's built-in Kafka source, so a user ``.schema(...)`` is refused.

    PySpark does not show a user-specified schema to the data source at
    ``load()`` (``schema()`` is then not called at all), so this runs when the
    reader is created: when a streaming query starts, or at a batch read's
    planning."""
    want = kafka_schema(include_headers)
    got = [(f.name, f.dataType) for f in schema.fields]
    if got != [(f.name, f.dataType) for f in want.fields]:
        raise ConfigError(
            "the kafka_ordered source has a fixed schema (that of Spark's built-in Kafka source) and cannot be "
            f"set with .schema(...): remove it; the source's schema is {want.simpleString()} "
            f"(includeHeaders={'true' if include_headers else 'false'}), got {schema.simpleString()}. "
            "Cast or parse the key/value columns after load() instead."
        )


class KafkaOrderedDataSource(DataSource):
    """``format("kafka_ordered")``: Spark's Kafka source, gated by the layout
    log, and its Kafka sink, partitioned by the layout (:mod:`spark_connector.sink`)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        """Runs at ``load()``: errors in the options alone (:class:`ConfigError`)
        surface there; errors that need the broker (missing layout log,
        unmanaged or unknown topics) when the query starts."""
        opts = parse_options(self.options, streaming=None)
        return kafka_schema(opts.include_headers)

    def reader(self, schema: StructType) -> "KafkaOrderedBatchReader":
        """Raises :class:`ConfigError` for stream-only options and a user schema."""
        opts = parse_options(self.options, streaming=False)
        check_schema(schema, opts.include_headers)
        return KafkaOrderedBatchReader(opts, schema)

    def streamReader(self, schema: StructType) -> "KafkaOrderedStreamReader":
        """Raises :class:`ConfigError` for batch-only options (``endingOffsets``...)
        and a user schema. PySpark calls this when the query starts: at
        ``load()`` the data source is not told whether it is read as a stream."""
        opts = parse_options(self.options, streaming=True)
        check_schema(schema, opts.include_headers)
        return KafkaOrderedStreamReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> "DataSourceWriter":
        """``df.write.format("kafka_ordered")``: see :mod:`spark_connector.sink`
        (raises :class:`ConfigError` for bad options or columns and overwrite
        mode, and the broker-side errors listed there)."""
        from .sink import make_writer

        return make_writer(self.options, schema, overwrite, streaming=False)  # type: ignore[return-value]

    def streamWriter(self, schema: StructType, overwrite: bool) -> "DataSourceStreamWriter":
        """``df.writeStream.format("kafka_ordered")``: see :mod:`spark_connector.sink`."""
        from .sink import make_writer

        return make_writer(self.options, schema, overwrite, streaming=True)  # type: ignore[return-value]


# ---------------------------------------------------------------- driver side


def _not_managed(topics: Sequence[str], layout_topic: str) -> TopicNotManagedError:
    names = ", ".join(topics)
    which = f"topic {names} is" if len(topics) == 1 else f"topics {names} are"
    adopt = " ".join(f"`kafka-ordered adopt {t} --layout-topic {layout_topic}`" for t in topics)
    return TopicNotManagedError(
        f"{which} not managed by kafka-ordered (no layout in the layout log {layout_topic}, option "
        f"ordered.layout.topic), so the kafka_ordered source cannot keep per-key order across partition changes. "
        f"Adopt it ({adopt}, or LayoutAdmin.adopt), check ordered.layout.topic, or set "
        "ordered.require.managed=false to read unmanaged topics on purpose, in offset order like Spark's "
        "built-in Kafka source."
    )


class _Runtime:
    """Broker clients of the driver (or the batch planner); never pickled.

    Creating it checks the layout log: raises
    :class:`LayoutTopicNotFoundError` when ``ordered.layout.topic`` does not
    exist (nothing is created), :class:`~kafka_ordered.errors.UnsafeLayoutLogError`
    when it can lose records, :class:`~kafka_ordered.errors.BrokerUnavailableError`
    when no broker answers. A failed constructor closes what it opened.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.timeout = opts.timeout_s
        self.conn: Dict[str, Any] = {"isolation.level": "read_uncommitted", **opts.conn}
        self._ts_consumer: Optional[Consumer] = None
        # Topics read by the first planning, and since when each topic has
        # been seen without a layout (grace for later subscribePattern matches).
        self._initial_topics: Optional[Set[str]] = None
        self._unmanaged_since: Dict[str, float] = {}
        #: The layout-log offset the last planning's view reached (every stamp
        #: in a planned range must name an offset below it).
        self.view_end = 0
        try:
            # The process's shared layout-log resources: one follower and one
            # admin client per cluster and layout log, also for every query.
            self.shared = resources.acquire(self.conn, opts.layout_topic,
                                            corrupt_policy=opts.corrupt_policy,  # type: ignore[arg-type]
                                            timeout=self.timeout, create=False, require_protocol=True)
        except UnknownTopicError as e:
            raise LayoutTopicNotFoundError(
                f"option ordered.layout.topic={opts.layout_topic!r}: the layout log topic {opts.layout_topic} does "
                f"not exist (bootstrap {self.conn.get('bootstrap.servers')}). The kafka_ordered source never "
                "creates topics: set ordered.layout.topic to the layout log your producers and `kafka-ordered` "
                f"use (default {DEFAULT_LAYOUT_TOPIC}), or create it by putting a topic under management "
                "(`kafka-ordered create` / `kafka-ordered adopt`)."
            ) from e
        self.follower = self.shared.follower
        self.offsets = self.shared.offsets
        self.admin = self.shared.admin
        try:
            self.offsets.warm_up()  # else the first end-offset read waits ~0.5 s for metadata
        except BaseException:
            self.close()
            raise

    # -- topics and partitions

    def _metadata(self) -> Dict[str, int]:
        try:
            md = self.admin.list_topics(timeout=self.timeout)
        except KafkaException as e:  # list_topics fails only when no broker answers in time
            err = e.args[0]
            raise BrokerUnavailableError(
                f"reading cluster metadata: broker unavailable ({err.str()}); check kafka.bootstrap.servers",
                code=err.code(),
            ) from e
        return {t: len(tm.partitions) for t, tm in md.topics.items() if tm.error is None and tm.partitions}

    def partitions(self) -> List[TP]:
        """Every partition the query reads now (physical partitions of each
        subscribed topic, draining and spare ones included).

        Raises :class:`~kafka_ordered.errors.UnknownTopicError` for a
        subscribed or assigned topic that does not exist,
        :class:`~kafka_ordered.errors.ConfigError` for ``assign`` on a
        managed topic, and (``ordered.require.managed``, the default)
        :class:`~kafka_ordered.errors.TopicNotManagedError` for a subscribed
        topic without a layout (see the module docstring for the grace given
        to topics that start matching ``subscribePattern`` later)."""
        opts = self.opts
        counts = self._metadata()
        history = self.follower.history
        if opts.assign:
            for t, ps in opts.assign.items():
                if history.current(t) is not None:
                    raise ConfigError(
                        f"option assign names {t}, a topic managed by kafka-ordered (layout in {opts.layout_topic}): "
                        "assigning its partitions by hand would bypass the layout and its ordering gates. "
                        f"Use .option('subscribe', '{t}') instead."
                    )
                if t not in counts:
                    raise UnknownTopicError(f"option assign: topic {t} does not exist")
                bad = [p for p in ps if p >= counts[t]]
                if bad:
                    raise UnknownTopicError(f"option assign: {t} has {counts[t]} partitions, no partition {bad}")
            return sorted((t, p) for t, ps in opts.assign.items() for p in ps)
        if opts.pattern is not None:
            rx = re.compile(opts.pattern)
            topics = [t for t in counts if rx.fullmatch(t) and t != opts.layout_topic and not t.startswith("__")]
        else:
            missing = [t for t in opts.subscribe if t not in counts]
            if missing:
                raise UnknownTopicError(
                    f"option subscribe: topic(s) {', '.join(missing)} do not exist "
                    f"(bootstrap {self.conn.get('bootstrap.servers')})"
                )
            topics = list(opts.subscribe)
        if opts.require_managed:
            topics = self._managed(topics)
        if self._initial_topics is None:
            self._initial_topics = set(topics)
        # Physical partitions as the metadata shows them (a partition the layout
        # names but the metadata does not show yet is picked up by a later batch).
        return [(t, p) for t in sorted(set(topics)) for p in range(counts[t])]

    def _managed(self, topics: Sequence[str]) -> List[str]:
        """``topics`` minus the pattern-matched unmanaged ones still within
        their grace; raises :class:`TopicNotManagedError` for the others."""
        history = self.follower.history
        if all(history.current(t) is not None for t in topics):
            return list(topics)
        history = self.follower.sync()  # a layout appended before this call counts
        unmanaged = [t for t in topics if history.current(t) is None]
        if not unmanaged:
            return list(topics)
        now = time.monotonic()
        failing = []
        for t in unmanaged:
            since = self._unmanaged_since.setdefault(t, now)
            appeared_later = self._initial_topics is not None and t not in self._initial_topics
            if self.opts.pattern is None or not appeared_later or now - since >= self.timeout:
                failing.append(t)
        if failing:
            raise _not_managed(failing, self.opts.layout_topic)
        return [t for t in topics if t not in unmanaged]

    def gates(self, topics: Sequence[str]) -> Dict[str, List[Gate]]:
        """Every gate of the managed ``topics``, from a view of the layout log
        that includes every record appended before this call (call it after
        reading the data end offsets: freshness).

        The layout log's end is read like the data's (Fetch high watermark);
        when the background follower has already applied everything below it
        (steady state) no further round trip is needed."""
        ltp = (self.opts.layout_topic, 0)
        end = self.offsets.end_offsets([ltp])[ltp]
        history = self.follower.catch_up_past(end - 1) if end > 0 else self.follower.history
        self.view_end = max(self.view_end, history.next_offset)
        return {t: history.gates(t) for t in topics if history.current(t) is not None}

    # -- offsets

    def _retrying(self, what: Callable[[], _T]) -> _T:
        """``what()``, retried ``fetchOffset.numRetries`` times,
        ``fetchOffset.retryIntervalMs`` apart, when it fails with a broker
        error (as the built-in source retries its offset fetches). Errors
        that a retry cannot fix (bad options, unknown topics) are raised at
        once."""
        attempt = 0
        while True:
            try:
                return what()
            except (ConfigError, UnknownTopicError, TopicNotManagedError):
                raise
            except (KafkaOrderedError, KafkaException):
                if attempt >= self.opts.fetch_offset_retries:
                    raise
                attempt += 1
                time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000.0)

    def ends(self, tps: Sequence[TP]) -> Dict[TP, int]:
        return self._retrying(lambda: self.offsets.end_offsets(tps))

    def log_starts(self, tps: Sequence[TP]) -> Dict[TP, int]:
        return self._retrying(lambda: self.offsets.start_offsets(tps)) if tps else {}

    def for_times(self, wanted: Mapping[TP, int]) -> Dict[TP, int]:
        """First offset with timestamp >= the given one (-1 when none)."""
        if not wanted:
            return {}
        if self._ts_consumer is None:
            self._ts_consumer = Consumer(
                {**reader_config(self.conn, self.opts.group_id, self.opts.group_id_prefix)}
            )
        consumer = self._ts_consumer

        def lookup() -> Dict[TP, int]:
            try:
                res = consumer.offsets_for_times(
                    [TopicPartition(t, p, ts) for (t, p), ts in wanted.items()], timeout=self.timeout
                )
            except KafkaException as e:
                err = e.args[0]
                raise KafkaOrderedError(f"looking up offsets by timestamp: {err.str()}", code=err.code()) from e
            return {(r.topic, r.partition): r.offset for r in res}

        return self._retrying(lookup)

    def resolve(self, spec: OffsetSpec, tps: Sequence[TP], name: str) -> Dict[TP, int]:
        """Offsets of ``tps`` for a starting/ending position spec."""
        opts = self.opts
        if spec.kind == "earliest":
            return self.log_starts(tps)
        if spec.kind == "latest":
            return self.ends(tps)
        if spec.kind == "offsets":
            topics = {t for t, _ in tps}
            extra = sorted(set(spec.per_topic) - topics)
            if extra:
                raise ConfigError(f"option {name} names topic(s) {', '.join(extra)} that the query does not read")
            unknown = [(t, p) for t, ps in spec.per_topic.items() for p in ps if (t, p) not in set(tps)]
            if unknown:
                raise ConfigError(f"option {name} names partitions that do not exist: {unknown[:5]}")
            want = {tp: spec.per_topic.get(tp[0], {}).get(tp[1], EARLIEST) for tp in tps}
            lows = self.log_starts([tp for tp, o in want.items() if o == EARLIEST])
            highs = self.ends([tp for tp, o in want.items() if o == LATEST])
            return {tp: lows[tp] if o == EARLIEST else highs[tp] if o == LATEST else o for tp, o in want.items()}
        # timestamps
        if spec.kind == "timestamp":
            wanted = {tp: int(spec.timestamp or 0) for tp in tps}
        else:
            wanted = {tp: spec.per_topic.get(tp[0], {}).get(tp[1], EARLIEST) for tp in tps}
        special = {tp: v for tp, v in wanted.items() if v in (EARLIEST, LATEST)}
        found = self.for_times({tp: v for tp, v in wanted.items() if tp not in special})
        out: Dict[TP, int] = {}
        ends = self.ends(tps)
        lows = self.log_starts([tp for tp, v in special.items() if v == EARLIEST])
        for tp in tps:
            if tp in special:
                out[tp] = lows[tp] if special[tp] == EARLIEST else ends[tp]
            elif found.get(tp, -1) >= 0:
                out[tp] = found[tp]
            elif name.startswith("ending") or opts.by_timestamp_strategy == "latest":
                out[tp] = ends[tp]
            else:
                raise ConfigError(
                    f"option {name}: no record of {tp[0]}[{tp[1]}] has a timestamp >= {wanted[tp]}; set "
                    "startingOffsetsByTimestampStrategy=latest to start at the end instead"
                )
        return out

    def close(self) -> None:
        """Give back the shared resources and close the runtime's own client
        (best effort; never raises; idempotent)."""
        shared, self.shared = self.shared, None  # type: ignore[assignment]
        if shared is not None:
            try:
                shared.release()
            except Exception:  # pragma: no cover - best effort
                pass
        if self._ts_consumer is not None:
            try:
                self._ts_consumer.close()
            except Exception:  # pragma: no cover
                pass
            self._ts_consumer = None


def _plan_partitions(opts: SourceOptions, ranges: Mapping[TP, Tuple[int, int]], log_id: str = "",
                     view_end: int = 0) -> List["KafkaInputPartition"]:
    """One input partition per non-empty range, split by maxRecordsPerPartition
    and minPartitions like the built-in source. ``log_id``/``view_end``: the
    layout log and how far the planning's view reached (readers check that
    every stamp in the range names an offset below it)."""
    sizes = {tp: e - s for tp, (s, e) in ranges.items() if e > s}
    total = sum(sizes.values())
    out: List[KafkaInputPartition] = []
    for tp in sorted(sizes):
        s, e = ranges[tp]
        pieces = 1
        if opts.max_records_per_partition:
            pieces = max(pieces, math.ceil(sizes[tp] / opts.max_records_per_partition))
        if opts.min_partitions and len(sizes) < opts.min_partitions:
            pieces = max(pieces, math.ceil(opts.min_partitions * sizes[tp] / total))
        for lo, hi in split_range(s, e, pieces):
            out.append(KafkaInputPartition(KafkaRange(tp[0], tp[1], lo, hi, log_id, view_end)))
    return out


class KafkaInputPartition(InputPartition):
    """One Spark task: ``[start, end)`` of one topic partition."""

    def __init__(self, rng: KafkaRange) -> None:
        super().__init__(rng)
        self.range = rng

    def __reduce__(self) -> Any:
        # Pickled as "import the class, then the state": a worker without
        # kafka-ordered gets the PYSPARK_PYTHON hint, not a bare ModuleNotFoundError.
        return reduce_by_import(self, dict(self.__dict__))


class _Reading:
    """``read()`` shared by the stream and batch readers (executor side)."""

    opts: SourceOptions
    schema: StructType

    def __getstate__(self) -> Dict[str, Any]:
        return dict(self.__dict__)

    def __reduce__(self) -> Any:
        # See KafkaInputPartition.__reduce__.
        return reduce_by_import(self, self.__getstate__())

    def read(self, partition: InputPartition) -> Iterator[Any]:
        rng = getattr(partition, "range", None)
        if not isinstance(rng, KafkaRange):
            return iter(())  # Spark's placeholder partition of an empty batch read
        from pyspark.sql.pandas.types import to_arrow_schema

        return read_range(
            self.opts.conn,
            rng,
            to_arrow_schema(self.schema, timezone="UTC"),
            include_headers=self.opts.include_headers,
            fail_on_data_loss=self.opts.fail_on_data_loss,
            poll_timeout_ms=self.opts.poll_timeout_ms,
            group_id=self.opts.group_id,
            group_id_prefix=self.opts.group_id_prefix,
        )


class KafkaOrderedStreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch planning with ordering gates (see the module docstring)."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._rt: Optional[_Runtime] = None
        self._new_starts: Dict[TP, int] = {}
        self._target: Optional[Dict[TP, int]] = None
        self._last_latest: Optional[Dict[TP, int]] = None
        # When the last batch was planned; None before the first one, which is
        # never delayed by minOffsetsPerTrigger (as the built-in source, whose
        # last trigger time starts at 0).
        self._last_batch: Optional[float] = None
        self._committed: Optional[Dict[TP, int]] = None

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_rt"] = None
        return state

    def _runtime(self) -> _Runtime:
        if self._rt is None:
            self._rt = _Runtime(self.opts)
        return self._rt

    # -- Spark API

    def initialOffset(self) -> dict:
        rt = self._runtime()
        tps = rt.partitions()
        return to_json(rt.resolve(self.opts.starting, tps, "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets is not None:
            return ReadMaxRows(self.opts.max_offsets)
        if self.opts.min_offsets is not None:
            return ReadMinRows(self.opts.min_offsets)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        rt = self._runtime()
        self._target = rt.ends(rt.partitions())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        rt = self._runtime()
        opts = self.opts
        begin = from_json(start)
        tps = rt.partitions()
        # Freshness: data end offsets first, then the layout log.
        latest = rt.ends(tps)
        topics = sorted({t for t, _ in tps})
        gates = rt.gates(topics) if opts.gating else {}
        self._last_latest = latest

        new = [tp for tp in tps if tp not in begin and tp not in self._new_starts]
        if new:
            # New partitions (and topics) start at the log start, never at latest.
            self._new_starts.update(rt.log_starts(new))
        cur = {tp: begin[tp] if tp in begin else self._new_starts[tp] for tp in tps}

        for tp in tps:
            if latest[tp] < cur[tp]:
                if opts.fail_on_data_loss:
                    raise DataLossError(
                        f"{tp[0]}[{tp[1]}] end offset {latest[tp]} is below the query's offset {cur[tp]}: the "
                        "topic was recreated or truncated. Set failOnDataLoss=false to continue from its end."
                    )
                cur[tp] = latest[tp]

        # Processed offsets for the gates: a source's log start counts as
        # processed (deleted records can never be delivered).
        planning = dict(cur)
        pending = pending_sources(gates, planning)
        if pending:
            for tp, low in rt.log_starts(sorted(pending)).items():
                if low > planning[tp]:
                    planning[tp] = low
        ends = gated_ends(gates, planning, latest)

        if self._target is not None:
            target = extend_target(self._target, latest, gates)
            ends = {tp: max(planning[tp], min(e, target.get(tp, planning[tp]))) for tp, e in ends.items()}

        if not isinstance(limit, ReadAllAvailable):
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else opts.max_offsets
            min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else opts.min_offsets
            if min_rows is not None and self._target is None:
                if self._last_batch is None:
                    self._last_batch = time.monotonic()  # the first trigger is never delayed
                else:
                    waited_ms = (time.monotonic() - self._last_batch) * 1000
                    if available(planning, ends) < min_rows and waited_ms < opts.max_trigger_delay_ms:
                        return start
            if max_rows is not None:
                ends = rate_limit(planning, ends, max_rows)

        # Partitions that left the metadata (topic deleted) keep their offsets.
        for tp, o in begin.items():
            ends.setdefault(tp, o)
        out = to_json(ends)
        if out != start:
            self._last_batch = time.monotonic()
        return out

    def reportLatestOffset(self) -> Optional[dict]:
        return to_json(self._last_latest) if self._last_latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = from_json(start), from_json(end)
        missing = [tp for tp in stop if tp not in begin and tp not in self._new_starts]
        if missing:  # a restarted query replaying a batch that added partitions
            self._new_starts.update(self._runtime().log_starts(missing))
        ranges: Dict[TP, Tuple[int, int]] = {}
        for tp, e in stop.items():
            s = begin[tp] if tp in begin else self._new_starts[tp]
            if e < s:
                if self.opts.fail_on_data_loss:
                    raise DataLossError(f"{tp[0]}[{tp[1]}]: batch end {e} is below its start {s}")
                continue
            ranges[tp] = (s, e)
        rt = self._runtime()
        view_end = max(rt.view_end, rt.follower.history.next_offset)
        return _plan_partitions(self.opts, ranges, rt.follower.log_id if self.opts.gating else "", view_end)

    def commit(self, end: dict) -> None:
        # Spark has processed everything up to ``end``; planning relies on the
        # start offsets Spark hands to latestOffset, which never pass this.
        self._committed = from_json(end)
        for tp in self._committed:
            self._new_starts.pop(tp, None)

    def stop(self) -> None:
        rt, self._rt = self._rt, None
        if rt is not None:
            rt.close()


class KafkaOrderedBatchReader(_Reading, DataSourceReader):
    """``spark.read.format("kafka_ordered")``: ``[startingOffsets, endingOffsets)``
    of every partition in one batch (no gates: a single batch has no order
    between partitions to protect)."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        rt = _Runtime(self.opts)
        try:
            tps = rt.partitions()
            begin = rt.resolve(self.opts.starting, tps, "startingOffsets")
            assert self.opts.ending is not None
            stop = rt.resolve(self.opts.ending, tps, "endingOffsets")
        finally:
            rt.close()
        ranges: Dict[TP, Tuple[int, int]] = {}
        for tp in tps:
            s, e = begin[tp], stop[tp]
            if e < s:
                raise ConfigError(
                    f"{tp[0]}[{tp[1]}]: endingOffsets {e} is before startingOffsets {s}"
                )
            ranges[tp] = (s, e)
        return _plan_partitions(self.opts, ranges)
