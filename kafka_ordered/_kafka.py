"""Thin I/O helpers over confluent-kafka shared by every component.

Client failures become :mod:`kafka_ordered.errors` classes through
:func:`kafka_ordered.errors.translate`.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
import time
import uuid
import weakref
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, TypeVar

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType

from . import _credentials
from ._ports import Later
from .config import internal_config
from .errors import BrokerUnavailableError, KafkaOrderedError, UnknownTopicError, for_code, translate

log = logging.getLogger("kafka_ordered.offsets")

TP = Tuple[str, int]

_ADMIN_CONFIGS: "weakref.WeakKeyDictionary[AdminClient, Dict[str, Any]]" = weakref.WeakKeyDictionary()


def new_admin(conn: Mapping[str, Any]) -> AdminClient:
    """An internal AdminClient for the application's config ``conn``."""
    conf = internal_config(conn, "producer")
    admin = AdminClient({**conf, "log_level": conf.get("log_level", 3)})
    _ADMIN_CONFIGS[admin] = conf
    return admin


_T = TypeVar("_T")


def _waited_for_controller(e: BaseException) -> bool:
    err = e.args[0] if isinstance(e, KafkaException) and e.args else None
    return (isinstance(err, KafkaError) and err.code() == KafkaError._TIMED_OUT
            and "waiting for controller" in err.str().lower())


def to_controller(admin: AdminClient, timeout: float, call: Callable[[float], _T]) -> _T:
    """``call(request_timeout)`` for a request librdkafka sends to the controller
    (CreateTopics, CreatePartitions, DescribeCluster, ...), in attempts of a
    third of ``timeout`` (at least 3 s). librdkafka waits for the controller
    its metadata last named; when that broker is gone (stopped, killed) it
    times out "waiting for controller" without sending anything, so the call
    is made again after a metadata refresh, which names a live controller.
    Other errors, and the last attempt's, are raised as they are."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            return call(max(0.5, min(left, max(3.0, timeout / 3))))
        except KafkaException as e:
            if not _waited_for_controller(e) or deadline - time.monotonic() < 0.5:
                raise
        try:
            admin.list_topics(timeout=max(0.1, min(2.0, deadline - time.monotonic())))
        except KafkaException:
            pass


def partition_count(admin: AdminClient, topic: str, timeout: float) -> int:
    """Physical partition count of ``topic``; raises ``UnknownTopicError``,
    ``BrokerUnavailableError``, or ``AuthenticationError`` as soon as the
    cluster refused the credentials of an internal admin's connection."""
    what = f"reading metadata of {topic}"
    conf = _ADMIN_CONFIGS.get(admin)
    deadline = time.monotonic() + timeout
    while True:
        # Short slices: a refused login never answers, and its error_cb is the only sign.
        left = deadline - time.monotonic()
        try:
            # Asking for one topic by name lets some brokers auto-create it.
            md = admin.list_topics(timeout=max(0.05, min(1.0, left)) if conf is not None else timeout)
        except KafkaException as e:
            if conf is not None:
                admin.poll(0)  # serves error_cb
            refused = _credentials.failure(conf, what) if conf is not None else None
            if refused is not None:
                raise refused from e
            if conf is not None and time.monotonic() < deadline:
                continue
            raise translate(e, what) from e
        break
    if not md.brokers:
        raise BrokerUnavailableError(f"{what}: no broker answered; check bootstrap.servers")
    tm = md.topics.get(topic)
    if tm is None or (tm.error is not None and for_code(tm.error.code()) is UnknownTopicError) or not tm.partitions:
        raise UnknownTopicError(f"topic {topic} does not exist", code=KafkaError.UNKNOWN_TOPIC_OR_PART)
    if tm.error is not None:
        raise translate(KafkaException(tm.error), f"reading metadata of {topic}")
    return len(tm.partitions)


