"""``OrderedKafkaProducer``: kafka-python's ``KafkaProducer`` over the registering core."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from types import TracebackType
from typing import Any, Callable, List, Mapping, Optional, Set, Tuple, Type

from kafka import KafkaProducer
from kafka.errors import IllegalStateError, KafkaTimeoutError
from kafka.future import Future

from .. import _log
from .._ports import Stamp
from .._registering import RegisteringCore, RegistrationRecord, TopicState
from ..config import (
    KAFKA_PYTHON_OPTIONS, PRODUCER_OPTIONS, forced, kafka_python_connection_config, metrics_client_id, split_config,
)
from ..errors import BrokerUnavailableError, PartitionOverrideError
from ..history import LayoutHistory
from ..layout import _as_bytes
from ..metrics import ProducerMetrics
from ..tokens import with_stamp
from ._compat import dotted, serializer

__all__ = ["OrderedKafkaProducer", "BufferedRecordFuture"]

log = logging.getLogger("kafka_ordered.producer")

_SERIALIZED = (bytes, bytearray, memoryview, type(None))


class BufferedRecordFuture(Future):
    """Returned by :meth:`OrderedKafkaProducer.send` for a record buffered
    behind a layout switch: resolves with the ``RecordMetadata`` of the real
    send (or its error). ``get(timeout)`` as for kafka-python's own futures."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        super().__init__()
        self._event = threading.Event()

    def success(self, value: Any) -> "BufferedRecordFuture":
        """Resolve with ``value`` (the real send's ``RecordMetadata``) and wake
        :meth:`get`; returns ``self``."""
        super().success(value)
        self._event.set()
        return self

    def failure(self, e: Any) -> "BufferedRecordFuture":
        """Resolve with the error ``e`` of the real send and wake :meth:`get`;
        returns ``self``."""
        super().failure(e)
        self._event.set()
        return self

    def get(self, timeout: Optional[float] = None) -> Any:
        """The ``RecordMetadata`` once the buffered record was sent and acknowledged.
        Raises the send's error, or ``KafkaTimeoutError`` when ``timeout`` seconds
        pass first (``None``: wait as long as it takes)."""
        if not self._event.wait(timeout):
            raise KafkaTimeoutError(f"Timeout after waiting for {timeout} secs.")
        if self.exception is not None:
            raise self.exception
        return self.value


class _Pending:
    """One record on its way: serialized, maybe buffered behind a switch."""

    __slots__ = ("value", "key", "headers", "timestamp_ms", "sent", "proxy", "error")

    def __init__(self, value: Any, key: Any, headers: List[Tuple[str, bytes]], timestamp_ms: Optional[int]) -> None:
        self.value = value
        self.key = key
        self.headers = headers
        self.timestamp_ms = timestamp_ms
        self.sent: Optional[Future] = None
        self.proxy: Optional[BufferedRecordFuture] = None
        self.error: Optional[BaseException] = None


def _refresh_metadata(metadata: Any, sender: Any, wait_s: float) -> None:
    """Ask kafka-python's sender thread for a Metadata update and wait for it
    (at most ``wait_s`` seconds)."""
    done = threading.Event()
    metadata.request_update().add_both(lambda *_: done.set())
    if sender is not None and hasattr(sender, "wakeup"):
        sender.wakeup()
    done.wait(wait_s)


