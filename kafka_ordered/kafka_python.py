"""kafka-python counterparts of :class:`~kafka_ordered.producer.OrderedProducer`
and :class:`~kafka_ordered.consumer.OrderedConsumer`.

:class:`OrderedKafkaProducer` wraps ``kafka.KafkaProducer`` and
:class:`OrderedKafkaConsumer` wraps ``kafka.KafkaConsumer`` (by composition),
with the same call signatures. They share the registration and gate logic of
the confluent-kafka wrappers; the layout log and offset reads stay on
confluent-kafka internally.

Our options are the ``ordered.*`` keys, passed as ``**{"ordered.producer.id":
"billing"}`` or with underscores, ``ordered_producer_id="billing"``.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from types import TracebackType
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Type

from kafka import KafkaConsumer, KafkaProducer
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener, ConsumerRebalanceListener
from kafka.errors import IllegalStateError, KafkaTimeoutError
from kafka.future import Future
from kafka.serializer import Serializer
from kafka.structs import OffsetAndMetadata, TopicPartition

from .assignor import OrderedAssignor, register_layouts, unregister_layouts
from .config import kafka_python_connection_config, split_config
from .consumer import CONSUMER_OPTIONS, _GatingConsumer, _reset_policy, _truthy
from .errors import ConfigError, PartitionOverrideError
from .gates import TP
from .layout import _as_bytes
from .listener import PartitionKeyRebalanceListener
from .producer import PRODUCER_OPTIONS, _forced, _RegisteringProducer

__all__ = ["OrderedKafkaProducer", "OrderedKafkaConsumer", "BufferedRecordFuture", "OrderedAssignor"]

log = logging.getLogger("kafka_ordered.kafka_python")


def _dotted(configs: Mapping[str, Any]) -> Dict[str, Any]:
    """Accept ``ordered_x_y=...`` as an alias of ``ordered.x.y``."""
    out: Dict[str, Any] = {}
    for key, value in configs.items():
        if key.startswith("ordered_"):
            dotted = key.replace("_", ".")
            if dotted in configs and configs[dotted] != value:
                raise ConfigError(f"{key}={value!r} conflicts with {dotted}={configs[dotted]!r}")
            out[dotted] = value
        elif key not in out:
            out[key] = value
    return out


def _serializer(s: Any) -> Optional[Serializer]:
    if s is None or isinstance(s, Serializer):
        return s

    class _Wrapped(Serializer):
        def serialize(self, topic: str, headers: Any, data: Any) -> Any:
            return s(data)

    return _Wrapped()


# -- producer -------------------------------------------------------------------


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
        super().success(value)
        self._event.set()
        return self

    def failure(self, e: Any) -> "BufferedRecordFuture":
        super().failure(e)
        self._event.set()
        return self

    def get(self, timeout: Optional[float] = None) -> Any:
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


class OrderedKafkaProducer(_RegisteringProducer):
    """``kafka.KafkaProducer`` that keeps per-key order across layout changes.

    Takes kafka-python's keyword configs plus ``ordered.*`` options (see
    module docstring). ``acks='all'`` and ``enable_idempotence=True`` are
    forced (other explicit values raise :class:`ConfigError`). Keys and values
    are serialized by this wrapper (``key_serializer``/``value_serializer``
    are not passed to the inner producer) so that the serialized key is what
    the layout hashes; records reach the inner producer as bytes with an
    explicit partition.

    ``send`` returns kafka-python's ``FutureRecordMetadata``, or a
    :class:`BufferedRecordFuture` when the record waits behind a layout switch
    (also for sends made from callbacks on kafka-python's sender thread; they
    never block on the switch's flush). ``flush`` completes pending switches.
    An explicit ``partition=`` on a keyed record of a managed topic raises
    :class:`PartitionOverrideError`; unmanaged topics pass straight through
    (the inner producer's partitioner then sees the serialized key).
    """

    def __init__(self, **configs: Any) -> None:
        opts, conf = split_config(_dotted(configs), PRODUCER_OPTIONS, "OrderedKafkaProducer")
        _forced(conf, "acks", "all", ("all", -1, "-1"))
        _forced(conf, "enable_idempotence", True, (True,))
        self._key_serializer = _serializer(conf.pop("key_serializer", None))
        self._value_serializer = _serializer(conf.pop("value_serializer", None))
        self._closed = False
        self._draining = False
        self._max_block_s = float(conf.get("max_block_ms", 60000)) / 1000.0
        self._init_registering(opts, kafka_python_connection_config(conf))
        try:
            self._producer = KafkaProducer(**conf)
        except BaseException:
            self._close_registering()
            raise
        self._sender_thread = getattr(self._producer, "_sender", None)
        self._metadata = getattr(self._producer, "_metadata", None)
        self._background: List[threading.Thread] = []

    @property
    def producer(self) -> KafkaProducer:
        """The wrapped ``KafkaProducer`` (do not send to managed topics through it)."""
        return self._producer

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
        if type(kb) not in _SERIALIZED:
            raise TypeError(f"Unsupported type for serialized key: {type(kb)}")
        if type(vb) not in _SERIALIZED:
            raise TypeError(f"Unsupported type for serialized value: {type(vb)}")
        st = self._state(topic)
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
        if st.buffer and not st.busy:  # an earlier switch failed: retry it now
            with self._lock:
                retry = not st.busy and bool(st.buffer)
                if retry:
                    st.buffer.append((hkey, item))
                    st.busy = True
            if retry:
                self._switch(topic, st)
                return self._buffered(item)
        return self._route(topic, hkey, item)

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
            done = threading.Event()
            md.request_update().add_both(lambda *_: done.set())
            sender = self._sender_thread
            if sender is not None and hasattr(sender, "wakeup"):
                sender.wakeup()
            done.wait(min(1.0, max(0.0, deadline - time.monotonic())))

    def _switch(self, topic: str, st: Any) -> None:
        if self._on_sender_thread():
            # A send from a callback: the switch flushes, and only this thread
            # completes a flush. Switch elsewhere; the record waits in the buffer.
            t = threading.Thread(target=self._background_switch, args=(topic, st),
                                 name=f"kafka-ordered-switch-{topic}", daemon=True)
            self._background = [b for b in self._background if b.is_alive()] + [t]
            t.start()
            return
        target = self._follower.history.current(topic)
        if target is not None:
            self._ensure_partitions(topic, target.partitions)
        super()._switch(topic, st)

    def _background_switch(self, topic: str, st: Any) -> None:
        try:
            self._switch(topic, st)
        except Exception as e:  # the records stay buffered; flush() retries and raises
            log.warning("layout switch of %s started from a callback failed: %s", topic, e)

    def _drain(self, topic: str, st: Any) -> None:
        self._draining = True
        try:
            super()._drain(topic, st)
        finally:
            self._draining = False

    def _buffered(self, item: Any) -> Any:
        with self._lock:
            if item.sent is not None:
                return item.sent
            if item.proxy is None:
                item.proxy = BufferedRecordFuture()
                if item.error is not None:
                    item.proxy.failure(item.error)
            return item.proxy

    def _send_now(self, topic: str, partition: Optional[int], item: Any) -> Any:
        try:
            fut = self._producer.send(topic, value=item.value, key=item.key, headers=item.headers,
                                      partition=partition, timestamp_ms=item.timestamp_ms)
        except Exception as e:
            if not self._draining:
                raise
            # A buffered record the client refuses: fail its future, keep draining.
            log.warning("buffered record for %s refused by the client: %s", topic, e)
            item.error = e
            if item.proxy is not None:
                item.proxy.failure(e)
            return None
        item.sent = fut
        if item.proxy is not None:
            fut.add_callback(item.proxy.success)
            fut.add_errback(item.proxy.failure)
        return fut

    def _flush_client(self, timeout: float) -> int:
        try:
            self._producer.flush(timeout=timeout)
            return 0
        except KafkaTimeoutError:
            return 1

    # -- the rest of KafkaProducer

    def flush(self, timeout: Optional[float] = None) -> None:
        """Complete pending layout switches, then ``KafkaProducer.flush``.
        Raises ``KafkaTimeoutError`` when records are still queued or buffered
        at the timeout, :class:`RegistrationError` when a switch fails."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> Optional[float]:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        while True:
            self._finish_switches(left())
            self._producer.flush(timeout=left())
            # Callbacks of what was just flushed may have sent again (maybe
            # starting a switch elsewhere): flush those as well.
            if not self._buffered_count():
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"{self._buffered_count()} record(s) still buffered behind a layout switch")

    def partitions_for(self, topic: str) -> Set[int]:
        return self._producer.partitions_for(topic)

    def metrics(self, raw: bool = False) -> Any:
        return self._producer.metrics(raw=raw)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._producer, name)

    def close(self, timeout: Optional[float] = None) -> None:
        """Flush (completing switches), close the inner producer, stop following
        the layout log. Records that could not be delivered are logged."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        except Exception as e:
            log.warning("OrderedKafkaProducer closing with undelivered records: %s", e)
        finally:
            self._closed = True
            try:
                self._producer.close(timeout=timeout)
            finally:
                self._close_registering()

    def __enter__(self) -> "OrderedKafkaProducer":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()


# -- consumer -------------------------------------------------------------------


async def _call(listener: Any, method: str, arg: Any) -> None:
    fn = getattr(listener, method, None)
    if fn is None:
        return
    if inspect.iscoroutinefunction(fn):
        await fn(arg)
    else:
        fn(arg)


class _Rebalance(AsyncConsumerRebalanceListener):
    """Runs on kafka-python's IO loop: our bookkeeping around the user's listener."""

    def __init__(self, owner: "OrderedKafkaConsumer", user: Any) -> None:
        self.owner = owner
        self.user = user

    async def on_partitions_revoked(self, revoked: Any) -> None:
        try:
            await _call(self.user, "on_partitions_revoked", revoked)
        finally:
            await self.owner._on_revoked(revoked, lost=False)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.owner._on_assigned(assigned)
        await _call(self.user, "on_partitions_assigned", assigned)

    async def on_partitions_lost(self, lost: Any) -> None:
        try:
            if self.user is not None and hasattr(self.user, "on_partitions_lost"):
                await _call(self.user, "on_partitions_lost", lost)
            else:
                await _call(self.user, "on_partitions_revoked", lost)
        finally:
            await self.owner._on_revoked(lost, lost=True)


class OrderedKafkaConsumer(_GatingConsumer):
    """``kafka.KafkaConsumer`` that delivers keyed records in order across
    layout changes of managed topics.

    Takes kafka-python's keyword configs (``group_id`` required) plus
    ``ordered.*`` options. The wrapper owns offset storage: the inner
    consumer's auto-commit is off, and with ``enable_auto_commit=True`` (the
    default) the wrapper commits the positions of records returned by earlier
    polls every ``auto_commit_interval_ms``, and promptly when another
    member's gate waits on a partition it owns. Records held at a gate are
    never committed. The default ``partition_assignment_strategy`` is
    :class:`OrderedAssignor` (every member of a group must list it); listing
    the class binds it to this consumer's layout view.

    ``subscribe(..., key_listener=PartitionKeyRebalanceListener)`` for per-key
    state hand-off; ``listener`` stays kafka-python's
    ``ConsumerRebalanceListener`` (it runs on kafka-python's IO thread).
    """

    def __init__(self, *topics: str, **configs: Any) -> None:
        opts, conf = split_config(_dotted(configs), CONSUMER_OPTIONS, "OrderedKafkaConsumer")
        if not conf.get("group_id"):
            raise ConfigError("OrderedKafkaConsumer needs group_id: gates are evaluated per consumer group")
        auto_commit = _truthy(conf.pop("enable_auto_commit", True))
        interval = int(conf.pop("auto_commit_interval_ms", 5000)) / 1000.0
        conf["enable_auto_commit"] = False
        conn = kafka_python_connection_config(conf)
        self._closed = False
        self._defer: Optional[Dict[TopicPartition, OffsetAndMetadata]] = None
        self._commit_cb: Optional[Callable[..., Any]] = None
        self._init_gating(opts, conn, auto_commit, interval, _reset_policy(conf.get("auto_offset_reset", "latest")))
        strategies = conf.get("partition_assignment_strategy") or [OrderedAssignor]
        conf["partition_assignment_strategy"] = [
            OrderedAssignor(self._follower) if s is OrderedAssignor else s for s in strategies
        ]
        self._registry_key = (conn["bootstrap.servers"], opts["ordered.layout.topic"])
        register_layouts(*self._registry_key, self._follower)
        try:
            self._consumer = KafkaConsumer(**conf)
        except BaseException:
            unregister_layouts(*self._registry_key, self._follower)
            self._close_gating()
            raise
        self._coordinator: Any = getattr(self._consumer, "_coordinator", None)
        if topics:
            self.subscribe(list(topics))

    @property
    def consumer(self) -> KafkaConsumer:
        """The wrapped ``KafkaConsumer``."""
        return self._consumer

    # -- hooks

    def _c_partitions(self, tps: List[TP]) -> List[TopicPartition]:
        return [TopicPartition(t, p) for t, p in tps]

    def _c_pause(self, tps: List[TP]) -> None:
        self._consumer.pause(*self._c_partitions(tps))

    def _c_resume(self, tps: List[TP]) -> None:
        self._resume(self._c_partitions(tps))

    def _resume(self, partitions: List[TopicPartition]) -> None:
        """Resume, discarding fetched data the client parked while paused.

        kafka-python 3.0.12 (KAFKA-7548 port) restores parked records only
        while no exhausted record set is "in line", which after the first
        fetch is never: a resumed partition would never be fetched again.
        Parked data is re-fetched from the position instead (also right after
        a seek, where it is obsolete anyway).
        """
        fetcher = getattr(self._consumer, "_fetcher", None)
        for attr in ("_paused_partition_records", "_paused_completed_fetches"):
            parked = getattr(fetcher, attr, None)
            if isinstance(parked, dict):
                for tp in partitions:
                    parked.pop(tp, None)
        if partitions:
            self._consumer.resume(*partitions)

    def _c_seek(self, tp: TP, offset: int) -> None:
        self._consumer.seek(TopicPartition(*tp), offset)

    def _c_positions(self, tps: List[TP]) -> Dict[TP, int]:
        # The subscription state, not KafkaConsumer.position(): that one may
        # block on the network, and this also runs in rebalance callbacks.
        assignment = self._consumer._subscription.assignment
        out: Dict[TP, int] = {}
        for t, p in tps:
            state = assignment.get(TopicPartition(t, p))
            pos = getattr(state, "position", None) if state is not None else None
            if pos is not None:
                out[(t, p)] = pos.offset if isinstance(pos, OffsetAndMetadata) else int(pos)
        return out

    def _c_committed(self, tps: List[TP]) -> Dict[TP, int]:
        res = self._coordinator.fetch_committed_offsets(self._c_partitions(tps),
                                                        timeout_ms=int(self._timeout * 1000))
        return {(tp.topic, tp.partition): om.offset for tp, om in res.items() if om is not None and om.offset >= 0}

    def _c_commit(self, offsets: Dict[TP, int], asynchronous: bool) -> Any:
        kp = {TopicPartition(t, p): OffsetAndMetadata(off, "", -1) for (t, p), off in sorted(offsets.items())}
        if self._defer is not None:  # inside a rebalance callback: the caller awaits the commit
            self._defer.update(kp)
            return None
        if asynchronous:
            return self._consumer.commit_async(kp, callback=self._commit_cb)
        return self._consumer.commit(kp)

    # -- rebalance (on kafka-python's IO thread; no blocking consumer calls here)

    async def _on_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        parts = sorted(assigned)
        if not parts:
            return
        res = await self._coordinator.fetch_committed_offsets_async(parts, timeout_ms=int(self._timeout * 1000))
        committed = {(tp.topic, tp.partition): om.offset for tp, om in res.items()
                     if om is not None and om.offset >= 0}
        # _assigned reads start offsets (blocking I/O): off the IO loop, so
        # heartbeats go on meanwhile.
        starts = await self._off_loop(self._assigned, [(tp.topic, tp.partition) for tp in parts], committed)
        for tp in parts:
            key = (tp.topic, tp.partition)
            off = committed.get(key, starts.get(key))
            if off is not None:
                self._consumer.seek(tp, off)

    def _off_loop(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn`` on a worker thread; the returned future resolves on the IO loop."""
        fut = Future()
        net = self._consumer._net

        def work() -> None:
            try:
                value, error = fn(*args), None
            except BaseException as e:  # re-raised in the awaiting coroutine
                value, error = None, e

            async def resolve() -> None:
                if error is None:
                    fut.success(value)
                else:
                    fut.failure(error)

            net.call_soon_threadsafe(resolve)

        threading.Thread(target=work, name="kafka-ordered-assign", daemon=True).start()
        return fut

    async def _on_revoked(self, revoked: Iterable[TopicPartition], lost: bool) -> None:
        tps = [(tp.topic, tp.partition) for tp in revoked]
        if not lost and self._auto_commit:
            offsets = {tp: off for tp, off in self._positions(tps).items() if off > self._committed.get(tp, -1)}
            if offsets:
                self._defer = {}
                try:
                    self._commit(offsets, asynchronous=False)
                    deferred, self._defer = self._defer, None
                    commit = getattr(self._coordinator, "_commit_offsets_sync_async", None)
                    if commit is not None:  # awaited: lands before this member rejoins
                        await commit(deferred, timeout_ms=int(self._timeout * 1000))
                    else:  # pragma: no cover - other kafka-python versions
                        self._coordinator.commit_offsets_async(deferred)
                except Exception as e:
                    log.warning("commit on revoke failed: %s", e)
                finally:
                    self._defer = None
        self._revoked(tps)

    # -- subscription

    def subscribe(self, topics: Sequence[str] = (), pattern: Optional[str] = None, listener: Any = None,
                  key_listener: Optional[PartitionKeyRebalanceListener] = None) -> None:
        """``KafkaConsumer.subscribe`` plus ``key_listener`` for per-key state hand-off."""
        if key_listener is not None and not isinstance(key_listener, PartitionKeyRebalanceListener):
            raise TypeError("key_listener must be a PartitionKeyRebalanceListener")
        if listener is not None and not isinstance(listener, (ConsumerRebalanceListener,
                                                               AsyncConsumerRebalanceListener)):
            raise TypeError("listener must be a ConsumerRebalanceListener or AsyncConsumerRebalanceListener")
        self._listener = key_listener
        self._subscribed = set(topics or ())
        self._consumer.subscribe(topics=topics, pattern=pattern, listener=_Rebalance(self, listener))
        self._refresh_gates(force=True)

    def unsubscribe(self) -> None:
        self._final_commit()
        self._revoked(list(self._owned))
        self._consumer.unsubscribe()
        self._subscribed = set()

    def assign(self, partitions: List[TopicPartition]) -> None:
        """Manual assignment (no group rebalancing); gates still apply."""
        want = {(tp.topic, tp.partition) for tp in partitions}
        self._revoked(sorted(self._owned - want))
        added = sorted(want - self._owned)
        committed = self._c_committed(added) if added else {}
        starts = self._assigned(added, committed)
        self._consumer.assign(list(partitions))
        for key in added:
            off = committed.get(key, starts.get(key))
            if off is not None:
                self._consumer.seek(TopicPartition(*key), off)

    # -- consuming

    def poll(self, timeout_ms: float = 0, max_records: Optional[int] = None,
             update_offsets: bool = True) -> Dict[TopicPartition, List[Any]]:
        """``KafkaConsumer.poll``: deliverable records by partition ({} while
        partitions wait at gates)."""
        if self._closed:
            raise IllegalStateError("OrderedKafkaConsumer is closed")
        if timeout_ms < 0:
            raise ValueError("Timeout must not be negative")
        if max_records is None:
            max_records = self._consumer.config["max_poll_records"]
        deadline = time.monotonic() + timeout_ms / 1000.0
        self._begin_poll()
        out: Dict[TopicPartition, List[Any]] = {}
        while True:
            left = max(0.0, deadline - time.monotonic())
            chunk = left
            if self._owned and not self._rebalancing() and (self._has_closed_gates() or self._init_commit):
                chunk = min(left, self._commit_interval / 2)
            raw = self._consumer.poll(timeout_ms=int(chunk * 1000), max_records=max_records)
            if raw:
                self._take(raw, out)
            if out or time.monotonic() >= deadline:
                return out
            self._maintain()

    def _rebalancing(self) -> bool:
        co = self._coordinator
        try:
            return bool(co is not None and co.need_rejoin())
        except Exception:  # pragma: no cover - internals moved
            return False

    def _maintain(self) -> None:
        # Nothing to evaluate or commit without partitions. Skipping also keeps
        # the gaps between the client's polls short while it joins: kafka-python
        # 3.0.12 throws away a JoinGroup/SyncGroup round that completes while
        # no poll waits on it, and joins again.
        if self._owned:
            super()._maintain()

    def _take(self, raw: Mapping[TopicPartition, List[Any]], out: Dict[TopicPartition, List[Any]]) -> None:
        """Deliver what may be delivered of one fetch; the client's positions
        then count exactly the returned records (held ones are sought back)."""
        try:
            if self._gating:
                self._ensure_fresh()
            watched = self._watched()
            for tp, recs in raw.items():
                if not recs:
                    continue
                if (tp.topic, tp.partition) not in watched:
                    out.setdefault(tp, []).extend(recs)
                    continue
                key = (tp.topic, tp.partition)
                taken = []
                for r in recs:
                    if not self._admit(key, r.offset):
                        break
                    taken.append(r)
                if taken:
                    out.setdefault(tp, []).extend(taken)
        except BaseException:
            # Nothing of this fetch reaches the application: fetch it again.
            for tp, recs in raw.items():
                out.pop(tp, None)
                if recs:
                    key = (tp.topic, tp.partition)
                    if self._held.get(key, -1) >= recs[0].offset:
                        self._unhold(key)  # held in this fetch: decided again when fetched again
                    if key not in self._held:
                        self._pos[key] = recs[0].offset
                        self._c_seek(key, recs[0].offset)
            raise

    def __iter__(self) -> "OrderedKafkaConsumer":
        return self

    def __next__(self) -> Any:
        timeout = self._consumer.config.get("consumer_timeout_ms", float("inf"))
        deadline = time.monotonic() + (timeout / 1000.0 if timeout >= 0 else float("inf"))
        while not self._closed:
            left = deadline - time.monotonic()
            recs = self.poll(timeout_ms=max(0.0, min(left, 1.0)) * 1000, max_records=1)
            for rs in recs.values():
                if rs:
                    return rs[0]
            if time.monotonic() >= deadline:
                break
        raise StopIteration()

    # -- offsets

    def commit(self, offsets: Optional[Mapping[TopicPartition, Any]] = None, timeout_ms: Optional[int] = None) -> None:
        """``KafkaConsumer.commit``. Without ``offsets`` commits the positions
        of every record returned so far. Commits that move a partition past a
        gate opened inside this consumer also carry the source offsets it
        waited on."""
        want = self._wanted(offsets)
        self._last_commit = time.monotonic()
        if want:
            self._commit(want, asynchronous=False)

    def commit_async(self, offsets: Optional[Mapping[TopicPartition, Any]] = None,
                     callback: Optional[Callable[..., Any]] = None) -> Any:
        """``KafkaConsumer.commit_async`` (same offsets as :meth:`commit`)."""
        want = self._wanted(offsets)
        self._last_commit = time.monotonic()
        if not want:
            return None
        self._commit_cb = callback
        try:
            return self._commit(want, asynchronous=True)
        finally:
            self._commit_cb = None

    def _wanted(self, offsets: Optional[Mapping[TopicPartition, Any]]) -> Dict[TP, int]:
        if offsets is None:
            if self._stored is not None:
                return {tp: off for tp, off in self._stored.items() if tp in self._owned}
            return self._positions(self._owned)
        return {(tp.topic, tp.partition): (om.offset if isinstance(om, OffsetAndMetadata) else int(om))
                for tp, om in offsets.items()}

    def committed(self, partition: TopicPartition, metadata: bool = False, timeout_ms: Optional[int] = None) -> Any:
        return self._consumer.committed(partition, metadata=metadata, timeout_ms=timeout_ms)

    def position(self, partition: TopicPartition, timeout_ms: Optional[int] = None) -> Optional[int]:
        """Position after the records returned so far (held records do not count)."""
        key = (partition.topic, partition.partition)
        known = self._positions([key])
        if key in known:
            return known[key]
        return self._consumer.position(partition, timeout_ms=timeout_ms)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """``KafkaConsumer.seek``; the new position counts as processed for gates."""
        self._consumer.seek(partition, offset)
        key = (partition.topic, partition.partition)
        self._pos[key] = self._processed[key] = offset
        self._unhold(key)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._consumer.seek_to_beginning(*partitions)
        self._reset_positions(partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._consumer.seek_to_end(*partitions)
        self._reset_positions(partitions)

    def _reset_positions(self, partitions: Sequence[TopicPartition]) -> None:
        keys = [(p.topic, p.partition) for p in partitions] if partitions else list(self._owned)
        for key in keys:
            self._pos.pop(key, None)  # unknown until the reset resolves
            self._unhold(key)

    def _unhold(self, key: TP) -> None:
        if key in self._held:
            self._held.pop(key)
            self._held_since.pop(key, None)
            if key not in self._user_paused:
                self._resume([TopicPartition(*key)])

    def pause(self, *partitions: TopicPartition) -> None:
        self._user_paused |= {(p.topic, p.partition) for p in partitions}
        self._consumer.pause(*partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._user_paused -= {(p.topic, p.partition) for p in partitions}
        self._resume([p for p in partitions if (p.topic, p.partition) not in self._held])

    def paused(self) -> Set[TopicPartition]:
        """Partitions paused by the application (not those held at gates)."""
        return {tp for tp in self._consumer.paused() if (tp.topic, tp.partition) in self._user_paused}

    def assignment(self) -> Set[TopicPartition]:
        return self._consumer.assignment()

    def __getattr__(self, name: str) -> Any:
        # subscription, highwater, end_offsets, beginning_offsets, topics, metrics, ...
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._consumer, name)

    def _final_commit(self) -> None:
        if not self._auto_commit:
            return
        base = self._stored if self._stored is not None else self._positions(self._owned)
        offsets = {tp: off for tp, off in base.items() if tp in self._owned and off > self._committed.get(tp, -1)}
        if offsets:
            try:
                self._commit(offsets, asynchronous=False)
            except Exception as e:
                log.warning("final commit failed: %s", e)

    def close(self, autocommit: bool = True, timeout_ms: Optional[int] = None) -> None:
        """Commit returned records (with auto-commit), leave the group, stop following."""
        if self._closed:
            return
        self._closed = True
        try:
            if autocommit:
                self._final_commit()
            else:
                self._auto_commit = False  # also no commit from the revoke callback
            self._consumer.close(autocommit=False, timeout_ms=timeout_ms)
        finally:
            unregister_layouts(*self._registry_key, self._follower)
            self._close_gating()

    def __enter__(self) -> "OrderedKafkaConsumer":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close(autocommit=exc_type is None)
