"""The layout log: one single-partition topic with every layout change and
registration, in one total order (I/O; the records and their validation are
in :mod:`kafka_ordered.history`).

:class:`LayoutLog` creates/checks the topic and appends records (one record
per request, ``acks=all``, idempotent, waiting for the acknowledgement).
:class:`LayoutFollower` rebuilds the full history and keeps it current from
a background thread that keeps one long-poll Fetch in flight;
:meth:`LayoutFollower.sync` guarantees that the view includes every record
appended before the call, :meth:`LayoutFollower.catch_up_past` that it
includes a given offset (what a ``kafka-ordered.reg`` stamp names).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from types import TracebackType
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Type, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from ._kafka import OffsetReader, new_admin, partition_count, to_controller, wait_for_partitions
from .config import DEFAULT_LAYOUT_TOPIC, internal_config
from .errors import (
    BrokerUnavailableError,
    CorruptLayoutRecordError,
    UnsupportedLayoutVersionError,
    KafkaOrderedError,
    LayoutLogError,
    LayoutLogUnwritableError,
    ProtocolVersionError,
    UnknownTopicError,
    UnsafeLayoutLogError,
    translate,
)
from .history import CorruptPolicy, LayoutHistory
from .snapshots import InvalidSnapshot, decode as decode_snapshot, encode as encode_snapshot, restore, snapshot_topic, take
from .metrics import LayoutViewMetrics

__all__ = ["LayoutLog", "LayoutFollower", "LONG_POLL_MS"]

log = logging.getLogger("kafka_ordered.layout_log")

_GAP_REREADS = 5
_GAP_BACKOFF_S = 0.02
#: How long the follower's Fetch waits at the broker while the log has nothing
#: new (``fetch.wait.max.ms``): an idle process sends one request per wait.
LONG_POLL_MS = 5000
#: How often the follower thread wakes to check for close (no request involved).
_WAKE_S = 0.1
#: How often the follower thread does its chores (closing idle clients).
_HOUSEKEEPING_S = 5.0
#: Clients made on demand (the catch-up/offset reader's consumer, the writer)
#: are closed after this long unused, so an idle process keeps only the
#: follower's consumer and the admin client.
IDLE_CLOSE_S = 60.0

#: A client whose start replayed more layout-log records than this after the
#: newest snapshot writes a new snapshot (``<layout topic>.snapshots``).
SNAPSHOT_TAIL = 10_000
#: How many of the newest snapshots a reader tries before it replays the log.
_SNAPSHOTS_TRIED = 3

_LOG_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
#: The snapshots topic may be compacted (unlike the log): every snapshot has
#: the key ``snapshot`` and a reader wants only the newest, which compaction
#: always keeps. Compaction keeps it small forever, where time retention
#: could leave it empty (a reader then replays the log: slower, never wrong).
_SNAPSHOTS_TOPIC_CONFIG = {"cleanup.policy": "compact"}


_T = TypeVar("_T")


def _unknown_topic(e: KafkaException) -> bool:
    err = e.args[0] if e.args else None
    return isinstance(err, KafkaError) and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


class LayoutLog:
    """Creates, checks and appends to the layout-log topic.

    :meth:`ensure` creates the topic when missing (one partition, infinite
    retention, replication ``min(3, brokers)``) and refuses one that can lose
    records. :meth:`append` returns the record's offset once acknowledged by
    all in-sync replicas, or raises :class:`LayoutLogUnwritableError`.
    """

    def __init__(self, conn: Mapping[str, Any], topic: str = DEFAULT_LAYOUT_TOPIC, *, timeout: float = 10.0,
                 admin: Optional[AdminClient] = None) -> None:
        """``admin``: an AdminClient to share (else one of its own)."""
        self.topic = topic
        self.timeout = timeout
        self._conn = dict(conn)
        self._admin = admin if admin is not None else new_admin(self._conn)
        self._producer: Optional[Producer] = None
        self._lock = threading.Lock()
        self._used = time.monotonic()

    def ensure(self, create: bool = True) -> None:
        """Make sure the layout log exists and cannot lose records.

        Raises :class:`BrokerUnavailableError`, :class:`LayoutLogError` (cannot
        be created) or :class:`UnsafeLayoutLogError` (more than one partition,
        finite retention, compaction).
        """
        try:
            count = partition_count(self._admin, self.topic, self.timeout)
        except UnknownTopicError:
            if not create:
                raise
            count = self._create()
        if count != 1:
            raise UnsafeLayoutLogError(
                f"layout log {self.topic} has {count} partitions; it must have exactly one "
                "(one total order of layout changes). Use another ordered.layout.topic."
            )
        self._check_config()
        if create:
            self._ensure_snapshots()

    def _ensure_snapshots(self) -> None:
        """Create the snapshots topic when missing (one partition, the log's
        replication, compacted). Snapshots only speed up starts: a failure is a WARNING."""
        topic = snapshot_topic(self.topic)
        try:
            partition_count(self._admin, topic, self.timeout)
            return
        except UnknownTopicError:
            pass
        except KafkaOrderedError as e:
            log.warning("cannot check the snapshots topic %s: %s", topic, e)
            return
        try:
            brokers = len(self._admin.list_topics(timeout=self.timeout).brokers)
            new = NewTopic(topic, 1, max(1, min(3, brokers)), config=dict(_SNAPSHOTS_TOPIC_CONFIG))
            fs = self._admin.create_topics([new], request_timeout=self.timeout)
            fs[topic].result()
        except KafkaException as e:
            err = e.args[0]
            if getattr(err, "code", lambda: None)() != KafkaError.TOPIC_ALREADY_EXISTS:
                log.warning("cannot create the snapshots topic %s (%s): clients replay the whole layout log at "
                            "start; create it (1 partition) to let them start from a snapshot", topic, err)

    def _create(self) -> int:
        """Create the log's topic (or find it created by another client);
        returns its partition count once Metadata shows it."""
        try:
            brokers = len(self._admin.list_topics(timeout=self.timeout).brokers)
        except KafkaException as e:
            raise translate(e, "reading cluster metadata") from e
        rf = max(1, min(3, brokers))
        new = NewTopic(self.topic, 1, rf, config=dict(_LOG_TOPIC_CONFIG))
        try:
            to_controller(self._admin, self.timeout,
                          lambda t: self._admin.create_topics([new], request_timeout=t)[self.topic].result())
        except KafkaException as e:
            err = e.args[0]
            if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise LayoutLogError(
                    f"cannot create the layout log topic {self.topic}: {err.str()}. Create it yourself "
                    f"(1 partition, retention.ms=-1, retention.bytes=-1, cleanup.policy=delete) or grant "
                    "CreateTopics to this client.",
                    code=err.code(),
                ) from e
        return wait_for_partitions(self._admin, self.topic, 1, self.timeout)

    def _known(self, call: Callable[[], _T]) -> _T:
        """``call()``, asked again while a broker that has not learnt the log
        yet answers UNKNOWN_TOPIC_OR_PART (each broker of a cluster learns a
        new topic on its own), until the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return call()
            except KafkaException as e:
                if not _unknown_topic(e) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def _check_config(self) -> None:
        res = ConfigResource(ResourceType.TOPIC, self.topic)
        try:
            cfg = self._known(lambda: self._admin.describe_configs([res], request_timeout=self.timeout)[res].result())
        except KafkaException as e:
            log.warning("cannot check the retention of layout log %s: %s", self.topic, e)
            return
        values = {k: v.value for k, v in cfg.items()}
        problems: List[str] = []
        for key in ("retention.ms", "retention.bytes"):
            if key in values and values[key] not in (None, "-1"):
                problems.append(f"{key}={values[key]}")
        if "compact" in (values.get("cleanup.policy") or ""):
            problems.append(f"cleanup.policy={values['cleanup.policy']}")
        if problems:
            raise UnsafeLayoutLogError(
                f"layout log {self.topic} can lose records ({', '.join(problems)}); set retention.ms=-1, "
                "retention.bytes=-1, cleanup.policy=delete on it"
            )
        if "retention.ms" not in values:
            log.info("broker does not report retention of %s; assuming it keeps records", self.topic)

    def log_id(self) -> str:
        """The log's identity in ``kafka-ordered.reg`` stamps: its topic id (a
        recreated log has another), or ``name=<topic>`` on a broker that has no
        topic ids (a recreated or mirrored log then looks the same: stamps are
        only ever caught up on, so that costs reads, not order)."""
        try:
            tid = self._known(lambda: self._admin.describe_topics(
                TopicCollection([self.topic]), request_timeout=self.timeout)[self.topic].result()).topic_id
            text = str(tid) if tid is not None else ""
        except (KafkaException, AttributeError, TypeError, ValueError) as e:
            log.info("layout log %s: no topic id from the broker (%s); stamps name the topic", self.topic, e)
            text = ""
        if not text or set(text) <= {"A", "="} or ":" in text:  # the all-zero id: no topic ids here
            return f"name={self.topic}".replace(":", "_")
        return text

    def _get_producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(
                {
                    **internal_config(self._conn, "producer"),
                    "acks": "all",
                    # One record in flight at a time (append waits for its
                    # acknowledgement): retries cannot reorder, and a duplicate
                    # record is harmless (same gates; a repeated layout loses its
                    # race). Idempotence would only delay the first append by its
                    # producer-id round (~0.5 s, measured) at every process's
                    # first switch.
                    "enable.idempotence": False,
                    "max.in.flight.requests.per.connection": 1,
                    "linger.ms": 0,
                    "batch.num.messages": 1,
                    "message.timeout.ms": int(self.timeout * 1000),
                    "log_level": self._conn.get("log_level", 3),
                }
            )
        return self._producer

    @property
    def connected(self) -> bool:
        """Whether this writer has its producer (a librdkafka client) open."""
        return self._producer is not None

    def warm_up(self) -> None:
        """Open the connection and acquire the idempotent producer id now, so
        the first append is fast."""
        p = self._get_producer()
        try:
            p.list_topics(timeout=self.timeout)
        except KafkaException as e:
            raise translate(e, f"connecting to write layout log {self.topic}") from e
        deadline = time.monotonic() + self.timeout
        while p.flush(0) and time.monotonic() < deadline:
            pass

    def close_if_idle(self, idle_s: float) -> bool:
        """Close the producer when nothing was appended for ``idle_s`` seconds
        (the next append makes a new one); returns whether it did."""
        if self._producer is None or time.monotonic() - self._used < idle_s:
            return False
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._producer is None or time.monotonic() - self._used < idle_s:
                return False
            p, self._producer = self._producer, None
        finally:
            self._lock.release()
        p.flush(self.timeout)
        return True

    def append(self, key: bytes, value: bytes, topic: Optional[str] = None) -> int:
        """Append one record (to ``topic``, default the layout log; the
        snapshots topic is the other one) and wait for its acknowledgement;
        returns its offset."""
        topic = topic or self.topic
        with self._lock:
            self._used = time.monotonic()
            p = self._get_producer()
            result: Dict[str, Any] = {}

            def done(err: Optional[KafkaError], msg: Any) -> None:
                result["err"] = err
                result["offset"] = msg.offset() if err is None else None

            try:
                p.produce(topic, key=key, value=value, partition=0, on_delivery=done)
            except (KafkaException, BufferError) as e:
                raise LayoutLogUnwritableError(f"cannot append to layout log {topic}: {e}") from e
            deadline = time.monotonic() + self.timeout + 1
            while "err" not in result and time.monotonic() < deadline:
                p.poll(0.05)
            err = result.get("err")
            if "err" not in result or err is not None:
                code = err.code() if err is not None else KafkaError._MSG_TIMED_OUT
                text = err.str() if err is not None else "no acknowledgement within the timeout"
                raise LayoutLogUnwritableError(
                    f"append to layout log {topic} failed: {text}. The record may still have been written "
                    "(a leader that failed before acknowledging it): read the log before retrying. Check "
                    "that the broker is up and this client may write to the topic.",
                    code=code,
                )
            return int(result["offset"])

    def close(self) -> None:
        """Flush the writer's producer and drop it and the admin client
        reference (records already appended stay appended; an admin client
        passed in stays usable by its owner). Idempotent."""
        p, self._producer = self._producer, None
        if p is not None:
            p.flush(self.timeout)
        self._admin = None  # type: ignore[assignment]

    def __enter__(self) -> "LayoutLog":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()


