"""The registering producer: keyed records follow the topic's layout, and a
producer registers in the layout log before it writes under a new layout.

:class:`OrderedProducer` wraps confluent-kafka's ``Producer`` with the same
``produce``/``poll``/``flush``/``len`` interface. The registration logic is
shared with the kafka-python wrapper (:mod:`kafka_ordered.kafka_python`).
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
import uuid
from types import TracebackType
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple, Type

from confluent_kafka import Producer

from ._kafka import OffsetReader
from .config import connection_config, split_config
from .errors import ConfigError, PartitionOverrideError, RegistrationError, SwitchTimeoutError
from .history import LayoutHistory, encode_registration
from .layout import Layout, _as_bytes, transition_sources
from .layout_log import LayoutFollower, LayoutLog

__all__ = ["OrderedProducer", "RegistrationRecord"]

log = logging.getLogger("kafka_ordered.producer")

PRODUCER_OPTIONS = (
    "ordered.layout.topic",
    "ordered.layout.corrupt.policy",
    "ordered.follower.poll.interval.ms",
    "ordered.producer.id",
    "ordered.transition.window.ms",
    "ordered.registration.settle.ms",
    "ordered.switch.timeout.ms",
    "ordered.metadata.timeout.ms",
)

_UNKNOWN: Any = object()


class _TopicState:
    """Per-topic switching state; guarded by the producer's lock."""

    __slots__ = ("layout", "fn", "partitions", "busy", "buffer", "ready")

    def __init__(self) -> None:
        self.layout: Optional[Layout] = None  # the layout sends are partitioned by
        self.fn: Optional[Callable[[Any], int]] = None
        self.partitions = 0
        self.busy = False  # a switch is running
        self.buffer: Deque[Tuple[Optional[bytes], Any]] = collections.deque()
        # Keyed sends may go straight out: registered for the current layout,
        # no switch running, nothing buffered. Changed under the lock only.
        self.ready = False


class RegistrationRecord:
    """What one registration did (kept for tests and observability)."""

    __slots__ = ("topic", "from_epoch", "epoch", "gates", "offset", "pause_s", "phases")

    def __init__(self, topic: str, from_epoch: int, epoch: int, gates: Dict[int, Tuple[int, Dict[int, int]]],
                 offset: Optional[int], pause_s: float, phases: Optional[Dict[str, float]] = None) -> None:
        self.topic = topic
        self.from_epoch = from_epoch
        self.epoch = epoch
        self.gates = gates
        self.offset = offset
        self.pause_s = pause_s
        self.phases = phases or {}

    def __repr__(self) -> str:
        phases = ", ".join(f"{k} {v * 1000:.1f}" for k, v in self.phases.items())
        return (f"RegistrationRecord({self.topic!r}, {self.from_epoch}->{self.epoch}, gates={self.gates}, "
                f"offset={self.offset}, pause={self.pause_s * 1000:.1f} ms [{phases}])")


