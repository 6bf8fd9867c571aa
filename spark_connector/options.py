"""Options of the ``kafka_ordered`` Spark source (pure, no Spark, no I/O).

Names and meanings follow Spark's built-in Kafka source where they apply;
``ordered.*`` options are ours. Spark hands options over case-insensitively
(lower-cased keys); every value is a string.

The ``ordered.*`` keys the source shares with the clients
(:data:`SHARED_ORDERED_OPTIONS`) are parsed by :mod:`kafka_ordered.config`
(:func:`~kafka_ordered.config.split_config`), so they accept the same values
and have the same defaults everywhere. Spark's own options are parsed here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from kafka_ordered.config import PRODUCER_OPTIONS, forced, split_config
from kafka_ordered.errors import ConfigError

__all__ = [
    "SourceOptions",
    "parse_options",
    "OffsetSpec",
    "parse_duration_ms",
    "EARLIEST",
    "LATEST",
    "SHARED_ORDERED_OPTIONS",
    "ORDERED_OPTIONS",
    "REQUIRE_MANAGED",
    "SPARK_ONLY_OPTIONS",
    "DEFAULT_GROUP_ID_PREFIX",
    "STREAM_ONLY_REFUSED",
    "SinkOptions",
    "parse_sink_options",
    "SINK_ORDERED_OPTIONS",
    "SOURCE_ONLY_OPTIONS",
]

#: ``groupIdPrefix`` default: consumers get ``<prefix>-<random>`` as their
#: (never joined, never committed) group id, like the built-in source's
#: ``spark-kafka-source-...``.
DEFAULT_GROUP_ID_PREFIX = "kafka-ordered-spark"

#: Options of a batch read that a streaming query refuses, and why.
STREAM_ONLY_REFUSED = {
    "endingoffsets": "endingOffsets",
    "endingtimestamp": "endingTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
}

#: ``-2`` in a JSON offset spec: the partition's earliest offset (as in Spark's Kafka source).
EARLIEST = -2
#: ``-1`` in a JSON offset spec: the partition's latest offset.
LATEST = -1

# Kafka client options that the source manages itself (like the built-in source,
# which refuses the Java equivalents).
_REFUSED_KAFKA = {
    "enable.auto.commit": "the source never commits offsets to Kafka (Spark's checkpoint holds them)",
    "auto.offset.reset": "use startingOffsets instead",
    "enable.auto.offset.store": "the source never stores offsets in Kafka",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
    "interceptor.classes": "not supported",
    "enable.partition.eof": "the source needs partition EOF events to stop at end offsets",
}

#: ``ordered.*`` keys the source shares with the clients; parsed (values and
#: defaults) by :func:`kafka_ordered.config.split_config`.
SHARED_ORDERED_OPTIONS: Tuple[str, ...] = (
    "ordered.layout.topic",
    "ordered.gating",
    "ordered.layout.corrupt.policy",
    "ordered.metadata.timeout.ms",
)

#: ``ordered.require.managed`` (Spark source only, default true): every topic
#: read through ``subscribe``/``subscribePattern`` must be managed (have a
#: layout in the layout log); ``false`` reads unmanaged topics too, in offset
#: order like Spark's built-in source.
REQUIRE_MANAGED = "ordered.require.managed"

#: The Spark-only ``ordered.*`` keys: key -> (accepted values, default, meaning)
#: (docs/configuration.md is generated from this and :data:`kafka_ordered.config.OPTIONS`).
SPARK_ONLY_OPTIONS: Dict[str, Tuple[str, Any, str]] = {
    REQUIRE_MANAGED: ("bool (true or false)", True,
                      "every topic read through subscribe/subscribePattern must be managed; false reads unmanaged "
                      "topics too, in offset order like Spark's built-in source"),
}

#: Every ``ordered.*`` key the source accepts.
ORDERED_OPTIONS: Tuple[str, ...] = SHARED_ORDERED_OPTIONS + tuple(SPARK_ONLY_OPTIONS)

_BOOL = {"true": True, "false": False}


def _bool(name: str, value: Optional[str], default: bool) -> bool:
    if value is None:
        return default
    v = str(value).strip().lower()
    if v not in _BOOL:
        raise ConfigError(f"option {name} must be true or false, got {value!r}")
    return _BOOL[v]


def _pos_int(name: str, value: Optional[str], minimum: int = 1) -> Optional[int]:
    if value is None:
        return None
    try:
        i = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"option {name} must be an integer >= {minimum}, got {value!r}") from None
    if i < minimum:
        raise ConfigError(f"option {name} must be an integer >= {minimum}, got {value!r}")
    return i


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(name: str, value: str) -> int:
    """``"15m"``, ``"30s"``, ``"500ms"``, ``"1000"`` (ms) -> milliseconds."""
    m = _DURATION.match(str(value))
    if not m:
        raise ConfigError(f"option {name} must be a duration like 500ms, 30s, 15m, got {value!r}")
    return int(m.group(1)) * _UNIT_MS[(m.group(2) or "").lower() or None]


@dataclass(frozen=True)
class OffsetSpec:
    """A starting or ending position: ``kind`` is ``earliest``, ``latest``,
    ``offsets`` (``per_topic``: topic -> partition -> offset, -2 earliest,
    -1 latest), ``timestamp`` (``timestamp`` ms for every partition) or
    ``timestamps`` (``per_topic``: topic -> partition -> timestamp ms)."""

    kind: str
    per_topic: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    timestamp: Optional[int] = None

    def describe(self) -> str:
        """The position as the built-in source's options spell it: ``earliest``,
        ``latest``, ``timestamp N`` or the per-partition JSON (for error
        messages)."""
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "timestamp":
            return f"timestamp {self.timestamp}"
        return json.dumps({t: {str(p): o for p, o in ps.items()} for t, ps in self.per_topic.items()})


def _offset_json(name: str, raw: str, *, allow_earliest: bool, allow_latest: bool,
                 timestamps: bool = False) -> Dict[str, Dict[int, int]]:
    try:
        d = json.loads(raw)
    except ValueError as e:
        raise ConfigError(
            f"option {name} is neither 'earliest'/'latest' nor valid JSON like "
            f'{{"topic":{{"0":23,"1":-2}}}} ({e}): {raw!r}'
        ) from None
    if not isinstance(d, dict) or not d:
        raise ConfigError(f'option {name} must be a JSON object like {{"topic":{{"0":23,"1":-2}}}}, got {raw!r}')
    out: Dict[str, Dict[int, int]] = {}
    for topic, parts in d.items():
        if not isinstance(parts, dict) or not parts:
            raise ConfigError(f"option {name}: topic {topic!r} must map partition numbers to offsets, got {parts!r}")
        tp: Dict[int, int] = {}
        for p, off in parts.items():
            try:
                pi = int(p)
            except (TypeError, ValueError):
                raise ConfigError(f"option {name}: partition {p!r} of topic {topic!r} is not an integer") from None
            if pi < 0:
                raise ConfigError(f"option {name}: partition {p!r} of topic {topic!r} is negative")
            if isinstance(off, bool) or not isinstance(off, int):
                raise ConfigError(f"option {name}: offset of {topic}[{p}] must be an integer, got {off!r}")
            if timestamps:
                if off < 0 and off not in (EARLIEST, LATEST):
                    raise ConfigError(f"option {name}: timestamp of {topic}[{p}] must be >= 0, got {off}")
            elif off < EARLIEST:
                raise ConfigError(f"option {name}: offset of {topic}[{p}] must be >= -2, got {off}")
            if off == EARLIEST and not allow_earliest:
                raise ConfigError(f"option {name}: -2 (earliest) is not allowed here ({topic}[{p}])")
            if off == LATEST and not allow_latest:
                raise ConfigError(f"option {name}: -1 (latest) is not allowed here ({topic}[{p}])")
            tp[pi] = off
        out[str(topic)] = tp
    return out


def _position(opts: Mapping[str, str], prefix: str, default: str, *, allow_earliest: bool,
              allow_latest: bool) -> OffsetSpec:
    """Resolve ``{prefix}Offsets``/``{prefix}Timestamp``/``{prefix}OffsetsByTimestamp``
    with the built-in source's precedence (timestamps first)."""
    ts_global = opts.get(f"{prefix}timestamp")
    ts_json = opts.get(f"{prefix}offsetsbytimestamp")
    offsets = opts.get(f"{prefix}offsets")
    name = "startingOffsets" if prefix == "starting" else "endingOffsets"
    if ts_global is not None:
        try:
            ts = int(ts_global)
        except ValueError:
            raise ConfigError(f"option {prefix}Timestamp must be a timestamp in ms, got {ts_global!r}") from None
        if ts < 0:
            raise ConfigError(f"option {prefix}Timestamp must be >= 0, got {ts_global!r}")
        return OffsetSpec("timestamp", timestamp=ts)
    if ts_json is not None:
        return OffsetSpec("timestamps", _offset_json(f"{prefix}OffsetsByTimestamp", ts_json, allow_earliest=True,
                                                      allow_latest=True, timestamps=True))
    raw = (offsets if offsets is not None else default).strip()
    low = raw.lower()
    if low == "earliest":
        if not allow_earliest:
            raise ConfigError(f"option {name}='earliest' is not allowed")
        return OffsetSpec("earliest")
    if low == "latest":
        if not allow_latest:
            raise ConfigError(f"option {name}='latest' is not allowed for a batch query (nothing would be read)")
        return OffsetSpec("latest")
    return OffsetSpec("offsets", _offset_json(name, raw, allow_earliest=allow_earliest, allow_latest=allow_latest))