class LayoutFollower:
    """Reads the whole layout log and keeps following it in the background.

    ``history`` is the current view. One background thread keeps one Fetch of
    the log in flight with a long broker-side wait (``long_poll_ms``): an idle
    log costs one request per long poll, and an append is seen as soon as the
    broker answers the pending Fetch (Apache Kafka answers it at the append;
    a broker that does not, such as the embedded Tansu, answers at the end of
    the wait). :meth:`sync` and :meth:`catch_up_past` do not wait for that:
    they read what is missing with a short-wait reader (the process's
    :class:`~kafka_ordered._kafka.OffsetReader`, or one of the follower's
    own, made on first use). No clock is compared anywhere.

    :attr:`log_id` names the log in the ``kafka-ordered.reg`` stamps (its
    topic id; the topic name on a broker without topic ids). A refused or
    unreadable record stops the follower for good (:attr:`fatal`, raised by
    every later :meth:`sync`); a transient error of the background read is
    kept in :attr:`error` while it retries.
    """

    def __init__(
        self,
        conn: Mapping[str, Any],
        topic: str = DEFAULT_LAYOUT_TOPIC,
        *,
        long_poll_ms: int = LONG_POLL_MS,
        corrupt_policy: CorruptPolicy = "skip",
        timeout: float = 10.0,
        create: bool = True,
        admin: Optional[AdminClient] = None,
        reader: Optional[OffsetReader] = None,
    ) -> None:
        """``admin``: an AdminClient to share (else one of its own);
        ``reader``: the offset reader whose consumer serves catch-up reads
        (else one of its own, made on first use)."""
        if long_poll_ms <= 0:
            raise ValueError("long_poll_ms must be > 0")
        self.topic = topic
        self.timeout = timeout
        self.long_poll_ms = long_poll_ms
        self.create = create
        self.history = LayoutHistory(corrupt_policy)
        self.log_id = ""
        self.error: Optional[BaseException] = None
        #: A refused or unreadable record: the follower stopped for good.
        self.fatal: Optional[LayoutLogError] = None
        #: Refuse (as :attr:`fatal`) protocol-1 records appended to a log that had none at start.
        self.require_protocol = False
        self._last_end: Optional[int] = None
        self._confirmed_at = float("-inf")
        self._conn = dict(conn)
        self._tail: Optional[Consumer] = None
        self._admin = admin if admin is not None else new_admin(self._conn)
        self._reader = reader
        self._own_reader: Optional[OffsetReader] = None
        self._tp = TopicPartition(topic, 0)
        self._lock = threading.Lock()  # one writer of the history at a time
        self._listeners: List[Callable[[], None]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._reported_legacy = 0
        #: The offset the snapshot this view started from covers (``None``: replayed from 0).
        self.snapshot_offset: Optional[int] = None
        #: Layout-log records replayed at start, after the snapshot.
        self.replayed = 0
        self._snapshots = False  # whether the snapshots topic was seen
        self._snapshot_warned = False
        #: Called about every :data:`_HOUSEKEEPING_S` from the follower thread
        #: (the shared set closes clients it has not used for a while).
        self.housekeeping: Optional[Callable[[], None]] = None

    # -- life cycle

    def start(self) -> "LayoutFollower":
        """Check (and create if allowed) the log, read it to its end, and start
        following. Raises :class:`BrokerUnavailableError`, :class:`LayoutLogError`."""
        if self._thread is not None:
            return self
        checker = LayoutLog(self._conn, self.topic, timeout=self.timeout, admin=self._admin)
        checker.ensure(create=self.create)
        self.log_id = checker.log_id()
        self._tail = Consumer(
            {
                **internal_config(self._conn, "consumer"),
                "group.id": f"kafka-ordered-follower-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                # One Fetch in flight, held by the broker until a record arrives or
                # the wait ends: an idle log costs one request per wait.
                "fetch.wait.max.ms": self.long_poll_ms,
                "log_level": self._conn.get("log_level", 3),
            }
        )
        self._load_snapshot(self._tail)
        began = self.history.next_offset
        self._tail.assign([TopicPartition(self.topic, 0, began)])
        self._initial_read(self._tail)
        self.replayed = self.history.next_offset - began
        if self.replayed > SNAPSHOT_TAIL:
            self.write_snapshot()
        self._thread = threading.Thread(target=self._run, name=f"kafka-ordered-follower-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def _initial_read(self, c: Consumer) -> None:
        """Read the log from its start to its end through the tail consumer
        (the background thread is not running yet)."""
        deadline = time.monotonic() + self.timeout
        low, end = self._bounds(self.timeout)
        if low > self.history.next_offset:
            raise UnsafeLayoutLogError(
                f"layout log {self.topic} starts at offset {low}: records were deleted, so the "
                "history is incomplete. Restore them or start a new layout log."
            )
        while True:
            while self.history.next_offset < end:
                if time.monotonic() > deadline:
                    raise BrokerUnavailableError(
                        f"layout log {self.topic}: read {self.history.next_offset} of {end} records within the timeout"
                    )
                msgs = c.consume(500, 0.05)
                if msgs:
                    with self._lock:
                        self._apply_all(msgs, deadline)
            # A fetch may show a later end than ListOffsets did (brokers that
            # report the base offset of the last batch).
            _, fetched = c.get_watermark_offsets(self._tp, cached=True)
            if fetched is None or fetched <= end:
                break
            end = fetched
        self._last_end = end
        self._confirmed_at = time.monotonic()

    # -- snapshots

    def _load_snapshot(self, c: Consumer) -> None:
        """Start the view from the newest valid snapshot of the log, if any
        (tried newest first; an invalid one is a WARNING and the next older
        one, or a replay from offset 0, is used)."""
        topic = snapshot_topic(self.topic)
        try:
            low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=self.timeout)
        except KafkaException as e:
            # Absent, or created a moment ago and not yet known to every broker:
            # write_snapshot looks again before it gives up.
            log.debug("no snapshots of layout log %s (%s): replaying it whole", self.topic, e)
            return
        self._snapshots = True
        if high is None or low is None or high <= low:
            return
        first = max(low, high - _SNAPSHOTS_TRIED)
        found: Dict[int, Any] = {}
        reader = self._reader_for()
        was_open = reader.connected
        try:
            # Through the short-wait reader: behind the tail's long-poll fetch a
            # read of the log would wait for that fetch to end.
            got, _ = reader.read_from((topic, 0), first, upto=high, timeout=self.timeout)
            found.update((int(m.offset() or 0), m.value()) for m in got if m.error() is None)
        except KafkaOrderedError as e:
            log.debug("reading the snapshots of %s: %s", self.topic, e)
        if not found:
            log.warning("layout log %s: could not read its snapshots (%s, offsets %d-%d) within %.0f s; "
                        "replaying the whole log", self.topic, topic, first, high - 1, self.timeout)
            return
        try:
            end = self._listed_end(self.timeout)
        finally:
            if not was_open:  # opened for this start only: an idle process keeps no extra client
                reader.close_if_idle(0.0)
        for offset in sorted(found, reverse=True):
            try:
                snap = decode_snapshot(found[offset])
                if snap.log_id != self.log_id:
                    raise InvalidSnapshot(f"it is of another layout log ({snap.log_id}, this is {self.log_id})")
                if snap.next_offset > end:
                    raise InvalidSnapshot(f"it covers offset {snap.next_offset}, beyond the log's end {end}")
                history = restore(snap, self.history.corrupt_policy)
            except InvalidSnapshot as e:
                log.warning("layout log %s: the snapshot at %s offset %d is not used: %s; trying an older one, "
                            "else replaying the whole log", self.topic, topic, offset, e)
                continue
            self.history = history
            self.snapshot_offset = snap.next_offset
            log.debug("layout log %s: started from the snapshot at %s offset %d (covers %d records)",
                      self.topic, topic, offset, snap.next_offset)
            return

    def _snapshots_exist(self) -> bool:
        """Whether the snapshots topic exists, looked up until it is seen once
        (writing to a missing one could auto-create it uncompacted)."""
        if not self._snapshots:
            try:
                partition_count(self._admin, snapshot_topic(self.topic), self.timeout)
                self._snapshots = True
            except KafkaOrderedError as e:
                log.debug("no snapshots topic for layout log %s (%s): no snapshot written", self.topic, e)
        return self._snapshots

    def write_snapshot(self, writer: Optional[LayoutLog] = None) -> bool:
        """Append a snapshot of the current view to ``<layout topic>.snapshots``
        (through ``writer``, else a writer made for it); returns whether it was
        written. Gates whose every wait lies below its source's log start are
        left out. Never raises for a broker error: without a snapshots topic
        it writes nothing (DEBUG; the topic is looked up again at the next
        write, so one created later, or one a start could not see yet, is
        used); a failed write (no permission, too large a record) is one
        WARNING per follower."""
        if not self.log_id or not self._snapshots_exist():
            return False
        with self._lock:
            sources = {(g.topic, q) for t in self.history.topics() for g in self.history.gates(t) for q in g.wait}
        try:
            starts = self._reader_for().start_offsets(sources, self.timeout) if sources else {}
        except KafkaOrderedError as e:
            log.debug("log starts of gate sources unknown (%s): the snapshot keeps every gate", e)
            starts = {}
        with self._lock:  # (a source first seen now has no start here: its gates are kept)
            value = encode_snapshot(take(self.history, self.log_id, lambda tp: starts.get(tp, 0)))
        own = writer is None
        w = writer if writer is not None else LayoutLog(self._conn, self.topic, timeout=self.timeout, admin=self._admin)
        try:
            w.append(b"snapshot", value, topic=snapshot_topic(self.topic))
            return True
        except KafkaOrderedError as e:
            if not self._snapshot_warned:
                self._snapshot_warned = True
                log.warning("layout log %s: cannot write a snapshot (%d bytes) to %s: %s; clients keep replaying "
                            "the log from the last snapshot", self.topic, len(value), snapshot_topic(self.topic), e)
            return False
        finally:
            if own:
                w.close()

    def _run(self) -> None:
        c = self._tail
        assert c is not None
        chores = time.monotonic() + _HOUSEKEEPING_S
        while not self._stop.is_set():
            try:
                if time.monotonic() >= chores:
                    chores = time.monotonic() + _HOUSEKEEPING_S
                    if self.housekeeping is not None:
                        self.housekeeping()
                    if self._own_reader is not None:
                        self._own_reader.close_if_idle(IDLE_CLOSE_S)
                msgs = c.consume(500, _WAKE_S)
                before = self.history.version
                if msgs:
                    with self._lock:
                        self._apply_all(msgs, time.monotonic() + self.timeout)
                _, hw = c.get_watermark_offsets(self._tp, cached=True)
                if hw is not None and hw >= 0:
                    self._last_end = max(self._last_end or 0, hw)
                    if self.history.next_offset >= hw:
                        self._confirmed_at = time.monotonic()
                self.error = None
                if self.history.version != before:
                    self._changed()
            except (CorruptLayoutRecordError, UnsupportedLayoutVersionError, ProtocolVersionError) as e:
                log.error("layout log follower of %s stopped: %s", self.topic, e)
                self._changed()
                return
            except KafkaOrderedError as e:
                self.error = e
                log.warning("layout log follower: %s (retrying)", e)
                self._stop.wait(min(1.0, self.timeout))
            except Exception as e:  # keep following; surface through sync()
                self.error = e
                log.exception("layout log follower failed (retrying)")
                self._stop.wait(min(1.0, self.timeout))

    # -- applying records (under self._lock)

    def _apply_all(self, msgs: List[Any], deadline: float) -> None:
        """Apply fetched records in offset order. An offset beyond the next one
        is suspect (a broker may hand out a later batch before an earlier one
        is written): the hole is read again before anything after it."""
        history = self.history
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise translate(KafkaException(err), f"reading layout log {self.topic}")
            offset = int(m.offset() or 0)
            if offset < history.next_offset:
                continue
            if offset > history.next_offset:
                self._fill(offset, deadline)
                if offset < history.next_offset:
                    continue
            self._apply(m, offset)

    def _fill(self, target: int, deadline: float) -> None:
        """Read ``[next_offset, target)`` again with the short-wait reader. A
        hole is accepted as permanent (compaction, transaction markers) with a
        warning only after at least ``_GAP_REREADS`` re-reads over at least
        half the follower's timeout: a loaded broker can take that long to
        write a batch whose offsets it has handed out. Raises
        ``BrokerUnavailableError`` when ``deadline`` comes first (the
        background read tries again; nothing is skipped)."""
        history = self.history
        began = time.monotonic()
        settle = self.timeout / 2
        attempt = 0
        while history.next_offset < target:
            attempt += 1
            got, _ = self._reader_for().read_from((self.topic, 0), history.next_offset, upto=target,
                                                  timeout=max(0.1, deadline - time.monotonic()))
            progressed = False
            for m in got:
                offset = int(m.offset() or 0)
                if offset == history.next_offset and offset < target:
                    self._apply(m, offset)
                    progressed = True
            if history.next_offset >= target:
                return
            if progressed:
                began, attempt = time.monotonic(), 0
                continue
            if attempt >= _GAP_REREADS and time.monotonic() - began >= settle:
                log.warning("layout log %s: offsets %d..%d stayed missing over %d re-reads in %.1f s; treating "
                            "the gap as permanent (compaction or transaction markers)", self.topic,
                            history.next_offset, target - 1, attempt, time.monotonic() - began)
                history.skip_to(target)
                return
            pause = min(_GAP_BACKOFF_S * attempt, 0.5)
            if time.monotonic() + pause > deadline:
                raise BrokerUnavailableError(
                    f"layout log {self.topic}: offsets {history.next_offset}..{target - 1} are still missing "
                    f"after {attempt} re-reads; reading again later"
                )
            log.debug("layout log %s: offsets %d..%d missing, re-reading", self.topic, history.next_offset,
                      target - 1)
            time.sleep(pause)

    def _apply(self, m: Any, offset: int) -> None:
        if self.fatal is not None:
            raise self.fatal
        history = self.history
        problems = len(history.problems)
        try:
            history.apply(offset, m.key(), m.value(), m.timestamp()[1])
        except (CorruptLayoutRecordError, UnsupportedLayoutVersionError) as e:
            e.args = (f"layout log {self.topic} partition 0: {e}",)
            self.fatal = e
            raise
        for problem in history.problems[problems:]:
            log.warning("layout log %s partition 0: skipped the record at offset %d: %s "
                        "(ordered.layout.corrupt.policy=skip)", self.topic, problem.offset, problem.reason)
        for legacy in history.legacy_after_marker[self._reported_legacy:]:
            log.error("layout log %s offset %d was written by a kafka-ordered client of protocol 1 after the log "
                      "was upgraded to protocol %d at offset %s: that client does not stamp its records, so "
                      "ordering across its registration is not guaranteed. Stop or upgrade it.",
                      self.topic, legacy, history.protocol, history.protocol_offset)
        self._reported_legacy = len(history.legacy_after_marker)
        if self.require_protocol and self._thread is not None and history.protocol_problem() is not None:
            self.fatal = ProtocolVersionError(
                f"layout log {self.topic}: a kafka-ordered client of protocol 1 appended the record at offset "
                f"{offset} to a log this client started on; {history.protocol_problem()}", protocol=None)
            raise self.fatal
        key = m.key()
        change = history.find_change(key.decode("utf-8", "replace"), offset) if key else None
        if change is not None and self._thread is not None:
            log.info("layout change observed: %s epoch %d, %d partitions (%s by %s, layout-log offset %d)",
                     change.layout.topic, change.layout.epoch, change.layout.partitions, change.op,
                     change.admin_id or "?", offset)

    def _reader_for(self) -> OffsetReader:
        if self._reader is not None:
            return self._reader
        if self._own_reader is None:
            self._own_reader = OffsetReader(self._conn, self.timeout, admin=self._admin)
        return self._own_reader

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    # -- reading on demand

    def _bounds(self, timeout: float) -> Tuple[int, int]:
        """(log start, log end) of the layout log, by ListOffsets. Asked on the
        admin client's own connection: behind the follower's long-poll fetch,
        a broker answers only when that fetch completes (the end: see
        :meth:`_listed_end`)."""
        # (Through the reader: it asks again with fresh metadata after a leader change.)
        end = self._listed_end(timeout)
        low = self._reader_for().start_offsets([(self.topic, 0)], timeout)[(self.topic, 0)]
        return low, end

    def _listed_end(self, timeout: float) -> int:
        """The layout log's end, at least as late as this call: ListOffsets
        (latest), asked now. Exact on every broker for this log, whose
        batches each hold one record (:class:`LayoutLog` is its only writer
        and sends one record at a time): the embedded broker answers the base
        offset of the last batch + 1, low only after a batch of several. (A
        Fetch to confirm it, as :meth:`OffsetReader.end_offsets` makes for
        data partitions, costs ~20 ms on Apache Kafka, at every catch-up.)"""
        return self._reader_for().listed_end_offsets([(self.topic, 0)], timeout)[(self.topic, 0)]

    def _read_to(self, target: int, timeout: float) -> None:
        """Make the view include every offset below ``target`` (a read sent now)."""
        if self.fatal is not None:
            raise self.fatal
        if self.history.next_offset >= target:
            return
        deadline = time.monotonic() + timeout
        before = self.history.version
        try:
            with self._lock:
                history = self.history
                while history.next_offset < target:
                    if time.monotonic() > deadline:
                        raise BrokerUnavailableError(
                            f"layout log {self.topic}: read {history.next_offset} of {target} records within the "
                            "timeout"
                        )
                    got, hw = self._reader_for().read_from((self.topic, 0), history.next_offset,
                                                           timeout=max(0.1, deadline - time.monotonic()))
                    self._apply_all(got, deadline)
                    # A broker's ListOffsets may be low (the embedded Tansu after a
                    # multi-record batch): what the read showed counts too.
                    self._last_end = max(self._last_end or 0, hw, target)
                    if not got and history.next_offset < target:
                        time.sleep(_GAP_BACKOFF_S)
        finally:
            if self.history.version != before:
                self._changed()

    def sync(self, timeout: Optional[float] = None) -> LayoutHistory:
        """Catch up with every record appended before this call (its end
        offset is read now, by ListOffsets, see :meth:`_listed_end`, then
        what is missing is read); returns the history.

        Raises :class:`BrokerUnavailableError` when the log cannot be read in
        time, and the follower's fatal error (:class:`CorruptLayoutRecordError`
        under the ``refuse`` policy, :class:`UnsupportedLayoutVersionError`,
        :class:`ProtocolVersionError`) once it has stopped."""
        if self.fatal is not None:
            raise self.fatal
        called = time.monotonic()
        timeout = timeout or self.timeout
        end = self._listed_end(timeout)
        self._read_to(end, timeout)
        self._last_end = max(self._last_end or 0, end)
        self._confirmed_at = max(self._confirmed_at, called)
        return self.history

    def catch_up_past(self, offset: int, timeout: Optional[float] = None) -> LayoutHistory:
        """Make the view include layout-log ``offset`` (a registration a stamp
        names): nothing to do when it does; else what is missing is read now.
        Raises as :meth:`sync`."""
        self._read_to(offset + 1, timeout or self.timeout)
        return self.history

    def view_metrics(self) -> LayoutViewMetrics:
        """How current the view is (no request: from the last read).
        ``age_s`` is the time since the view was last known to be complete
        (a catch-up reached the end, or the background read found itself at
        the end shown by its last fetch response)."""
        nxt = self.history.next_offset
        end = self._last_end
        return LayoutViewMetrics(self.topic, nxt, end, max(0, (end or 0) - nxt), time.monotonic() - self._confirmed_at)

    @property
    def clients(self) -> int:
        """librdkafka client instances this follower has open of its own
        (its tail consumer, and its own reader's consumer if made)."""
        own = self._own_reader.clients if self._own_reader is not None else 0
        return (1 if self._tail is not None else 0) + own

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` (on the thread that read them) after new records
        were applied to the history."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener`` (no error when it was not added)."""
        try:
            self._listeners.remove(listener)
        except ValueError:
            pass

    def close(self) -> None:
        """Stop the background thread (waits up to ``timeout`` for it) and close
        the log consumer; :attr:`history` stays readable. Idempotent."""
        self._stop.set()
        t, self._thread = self._thread, None
        if t is not None:
            t.join(timeout=self.timeout)
        c, self._tail = self._tail, None
        if c is not None:
            c.close()
        r, self._own_reader = self._own_reader, None
        if r is not None:
            r.close()
        self._admin = None  # type: ignore[assignment]  # a live client keeps reconnecting

    def __enter__(self) -> "LayoutFollower":
        return self.start()

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()