class _ProducerPort:
    """:class:`~kafka_ordered._ports.ProducerPort` over a ``KafkaProducer``."""

    def __init__(self, producer: KafkaProducer, lock: threading.RLock) -> None:
        self.producer = producer
        self.lock = lock

    def send(self, topic: str, partition: Optional[int], item: _Pending, stamp: Optional[Stamp] = None,
             on_done: Optional[Callable[[bool], None]] = None) -> Future:
        headers = item.headers if stamp is None else with_stamp(item.headers, stamp.value)
        fut = self.producer.send(topic, value=item.value, key=item.key, headers=headers,
                                 partition=partition, timestamp_ms=item.timestamp_ms)
        if stamp is not None:
            acked = stamp.acked
            fut.add_callback(lambda _md: acked())
        if on_done is not None:
            then = on_done
            fut.add_callback(lambda _md: then(True))
            fut.add_errback(lambda _e: then(False))
        item.sent = fut
        if item.proxy is not None:
            fut.add_callback(item.proxy.success)
            fut.add_errback(item.proxy.failure)
        return fut

    def flush(self, timeout: float) -> int:
        try:
            self.producer.flush(timeout=timeout)
            return 0
        except KafkaTimeoutError:
            return 1

    def learn_partitions(self, topic: str, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        metadata = self.producer._metadata  # kafka-python keeps the partitions it refuses records for here
        while True:
            known = len(metadata.partitions_for_topic(topic) or ())
            if known >= count:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrokerUnavailableError(
                    f"the producer's metadata shows {known} partition(s) of {topic} after {timeout:.1f} s; "
                    f"its layout needs {count}")
            self.producer._sender.add_topic(topic)
            _refresh_metadata(metadata, self.producer._sender, min(left, 2.0))
            time.sleep(0.05)

    def send_tombstone(self, topic: str, partition: int, key: bytes, headers: List[Tuple[str, bytes]]) -> None:
        fut = self.producer.send(topic, value=None, key=key, headers=headers, partition=partition)
        fut.add_errback(lambda e: log.warning("a move tombstone was not delivered (%s): the key's value in the "
                                              "partition it left survives compaction", e))

    def failed(self, item: _Pending, error: BaseException) -> None:
        with self.lock:
            item.error = error
            if item.proxy is not None:
                item.proxy.failure(error)


class OrderedKafkaProducer:
    """``kafka.KafkaProducer`` that keeps per-key order across layout changes.

    Takes kafka-python's keyword configs plus ``ordered.*`` options (as
    ``**{"ordered.producer.id": "billing"}`` or ``ordered_producer_id="billing"``).
    ``acks='all'`` and ``enable_idempotence=True`` are forced (other explicit
    values raise :class:`ConfigError`). Keys and values are serialized by
    this wrapper (``key_serializer``/``value_serializer`` are not passed to
    the inner producer) so that the serialized key is what the layout hashes;
    records reach the inner producer as bytes with an explicit partition.

    ``send`` returns kafka-python's ``FutureRecordMetadata``, or a
    :class:`BufferedRecordFuture` when the record waits behind a layout switch
    (also for sends made from callbacks on kafka-python's sender thread; they
    never block on the switch's flush). A buffered record the client refuses
    fails alone: its future fails (or ``send`` raises, for the call that ran
    the switch). ``flush`` completes pending switches. An explicit
    ``partition=`` on a keyed record of a managed topic raises
    :class:`PartitionOverrideError`; unmanaged topics pass straight through.
    """

    def __init__(self, **configs: Any) -> None:
        opts, conf = split_config(dotted(configs), PRODUCER_OPTIONS + KAFKA_PYTHON_OPTIONS, "OrderedKafkaProducer")
        forced(conf, "acks", "all", ("all", -1, "-1"))
        forced(conf, "enable_idempotence", True, (True,))
        self._key_serializer = serializer(conf.pop("key_serializer", None))
        self._value_serializer = serializer(conf.pop("value_serializer", None))
        self._closed = False
        self._max_block_s = float(conf.get("max_block_ms", 60000)) / 1000.0
        conn = kafka_python_connection_config(conf, opts["ordered.librdkafka.config"])
        shared = _log.acquire(conn, opts["ordered.layout.topic"],
                              corrupt_policy=opts["ordered.layout.corrupt.policy"],
                              timeout=opts["ordered.metadata.timeout.ms"] / 1000.0)
        try:
            self._producer = KafkaProducer(**conf)
        except BaseException:
            shared.release()
            raise
        lock = threading.RLock()
        self._port = _ProducerPort(self._producer, lock)
        self._shared = shared
        self._core = RegisteringCore(self._port, shared, opts)
        self._client_id = metrics_client_id({"client.id": conf.get("client_id")}, "producer")
        self._core.transactional = bool(conf.get("transactional_id"))
        self._routes = self._core.routes
        self._port.lock = self._core.lock
        self._core.run_switch = self._switch
        self._sender_thread = getattr(self._producer, "_sender", None)
        self._metadata = getattr(self._producer, "_metadata", None)
        self._background: List[threading.Thread] = []

    @property
    def producer(self) -> KafkaProducer:
        """The wrapped ``KafkaProducer`` (do not send to managed topics through it)."""
        return self._producer

    @property
    def producer_id(self) -> str:
        """This producer's id in registrations (the stable id, or ``anon-...``)."""
        return self._core.producer_id

    def ordered_metrics(self) -> ProducerMetrics:
        """A snapshot of this producer's layout switches, buffered records and
        layout-log view (see :class:`kafka_ordered.metrics.ProducerMetrics`)."""
        return replace(self._core.metrics(), client_id=self._client_id)

    @property
    def stable_id(self) -> bool:
        """Whether this producer has a stable ``ordered.producer.id``."""
        return self._core.stable_id

    @property
    def registrations(self) -> List[RegistrationRecord]:
        """What each registration of this producer did, oldest first."""
        return self._core.registrations

    @property
    def history(self) -> LayoutHistory:
        """The layout history this producer follows (shared by the process's
        clients of the same cluster and layout log)."""
        return self._core.history

    # -- sending

    def send(self, topic: str, value: Any = None, key: Any = None, headers: Optional[List[Tuple[str, bytes]]] = None,
             partition: Optional[int] = None, timestamp_ms: Optional[int] = None) -> Future:
        """``KafkaProducer.send``; see the class docstring."""
        if self._closed:
            raise IllegalStateError("OrderedKafkaProducer already closed!")
        if value is None and key is None:
            raise ValueError("Need at least one: key or value")
        if headers is None:
            headers = []
        elif not isinstance(headers, list):
            raise TypeError("headers must be list-type")
        elif not all(isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str) and isinstance(h[1], bytes)
                     for h in headers):
            raise TypeError("All headers items must be (str, bytes) tuples")
        kb = key if self._key_serializer is None else self._key_serializer.serialize(topic, headers, key)
        vb = value if self._value_serializer is None else self._value_serializer.serialize(topic, headers, value)
        if kb.__class__ is bytes and partition is None:
            # The per-record path (see kafka_ordered._fastpath): counted in
            # before the ready check, out after the inner send returned.
            r = self._routes.get(topic)
            if r is not None and r.ready and vb.__class__ in _SERIALIZED:
                ready = r.enter()
                try:
                    if ready:
                        p = r.fn(kb)
                        if not r.stamp or p not in r.stamp:
                            return self._producer.send(topic, value=vb, key=kb, headers=headers, partition=p,
                                                       timestamp_ms=timestamp_ms)
                finally:
                    r.leave()
        if type(kb) not in _SERIALIZED:
            raise TypeError(f"Unsupported type for serialized key: {type(kb)}")
        if type(vb) not in _SERIALIZED:
            raise TypeError(f"Unsupported type for serialized value: {type(vb)}")
        st = self._core.state(topic)
        if st is None or (kb is None and partition is not None):
            return self._producer.send(topic, value=vb, key=kb, headers=headers, partition=partition,
                                       timestamp_ms=timestamp_ms)
        if kb is not None and partition is not None:
            raise PartitionOverrideError(
                f"explicit partition={partition} for a keyed record of managed topic {topic} would break "
                "per-key ordering; leave partition unset"
            )
        if self._metadata is not None and self._metadata.partitions_for_topic(topic) is None:
            self._ensure_partitions(topic, 1)  # fetch metadata outside the layout lock
        hkey = kb if kb is None or type(kb) is bytes else _as_bytes(kb)
        item = _Pending(vb, kb, headers, timestamp_ms)
        self._core.retry(topic, st)  # an earlier switch failed: retry it first
        buffered, result = self._core.route(topic, st, hkey, item)
        return self._buffered(item) if buffered else result

    def _on_sender_thread(self) -> bool:
        return threading.current_thread() is self._sender_thread

    def _ensure_partitions(self, topic: str, needed: int) -> None:
        """Wait (bounded by ``max_block_ms``) until the inner producer's metadata
        knows ``needed`` partitions of ``topic``. Never on the sender thread."""
        md = self._metadata
        if md is None or self._on_sender_thread():
            return
        known = md.partitions_for_topic(topic)
        if known is not None and len(known) >= needed:
            return
        if known is None:
            self._producer.partitions_for(topic)  # raises KafkaTimeoutError after max_block_ms
        deadline = time.monotonic() + self._max_block_s
        while True:
            known = md.partitions_for_topic(topic)
            if (known is not None and len(known) >= needed) or time.monotonic() > deadline:
                return
            _refresh_metadata(md, self._sender_thread, min(1.0, max(0.0, deadline - time.monotonic())))

    def _switch(self, topic: str, st: TopicState, own: Any) -> None:
        if self._on_sender_thread():
            # A send from a callback: the switch flushes, and only this thread
            # completes a flush. Switch elsewhere; the record waits in the buffer.
            t = threading.Thread(target=self._background_switch, args=(topic, st),
                                 name=f"kafka-ordered-switch-{topic}", daemon=True)
            self._background = [b for b in self._background if b.is_alive()] + [t]
            t.start()
            return
        self._core.switch(topic, st, own)

    def _background_switch(self, topic: str, st: TopicState) -> None:
        try:
            self._core.switch(topic, st)
        except Exception as e:  # the records stay buffered; flush() retries and raises
            log.warning("layout switch of %s started from a callback failed: %s", topic, e)

    def _buffered(self, item: _Pending) -> Future:
        with self._core.lock:
            if item.sent is not None:
                return item.sent
            if item.proxy is None:
                item.proxy = BufferedRecordFuture()
                if item.error is not None:
                    item.proxy.failure(item.error)
            return item.proxy

    # -- the rest of KafkaProducer

    def flush(self, timeout: Optional[float] = None) -> None:
        """Complete pending layout switches, then ``KafkaProducer.flush``.
        Raises ``KafkaTimeoutError`` when records are still queued or buffered
        at the timeout, :class:`RegistrationError` when a switch fails."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> Optional[float]:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        while True:
            self._core.finish_switches(left())
            self._producer.flush(timeout=left())
            # Callbacks of what was just flushed may have sent again (maybe
            # starting a switch elsewhere), or made move tombstones due: flush those as well.
            if not self._core.send_due_tombstones() and not self._core.buffered_count():
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"{self._core.buffered_count()} record(s) still buffered behind a layout switch")

    def init_transactions(self) -> None:
        """``KafkaProducer.init_transactions``, unchanged (needs
        ``transactional_id``)."""
        self._producer.init_transactions()

    def begin_transaction(self) -> None:
        """``KafkaProducer.begin_transaction``, unchanged. A layout switch inside
        the transaction flushes and registers within it; its records belong to the
        transaction."""
        self._producer.begin_transaction()
        self._core.begin_transaction()

    def send_offsets_to_transaction(self, offsets: Mapping[Any, Any], group_metadata: Any) -> None:
        """``KafkaProducer.send_offsets_to_transaction``, unchanged (pass an
        :class:`OrderedKafkaConsumer`'s ``group_metadata()``)."""
        self._producer.send_offsets_to_transaction(offsets, group_metadata)

    def commit_transaction(self) -> None:
        """Complete pending layout switches (their records belong to this
        transaction), then ``KafkaProducer.commit_transaction``. Stamped
        records of the transaction count as acknowledged once it committed."""
        self._core.finish_switches(None)
        self._producer.commit_transaction()
        self._core.end_transaction(committed=True)

    def abort_transaction(self) -> None:
        """``KafkaProducer.abort_transaction``: the transaction's records,
        including those sent after a layout switch inside it, are aborted as with
        the plain client; partitions whose stamped records it aborted keep being
        stamped."""
        self._producer.abort_transaction()
        self._core.end_transaction(committed=False)

    def partitions_for(self, topic: str) -> Set[int]:
        """``KafkaProducer.partitions_for``: physical partitions, including
        draining and spare ones; plain delegation."""
        return self._producer.partitions_for(topic)

    def metrics(self, raw: bool = False) -> Any:
        """``KafkaProducer.metrics``; plain delegation (the ordering protocol's
        own numbers are in :meth:`ordered_metrics`)."""
        return self._producer.metrics(raw=raw)

    def bootstrap_connected(self) -> bool:
        """``KafkaProducer.bootstrap_connected``; plain delegation."""
        return self._producer.bootstrap_connected()

    def max_usable_produce_magic(self, api_version: Any) -> int:
        """``KafkaProducer.max_usable_produce_magic``; plain delegation."""
        return KafkaProducer.max_usable_produce_magic(api_version)

    def close(self, timeout: Optional[float] = None, null_logger: bool = False) -> None:
        """Flush (completing switches), close the inner producer, release the
        layout-log resources. Records that could not be delivered are logged."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        except Exception as e:
            log.warning("OrderedKafkaProducer closing with undelivered records: %s", e)
        finally:
            self._closed = True
            try:
                self._producer.close(timeout=timeout, null_logger=null_logger)
            finally:
                self._core.close()
                self._shared.release()

    def __enter__(self) -> "OrderedKafkaProducer":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()