@dataclass(frozen=True)
class SourceOptions:
    """Parsed options; everything picklable.

    ``layout_topic`` must exist (the source never creates it);
    ``require_managed`` says whether subscribed topics without a layout are
    an error (true, the default) or read in offset order without gates.
    """

    conn: Mapping[str, Any]  # librdkafka config of every client the source creates
    subscribe: Tuple[str, ...]
    pattern: Optional[str]
    assign: Mapping[str, Tuple[int, ...]]
    starting: OffsetSpec
    ending: Optional[OffsetSpec]
    by_timestamp_strategy: str
    max_offsets: Optional[int]
    min_offsets: Optional[int]
    max_trigger_delay_ms: int
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    min_partitions: Optional[int]
    max_records_per_partition: Optional[int]
    group_id: Optional[str]  # kafka.group.id: used as is by every consumer (never joined, never committed)
    group_id_prefix: str  # groupIdPrefix: generated group ids are "<prefix>-<random>"
    fetch_offset_retries: int  # fetchOffset.numRetries: retries of a failed driver-side offset read
    fetch_offset_retry_interval_ms: int  # fetchOffset.retryIntervalMs: wait between those retries
    layout_topic: str
    gating: bool
    corrupt_policy: str
    metadata_timeout_ms: int
    require_managed: bool

    @property
    def timeout_s(self) -> float:
        """``ordered.metadata.timeout.ms`` in seconds."""
        return self.metadata_timeout_ms / 1000.0

    def mode(self) -> str:
        """Which of the built-in source's topic options was given: ``assign``,
        ``subscribePattern`` or ``subscribe``."""
        return "assign" if self.assign else "subscribePattern" if self.pattern is not None else "subscribe"


