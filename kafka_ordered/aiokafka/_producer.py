"""``OrderedAIOKafkaProducer``: aiokafka's ``AIOKafkaProducer`` over the registering core."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, Type

from aiokafka import AIOKafkaProducer
from aiokafka.errors import ProducerClosed

from .. import _log
from .._ports import Stamp
from .._registering import RegisteringCore, RegistrationRecord
from ..config import (
    KAFKA_PYTHON_OPTIONS, PRODUCER_OPTIONS, dotted, forced, kafka_python_connection_config, metrics_client_id,
    split_config,
)
from ..errors import BrokerUnavailableError, ConfigError, PartitionOverrideError
from ..history import LayoutHistory
from ..layout import _as_bytes
from ..metrics import ProducerMetrics
from ..tokens import with_stamp
from ._bridge import LoopBridge

__all__ = ["OrderedAIOKafkaProducer"]

log = logging.getLogger("kafka_ordered.producer")

_SERIALIZED = (bytes, bytearray, memoryview, type(None))


class _Pending:
    """One record on its way: serialized, maybe buffered behind a switch;
    ``result`` (a future of the loop) resolves with its ``RecordMetadata``."""

    __slots__ = ("value", "key", "headers", "timestamp_ms", "result")

    def __init__(self, value: Any, key: Any, headers: List[Tuple[str, bytes]], timestamp_ms: Optional[int],
                 result: "asyncio.Future[Any]") -> None:
        self.value = value
        self.key = key
        self.headers = headers
        self.timestamp_ms = timestamp_ms
        self.result = result


def _settle(target: "asyncio.Future[Any]", source: "asyncio.Future[Any]") -> None:
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())  # type: ignore[arg-type]
    else:
        target.set_result(source.result())


class _ProducerPort:
    """:class:`~kafka_ordered._ports.ProducerPort` over an ``AIOKafkaProducer``
    (called on the bridge's worker; each client call runs on the loop)."""

    def __init__(self, producer: AIOKafkaProducer, bridge: LoopBridge) -> None:
        self.producer = producer
        self.bridge = bridge

    def send(self, topic: str, partition: Optional[int], item: _Pending, stamp: Optional[Stamp] = None,
             on_done: Optional[Callable[[bool], None]] = None) -> "asyncio.Future[Any]":
        headers = item.headers if stamp is None else with_stamp(item.headers, stamp.value)
        acked = stamp.acked if stamp is not None else None

        async def enqueue() -> "asyncio.Future[Any]":
            fut = await self.producer.send(topic, value=item.value, key=item.key, partition=partition,
                                           timestamp_ms=item.timestamp_ms, headers=headers)

            def delivered(f: "asyncio.Future[Any]") -> None:
                ok = not f.cancelled() and f.exception() is None
                if ok and acked is not None:
                    acked()
                if on_done is not None:
                    on_done(ok)
                _settle(item.result, f)

            fut.add_done_callback(delivered)
            return fut

        return self.bridge.wait(enqueue)

    def flush(self, timeout: float) -> int:
        try:
            self.bridge.wait(self.producer.flush, timeout=timeout)
            return 0
        except TimeoutError:
            return 1

    def learn_partitions(self, topic: str, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        cluster = self.producer.client.cluster
        while True:
            known = len(self.bridge.call(cluster.partitions_for_topic, topic) or ())
            if known >= count:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrokerUnavailableError(
                    f"the producer's metadata shows {known} partition(s) of {topic} after {timeout:.1f} s; "
                    f"its layout needs {count}")
            self.bridge.call(self.producer.client.add_topic, topic)
            try:
                self.bridge.wait(self.producer.client.force_metadata_update, timeout=min(left, 2.0))
            except TimeoutError:
                pass
            time.sleep(0.05)

    def send_tombstone(self, topic: str, partition: int, key: bytes, headers: List[Tuple[str, bytes]]) -> None:
        async def enqueue() -> None:
            fut = await self.producer.send(topic, value=None, key=key, partition=partition, headers=headers)
            fut.add_done_callback(_log_lost_tombstone)

        self.bridge.wait(enqueue)

    def failed(self, item: _Pending, error: BaseException) -> None:
        def fail() -> None:
            if not item.result.done():
                item.result.set_exception(error)

        self.bridge.call(fail)


def _log_lost_tombstone(fut: "asyncio.Future[Any]") -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("a move tombstone was not delivered (%s): the key's value in the partition it left survives "
                    "compaction", fut.exception())


class OrderedAIOKafkaProducer:
    """``aiokafka.AIOKafkaProducer`` that keeps per-key order across layout changes.

    Construct it inside a running event loop, as ``AIOKafkaProducer``, with
    aiokafka's keyword configs plus ``ordered.*`` options (``ordered_x_y=``
    also works); ``await start()`` connects to the layout log too.
    ``acks='all'`` and ``enable_idempotence=True`` are forced (other
    explicit values raise :class:`ConfigError`). Keys and values are
    serialized by this wrapper so that the serialized key is what the layout
    hashes; records reach the inner producer as bytes with an explicit
    partition.

    ``send`` returns a future of ``RecordMetadata`` as aiokafka's does (a
    record that waits behind a layout switch resolves once it was sent and
    acknowledged). An explicit ``partition=`` on a keyed record of a managed
    topic, and ``send_batch`` to a managed topic (a batch goes to one
    partition whatever its keys), raise :class:`PartitionOverrideError`;
    unmanaged topics pass straight through. ``transactional_id`` is refused
    with :class:`ConfigError` (transactions are not supported by this
    adapter yet). Switches (flush, registration) run on one worker thread
    per producer, never on the event loop.
    """

    def __init__(self, **configs: Any) -> None:
        opts, conf = split_config(dotted(configs), PRODUCER_OPTIONS + KAFKA_PYTHON_OPTIONS, "OrderedAIOKafkaProducer")
        forced(conf, "acks", "all", ("all", -1, "-1"))
        forced(conf, "enable_idempotence", True, (True,))
        if conf.get("transactional_id"):
            raise ConfigError("OrderedAIOKafkaProducer does not support transactions yet (transactional_id); "
                              "use OrderedProducer or OrderedKafkaProducer for transactional topics")
        self._key_serializer: Optional[Callable[[Any], Any]] = conf.pop("key_serializer", None)
        self._value_serializer: Optional[Callable[[Any], Any]] = conf.pop("value_serializer", None)
        self._conn = kafka_python_connection_config(conf, opts["ordered.librdkafka.config"])
        self._opts = opts
        self._client_id = metrics_client_id({"client.id": conf.get("client_id")}, "producer")
        self._bridge = LoopBridge("kafka-ordered-aiokafka-producer")
        self._producer = AIOKafkaProducer(**conf)
        self._port = _ProducerPort(self._producer, self._bridge)
        self._core_: Optional[RegisteringCore] = None
        self._shared: Optional[_log.Shared] = None
        self._routes: Dict[str, Any] = {}
        self._closed = False

    @property
    def _core(self) -> RegisteringCore:
        if self._core_ is None:
            raise ProducerClosed() if self._closed else ConfigError(
                "OrderedAIOKafkaProducer is not started: await start() first")
        return self._core_

    # -- life cycle

    async def start(self) -> None:
        """Connect to the layout log (catching up with it, on the worker
        thread), then ``AIOKafkaProducer.start``. Raises what either raises;
        nothing started is left running then."""
        self._bridge.bind()
        try:
            shared = await self._bridge.acquire(self._conn, self._opts)
        except BaseException:
            self._bridge.close()
            raise
        self._shared = shared
        self._core_ = RegisteringCore(self._port, shared, self._opts, routes=self._routes)
        try:
            await self._producer.start()
        except BaseException:
            await self._release()
            raise

    async def stop(self) -> None:
        """Flush (completing switches), ``AIOKafkaProducer.stop``, release the
        layout-log resources. Records that could not be delivered are logged."""
        if self._closed:
            return
        try:
            if self._core_ is not None:
                await self.flush()
        except Exception as e:
            log.warning("OrderedAIOKafkaProducer stopping with undelivered records: %s", e)
        finally:
            self._closed = True
            try:
                await self._producer.stop()
            finally:
                await self._release()

    async def _release(self) -> None:
        core, shared = self._core_, self._shared
        self._core_ = self._shared = None
        await self._bridge.release(core, shared)

    async def __aenter__(self) -> "OrderedAIOKafkaProducer":
        await self.start()
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.stop()

    @property
    def producer(self) -> AIOKafkaProducer:
        """The wrapped ``AIOKafkaProducer`` (do not send to managed topics through it)."""
        return self._producer

    @property
    def producer_id(self) -> str:
        """This producer's id in registrations (the stable id, or ``anon-...``)."""
        return self._core.producer_id

    @property
    def history(self) -> LayoutHistory:
        """The layout history this producer follows."""
        return self._core.history

    @property
    def registrations(self) -> List[RegistrationRecord]:
        """What each registration of this producer did, oldest first."""
        return self._core.registrations

    def ordered_metrics(self) -> ProducerMetrics:
        """A snapshot of this producer's layout switches, buffered records and
        layout-log view (see :class:`kafka_ordered.metrics.ProducerMetrics`)."""
        return replace(self._core.metrics(), client_id=self._client_id)

    # -- sending

    async def send(self, topic: str, value: Any = None, key: Any = None, partition: Optional[int] = None,
                   timestamp_ms: Optional[int] = None, headers: Optional[List[Tuple[str, bytes]]] = None
                   ) -> "asyncio.Future[Any]":
        """``AIOKafkaProducer.send``; see the class docstring."""
        if self._closed:
            raise ProducerClosed()
        core = self._core
        kb = key if self._key_serializer is None else self._key_serializer(key)
        vb = value if self._value_serializer is None else self._value_serializer(value)
        hs = list(headers) if headers else []
        if kb.__class__ is bytes and partition is None:
            # The per-record path (see kafka_ordered._fastpath): counted in
            # before the ready check, out after the inner send enqueued.
            r = self._routes.get(topic)
            if r is not None and r.ready and vb.__class__ in _SERIALIZED:
                ready = r.enter()
                try:
                    if ready:
                        p = r.fn(kb)
                        if not r.stamp or p not in r.stamp:
                            return await self._producer.send(topic, value=vb, key=kb, partition=p,
                                                              timestamp_ms=timestamp_ms, headers=hs)
                finally:
                    r.leave()
        if type(kb) not in _SERIALIZED:
            raise TypeError(f"Unsupported type for serialized key: {type(kb)}")
        if type(vb) not in _SERIALIZED:
            raise TypeError(f"Unsupported type for serialized value: {type(vb)}")
        result: "asyncio.Future[Any]" = self._bridge.loop.create_future()
        item = _Pending(vb, kb, hs, timestamp_ms, result)
        direct = await self._bridge.run(self._route, core, topic, kb, partition, item)
        if direct:
            return await self._producer.send(topic, value=vb, key=kb, partition=partition,
                                              timestamp_ms=timestamp_ms, headers=hs)
        return result

    @staticmethod
    def _route(core: RegisteringCore, topic: str, kb: Any, partition: Optional[int], item: _Pending) -> bool:
        """On the worker: send or buffer ``item`` through the core; ``True``
        when the topic is not managed (the caller sends it as is)."""
        st = core.state(topic)
        if st is None or (kb is None and partition is not None):
            return True
        if kb is not None and partition is not None:
            raise PartitionOverrideError(
                f"explicit partition={partition} for a keyed record of managed topic {topic} would break "
                "per-key ordering; leave partition unset")
        hkey = kb if kb is None or type(kb) is bytes else _as_bytes(kb)
        core.retry(topic, st)  # an earlier switch failed: retry it first
        core.route(topic, st, hkey, item)
        return False

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, partition: Optional[int] = None,
                            timestamp_ms: Optional[int] = None,
                            headers: Optional[List[Tuple[str, bytes]]] = None) -> Any:
        """``AIOKafkaProducer.send_and_wait``: :meth:`send`, then its ``RecordMetadata``."""
        fut = await self.send(topic, value=value, key=key, partition=partition, timestamp_ms=timestamp_ms,
                              headers=headers)
        return await fut

    def create_batch(self) -> Any:
        """``AIOKafkaProducer.create_batch``; plain delegation."""
        return self._producer.create_batch()

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> "asyncio.Future[Any]":
        """``AIOKafkaProducer.send_batch`` for topics that are not managed. A
        batch goes to one partition whatever its records' keys: to a managed
        topic it raises :class:`PartitionOverrideError` (use :meth:`send`)."""
        managed = await self._bridge.run(self._core.state, topic)
        if managed is not None:
            raise PartitionOverrideError(
                f"send_batch to managed topic {topic} would put every key of the batch in partition {partition}; "
                "send its records with send()")
        return await self._producer.send_batch(batch, topic, partition=partition)

    async def flush(self) -> None:
        """Complete pending layout switches, then ``AIOKafkaProducer.flush``.
        Raises :class:`RegistrationError` when a switch fails."""
        core = self._core
        while True:
            await self._bridge.run(core.finish_switches, None)
            await self._producer.flush()
            # Acknowledgements of what was just flushed may have made move tombstones due.
            if not await self._bridge.run(core.send_due_tombstones) and not core.buffered_count():
                return

    # -- transactions: refused at construction (no transactional_id), so each
    # raises what a non-transactional AIOKafkaProducer raises

    async def begin_transaction(self) -> None:
        """``AIOKafkaProducer.begin_transaction``: raises ``IllegalOperation``
        (this wrapper takes no ``transactional_id``); plain delegation."""
        await self._producer.begin_transaction()

    async def commit_transaction(self) -> None:
        """``AIOKafkaProducer.commit_transaction``: raises as :meth:`begin_transaction`."""
        await self._producer.commit_transaction()

    async def abort_transaction(self) -> None:
        """``AIOKafkaProducer.abort_transaction``: raises as :meth:`begin_transaction`."""
        await self._producer.abort_transaction()

    def transaction(self) -> Any:
        """``AIOKafkaProducer.transaction``: its context raises as
        :meth:`begin_transaction` when entered."""
        return self._producer.transaction()

    async def send_offsets_to_transaction(self, offsets: Any, group_id: str) -> None:
        """``AIOKafkaProducer.send_offsets_to_transaction``: raises as :meth:`begin_transaction`."""
        await self._producer.send_offsets_to_transaction(offsets, group_id)

    async def partitions_for(self, topic: str) -> Set[int]:
        """``AIOKafkaProducer.partitions_for``: physical partitions, including
        draining and spare ones; plain delegation."""
        return await self._producer.partitions_for(topic)