def wait_for_partitions(admin: AdminClient, topic: str, count: int, timeout: float) -> int:
    """Return, with the last count seen, once Metadata shows at least
    ``count`` partitions of ``topic`` in three answers in a row: on a
    multi-broker cluster each broker learns a new topic (or new partitions)
    on its own, and the next one asked may not know it yet. Raises
    :class:`KafkaOrderedError` when ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        try:
            shown = partition_count(admin, topic, timeout)
            seen = seen + 1 if shown >= count else 0
        except UnknownTopicError:
            seen = 0
        if seen >= 3:
            return shown
        time.sleep(0.05)
    raise KafkaOrderedError(f"topic {topic} did not show {count} partitions in metadata within {timeout:g} s")


def cleanup_policy(admin: AdminClient, topic: str, timeout: float) -> Optional[str]:
    """``topic``'s ``cleanup.policy``, or ``None`` when the broker does not say."""
    res = ConfigResource(ResourceType.TOPIC, topic)
    try:
        cfg = admin.describe_configs([res], request_timeout=timeout)[res].result()
    except KafkaException:
        return None
    entry = cfg.get("cleanup.policy")
    return None if entry is None else entry.value


def topic_exists(admin: AdminClient, topic: str, timeout: float) -> bool:
    try:
        partition_count(admin, topic, timeout)
        return True
    except UnknownTopicError:
        return False


#: ListOffsets errors that mean the admin client's cached metadata is stale:
#: retried after a refresh until the caller's timeout.
_STALE_METADATA = frozenset({
    KafkaError._NOENT,
    KafkaError._UNKNOWN_PARTITION,  # partitions an expansion just created, not yet in the client's metadata
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
})
#: How long the first ListOffsets attempt may take before it is asked again
#: (a healthy broker answers in milliseconds; one asked through stale metadata
#: answered only at the request timeout); each further attempt may take twice
#: as long, so a slow but healthy cluster is not asked again and again.
_LIST_ATTEMPT_S = 2.0


#: How long the offset reader waits for a fetch response before it replaces
#: its consumer (see :meth:`OffsetReader._renew`); twice as long after each
#: replacement.
_RENEW_S = 1.0


def group_reader(conn: Mapping[str, Any], group: str, **extra: Any) -> Consumer:
    """A consumer of ``group`` that never joins it, for reading the group's
    commits with ``committed`` (``extra``: more librdkafka settings). Not
    librdkafka's admin ListConsumerGroupOffsets: it crashed the process
    (SIGABRT on ``eonce->refcnt > 0``, or SIGSEGV on NOT_COORDINATOR:
    librdkafka issue 5040) when the coordinator's broker was killed."""
    return Consumer({**internal_config(conn, "consumer"), "group.id": group, "enable.auto.commit": False,
                     "enable.auto.offset.store": False, **extra})


def read_group_commits(reader: Consumer, group: str, want: List[TopicPartition],
                       timeout: float) -> List[TopicPartition]:
    """``reader.committed(want)`` for ``group`` (``reader``: a
    :func:`group_reader`), with a failure translated; a partition the
    answer gives an error instead of a commit fails the read with that
    error (retriable as its code is): it is never taken as one without a
    commit."""
    try:
        got = reader.committed(want, timeout=timeout)
    except KafkaException as e:
        raise translate(e, f"reading the commits of group {group}", api="OffsetFetch") from e
    for tp in got:
        if tp.error is not None:
            raise translate(KafkaException(tp.error),
                            f"reading the committed offset of {tp.topic}[{tp.partition}] for group {group}",
                            api="OffsetFetch")
    return got


def _close_aside(client: Consumer) -> None:
    """Close ``client`` on a thread of its own: librdkafka's close of a
    consumer can take 100 ms and more, which the offset reader's worker
    would otherwise add to every read queued after it (a new group's first
    gate read, right after the last consumer of another group closed). Not
    a daemon: an exiting interpreter waits for the close to end."""
    threading.Thread(target=client.close, name="kafka-ordered-close").start()