class _RegisteringProducer:
    """Layout following and registration, independent of the client library.

    Subclasses provide ``_send_now(topic, partition, item)`` (enqueue one
    record in the client with an explicit partition; ``item`` is whatever the
    subclass buffered) and ``_flush_client(timeout) -> int`` (records still in
    flight).
    """

    def _init_registering(self, opts: Mapping[str, Any], conn: Mapping[str, Any]) -> None:
        self._timeout = opts["ordered.metadata.timeout.ms"] / 1000.0
        self._switch_timeout = opts["ordered.switch.timeout.ms"] / 1000.0
        self._window_ms = opts["ordered.transition.window.ms"]
        self._settle_override = opts["ordered.registration.settle.ms"]
        stable = opts["ordered.producer.id"]
        self.producer_id: str = stable or f"anon-{uuid.uuid4().hex}"
        self.stable_id = stable is not None
        self._follower = LayoutFollower(
            conn,
            opts["ordered.layout.topic"],
            poll_interval_ms=opts["ordered.follower.poll.interval.ms"],
            corrupt_policy=opts["ordered.layout.corrupt.policy"],
            timeout=self._timeout,
        ).start()
        self._log = LayoutLog(conn, opts["ordered.layout.topic"], timeout=self._timeout)
        self._offsets = OffsetReader(conn, self._timeout)
        self._log.warm_up()
        self._offsets.warm_up()
        self._states: Dict[str, Optional[_TopicState]] = {}
        self._seen_version = -1
        self._history = self._follower.history
        self._lock = threading.RLock()
        # Guards only the per-record path's check-and-enqueue; taken (inside
        # _lock) wherever a topic stops being ready, so no record computed
        # under the old layout is enqueued after that.
        self._fast = threading.Lock()
        self._fast_acquire, self._fast_release = self._fast.acquire, self._fast.release
        self._idle = threading.Condition(self._lock)
        self.registrations: List[RegistrationRecord] = []
        self._follower.add_listener(self._refresh_states)

    @property
    def history(self) -> LayoutHistory:
        """The layout history this producer follows."""
        return self._follower.history

    def _refresh_states(self) -> None:
        """Track newly managed topics and mark topics whose layout changed."""
        history = self._follower.history
        with self._lock:
            version = history.version
            for t in history.topics():
                st = self._states.get(t)
                if st is None:
                    self._states[t] = _TopicState()
                elif st.ready and self._needs_switch(t, st):
                    with self._fast:
                        st.ready = False
            self._seen_version = version

    def _state(self, topic: str) -> Optional[_TopicState]:
        """The topic's state, or ``None`` when it is not managed."""
        if self._follower.history.version != self._seen_version:
            self._refresh_states()
        try:
            return self._states[topic]
        except KeyError:
            pass
        # First send to this topic: it may have been put under management a
        # moment ago, so read the log to its end before calling it unmanaged.
        self._follower.sync()
        self._refresh_states()
        with self._lock:
            return self._states.setdefault(topic, None)

    def _needs_switch(self, topic: str, st: _TopicState) -> bool:
        cur = self._follower.history.current(topic)
        return st.layout is None or (cur is not None and cur.epoch != st.layout.epoch)

    def _route(self, topic: str, key: Optional[bytes], item: Any) -> Any:
        """Send ``item`` now under the current layout, or buffer it behind a
        switch (running the switch on this thread if none is running)."""
        st = self._state(topic)
        if st is None:
            return self._send_now(topic, None, item)
        with self._lock:
            if st.busy or st.buffer:
                st.buffer.append((key, item))
                return self._buffered(item)
            if key is None:
                count = st.partitions or self._follower.history.current(topic).partitions  # type: ignore[union-attr]
                return self._send_now(topic, random.randrange(count), item)
            if not self._needs_switch(topic, st):
                st.ready = True
                return self._send_now(topic, st.fn(key), item)  # type: ignore[misc]
            st.busy = True
            with self._fast:
                st.ready = False
            st.buffer.append((key, item))
        self._switch(topic, st)
        return self._buffered(item)

    def _buffered(self, item: Any) -> Any:
        """Return value of a send that was buffered (subclasses override)."""
        return None

    def _initial_from_epoch(self, topic: str, target: Layout) -> int:
        history = self._follower.history
        if self.stable_id:
            last = history.last_registration(topic, self.producer_id)
            if last is not None:
                return last.epoch
        recent = history.epochs_changed_since(topic, int(time.time() * 1000) - self._window_ms)
        return min(recent) - 1 if recent else target.epoch

    def _settle_s(self, layout: Layout) -> float:
        ms = layout.settle_ms if self._settle_override is None else max(self._settle_override, layout.settle_ms)
        return ms / 1000.0

    def _switch(self, topic: str, st: _TopicState) -> None:
        """Register for the topic's current layout, then send the buffer under it.

        On failure the buffered records stay buffered, in order, and the next
        send or flush retries; the error is raised to the caller.
        """
        began = time.monotonic()
        deadline = began + self._switch_timeout
        try:
            history = self._follower.history
            target = history.current(topic)
            assert target is not None
            from_epoch = st.layout.epoch if st.layout is not None else self._initial_from_epoch(topic, target)
            spec: Dict[int, Tuple[int, Dict[int, int]]] = {}
            offset: Optional[int] = None
            phases: Dict[str, float] = {}
            mark = began

            def phase(name: str) -> None:
                nonlocal mark
                now = time.monotonic()
                phases[name] = now - mark
                mark = now

            if from_epoch < target.epoch:
                before = [history.layout(topic, e) for e in range(from_epoch, target.epoch)]
                srcs = transition_sources(before, target)
                if srcs:
                    self._flush_all(deadline)
                    phase("flush")
                    # Waits first, then starts, in separate reads: one sweep can
                    # produce two registrations that wait on each other.
                    waits = self._offsets.end_offsets({(topic, q) for qs in srcs.values() for q in qs},
                                                      self._remaining(deadline))
                    phase("waits")
                    starts = self._offsets.end_offsets({(topic, p) for p in srcs}, self._remaining(deadline))
                    phase("starts")
                    spec = {p: (starts[(topic, p)], {q: waits[(topic, q)] for q in sorted(qs)})
                            for p, qs in srcs.items()}
            last = history.last_registration(topic, self.producer_id) if self.stable_id else None
            if spec or (self.stable_id and (last is None or last.epoch != target.epoch)):
                offset = self._log.append(*encode_registration(
                    topic, self.producer_id, self.stable_id, target.epoch, min(from_epoch, target.epoch), spec))
                phase("append")
                if spec:
                    time.sleep(self._settle_s(target))
                    phase("settle")
            self.registrations.append(
                RegistrationRecord(topic, from_epoch, target.epoch, spec, offset, time.monotonic() - began, phases))
            if spec:
                log.info("producer %s registered for %s epoch %d (from %d) with gates on %s",
                         self.producer_id, topic, target.epoch, from_epoch, sorted(spec))
        except BaseException as e:
            with self._lock:
                st.busy = False
                self._idle.notify_all()
            if isinstance(e, RegistrationError):
                raise
            if isinstance(e, Exception):
                raise RegistrationError(
                    f"producer {self.producer_id} could not register for {topic}: {e}. "
                    f"{len(st.buffer)} record(s) stay buffered and are retried by the next send or flush."
                ) from e
            raise
        with self._lock:
            st.layout, st.fn, st.partitions = target, target._fn, target.partitions
            try:
                self._drain(topic, st)
            finally:
                st.busy = False
                st.ready = not self._needs_switch(topic, st)
                self._idle.notify_all()

    def _drain(self, topic: str, st: _TopicState) -> None:
        """Send the buffer in order (lock held; callbacks that send again append to it)."""
        buf = st.buffer
        while buf:
            key, item = buf[0]
            partition = st.fn(key) if key is not None else random.randrange(st.partitions)  # type: ignore[misc]
            self._send_now(topic, partition, item)
            buf.popleft()

    def _remaining(self, deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SwitchTimeoutError(f"layout switch took longer than {self._switch_timeout:.1f} s")
        return left

    def _flush_all(self, deadline: float) -> None:
        while self._flush_client(min(1.0, self._remaining(deadline))) > 0:
            pass

    def _finish_switches(self, timeout: Optional[float]) -> None:
        """Complete pending switches of topics with buffered records (flush/close)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for topic, st in list(self._states.items()):
            if st is None:
                continue
            with self._lock:
                while st.busy:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return
                    self._idle.wait(left)
                if not st.buffer:
                    continue
                if not self._needs_switch(topic, st):
                    self._drain(topic, st)
                    st.ready = True
                    continue
                st.busy = True
            self._switch(topic, st)

    def _buffered_count(self) -> int:
        return sum(len(st.buffer) for st in self._states.values() if st is not None)

    def _close_registering(self) -> None:
        self._follower.close()
        self._offsets.close()
        self._log.close()

    # subclass hooks
    def _send_now(self, topic: str, partition: Optional[int], item: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _flush_client(self, timeout: float) -> int:  # pragma: no cover
        raise NotImplementedError


def _forced(conf: Dict[str, Any], key: str, value: Any, ok: Tuple[Any, ...]) -> None:
    if key in conf and conf[key] not in ok:
        raise ConfigError(
            f"{key}={conf[key]!r} is not allowed for an ordered producer: ordering across layout "
            f"changes needs {key}={value!r}"
        )
    conf[key] = value


class OrderedProducer(_RegisteringProducer):
    """confluent-kafka ``Producer`` that keeps per-key order across layout changes.

    ``config`` is the usual librdkafka dict plus ``ordered.*`` keys
    (``ordered.producer.id`` for a stable id, ``ordered.layout.topic``, ...).
    ``acks=all`` and ``enable.idempotence=true`` are forced (other explicit
    values raise :class:`ConfigError`).

    Keyed records to a managed topic are partitioned by its current layout.
    At the first keyed send and at every layout change the producer flushes,
    registers in the layout log and pauses briefly (``settle_ms``) before
    sending under the new layout; sends made meanwhile (from other threads
    or delivery callbacks) are buffered in order and counted by ``len()``.
    Unmanaged topics pass straight through. An explicit ``partition=`` on a
    keyed record of a managed topic raises :class:`PartitionOverrideError`.
    Registration failures raise :class:`RegistrationError`; the records stay
    buffered and are retried by the next send or ``flush()``.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        opts, conf = split_config(config, PRODUCER_OPTIONS, "OrderedProducer")
        _forced(conf, "acks", "all", ("all", -1, "-1"))
        _forced(conf, "enable.idempotence", True, (True, "true"))
        self._init_registering(opts, connection_config(conf))
        self._producer = Producer(conf)
        self._raw_produce = self._producer.produce

    @property
    def producer(self) -> Producer:
        """The wrapped confluent-kafka ``Producer`` (do not produce to managed topics through it)."""
        return self._producer

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: Optional[Callable[..., None]] = None, timestamp: int = 0,
                headers: Any = None, *, callback: Optional[Callable[..., None]] = None) -> None:
        """Same as ``confluent_kafka.Producer.produce``; see the class docstring."""
        st = self._states.get(topic)
        if st is not None and st.ready and key.__class__ is bytes and partition == -1 and not timestamp \
                and headers is None:
            # The per-record path: registered, current, nothing buffered. Keyword
            # arguments cost the C call a microsecond, so none are passed here.
            cb = on_delivery or callback
            self._fast_acquire()  # cheaper than ``with`` (about half, measured)
            try:
                if st.ready:
                    if cb is None:
                        self._raw_produce(topic, value, key, st.fn(key))  # type: ignore[misc]
                    else:
                        self._raw_produce(topic, value, key, st.fn(key), cb)  # type: ignore[misc]
                    return
            finally:
                self._fast_release()
        self._produce_slow(topic, value, key, partition, on_delivery or callback, timestamp, headers)

    def _produce_slow(self, topic: str, value: Any, key: Any, partition: Optional[int],
                      cb: Optional[Callable[..., None]], timestamp: int, headers: Any) -> None:
        if self._history.version != self._seen_version:
            self._refresh_states()
        st = self._states.get(topic, _UNKNOWN)
        if st is _UNKNOWN:
            st = self._state(topic)
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
        self._route(topic, kb, (value, key, cb, timestamp, headers))

    def _send_now(self, topic: str, partition: Optional[int], item: Any) -> None:
        value, key, cb, timestamp, headers = item
        p = -1 if partition is None else partition
        while True:
            try:
                self._raw_produce(topic, value, key, p, cb, timestamp=timestamp, headers=headers)
                return
            except BufferError:
                self._producer.poll(0.05)

    def _flush_client(self, timeout: float) -> int:
        return self._producer.flush(timeout)

    def poll(self, timeout: float = -1) -> int:
        return self._producer.poll(timeout)

    def flush(self, timeout: float = -1) -> int:
        """Complete pending layout switches, then flush; returns the number of
        records still queued or buffered."""
        t = None if timeout is None or timeout < 0 else timeout
        began = time.monotonic()
        self._finish_switches(t)
        left = -1 if t is None else max(0.0, t - (time.monotonic() - began))
        return self._producer.flush(left) + self._buffered_count()

    def __len__(self) -> int:
        return len(self._producer) + self._buffered_count()

    def __getattr__(self, name: str) -> Any:
        # Everything else (list_topics, transactions, purge, ...) is the client's own.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._producer, name)

    def close(self, timeout: float = 30.0) -> int:
        """Flush (completing switches) and stop following the layout log;
        returns the records that could not be delivered in time."""
        try:
            return self.flush(timeout)
        finally:
            self._close_registering()

    def __enter__(self) -> "OrderedProducer":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()
