"""``OrderedProducer``: confluent-kafka's ``Producer`` over the registering core."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple, Type

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from .. import _log
from .._fastpath import fast_produce, method
from .._ports import Stamp
from .._registering import RegisteringCore, RegistrationRecord, anonymous_id
from ..config import PRODUCER_OPTIONS, client_config, forced, metrics_client_id, split_config
from ..errors import BrokerUnavailableError, KafkaOrderedError, PartitionOverrideError
from ..history import LayoutHistory
from ..layout import _as_bytes
from ..metrics import ProducerMetrics
from ..tokens import with_stamp
from ._common import _new_client, _shared

__all__ = ["OrderedProducer"]

plog = logging.getLogger("kafka_ordered.producer")

_Item = Tuple[Any, Any, Optional[Callable[..., None]], int, Any]  # value, key, callback, timestamp, headers


def _done_callback(cb: Optional[Callable[..., None]], done: Callable[[bool], None]) -> Callable[..., None]:
    def delivered(err: Any, msg: Any) -> None:
        done(err is None)
        if cb is not None:
            cb(err, msg)
    return delivered


def _tombstone_delivered(err: Any, msg: Any) -> None:
    if err is not None:
        plog.warning("a move tombstone was not delivered (%s): the key's value in the partition it left "
                     "survives compaction", err)


class _ProducerPort:
    """:class:`~kafka_ordered._ports.ProducerPort` over a confluent ``Producer``."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.produce = producer.produce

    def send(self, topic: str, partition: Optional[int], item: _Item, stamp: Optional[Stamp] = None,
             on_done: Optional[Callable[[bool], None]] = None) -> None:
        value, key, cb, timestamp, headers = item
        p = -1 if partition is None else partition
        if stamp is not None:
            headers = with_stamp(headers, stamp.value)
            acked = stamp.acked
            cb = _done_callback(cb, lambda ok: acked() if ok else None)
        if on_done is not None:
            cb = _done_callback(cb, on_done)
        while True:
            try:
                self.produce(topic, value, key, p, cb, timestamp=timestamp, headers=headers)
                return
            except BufferError:
                self.producer.poll(0.05)

    def flush(self, timeout: float) -> int:
        return self.producer.flush(timeout)

    def learn_partitions(self, topic: str, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        known = 0
        while True:
            left = deadline - time.monotonic()
            try:
                # A Metadata request for the topic also updates the client's own view of it.
                t = self.producer.list_topics(topic, timeout=max(0.1, min(2.0, left))).topics.get(topic)
                known = len(t.partitions) if t is not None and t.error is None else 0
            except KafkaException:
                pass
            if known >= count:
                return
            if left <= 0:
                raise BrokerUnavailableError(
                    f"the producer's metadata shows {known} partition(s) of {topic} after {timeout:.1f} s; "
                    f"its layout needs {count}")
            time.sleep(0.05)

    def send_tombstone(self, topic: str, partition: int, key: bytes, headers: List[Tuple[str, bytes]]) -> None:
        while True:
            try:
                self.produce(topic, None, key, partition, _tombstone_delivered,
                             headers=headers)  # type: ignore[arg-type]  # list[tuple[str, bytes]] is what it takes
                return
            except BufferError:
                self.producer.poll(0.05)

    def failed(self, item: _Item, error: BaseException) -> None:
        cb = item[2]
        if cb is None:
            plog.error("a record buffered behind a layout switch was refused by the client and has no "
                       "delivery callback to report to: %s", error)
            return
        kerr = error.args[0] if isinstance(error, KafkaException) and error.args else None
        if not isinstance(kerr, KafkaError):
            kerr = KafkaError(KafkaError._INVALID_ARG, f"record refused by the client: {error}")
        cb(kerr, None)


class OrderedProducer:
    """confluent-kafka ``Producer`` that keeps per-key order across layout changes.

    ``config`` is the usual librdkafka dict plus ``ordered.*`` keys
    (``ordered.producer.id`` for a stable id, ``ordered.layout.topic``, ...).
    ``acks=all`` and ``enable.idempotence=true`` are forced (other explicit
    values raise :class:`ConfigError`); every other key reaches the inner
    client and the internal layout-log clients unchanged.

    Like the client, construction needs no broker: the first operation that
    needs the layouts (the first ``produce``, ``history``,
    ``begin_transaction``) reads the layout log, waiting at most
    ``ordered.metadata.timeout.ms``, and raises :class:`BrokerUnavailableError`
    naming ``bootstrap.servers`` when it cannot (nothing is sent or kept; the
    next call tries again). No record is sent before the layouts are known.

    Keyed records to a managed topic are partitioned by its current layout.
    At the first keyed send and at every layout change the producer flushes,
    registers in the layout log and sends under the new layout at once; its
    first keyed records to each partition the registration gates carry the
    ``kafka-ordered.reg`` header (until one of them is acknowledged), which
    tells consumers to read the registration first. Sends made meanwhile
    (from other threads or delivery callbacks) are buffered in order and
    counted by ``len()``.
    A buffered record the client refuses fails alone: its delivery callback
    gets the error (or ``produce`` raises it, for the call that ran the
    switch); the records around it are delivered in order. Unmanaged topics
    pass straight through. An explicit ``partition=`` on a keyed record of a
    managed topic raises :class:`PartitionOverrideError`. Registration
    failures raise :class:`RegistrationError`; the records stay buffered and
    are retried by the next send or ``flush()``.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        opts, conf = split_config(config, PRODUCER_OPTIONS, "OrderedProducer")
        forced(conf, "acks", "all", ("all", -1, "-1"))
        forced(conf, "enable.idempotence", True, (True, "true"))
        conf = client_config(conf, "producer")
        # The client first: it rejects bad settings before anything is started.
        self._producer = _new_client(Producer, conf, "OrderedProducer")
        self._port = _ProducerPort(self._producer)
        self._opts, self._conf = opts, conf
        self._producer_id = opts["ordered.producer.id"] or anonymous_id()
        self._client_id = metrics_client_id(conf, "producer")
        # Like the client, construction needs no broker: the layout log is
        # read by the first operation that needs it (the _core property).
        self._shared: Optional[_log.Shared] = None
        self._core_: Optional[RegisteringCore] = None
        self._start_lock = threading.Lock()
        self._raw_produce = self._producer.produce
        self._closed = False
        # The per-record path (see produce()); the core fills the routes.
        self._routes: Dict[str, Any] = {}
        self._fast_produce = fast_produce(self._raw_produce, self._produce, self._routes)

    @property
    def _core(self) -> RegisteringCore:
        """The registering core, started (layout log read) on first use.
        Raises :class:`BrokerUnavailableError` naming ``bootstrap.servers``
        when the log cannot be read within ``ordered.metadata.timeout.ms``
        (the next operation tries again), and what :func:`_log.acquire` raises."""
        core = self._core_
        if core is not None:
            return core
        with self._start_lock:
            if self._core_ is None:
                if self._closed:
                    raise KafkaOrderedError("the producer is closed")
                shared = _shared(self._opts, self._conf, "OrderedProducer")
                core = RegisteringCore(self._port, shared, self._opts, producer_id=self._producer_id,
                                       routes=self._routes)
                core.transactional = bool(self._conf.get("transactional.id"))
                self._shared, self._core_ = shared, core
            return self._core_

    @property
    def producer(self) -> Producer:
        """The wrapped confluent-kafka ``Producer`` (do not produce to managed topics through it)."""
        return self._producer

    @property
    def producer_id(self) -> str:
        """This producer's id in registrations (the stable id, or ``anon-...``)."""
        return self._producer_id

    def ordered_metrics(self) -> ProducerMetrics:
        """A snapshot of this producer's layout switches, buffered records and
        layout-log view (see :class:`kafka_ordered.metrics.ProducerMetrics`;
        before the first send nothing is started and the snapshot is empty)."""
        core = self._core_
        if core is None:
            return ProducerMetrics(self._producer_id, {}, 0, None, None, client_id=self.client_id)
        return replace(core.metrics(), client_id=self.client_id)

    @property
    def client_id(self) -> str:
        """The ``client_id`` label of this producer's metrics (see
        :func:`kafka_ordered.config.metrics_client_id`)."""
        return self._client_id

    @property
    def stable_id(self) -> bool:
        """Whether this producer has a stable ``ordered.producer.id``."""
        return self._opts["ordered.producer.id"] is not None

    @property
    def registrations(self) -> List[RegistrationRecord]:
        """What each registration of this producer did, oldest first."""
        core = self._core_
        return [] if core is None else core.registrations

    @property
    def history(self) -> LayoutHistory:
        """The layout history this producer follows (reads the layout log
        first if no send did yet)."""
        return self._core.history

    # -- sending

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: Optional[Callable[..., None]] = None, timestamp: int = 0,
                headers: Any = None, *, callback: Optional[Callable[..., None]] = None) -> None:
        """Same as ``confluent_kafka.Producer.produce``; see the class docstring.

        A call goes to the instance's per-record path first
        (:func:`kafka_ordered._fastpath.fast_produce`, C when the speed-ups
        are enabled), which sends the common case itself and hands every
        other call, unchanged, to this method's body."""
        cb = on_delivery if on_delivery is not None else callback
        st = self._core.state(topic)
        if partition is None:
            partition = -1
        if st is None or (key is None and partition >= 0):
            self._raw_produce(topic, value, key, partition, cb, timestamp=timestamp, headers=headers)
            return
        kb: Optional[bytes] = None
        if key is not None:
            if partition >= 0:
                raise PartitionOverrideError(
                    f"explicit partition={partition} for a keyed record of managed topic {topic} would break "
                    "per-key ordering; leave partition unset"
                )
            kb = key if type(key) is bytes else key.encode("utf-8") if isinstance(key, str) else _as_bytes(key)
        self._core.retry(topic, st)
        self._core.route(topic, st, kb, (value, key, cb, timestamp, headers))

    _produce = produce
    if not TYPE_CHECKING:  # the method as written above, dispatched to the per-record path first
        produce = method(produce, "_fast_produce")

    def produce_batch(self, topic: str, messages: List[Dict[str, Any]], partition: int = -1,
                      on_delivery: Optional[Callable[..., None]] = None,
                      callback: Optional[Callable[..., None]] = None) -> int:
        """``Producer.produce_batch``: every keyed record of a managed topic is
        partitioned by the layout (through :meth:`produce`). Returns the number
        of records accepted; a refused record gets ``'_error'`` set in its dict,
        as confluent-kafka does. Unmanaged topics use the client's own batch path."""
        if self._core.state(topic) is None:
            return self._producer.produce_batch(topic, messages, partition=partition,
                                                on_delivery=on_delivery or callback)
        accepted = 0
        for m in messages:
            try:
                self.produce(topic, m.get("value"), m.get("key"), m.get("partition", partition),
                             m.get("callback", on_delivery or callback), m.get("timestamp", 0), m.get("headers"))
                accepted += 1
            except KafkaException as e:
                m["_error"] = e.args[0] if e.args else e
            except (BufferError, TypeError, ValueError) as e:
                m["_error"] = KafkaError(KafkaError._INVALID_ARG, str(e))
        return accepted

    def poll(self, timeout: float = -1) -> int:
        """``Producer.poll``: serve delivery callbacks (then send the move
        tombstones the acknowledgements made due)."""
        served = self._producer.poll(timeout)
        core = self._core_
        if core is not None and core.tombstones_due:
            core.send_due_tombstones()
        return served

    def flush(self, timeout: float = -1) -> int:
        """Complete pending layout switches, then flush; returns the number of
        records still queued or buffered."""
        core = self._core_
        if core is None:  # nothing was sent through the core yet
            return self._producer.flush(timeout)
        t = None if timeout is None or timeout < 0 else timeout
        began = time.monotonic()
        core.finish_switches(t)
        while True:
            left = -1 if t is None else max(0.0, t - (time.monotonic() - began))
            queued = self._producer.flush(left)
            # The acknowledgements just served may have made move tombstones due.
            if not core.send_due_tombstones():
                return queued + core.buffered_count()

    def reregister(self, timeout: float = -1) -> None:
        """Register again, at the next keyed send to each managed topic, as
        this producer would if it were started now (an anonymous id: from
        just before the oldest layout change inside
        ``ordered.transition.window.ms``; a stable id: from its last
        registration), with waits read after this call. Pending layout
        switches are completed and the layout view is read to the log's end
        first.

        What it is for: records acknowledged *by other producers* before
        this call are then ordered before this producer's later records of
        the same keys (the layout changes they were written under lie inside
        the window), as they would be for a newly started producer, without a
        new connection. The Spark sink calls it at the start of every task.
        Raises :class:`~kafka_ordered.errors.SwitchTimeoutError` when a
        switch is still running after ``timeout``, and
        :class:`~kafka_ordered.errors.BrokerUnavailableError` when the layout
        log cannot be read in time."""
        self._core.restart(None if timeout is None or timeout < 0 else timeout)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """``Producer.purge``. Records buffered behind a layout switch are not
        purged (they were accepted in order and are sent when it completes)."""
        self._producer.purge(in_queue=in_queue, in_flight=in_flight, blocking=blocking)

    def __len__(self) -> int:
        core = self._core_
        return len(self._producer) + (0 if core is None else core.buffered_count())

    # -- transactions (the registration's flush happens inside the transaction)

    def init_transactions(self, timeout: float = -1) -> None:
        """``Producer.init_transactions``, unchanged (needs ``transactional.id``)."""
        self._producer.init_transactions(timeout)

    def begin_transaction(self) -> None:
        """``Producer.begin_transaction``, unchanged. A layout switch inside the
        transaction flushes and registers within it; its records belong to the
        transaction. (Reads the layout log first if no send did yet.)"""
        core = self._core
        self._producer.begin_transaction()
        core.begin_transaction()

    def send_offsets_to_transaction(self, positions: List[TopicPartition], group_metadata: Any,
                                    timeout: float = -1) -> None:
        """``Producer.send_offsets_to_transaction``, unchanged (exactly-once
        consume-transform-produce; pass an :class:`OrderedConsumer`'s
        :meth:`~OrderedConsumer.consumer_group_metadata`)."""
        self._producer.send_offsets_to_transaction(positions, group_metadata, timeout)

    def commit_transaction(self, timeout: float = -1) -> None:
        """Complete pending layout switches (their records belong to this
        transaction), then ``Producer.commit_transaction``. Stamped records of
        the transaction count as acknowledged once it committed."""
        core = self._core_
        if core is not None:
            core.finish_switches(None if timeout is None or timeout < 0 else timeout)
        self._producer.commit_transaction(timeout)
        if core is not None:
            core.end_transaction(committed=True)

    def abort_transaction(self, timeout: float = -1) -> None:
        """``Producer.abort_transaction``: the transaction's records, including
        those sent after a layout switch inside it, are aborted as with the plain
        client; partitions whose stamped records it aborted keep being stamped."""
        self._producer.abort_transaction(timeout)
        if self._core_ is not None:
            self._core_.end_transaction(committed=False)

    # -- plain delegations (cannot affect order)

    def list_topics(self, topic: Optional[str] = None, timeout: float = -1) -> Any:
        """``Producer.list_topics``: cluster metadata (physical partitions,
        including draining and spare ones); plain delegation."""
        return self._producer.list_topics(topic, timeout)

    def cluster_id(self, timeout: float = -1) -> Optional[str]:
        """``Producer.cluster_id``; plain delegation."""
        return self._producer.cluster_id(timeout)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """``Producer.set_sasl_credentials``; plain delegation. The process's
        internal layout-log clients keep the credentials they were created with."""
        self._producer.set_sasl_credentials(username, password)

    def close(self, timeout: float = 30.0) -> int:
        """Flush (completing switches) and release the layout-log resources;
        returns the records that could not be delivered in time."""
        with self._start_lock:  # no core is started after this
            if self._closed:
                return 0
            self._closed = True
        try:
            return self.flush(timeout)
        finally:
            core, shared = self._core_, self._shared
            if core is not None and shared is not None:
                core.close()
                shared.release()

    def __enter__(self) -> "OrderedProducer":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()
