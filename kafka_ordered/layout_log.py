"""The layout log: one single-partition topic with every layout change and
registration, in one total order (I/O; the records and their validation are
in :mod:`kafka_ordered.history`).

:class:`LayoutLog` creates/checks the topic and appends records (one record
per request, ``acks=all``, idempotent, waiting for the acknowledgement).
:class:`LayoutFollower` rebuilds the full history and keeps it current from
a background thread; :meth:`LayoutFollower.sync` guarantees that the view
includes every record appended before the call.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from types import TracebackType
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Type

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec, ResourceType

from ._kafka import new_admin, partition_count
from .config import DEFAULT_LAYOUT_TOPIC, internal_config
from .errors import (
    BrokerUnavailableError,
    CorruptLayoutRecordError,
    UnsupportedLayoutVersionError,
    KafkaOrderedError,
    LayoutLogError,
    LayoutLogUnwritableError,
    UnknownTopicError,
    UnsafeLayoutLogError,
    translate,
)
from .history import CorruptPolicy, LayoutHistory
from .metrics import LayoutViewMetrics

__all__ = ["LayoutLog", "LayoutFollower"]

log = logging.getLogger("kafka_ordered.layout_log")

_GAP_REREADS = 5
_GAP_BACKOFF_S = 0.02

_LOG_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}


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
            self._create()
            count = partition_count(self._admin, self.topic, self.timeout)
        if count != 1:
            raise UnsafeLayoutLogError(
                f"layout log {self.topic} has {count} partitions; it must have exactly one "
                "(one total order of layout changes). Use another ordered.layout.topic."
            )
        self._check_config()

    def _create(self) -> None:
        try:
            brokers = len(self._admin.list_topics(timeout=self.timeout).brokers)
        except KafkaException as e:
            raise translate(e, "reading cluster metadata") from e
        rf = max(1, min(3, brokers))
        fs = self._admin.create_topics(
            [NewTopic(self.topic, 1, rf, config=dict(_LOG_TOPIC_CONFIG))], request_timeout=self.timeout
        )
        try:
            fs[self.topic].result()
        except KafkaException as e:
            err = e.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            raise LayoutLogError(
                f"cannot create the layout log topic {self.topic}: {err.str()}. Create it yourself "
                f"(1 partition, retention.ms=-1, retention.bytes=-1, cleanup.policy=delete) or grant "
                "CreateTopics to this client.",
                code=err.code(),
            ) from e
        # Metadata propagates asynchronously on multi-broker clusters.
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                partition_count(self._admin, self.topic, self.timeout)
                return
            except UnknownTopicError:
                time.sleep(0.05)

    def _check_config(self) -> None:
        res = ConfigResource(ResourceType.TOPIC, self.topic)
        try:
            cfg = self._admin.describe_configs([res], request_timeout=self.timeout)[res].result()
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

    def _get_producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(
                {
                    **internal_config(self._conn, "producer"),
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 0,
                    "batch.num.messages": 1,
                    "message.timeout.ms": int(self.timeout * 1000),
                    "log_level": self._conn.get("log_level", 3),
                }
            )
        return self._producer

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

    def append(self, key: bytes, value: bytes) -> int:
        """Append one record and wait for its acknowledgement; returns its offset."""
        with self._lock:
            p = self._get_producer()
            result: Dict[str, Any] = {}

            def done(err: Optional[KafkaError], msg: Any) -> None:
                result["err"] = err
                result["offset"] = msg.offset() if err is None else None

            try:
                p.produce(self.topic, key=key, value=value, partition=0, on_delivery=done)
            except (KafkaException, BufferError) as e:
                raise LayoutLogUnwritableError(f"cannot append to layout log {self.topic}: {e}") from e
            deadline = time.monotonic() + self.timeout + 1
            while "err" not in result and time.monotonic() < deadline:
                p.poll(0.05)
            err = result.get("err")
            if "err" not in result or err is not None:
                code = err.code() if err is not None else KafkaError._MSG_TIMED_OUT
                text = err.str() if err is not None else "no acknowledgement within the timeout"
                raise LayoutLogUnwritableError(
                    f"append to layout log {self.topic} failed: {text}. Nothing was changed; "
                    "check that the broker is up and this client may write to the topic.",
                    code=code,
                )
            return int(result["offset"])

    def close(self) -> None:
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

    ``history`` is the current view. :meth:`sync` returns only once the view
    includes every record appended before the call; :attr:`fresh_as_of` is
    the monotonic time at which the last completed catch-up began (so the
    view includes everything appended before it). A follower error (broker
    down, refused corrupt record) is kept in :attr:`error` and re-raised by
    :meth:`sync`.
    """

    def __init__(
        self,
        conn: Mapping[str, Any],
        topic: str = DEFAULT_LAYOUT_TOPIC,
        *,
        poll_interval_ms: int = 50,
        corrupt_policy: CorruptPolicy = "skip",
        timeout: float = 10.0,
        create: bool = True,
        admin: Optional[AdminClient] = None,
    ) -> None:
        """``admin``: an AdminClient to share (else one of its own)."""
        self.topic = topic
        self.timeout = timeout
        self.poll_interval = poll_interval_ms / 1000.0
        self.create = create
        self.history = LayoutHistory(corrupt_policy)
        self.fresh_as_of = float("-inf")
        self.error: Optional[BaseException] = None
        #: A refused or unreadable record: the follower stopped for good.
        self.fatal: Optional[LayoutLogError] = None
        self._last_end: Optional[int] = None
        self._conn = dict(conn)
        self._consumer: Optional[Consumer] = None
        self._admin = admin if admin is not None else new_admin(self._conn)
        self._tp = TopicPartition(topic, 0)
        self._lock = threading.Lock()
        self._listeners: List[Callable[[], None]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "LayoutFollower":
        """Check (and create if allowed) the log, read it to its end, and start
        following. Raises :class:`BrokerUnavailableError`, :class:`LayoutLogError`."""
        if self._thread is not None:
            return self
        LayoutLog(self._conn, self.topic, timeout=self.timeout, admin=self._admin).ensure(create=self.create)
        self._consumer = Consumer(
            {
                **internal_config(self._conn, "consumer"),
                "group.id": f"kafka-ordered-follower-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                # Long polls answer as soon as a record arrives; a short wait
                # would only load the broker while the log is idle.
                "fetch.wait.max.ms": 200,
                "log_level": self._conn.get("log_level", 3),
            }
        )
        self._consumer.assign([TopicPartition(self.topic, 0, 0)])
        self.sync()
        self._thread = threading.Thread(target=self._run, name=f"kafka-ordered-follower-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.poll_interval):
            try:
                self._catch_up(self.timeout)
                self.error = None
            except (CorruptLayoutRecordError, UnsupportedLayoutVersionError) as e:
                log.error("layout log follower of %s stopped: %s", self.topic, e)
                for listener in list(self._listeners):
                    listener()
                return
            except KafkaOrderedError as e:
                self.error = e
                log.warning("layout log follower: %s (retrying)", e)
                self._stop.wait(min(1.0, self.timeout))
            except Exception as e:  # keep following; surface through sync()
                self.error = e
                log.exception("layout log follower failed (retrying)")
                self._stop.wait(min(1.0, self.timeout))

    def _catch_up(self, timeout: float) -> None:
        if self.fatal is not None:
            raise self.fatal
        with self._lock:
            c = self._consumer
            if c is None:
                raise LayoutLogError("the layout follower is closed")
            began = time.monotonic()
            deadline = began + timeout
            history = self.history
            low, end = self._bounds(timeout, earliest=history.next_offset == 0)
            if low > 0 and history.next_offset < low:
                raise UnsafeLayoutLogError(
                    f"layout log {self.topic} starts at offset {low}: records were deleted, so the "
                    "history is incomplete. Restore them or start a new layout log."
                )
            before, problems = history.version, len(history.problems)
            rereads = 0
            try:
                while True:
                    while history.next_offset < end:
                        if time.monotonic() > deadline:
                            raise BrokerUnavailableError(
                                f"layout log {self.topic}: read {history.next_offset} of {end} records "
                                "within the timeout"
                            )
                        for m in c.consume(500, 0.005):
                            err = m.error()
                            if err is not None:
                                if err.code() != KafkaError._PARTITION_EOF:
                                    raise translate(KafkaException(err), f"reading layout log {self.topic}")
                                continue
                            offset = int(m.offset() or 0)
                            if offset > history.next_offset:
                                if rereads < _GAP_REREADS:
                                    # A broker may hand out a later batch before an earlier
                                    # one is written (the embedded Tansu does): read again.
                                    rereads += 1
                                    log.debug("layout log %s: offset %d after %d, re-reading", self.topic,
                                              offset, history.next_offset)
                                    c.seek(TopicPartition(self.topic, 0, history.next_offset))
                                    time.sleep(_GAP_BACKOFF_S * rereads)
                                    break
                                log.warning("layout log %s: offsets %d..%d stayed missing over %d re-reads; "
                                            "treating the gap as permanent (compaction or transaction markers)",
                                            self.topic, history.next_offset, offset - 1, rereads)
                                history.skip_to(offset)
                            self._apply(m, offset)
                            rereads = 0
                    # A fetch may have shown a later end than ListOffsets did (brokers
                    # that report the base offset of the last batch).
                    _, fetched_end = c.get_watermark_offsets(self._tp, cached=True)
                    if fetched_end is None or fetched_end <= end:
                        break
                    end = fetched_end
            finally:
                for problem in history.problems[problems:]:
                    log.warning("layout log %s partition 0: skipped the record at offset %d: %s "
                                "(ordered.layout.corrupt.policy=skip)", self.topic, problem.offset, problem.reason)
            self.fresh_as_of = began
            self._last_end = end
        if history.version != before:
            for listener in list(self._listeners):
                listener()

    def _apply(self, m: Any, offset: int) -> None:
        try:
            self.history.apply(offset, m.key(), m.value(), m.timestamp()[1])
            key = m.key()
            change = self.history.find_change(key.decode("utf-8", "replace"), offset) if key else None
            if change is not None and self._thread is not None:
                log.info("layout change observed: %s epoch %d, %d partitions (%s by %s, layout-log offset %d)",
                         change.layout.topic, change.layout.epoch, change.layout.partitions, change.op,
                         change.admin_id or "?", offset)
        except (CorruptLayoutRecordError, UnsupportedLayoutVersionError) as e:
            e.args = (f"layout log {self.topic} partition 0: {e}",)
            self.fatal = e
            raise

    def _bounds(self, timeout: float, earliest: bool) -> Tuple[int, int]:
        """(log start or 0, log end) of the layout log. Asked on the admin
        client's own connection: behind the follower's long-poll fetch, a
        broker answers only when that fetch completes."""
        specs = {TopicPartition(self.topic, 0, 0): OffsetSpec.latest()}
        try:
            end = next(iter(self._admin.list_offsets(specs, request_timeout=timeout).values())).result().offset
            low = 0
            if earliest:
                specs = {TopicPartition(self.topic, 0, 0): OffsetSpec.earliest()}
                low = next(iter(self._admin.list_offsets(specs, request_timeout=timeout).values())).result().offset
        except KafkaException as e:
            raise translate(e, f"reading the end of layout log {self.topic}") from e
        return low, end

    def sync(self, timeout: Optional[float] = None) -> LayoutHistory:
        """Catch up with every record appended before this call; returns the history.

        Raises :class:`BrokerUnavailableError` when the log cannot be read in
        time, and the follower's fatal error (:class:`CorruptLayoutRecordError`
        under the ``refuse`` policy, :class:`UnsupportedLayoutVersionError`)
        once it has stopped."""
        called = time.monotonic()
        self._catch_up(timeout or self.timeout)
        assert self.fresh_as_of >= called
        return self.history

    def fresh_within(self, seconds: float) -> bool:
        """Whether the view includes every record appended up to ``seconds``
        before now (the consumers' freshness rule). Never after a fatal error."""
        return self.fatal is None and time.monotonic() - self.fresh_as_of < seconds

    def fresh_until(self, seconds: float) -> float:
        """The monotonic time until which :meth:`fresh_within` ``(seconds)``
        holds without a new catch-up (``-inf`` after a fatal error)."""
        return self.fresh_as_of + seconds if self.fatal is None else float("-inf")

    def view_metrics(self) -> LayoutViewMetrics:
        """How current the view is (no request: from the last catch-up)."""
        nxt = self.history.next_offset
        end = self._last_end
        return LayoutViewMetrics(self.topic, nxt, end, max(0, (end or 0) - nxt), time.monotonic() - self.fresh_as_of)

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
        self._stop.set()
        t, self._thread = self._thread, None
        if t is not None:
            t.join(timeout=self.timeout)
        with self._lock:
            c, self._consumer = self._consumer, None
        if c is not None:
            c.close()
        self._admin = None  # type: ignore[assignment]  # a live client keeps reconnecting

    def __enter__(self) -> "LayoutFollower":
        return self.start()

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()