class OffsetReader:
    """Reads true log-end offsets and log-start offsets.

    End offsets come from the high watermark of Fetch responses requested
    after the call starts: correct on every broker, including those whose
    ListOffsets(latest) is wrong after multi-record batches (Tansu).
    Thread-safe (one request at a time). Its consumer is created on first
    use; :meth:`read_from` also serves the layout-log follower's catch-up
    reads (short fetch waits, unlike the follower's long poll).
    """

    def __init__(self, conn: Mapping[str, Any], timeout: float = 10.0, *, admin: Optional[AdminClient] = None) -> None:
        """``admin``: an AdminClient to share (else one of its own, made on first use)."""
        self.timeout = timeout
        self._conn = dict(conn)
        self._consumer: Optional[Consumer] = None
        self._admin: Optional[AdminClient] = admin
        self._known_topics: set = set()
        self._lock = threading.Lock()
        self._used = time.monotonic()
        self._worker: Optional[ThreadPoolExecutor] = None
        #: Consumers of groups whose commits are read (group_commits), used on the worker only,
        #: each with when it was last used.
        self._group_readers: Dict[str, Tuple[Consumer, float]] = {}
        #: How many open consumers of each group read its commits here (see use_group); under _lock.
        self._group_users: Dict[str, int] = {}

    @property
    def connected(self) -> bool:
        """Whether its consumer is open now (it opens on first use)."""
        return self._consumer is not None

    def _get_consumer(self) -> Consumer:
        self._used = time.monotonic()
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    **internal_config(self._conn, "consumer"),
                    "group.id": f"kafka-ordered-offsets-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    # The true end, also past an open transaction (read_committed,
                    # librdkafka's default, stops at the last stable offset and
                    # reports it as the high watermark): a switch inside a
                    # transaction reads the ends of partitions that hold the
                    # transaction's own records.
                    "isolation.level": "read_uncommitted",
                    # Reads start just below the end, so a record normally comes
                    # back at once; the wait matters only for empty reads.
                    "fetch.wait.max.ms": 20,
                    "fetch.max.bytes": 1 << 20,
                    "max.partition.fetch.bytes": 1 << 18,
                    "log_level": self._conn.get("log_level", 3),
                }
            )
        return self._consumer

    def _renew(self, assignment: List[TopicPartition], deadline: float) -> Consumer:
        """Replace the consumer (lock held) by a new one assigned ``assignment``.

        Called when a fetch brought nothing for a while: after a partition's
        leader failed over, librdkafka 2.16's consumer, which had read that
        partition before and unassigned it, fetched nothing from it again
        (not in minutes, also after a metadata refresh), where a new consumer
        reads it at once (test_layout_log_failover). A consumer is cheap next
        to a registration that cannot complete."""
        old, self._consumer = self._consumer, None
        self._known_topics = set()
        if old is not None:
            try:
                old.close()
            except Exception:  # closing a client that is in trouble; the new one matters
                pass
        log.debug("offset reader: no fetch response for %s within %.1f s; reading with a new consumer",
                  [(tp.topic, tp.partition) for tp in assignment[:5]], _RENEW_S)
        c = self._get_consumer()
        try:
            self._known_topics |= set(c.list_topics(timeout=max(0.1, deadline - time.monotonic())).topics)
        except KafkaException:
            pass  # the fetch loop's deadline reports it
        c.assign(assignment)
        return c

    def warm_up(self) -> None:
        """Connect now so the first read is fast."""
        try:
            self._get_consumer().list_topics(timeout=self.timeout)
        except KafkaException as e:
            raise translate(e, "connecting the offset reader") from e

    def _list(self, want: List[TP], spec: Any, timeout: float, what: str,
              isolation: Optional[IsolationLevel] = None) -> Dict[TP, int]:
        if self._admin is None:
            self._admin = new_admin(self._conn)
        extra = {} if isolation is None else {"isolation_level": isolation}
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            attempt += 1
            try:
                fs = self._admin.list_offsets({TopicPartition(t, p): spec for t, p in want},
                                              request_timeout=max(0.1, min(_LIST_ATTEMPT_S * 2 ** min(attempt - 1, 4),
                                                                           deadline - time.monotonic())),
                                              **extra)
                got = {(tp.topic, tp.partition): f.result().offset for tp, f in fs.items()}
                # An answer without an offset (-1001, and no error) came for
                # partitions whose leader had failed over: never an end or start.
                invalid = sorted(tp for tp, off in got.items() if off < 0)
                if not invalid:
                    return got
                if time.monotonic() >= deadline:
                    raise BrokerUnavailableError(
                        f"{what}: no broker answered with an offset for {invalid[:5]} within the timeout")
            except KafkaException as e:
                err = e.args[0] if e.args else None
                if not isinstance(err, KafkaError) or err.code() not in _STALE_METADATA:
                    raise translate(e, what, api="ListOffsets") from e
                if time.monotonic() >= deadline:
                    # The partitions' leadership did not settle in time (a failed broker's
                    # partitions still moving): retrying later may succeed.
                    raise BrokerUnavailableError(
                        f"{what}: no broker answered as leader of {sorted(want)[:5]} within the timeout "
                        f"(last error {err.name()}: {err.str()})", code=err.code()) from e
            # The admin client's metadata of the topic is stale: "no leaders
            # found" when it predates new partitions (a real expansion), leader
            # errors or answers without an offset when a leader failed over
            # since. librdkafka 2.16's admin client kept asking the dead leader
            # (the answer came after the request timeout, without an offset),
            # also after a metadata refresh, where a new one answers at once
            # (test_layout_log_failover): this reader asks again through an
            # admin client of its own.
            log.debug("%s: ListOffsets failed (attempt %d); asking through a new admin client", what, attempt)
            self._admin = new_admin(self._conn)
            time.sleep(0.05)

    def open_transactions(self, tps: Iterable[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        """The partitions whose end a ``read_committed`` reader cannot reach
        now (an open transaction holds their last stable offset back), with
        that offset. Compares ListOffsets(latest) of both isolation levels, so
        a broker that ignores the level reports nothing."""
        want = sorted(set(tps))
        if not want:
            return {}
        timeout = timeout or self.timeout
        stable = self._list(want, OffsetSpec.latest(), timeout, "reading last stable offsets",
                            IsolationLevel.READ_COMMITTED)
        latest = self._list(want, OffsetSpec.latest(), timeout, "reading end offsets",
                            IsolationLevel.READ_UNCOMMITTED)
        return {tp: stable[tp] for tp in want if stable[tp] < latest[tp]}

    def end_offsets(self, tps: Iterable[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        """The log-end offset (high watermark) of each partition, at least as
        late as the moment of the call. Raises ``BrokerUnavailableError`` on timeout.

        ListOffsets(latest) can be low (the embedded broker answers the base
        of the last batch + 1), so it is only a starting point: the end is the
        high watermark of a Fetch response for a request sent after the call,
        reading from just before that point so that a record comes back at once.
        """
        want = sorted(set(tps))
        if not want:
            return {}
        timeout = timeout or self.timeout
        deadline = time.monotonic() + timeout
        listed = self._list(want, OffsetSpec.latest(), timeout, "reading end offsets")
        ends: Dict[TP, int] = {tp: 0 for tp in want if listed[tp] <= 0}
        fetch = [tp for tp in want if tp not in ends]
        if not fetch:
            return ends
        with self._lock:
            c = self._get_consumer()
            if not {t for t, _ in fetch} <= self._known_topics:
                # Without the topic's metadata the first fetch waits for the
                # client's next leader query (~0.5 s).
                try:
                    self._known_topics |= set(c.list_topics(timeout=timeout).topics)
                except KafkaException as e:
                    raise translate(e, "reading cluster metadata") from e
            c.assign([TopicPartition(t, p, listed[(t, p)] - 1) for t, p in fetch])
            renewals = 0
            renew = time.monotonic() + _RENEW_S
            try:
                while len(ends) < len(want):
                    if time.monotonic() > deadline:
                        missing = [tp for tp in want if tp not in ends]
                        raise BrokerUnavailableError(f"no fetch response for {missing[:5]} within the timeout")
                    if time.monotonic() >= renew:
                        c = self._renew([TopicPartition(t, p, listed[(t, p)] - 1) for t, p in fetch
                                         if (t, p) not in ends], deadline)
                        renewals += 1
                        renew = time.monotonic() + _RENEW_S * 2 ** min(renewals, 4)
                    fetched: set = set()
                    for m in c.consume(1000, 0.005):
                        err = m.error()
                        tp = (str(m.topic()), int(m.partition() or 0))
                        if err is None:
                            fetched.add(tp)
                        elif err.code() == KafkaError._PARTITION_EOF:
                            ends[tp] = int(m.offset() or 0)
                        elif err.code() == KafkaError._UNKNOWN_PARTITION:
                            continue  # new partitions: a renewed consumer learns them (see _renew)
                        elif for_code(err.code()) is UnknownTopicError:
                            raise UnknownTopicError(f"{m.topic()}: {err.str()}", code=err.code())
                        elif err.fatal() or not err.retriable():
                            raise translate(KafkaException(err), "reading end offsets")
                    # A record proves a Fetch response since assign(); its high
                    # watermark (cached before the records are queued) is the end.
                    for tp in fetched - set(ends):
                        _, hw = c.get_watermark_offsets(TopicPartition(*tp), cached=True)
                        if hw is not None and hw >= 0:
                            ends[tp] = hw
                for tp in fetch:
                    _, hw = c.get_watermark_offsets(TopicPartition(*tp), cached=True)
                    if hw is not None and hw > ends[tp]:
                        ends[tp] = hw
            finally:
                c.unassign()
        return ends

    def read_from(self, tp: TP, offset: int, upto: Optional[int] = None,
                  timeout: Optional[float] = None) -> Tuple[List[Any], int]:
        """The records of ``tp`` from ``offset`` on, fetched by requests sent
        after the call: until the partition's end, or until a record at or past
        ``upto - 1`` arrived. Returns them in fetch order (a broker may leave a
        hole: the caller checks offsets) and the high watermark of the last
        response. Raises ``BrokerUnavailableError`` when nothing conclusive
        arrives in time."""
        timeout = timeout or self.timeout
        deadline = time.monotonic() + timeout
        topic, partition = tp
        with self._lock:
            c = self._get_consumer()
            if topic not in self._known_topics:
                try:
                    self._known_topics |= set(c.list_topics(timeout=timeout).topics)
                except KafkaException as e:
                    raise translate(e, "reading cluster metadata") from e
            c.assign([TopicPartition(topic, partition, offset)])
            out: List[Any] = []
            renewals = 0
            renew = time.monotonic() + _RENEW_S
            try:
                while True:
                    if time.monotonic() > deadline:
                        raise BrokerUnavailableError(
                            f"{topic}[{partition}]: no fetch response from offset {offset} within the timeout")
                    if time.monotonic() >= renew:
                        at = int(out[-1].offset() or 0) + 1 if out else offset
                        c = self._renew([TopicPartition(topic, partition, at)], deadline)
                        renewals += 1
                        renew = time.monotonic() + _RENEW_S * 2 ** min(renewals, 4)
                    done = False
                    for m in c.consume(1000, 0.005):
                        err = m.error()
                        if err is None:
                            out.append(m)
                            if upto is not None and int(m.offset() or 0) >= upto - 1:
                                done = True
                        elif err.code() == KafkaError._PARTITION_EOF:
                            done = True
                        elif err.code() == KafkaError._UNKNOWN_PARTITION:
                            continue  # new partitions: a renewed consumer learns them (see _renew)
                        elif for_code(err.code()) is UnknownTopicError:
                            raise UnknownTopicError(f"{topic}: {err.str()}", code=err.code())
                        elif err.fatal() or not err.retriable():
                            raise translate(KafkaException(err), f"reading {topic}")
                    if done:
                        break
                _, hw = c.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            finally:
                c.unassign()
        return out, int(hw) if hw is not None and hw >= 0 else 0

    def listed_end_offsets(self, tps: Iterable[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        """ListOffsets(latest) of each partition, without the Fetch that
        :meth:`end_offsets` adds (so it can be low on some brokers)."""
        want = sorted(set(tps))
        if not want:
            return {}
        return self._list(want, OffsetSpec.latest(), timeout or self.timeout, "reading end offsets")

    def start_offsets(self, tps: Iterable[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        """The log-start offset of each partition (ListOffsets earliest)."""
        want = sorted(set(tps))
        if not want:
            return {}
        return self._list(want, OffsetSpec.earliest(), timeout or self.timeout, "reading log-start offsets")

    def start_offsets_later(self, tps: Iterable[TP], timeout: Optional[float] = None) -> Later[Dict[TP, int]]:
        """:meth:`start_offsets` on the reader's worker thread: returns at
        once (see :class:`~kafka_ordered._ports.Later`)."""
        return Later(self._work().submit(self.start_offsets, list(tps), timeout))

    def group_commits(self, group: str, tps: Iterable[TP], timeout: Optional[float] = None) -> Later[Dict[TP, int]]:
        """The commits of ``group`` on ``tps`` (partitions without one left
        out), read on the reader's worker thread: returns at once (see
        :class:`~kafka_ordered._ports.Later`). ``timeout``: seconds the read
        may take (default: the reader's timeout). A partition whose commit
        the coordinator could not give fails the read with its error (see
        :func:`read_group_commits`).

        Read by a :func:`group_reader` (one per group, kept until
        :meth:`close`, until the last consumer of the group calls
        :meth:`release_group`, or until :meth:`close_if_idle` finds it
        idle). Not by the application's consumer: with confluent-kafka 2.16,
        its ``committed`` called from this thread while the application
        polled took 33 s (its timeout was 1 s)."""
        want = [TopicPartition(t, p) for t, p in sorted(set(tps))]
        return Later(self._work().submit(self._group_commits, group, want, timeout or self.timeout))

    def _group_commits(self, group: str, want: List[TopicPartition], timeout: float) -> Dict[TP, int]:
        known = self._group_readers.get(group)
        reader = known[0] if known is not None else group_reader(self._conn, group,
                                                                  log_level=self._conn.get("log_level", 3))
        self._group_readers[group] = (reader, time.monotonic())
        got = read_group_commits(reader, group, want, timeout)
        return {(r.topic, r.partition): r.offset for r in got if r.offset >= 0}

    def use_group(self, group: str) -> None:
        """A consumer of ``group`` in this process reads the group's commits
        here from now on; it calls :meth:`release_group` when it closes."""
        with self._lock:
            self._group_users[group] = self._group_users.get(group, 0) + 1

    def release_group(self, group: str) -> None:
        """A consumer of ``group`` closed. When no other one that
        :meth:`use_group` counted is left, the group's reader is closed now
        (taken out by the worker after the reads queued before, closed aside;
        a later read makes a new one), not when idle: a process of
        short-lived consumers of many groups keeps no librdkafka client for
        each."""
        with self._lock:
            left = self._group_users.get(group, 0) - 1
            if left > 0:
                self._group_users[group] = left
                return
            self._group_users.pop(group, None)
            worker = self._worker
        if worker is None:
            return
        try:
            worker.submit(self._close_group_reader, group)
        except RuntimeError:  # shut down meanwhile: close() closes the readers
            pass

    def _close_group_reader(self, group: str) -> None:
        """Close ``group``'s reader unless a consumer of it opened since (on
        the worker, which only takes it out: see :func:`_close_aside`)."""
        with self._lock:
            if group in self._group_users:
                return
        known = self._group_readers.pop(group, None)
        if known is not None:
            _close_aside(known[0])

    def _work(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="kafka-ordered-offsets")
            return self._worker

    def _close_group_readers(self, idle_s: float = 0.0) -> None:
        """Close the group readers not used for ``idle_s`` seconds (on the
        worker, which only takes them out: see :func:`_close_aside`)."""
        now = time.monotonic()
        for group in [g for g, (_, used) in self._group_readers.items() if now - used >= idle_s]:
            _close_aside(self._group_readers.pop(group)[0])

    @property
    def clients(self) -> int:
        """librdkafka client instances this reader has open (its consumer, if
        made, and one consumer per group whose commits it read)."""
        return (0 if self._consumer is None else 1) + len(self._group_readers)

    def close_if_idle(self, idle_s: float) -> bool:
        """Close the consumer when it has not been used for ``idle_s`` seconds
        (the next read makes a new one); returns whether it did. Each group
        reader not used for as long is closed too, on the worker after the
        reads queued before (the next read of that group makes a new one)."""
        if self._group_readers:
            with self._lock:
                worker = self._worker
            try:
                if worker is not None:
                    worker.submit(self._close_group_readers, idle_s)
            except RuntimeError:  # shut down meanwhile: close() closes them
                pass
        if self._consumer is None or time.monotonic() - self._used < idle_s:
            return False
        if not self._lock.acquire(blocking=False):
            return False  # in use right now
        try:
            if self._consumer is None or time.monotonic() - self._used < idle_s:
                return False
            c, self._consumer = self._consumer, None
            self._known_topics = set()
        finally:
            self._lock.release()
        c.close()
        return True

    def close(self) -> None:
        """Close the internal consumer; the shared admin client, if one was passed,
        is left open. Idempotent."""
        with self._lock:
            c, self._consumer = self._consumer, None
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.submit(self._close_group_readers)  # after the reads queued before it, on their thread
            worker.shutdown(wait=False)
        if c is not None:
            c.close()
        self._admin = None