def _int_or(name: str, value: Optional[str], default: int) -> int:
    """An integer >= 0, ``default`` when not given."""
    got = _pos_int(name, value, 0)
    return default if got is None else got


def _group_id_prefix(value: Optional[str]) -> str:
    if value is None:
        return DEFAULT_GROUP_ID_PREFIX
    v = str(value).strip()
    if not v:
        raise ConfigError("option groupIdPrefix must not be empty")
    return v


def parse_options(raw: Mapping[str, Any], *, streaming: Optional[bool]) -> SourceOptions:
    """Validate the options of a streaming (``streaming=True``) or batch
    (``False``) read; ``None`` checks what both have in common (at ``load()``,
    before Spark says which it is).

    Raises :class:`~kafka_ordered.errors.ConfigError` with a message naming
    the option for anything wrong that can be seen without a broker.
    """
    opts: Dict[str, str] = {str(k).lower(): v for k, v in raw.items() if v is not None}
    if not opts:
        raise ConfigError(
            "the kafka_ordered source got no options at all (kafka.bootstrap.servers and subscribe/"
            "subscribePattern/assign are required). A table created with CREATE TABLE ... USING kafka_ordered "
            "OPTIONS (...) reads like this: PySpark does not pass a catalog table's OPTIONS to a Python data "
            "source (PythonDataSourceV2.getTable ignores them). Use spark.read/readStream.format('kafka_ordered')"
            ".options(...), or in SQL CREATE TEMPORARY VIEW ... USING kafka_ordered OPTIONS (...)."
        )

    # -- connection
    conn: Dict[str, Any] = {}
    group_id: Optional[str] = None
    for k, v in opts.items():
        if k.startswith("kafka."):
            key = k[len("kafka."):]
            if key in _REFUSED_KAFKA:
                raise ConfigError(f"option kafka.{key} is not supported: {_REFUSED_KAFKA[key]}")
            if key == "group.id":
                # As in the built-in source: used as is instead of generated ids. Our
                # consumers only assign() and never commit, so sharing a group id (for
                # ACLs) cannot disturb that group's members or its committed offsets.
                group_id = str(v).strip()
                if not group_id:
                    raise ConfigError("option kafka.group.id must not be empty")
                continue
            conn[key] = v
    if not conn.get("bootstrap.servers"):
        raise ConfigError(
            "option kafka.bootstrap.servers is required (e.g. .option('kafka.bootstrap.servers', 'host:9092')); "
            f"options given: {', '.join(sorted(opts)) or 'none'}"
        )

    # -- topics
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        names = {"subscribe": "subscribe", "subscribepattern": "subscribePattern", "assign": "assign"}
        raise ConfigError(
            "exactly one of the options subscribe, subscribePattern, assign must be given"
            + (f" (got {', '.join(names[g] for g in given)})" if given else " (got none)")
        )
    subscribe: Tuple[str, ...] = ()
    pattern: Optional[str] = None
    assign: Dict[str, Tuple[int, ...]] = {}
    if "subscribe" in opts:
        subscribe = tuple(t.strip() for t in str(opts["subscribe"]).split(",") if t.strip())
        if not subscribe:
            raise ConfigError("option subscribe must list at least one topic (comma-separated)")
    elif "subscribepattern" in opts:
        pattern = str(opts["subscribepattern"]).strip()
        if not pattern:
            raise ConfigError("option subscribePattern must not be empty")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ConfigError(f"option subscribePattern is not a valid regular expression: {e}") from None
    else:
        try:
            d = json.loads(opts["assign"])
        except ValueError as e:
            raise ConfigError(f'option assign must be JSON like {{"topicA":[0,1]}}: {e}') from None
        if not isinstance(d, dict) or not d or not all(
            isinstance(ps, list) and ps and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in ps)
            for ps in d.values()
        ):
            raise ConfigError(f'option assign must be JSON like {{"topicA":[0,1]}}, got {opts["assign"]!r}')
        assign = {str(t): tuple(sorted(set(ps))) for t, ps in d.items()}

    # -- positions
    starting = _position(opts, "starting", "earliest" if streaming is False else "latest", allow_earliest=True,
                         allow_latest=True)
    ending: Optional[OffsetSpec] = None
    if streaming:
        for k, name in STREAM_ONLY_REFUSED.items():
            if k in opts:
                raise ConfigError(
                    f"option {name} is not allowed for a streaming query (only for spark.read): a stream has "
                    "no end; stop the query instead, or use Trigger.AvailableNow to read what exists and stop"
                )
    elif streaming is False or any(k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")):
        ending = _position(opts, "ending", "latest", allow_earliest=False, allow_latest=True)
    if streaming is False:
        if starting.kind == "latest":
            raise ConfigError("option startingOffsets='latest' is not allowed for a batch query (nothing would be read)")
        if starting.kind == "offsets" and any(o == LATEST for ps in starting.per_topic.values() for o in ps.values()):
            raise ConfigError("option startingOffsets: -1 (latest) is not allowed for a batch query")
    strategy = str(opts.get("startingoffsetsbytimestampstrategy", "error")).lower()
    if strategy not in ("error", "latest"):
        raise ConfigError(f"option startingOffsetsByTimestampStrategy must be 'error' or 'latest', got {strategy!r}")

    # -- limits
    max_offsets = _pos_int("maxOffsetsPerTrigger", opts.get("maxoffsetspertrigger"))
    min_offsets = _pos_int("minOffsetsPerTrigger", opts.get("minoffsetspertrigger"))
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise ConfigError(f"minOffsetsPerTrigger ({min_offsets}) must not exceed maxOffsetsPerTrigger ({max_offsets})")
    delay = parse_duration_ms("maxTriggerDelay", opts.get("maxtriggerdelay", "15m"))
    if streaming is False:
        for k in ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"):
            if k in opts:
                raise ConfigError(f"option {k} only applies to streaming queries")

    # -- ours
    for k in opts:
        if k.startswith("ordered.") and k not in ORDERED_OPTIONS:
            raise ConfigError(f"unknown option {k!r}; the kafka_ordered source accepts: {', '.join(ORDERED_OPTIONS)}")
    given_shared = {k: v for k, v in opts.items() if k in SHARED_ORDERED_OPTIONS}
    shared, _ = split_config(given_shared, SHARED_ORDERED_OPTIONS, "the kafka_ordered source")

    return SourceOptions(
        conn=conn,
        subscribe=subscribe,
        pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        by_timestamp_strategy=strategy,
        max_offsets=max_offsets,
        min_offsets=min_offsets,
        max_trigger_delay_ms=delay,
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss"), True),
        include_headers=_bool("includeHeaders", opts.get("includeheaders"), False),
        poll_timeout_ms=_pos_int("kafkaConsumer.pollTimeoutMs", opts.get("kafkaconsumer.polltimeoutms")) or 120_000,
        min_partitions=_pos_int("minPartitions", opts.get("minpartitions")),
        max_records_per_partition=_pos_int("maxRecordsPerPartition", opts.get("maxrecordsperpartition")),
        group_id=group_id,
        group_id_prefix=_group_id_prefix(opts.get("groupidprefix")),
        # Spark's defaults: 3 retries, 10 ms apart.
        fetch_offset_retries=_int_or("fetchOffset.numRetries", opts.get("fetchoffset.numretries"), 3),
        fetch_offset_retry_interval_ms=_int_or("fetchOffset.retryIntervalMs", opts.get("fetchoffset.retryintervalms"), 10),
        layout_topic=shared["ordered.layout.topic"],
        gating=shared["ordered.gating"],
        corrupt_policy=shared["ordered.layout.corrupt.policy"],
        metadata_timeout_ms=shared["ordered.metadata.timeout.ms"],
        require_managed=_bool(REQUIRE_MANAGED, opts.get(REQUIRE_MANAGED), True),
    )


# ------------------------------------------------------------------ the sink

#: ``ordered.*`` keys the sink accepts: the producer's, minus
#: ``ordered.producer.id`` (the sink chooses its producers' ids, see
#: docs/spark.md), plus :data:`REQUIRE_MANAGED`.
SINK_ORDERED_OPTIONS: Tuple[str, ...] = tuple(k for k in PRODUCER_OPTIONS if k != "ordered.producer.id") + (
    REQUIRE_MANAGED,
)

#: Options of the source that mean nothing to the sink (lower-cased): given to
#: a write they are an error, not silently ignored.
SOURCE_ONLY_OPTIONS: Tuple[str, ...] = (
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets", "startingtimestamp",
    "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy", "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay",
    "failondataloss", "includeheaders", "kafkaconsumer.polltimeoutms", "minpartitions",
    "maxrecordsperpartition", "groupidprefix", "fetchoffset.numretries", "fetchoffset.retryintervalms",
    "ordered.gating",
)

# Producer settings the sink refuses (the built-in sink refuses the Java serializers too).
_REFUSED_SINK_KAFKA = {
    "key.serializer": "keys are written as given (binary or string columns)",
    "value.serializer": "values are written as given (binary or string columns)",
    "transactional.id": "the sink is at-least-once, like Spark's Kafka sink; it does not write in transactions",
    "interceptor.classes": "not supported",
}


@dataclass(frozen=True)
class SinkOptions:
    """Parsed options of a write (picklable).

    ``producer_config`` is what each executor's
    :class:`~kafka_ordered.OrderedProducer` gets: every ``kafka.*`` option
    without the prefix, ``acks=all`` and idempotence forced, and the
    producer's ``ordered.*`` keys. ``topic``: the ``topic`` option (it
    overrides a ``topic`` column), or ``None``."""

    producer_config: Mapping[str, Any]
    topic: Optional[str]
    require_managed: bool
    layout_topic: str
    corrupt_policy: str
    metadata_timeout_ms: int

    @property
    def timeout_s(self) -> float:
        """``ordered.metadata.timeout.ms`` in seconds."""
        return self.metadata_timeout_ms / 1000.0


def parse_sink_options(raw: Mapping[str, Any]) -> SinkOptions:
    """Validate the options of ``df.write``/``df.writeStream.format("kafka_ordered")``.

    Raises :class:`~kafka_ordered.errors.ConfigError` naming the option for:
    no ``kafka.bootstrap.servers``; a refused producer setting
    (``kafka.key.serializer``, ``kafka.value.serializer``,
    ``kafka.transactional.id``, ``kafka.interceptor.classes``; ``kafka.acks``
    other than ``all`` and ``kafka.enable.idempotence=false``, which would
    void the ordering); ``ordered.producer.id``; an unknown ``ordered.*``
    key; a source-only option (``subscribe``, ``startingOffsets``...)."""
    opts: Dict[str, str] = {str(k).lower(): v for k, v in raw.items() if v is not None}
    conf: Dict[str, Any] = {}
    for k, v in opts.items():
        if k.startswith("kafka."):
            key = k[len("kafka."):]
            if key in _REFUSED_SINK_KAFKA:
                raise ConfigError(f"option kafka.{key} is not supported by the kafka_ordered sink: {_REFUSED_SINK_KAFKA[key]}")
            conf[key] = v
    if not conf.get("bootstrap.servers"):
        raise ConfigError(
            "option kafka.bootstrap.servers is required (e.g. .option('kafka.bootstrap.servers', 'host:9092')); "
            f"options given: {', '.join(sorted(opts)) or 'none'}"
        )
    try:
        forced(conf, "acks", "all", ("all", -1, "-1"))
        forced(conf, "enable.idempotence", True, (True, "true"))
    except ConfigError as e:
        raise ConfigError(f"option kafka.{e}") from None
    source_only = sorted(k for k in opts if k in SOURCE_ONLY_OPTIONS)
    if source_only:
        raise ConfigError(
            f"option(s) {', '.join(source_only)} apply to reading (spark.read/readStream), not to the "
            "kafka_ordered sink: remove them from the write"
        )
    if "ordered.producer.id" in opts:
        raise ConfigError(
            "option ordered.producer.id is not supported by the kafka_ordered sink: one id would be shared by "
            "concurrent tasks, which the protocol forbids. The sink's producers are anonymous and register again "
            "at every task, which keeps the order across micro-batches (see docs/spark.md, 'The sink')"
        )
    for k in opts:
        if k.startswith("ordered.") and k not in SINK_ORDERED_OPTIONS:
            raise ConfigError(
                f"unknown option {k!r}; the kafka_ordered sink accepts: {', '.join(SINK_ORDERED_OPTIONS)}"
            )
    given = {k: v for k, v in opts.items() if k in SINK_ORDERED_OPTIONS and k != REQUIRE_MANAGED}
    shared, _ = split_config(given, PRODUCER_OPTIONS, "the kafka_ordered sink")
    topic = opts.get("topic")
    if topic is not None and not str(topic).strip():
        raise ConfigError("option topic must not be empty")
    return SinkOptions(
        producer_config={**conf, **{k: v for k, v in shared.items() if k != "ordered.producer.id"}},
        topic=str(topic).strip() if topic is not None else None,
        require_managed=_bool(REQUIRE_MANAGED, opts.get(REQUIRE_MANAGED), True),
        layout_topic=shared["ordered.layout.topic"],
        corrupt_policy=shared["ordered.layout.corrupt.policy"],
        metadata_timeout_ms=shared["ordered.metadata.timeout.ms"],
    )
