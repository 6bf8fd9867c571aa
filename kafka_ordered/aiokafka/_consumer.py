"""``OrderedAIOKafkaConsumer``: aiokafka's ``AIOKafkaConsumer`` over the gating core."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from types import TracebackType
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Type, TypeVar

from aiokafka import AIOKafkaConsumer
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import ConsumerStoppedError, KafkaError, NoOffsetForPartitionError
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition

from .. import _log
from .._fastpath import admits_runs, calm_rest, calm_wait
from .._gating import GatingCore, GatingOptions, PollCycle
from .._grouped import needs_catch_up, released_in_hand, serialized_bytes, take
from .._ports import TP, Later, Pending
from ..config import (
    CONSUMER_OPTIONS, KAFKA_PYTHON_OPTIONS, dotted, kafka_python_connection_config, metrics_client_id, split_config,
    truthy,
)
from ..errors import ConfigError, translate
from ..gates import GateStatus, reset_policy
from ..history import LayoutHistory
from ..listener import PartitionKeyRebalanceListener
from ..metrics import ConsumerMetrics
from ._bridge import LoopBridge

__all__ = ["OrderedAIOKafkaConsumer"]

log = logging.getLogger("kafka_ordered.consumer")

_FETCH_SLICE_MS = 1000  # getone() waits for a record in slices this long

T = TypeVar("T")


def _replace_headers(record: ConsumerRecord, headers: List[Tuple[str, bytes]]) -> ConsumerRecord:
    """``record`` with ``headers`` as aiokafka shows them (a tuple), set in
    place: aiokafka made it for this fetch alone, and ``dataclasses.replace``
    would cost ~2 µs a record (a replay of history is full of stamped
    records)."""
    record.headers = tuple(headers)
    return record


def _decide(core: GatingCore, raw: Dict[TopicPartition, List[ConsumerRecord]],
            out: Dict[TopicPartition, List[ConsumerRecord]], firsts: Dict[TP, int],
            limit: Optional[int] = None, among: Optional[Set[TP]] = None
            ) -> Dict[TopicPartition, List[ConsumerRecord]]:
    """:func:`~kafka_ordered._grouped.take` on the worker, after noting in
    ``firsts`` the first offset of every partition it may deliver from hand
    (the fetched ones were noted on the loop, :func:`_note_fetched`): a
    caller cancelled meanwhile never sees the result, and
    :meth:`OrderedAIOKafkaConsumer._unharmed` rewinds there."""
    for key, kept in core.kept.items():
        if kept:
            firsts[key] = min(firsts.get(key, kept[0].offset), kept[0].offset)
    return take(core, raw, out, _replace_headers, limit, among)


def _note_fetched(firsts: Dict[TP, int], raw: Dict[TopicPartition, List[ConsumerRecord]]) -> None:
    """Note in ``firsts`` the first offset of every partition of a fetch, on
    the loop before the fetch goes to the worker: a call cancelled while its
    job still waits for the worker cancels the job, which then never runs,
    and the fetched records must still be fetched again."""
    for tp, recs in raw.items():
        if recs:
            key = (tp.topic, tp.partition)
            firsts[key] = min(firsts.get(key, recs[0].offset), recs[0].offset)


def _from_hand(cycle: PollCycle, out: Dict[TopicPartition, List[ConsumerRecord]], firsts: Dict[TP, int],
               limit: Optional[int], among: Optional[Set[TP]]) -> Tuple[Dict[TopicPartition, List[ConsumerRecord]], bool]:
    """Records in hand of released partitions (of ``among``) decided first,
    without waiting for the client (:func:`~kafka_ordered._grouped.released_in_hand`),
    and whether that ends the cycle."""
    core = cycle.core
    if released_in_hand(core, among):
        out = _decide(core, {}, out, firsts, limit, among)
        if out:
            cycle.done(True)
            return out, True
    return out, False


def _begun(core: GatingCore, timeout: float, out: Dict[TopicPartition, List[ConsumerRecord]],
           firsts: Dict[TP, int], limit: Optional[int], among: Optional[Set[TP]]
           ) -> Tuple[PollCycle, Dict[TopicPartition, List[ConsumerRecord]], bool]:
    """The start of a poll cycle on the worker (:meth:`GatingCore.poll_cycle`)
    and :func:`_from_hand`, in one hop."""
    cycle = core.poll_cycle(timeout)
    return (cycle, *_from_hand(cycle, out, firsts, limit, among))


def _decided(cycle: PollCycle, raw: Dict[TopicPartition, List[ConsumerRecord]],
             out: Dict[TopicPartition, List[ConsumerRecord]], firsts: Dict[TP, int],
             limit: Optional[int], among: Optional[Set[TP]]) -> Tuple[Dict[TopicPartition, List[ConsumerRecord]], bool]:
    """One fetch of a poll cycle decided on the worker (:func:`_decide`),
    whether the cycle is over (:meth:`PollCycle.done`), and if not, what
    :func:`_from_hand` gives before the next fetch, in one hop."""
    if raw:
        out = _decide(cycle.core, raw, out, firsts)
    if cycle.done(bool(out)):
        return out, True
    return _from_hand(cycle, out, firsts, limit, among)


def _rewind_noted(core: GatingCore, firsts: Dict[TP, int]) -> None:
    """On the worker: rewind what :func:`_decide` noted (nothing: no rewind)."""
    if firsts:
        core.rewind(firsts)


def _commits(res: Mapping[TopicPartition, Any]) -> Dict[TP, int]:
    """The coordinator's answer of committed offsets as the core's: partitions
    without a commit are left out."""
    return {(tp.topic, tp.partition): om.offset for tp, om in res.items() if om is not None and om.offset >= 0}


def _revoke_owned(core: GatingCore) -> None:
    """Forget every partition ``core`` owns (an assignment replaced them)."""
    core.revoked(sorted(core.owned))


class _ConsumerPort:
    """:class:`~kafka_ordered._ports.ConsumerPort` over an ``AIOKafkaConsumer``
    (called on the bridge's worker; each client call runs on the loop)."""

    def __init__(self, consumer: AIOKafkaConsumer, bridge: LoopBridge, timeout: float) -> None:
        self.consumer = consumer
        self.bridge = bridge
        self.timeout = timeout
        #: Positions read on the loop right before a hop to the worker
        #: (:meth:`snapshot`), served by :meth:`positions` until this port
        #: pauses, resumes or seeks: no round trip back to the loop for them.
        self._seen: Optional[Dict[TP, int]] = None

    def partitions(self, tps: List[TP]) -> List[TopicPartition]:
        return [TopicPartition(t, p) for t, p in tps]

    def pause(self, tps: List[TP]) -> None:
        self._seen = None
        self.bridge.call(self._assigned_only, self.consumer.pause, tps)

    def resume(self, tps: List[TP]) -> None:
        self._seen = None
        self.bridge.call(self._assigned_only, self.consumer.resume, tps)

    def _assigned_only(self, fn: Any, tps: List[TP]) -> None:
        assigned = self.consumer._subscription.assigned_partitions()
        fn(*[tp for tp in self.partitions(tps) if tp in assigned])

    def seek(self, tp: TP, offset: int) -> None:
        self._seen = None
        self.bridge.call(self.consumer.seek, TopicPartition(*tp), offset)

    def positions(self, tps: List[TP]) -> Dict[TP, int]:
        seen = self._seen
        if seen is not None:
            return {tp: seen[tp] for tp in tps if tp in seen}
        return self.bridge.call(self._positions, tps)

    def snapshot(self) -> None:
        """On the loop, before a hop to the worker: read the positions of
        every assigned partition now, for :meth:`positions` to serve during
        the hop (they move only by this consumer's fetches and seeks, which
        wait for the hop, and by its own pauses, resumes and seeks, which
        drop the snapshot). :meth:`forget` ends it."""
        self._seen = self._positions(None)

    def forget(self) -> None:
        """After the hop: positions are read on the loop again."""
        self._seen = None

    def _positions(self, tps: Optional[List[TP]]) -> Dict[TP, int]:
        """Positions of ``tps`` (``None``: every assigned partition), on the loop."""
        sub = self.consumer._subscription.subscription
        assignment = sub.assignment if sub is not None else None
        out: Dict[TP, int] = {}
        if assignment is None:
            return out
        assigned = assignment.tps
        for part in (assigned if tps is None else [TopicPartition(*tp) for tp in tps]):
            if part in assigned:
                state = assignment.state_value(part)
                if state.has_valid_position:
                    out[(part.topic, part.partition)] = state.position
        return out

    def learn_partitions(self, topic: str) -> None:
        self.bridge.call(self.consumer._client.force_metadata_update)

    def committed_later(self, tps: List[TP], timeout: float) -> Pending[Dict[TP, int]]:
        # aiokafka's own coordinator reads them (on the loop): no client of
        # their own for the group, as the librdkafka adapters need.
        return Later(self.bridge.spawn(self.read_commits, tps, timeout))

    async def read_commits(self, tps: List[TP], timeout: Optional[float]) -> Dict[TP, int]:
        """The group's commits of ``tps`` (partitions without one left out),
        read on the loop by aiokafka's coordinator within ``timeout``
        seconds (``None``: its own retries decide); raises a
        :class:`~kafka_ordered.errors.KafkaOrderedError`."""
        try:
            return _commits(await asyncio.wait_for(
                self.consumer._coordinator.fetch_committed_offsets(self.partitions(tps)), timeout))
        except (KafkaError, asyncio.TimeoutError, TimeoutError) as e:
            raise translate(e, "reading committed offsets") from e

    def commit(self, offsets: Dict[TP, int], asynchronous: bool) -> Any:
        if asynchronous:
            fut = self.bridge.spawn(self._commit, offsets)
            fut.add_done_callback(_log_failed_commit)
            return fut
        return self.bridge.wait(self._commit, offsets, timeout=self.timeout)

    async def _commit(self, offsets: Dict[TP, int]) -> None:
        # Through the coordinator: a commit past a gate also carries the
        # source offsets it waited on, which may belong to partitions this
        # member no longer owns (AIOKafkaConsumer.commit refuses those).
        sub = self.consumer._subscription.subscription
        assignment = sub.assignment if sub is not None else None
        await self.consumer._coordinator.commit_offsets(
            assignment, {TopicPartition(t, p): OffsetAndMetadata(off, "") for (t, p), off in sorted(offsets.items())})


def _log_failed_commit(fut: Any) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.warning("commit failed: %s", fut.exception())


class _AwaitedKeyListener(PartitionKeyRebalanceListener):
    """The application's key listener as the core calls it (on the worker):
    a callback that returns an awaitable is awaited on the loop."""

    def __init__(self, user: PartitionKeyRebalanceListener, bridge: LoopBridge) -> None:
        self.user = user
        self.bridge = bridge

    def _done(self, result: Any) -> None:
        if inspect.isawaitable(result):
            self.bridge.wait(lambda: result)

    def on_partition_key_maybe_revoked(self, partitions: List[Any]) -> None:
        self._done(self.user.on_partition_key_maybe_revoked(partitions))

    def on_partition_key_assigned(self, partitions: List[Any]) -> None:
        self._done(self.user.on_partition_key_assigned(partitions))


async def _call_listener(listener: Any, name: str, partitions: Any) -> None:
    if listener is None:
        return
    result = getattr(listener, name)(partitions)
    if inspect.isawaitable(result):
        await result


class _Rebalance(ConsumerRebalanceListener):
    """Runs on the loop inside aiokafka's rebalance: our bookkeeping around
    the application's own listener."""

    def __init__(self, owner: "OrderedAIOKafkaConsumer", user: Optional[ConsumerRebalanceListener]) -> None:
        self.owner = owner
        self.user = user

    async def on_partitions_revoked(self, revoked: Any) -> None:
        try:
            await _call_listener(self.user, "on_partitions_revoked", revoked)
        finally:
            await self.owner._on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.owner._on_assigned(assigned)
        await _call_listener(self.user, "on_partitions_assigned", assigned)


class OrderedAIOKafkaConsumer:
    """``aiokafka.AIOKafkaConsumer`` that delivers keyed records in order
    across layout changes of managed topics.

    Construct it inside a running event loop, as ``AIOKafkaConsumer``, with
    aiokafka's keyword configs (``group_id`` required) plus ``ordered.*``
    options (``ordered_x_y=`` also works). ``await start()`` connects to the
    layout log too. The wrapper owns offset storage: the inner consumer's
    auto-commit is off, and with ``enable_auto_commit=True`` (the default)
    the wrapper commits the positions of records returned by earlier
    ``getmany``/``getone`` calls every ``auto_commit_interval_ms``, and
    promptly when another member's gate waits on a partition it owns.
    Records held at a gate are never committed.

    ``subscribe(..., key_listener=PartitionKeyRebalanceListener)`` for per-key
    state hand-off; its callbacks may be coroutines (they are awaited).
    ``listener`` stays aiokafka's ``ConsumerRebalanceListener``. aiokafka
    forgets pauses at every rebalance: the wrapper applies the application's
    own pauses again, and its holds at gates are re-decided from the gates.

    The protocol's blocking work (layout-log catch-ups, offset reads) runs
    on one worker thread per consumer, never on the event loop; a poll's
    start and the decision of a fetch that need none run on the loop.
    """

    def __init__(self, *topics: str, **configs: Any) -> None:
        opts, conf = split_config(dotted(configs), CONSUMER_OPTIONS + KAFKA_PYTHON_OPTIONS, "OrderedAIOKafkaConsumer")
        if not conf.get("group_id"):
            raise ConfigError("OrderedAIOKafkaConsumer needs group_id: gates are evaluated per consumer group")
        auto_commit = truthy(conf.pop("enable_auto_commit", True))
        interval = int(conf.pop("auto_commit_interval_ms", 5000)) / 1000.0
        conf["enable_auto_commit"] = False
        self._conn = kafka_python_connection_config(conf, opts["ordered.librdkafka.config"])
        self._opts = opts
        self._group_id = str(conf["group_id"])
        self._client_id = metrics_client_id({"client.id": conf.get("client_id")}, "consumer", self._group_id)
        self._options = GatingOptions(opts, auto_commit, interval,
                                      reset_policy(conf.get("auto_offset_reset", "latest")))
        self._bridge = LoopBridge("kafka-ordered-aiokafka-consumer")
        self._consumer = AIOKafkaConsumer(**conf)
        self._shared: Optional[_log.Shared] = None
        self._core_: Optional[GatingCore] = None
        self._port = _ConsumerPort(self._consumer, self._bridge, self._options.timeout)
        self._closed = False
        #: A read that started an assignment failed for good: raised out of
        #: the next getmany (aiokafka only logs a listener's error).
        self._start_error: Optional[BaseException] = None
        self._key_listener: Optional[PartitionKeyRebalanceListener] = None
        self._subscribed: Set[str] = set()
        #: Partitions :meth:`assign` gave the client, not started yet (paused
        #: in the client), each with the offset the application sought it to
        #: since (``None``: not sought); see :meth:`_start_assigned`.
        self._unstarted: Dict[TP, Optional[int]] = {}
        #: :meth:`assign` replaced the assignment: what the core owns goes first.
        self._revoke_all = False
        #: Counts assignments: a start of an earlier one gives up.
        self._generation = 0
        #: The start running now (one at a time; callers wait on it shielded).
        self._starting: Optional["asyncio.Future[None]"] = None
        if topics:
            self.subscribe(list(topics))

    @property
    def _core(self) -> GatingCore:
        if self._core_ is None:
            raise ConsumerStoppedError() if self._closed else ConfigError(
                "OrderedAIOKafkaConsumer is not started: await start() first")
        return self._core_

    # -- life cycle

    async def start(self) -> None:
        """Connect to the layout log (catching up with it, on the worker
        thread), then ``AIOKafkaConsumer.start``. Raises what either raises
        (:class:`~kafka_ordered.errors.BrokerUnavailableError` when the
        layout log cannot be read within ``ordered.metadata.timeout.ms``);
        nothing started is left running then."""
        self._bridge.bind()
        try:
            shared = await self._bridge.acquire(self._conn, self._opts)
        except BaseException:
            self._bridge.close()
            raise
        self._shared = shared
        core = GatingCore(self._port, shared.follower, shared.offsets, self._options)
        # Holds in hand: a split replay is not paused and sought back at
        # every gate (aiokafka drops what it prefetched of a paused partition).
        core.keep_in_hand = True
        core.kept_bytes = serialized_bytes
        self._core_ = core
        self._apply_listener()
        core.subscribed = set(self._subscribed)
        try:
            await self._consumer.start()
        except BaseException:
            await self._release()
            raise

    async def stop(self) -> None:
        """Commit returned records (with auto-commit), ``AIOKafkaConsumer.stop``
        (leaves the group), release the layout-log resources."""
        if self._closed:
            return
        self._closed = True
        if self._starting is not None:
            self._starting.cancel()
        try:
            if self._core_ is not None and self._options.auto_commit:
                offsets = await self._bridge.run(self._core_.uncommitted)
                if offsets:
                    try:
                        await self._bridge.run(self._core_.commit, offsets, False)
                    except Exception as e:
                        log.warning("final commit failed: %s", e)
                self._options.auto_commit = False  # also no commit from the revoke callback
            await self._consumer.stop()
        finally:
            await self._release()

    async def _release(self) -> None:
        core, shared = self._core_, self._shared
        self._core_ = self._shared = None
        await self._bridge.release(core, shared)

    async def __aenter__(self) -> "OrderedAIOKafkaConsumer":
        await self.start()
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.stop()

    @property
    def consumer(self) -> AIOKafkaConsumer:
        """The wrapped ``AIOKafkaConsumer``."""
        return self._consumer

    @property
    def history(self) -> LayoutHistory:
        """The layout history this consumer follows (shared by the process's
        clients of the same cluster and layout log)."""
        return self._core.history

    @property
    def stall_seconds(self) -> Dict[TP, float]:
        """Total time each partition waited at gates that since opened."""
        return self._core.stall_seconds

    def ordered_metrics(self) -> ConsumerMetrics:
        """A snapshot of this member's gates, held records, gate waits and
        layout-log view (see :class:`kafka_ordered.metrics.ConsumerMetrics`)."""
        return self._core.metrics(self._group_id, self._client_id)

    def gate_status(self) -> List[GateStatus]:
        """Every partition with a closed gate (see :meth:`OrderedConsumer.gate_status`)."""
        return self._core.gate_status()

    # -- rebalance (on the loop, inside aiokafka's rebalance)

    async def _on_assigned(self, assigned: Any) -> None:
        parts = sorted(assigned)
        if not parts:
            return
        keys = [(tp.topic, tp.partition) for tp in parts]
        try:
            # aiokafka's coordinator tries a retriable failure again itself.
            committed = await self._port.read_commits(keys, None)
            starts = await self._bridge.run(self._core.assigned, keys, committed)
        except BaseException as e:
            # aiokafka logs the listener's error and fetches them ungated.
            await self._bridge.run(self._core.start_failed, keys)
            if isinstance(e, Exception):  # (not a cancellation)
                self._start_error = e
            raise
        for tp, key in zip(parts, keys):
            off = starts.get(key)
            if off is not None:
                self._consumer.seek(tp, off)
        await self._bridge.run(self._core.unpause_assigned, keys)

    async def _on_revoked(self, revoked: Any) -> None:
        core = self._core_
        if core is None:
            return
        tps = [(tp.topic, tp.partition) for tp in revoked]
        if self._options.auto_commit:
            offsets = await self._bridge.run(core.uncommitted, tps)
            if offsets:
                try:  # lands before this member rejoins
                    await self._bridge.run(core.commit, offsets, False)
                except Exception as e:
                    log.warning("commit on revoke failed: %s", e)
        await self._bridge.run(core.revoked, tps)

    # -- subscription

    def subscribe(self, topics: Sequence[str] = (), pattern: Optional[str] = None,
                  listener: Optional[ConsumerRebalanceListener] = None, *,
                  key_listener: Optional[PartitionKeyRebalanceListener] = None) -> None:
        """``AIOKafkaConsumer.subscribe`` plus ``key_listener`` for per-key state hand-off."""
        if key_listener is not None and not isinstance(key_listener, PartitionKeyRebalanceListener):
            raise TypeError("key_listener must be a PartitionKeyRebalanceListener")
        if listener is not None and not isinstance(listener, ConsumerRebalanceListener):
            raise TypeError("listener must be a ConsumerRebalanceListener")
        self._consumer.subscribe(topics=topics, pattern=pattern, listener=_Rebalance(self, listener))
        self._key_listener = key_listener
        self._subscribed = set(topics or ())
        if self._core_ is not None:
            self._apply_listener()
            self._core_.subscribed = set(self._subscribed)

    def _apply_listener(self) -> None:
        user = self._key_listener
        self._core.listener = None if user is None else _AwaitedKeyListener(user, self._bridge)

    def unsubscribe(self) -> None:
        """``AIOKafkaConsumer.unsubscribe``; the gate state of every owned
        partition goes (commit first with :meth:`commit` to keep progress)."""
        self._core.revoked(list(self._core.owned))
        self._unstarted = {}
        self._revoke_all = False
        self._generation += 1
        self._consumer.unsubscribe()
        self._subscribed = set()
        self._core.subscribed = set()

    def subscription(self) -> Set[str]:
        """``AIOKafkaConsumer.subscription``; plain delegation."""
        return self._consumer.subscription()

    def assign(self, partitions: List[TopicPartition], *,
               key_listener: Optional[PartitionKeyRebalanceListener] = None) -> None:
        """``AIOKafkaConsumer.assign``: manual assignment (no group
        rebalancing), replacing the previous one as aiokafka's does: every
        partition starts anew (progress not committed is fetched again; the
        application's own pauses are kept, see :meth:`pause`); gates still
        apply. ``key_listener`` as for :meth:`subscribe`.

        Where each partition starts is decided by the next :meth:`getmany`
        (which waits for that at most its ``timeout_ms``; the start goes on
        meanwhile), :meth:`getone`, :meth:`position` or ``seek_to_*``: the
        offset a :meth:`seek` chose since, else the group's committed
        offset, else the layout-aware start
        (:func:`kafka_ordered.gates.start_position`), else aiokafka's
        ``auto_offset_reset``. Until then the client keeps the partitions
        paused, so nothing of them is fetched before that decision; an
        application that seeks every partition right away starts without
        reading the group's commits first, as with aiokafka. Raises
        :class:`~kafka_ordered.errors.ConfigError` before :meth:`start`,
        and what aiokafka's ``assign`` raises (then nothing changed)."""
        _ = self._core  # (before start(): ConfigError)
        if key_listener is not None and not isinstance(key_listener, PartitionKeyRebalanceListener):
            raise TypeError("key_listener must be a PartitionKeyRebalanceListener")
        self._consumer.assign(list(partitions))
        if key_listener is not None:
            self._key_listener = key_listener
            self._apply_listener()
        self._consumer.pause(*partitions)
        for tp in partitions:
            # A position, never fetched while paused: without one the client's
            # fetcher resolves its own (a read of the commits, a retry
            # backoff), fetching nothing from that leader meanwhile.
            self._consumer.seek(tp, 0)
        self._generation += 1
        self._revoke_all = True
        self._unstarted = dict.fromkeys(sorted({(tp.topic, tp.partition) for tp in partitions}))

    async def _started(self, timeout: Optional[float] = None) -> None:
        """Start what :meth:`assign` gave, waiting at most ``timeout``
        seconds (``None``: until it is done); the start goes on meanwhile,
        also when the caller is cancelled. One start runs at a time, and an
        assignment made during one is started after it. A start that fails
        leaves its error for :meth:`_raise_start_error`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._unstarted or self._revoke_all:
            task = self._starting
            if task is None:
                task = self._starting = asyncio.ensure_future(self._start_assigned())
                task.add_done_callback(self._start_done)
            left = None if deadline is None else deadline - time.monotonic()
            try:
                await asyncio.wait_for(asyncio.shield(task), left)
            except (asyncio.TimeoutError, TimeoutError):
                return
            except asyncio.CancelledError:
                if task.cancelled() and self._closed:  # stop() ended the start
                    raise ConsumerStoppedError() from None
                raise
            except Exception:
                return  # kept by _start_done

    def _start_done(self, task: "asyncio.Future[None]") -> None:
        if self._starting is task:
            self._starting = None
        if not task.cancelled() and task.exception() is not None:
            self._start_error = task.exception()

    async def _assignment_started(self) -> None:
        """Before a call that needs the partitions :meth:`assign` gave
        started: start them and wait; raise, once, what a failed start raised."""
        if self._unstarted or self._revoke_all:
            await self._started()
            self._raise_start_error()

    def _raise_start_error(self) -> None:
        """Raise, once, the error of a start that failed."""
        if self._start_error is not None:
            error, self._start_error = self._start_error, None
            raise error

    async def _start_assigned(self) -> None:
        """One start of what :meth:`assign` gave (see there): the core drops
        what it owned, then the partitions the application sought start at
        their offsets (:meth:`GatingCore.assigned_at`) and are resumed
        (except those the application paused), then the others where
        :meth:`GatingCore.assigned` resolves them from the group's commits
        (those it leaves to the client: aiokafka's ``auto_offset_reset``).
        Every core call runs on the worker unless it is idle. Seeks the
        application makes meanwhile win. Raises a
        :class:`~kafka_ordered.errors.KafkaOrderedError` when the commits
        cannot be read, and aiokafka's ``NoOffsetForPartitionError`` where
        its reset policy is ``none``: those partitions then stay paused and
        unstarted, and the next call starts them again. An assignment made
        meanwhile ends it (what it started goes from the core again)."""
        gen = self._generation
        core = self._core
        if self._revoke_all:
            self._revoke_all = False
            await self._step(self._bridge.idle(), _revoke_owned, core)
        unstarted = self._unstarted
        sought = {tp: off for tp, off in unstarted.items() if off is not None}
        if sought:
            await self._step(self._bridge.idle(), core.assigned_at, sought)
            if gen != self._generation:
                await self._bridge.run(core.revoked, list(sought))
                return
            for tp, off in sought.items():
                now = unstarted.pop(tp)
                if now != off:  # sought again meanwhile
                    await self._step(self._bridge.idle(), core.seeked, tp, now)
            await self._step(self._bridge.idle(), core.unpause_assigned, list(sought))
        rest = [tp for tp, off in unstarted.items() if off is None]
        if not rest:
            return
        committed = await self._port.read_commits(rest, self._options.timeout)
        if gen != self._generation:
            return
        starts = await self._bridge.run(core.assigned, rest, committed)
        late: Dict[TP, int] = {}
        try:
            if gen == self._generation:
                late = {tp: at for tp in rest if (at := unstarted.get(tp)) is not None}
                for key, off in starts.items():
                    if key not in late:
                        self._consumer.seek(TopicPartition(*key), off)
                await self._client_reset([tp for tp in rest if tp not in starts and tp not in late])
        except BaseException:
            await asyncio.shield(self._bridge.run(core.revoked, rest))
            raise
        if gen != self._generation:
            await self._bridge.run(core.revoked, rest)
            return
        for tp, off in late.items():
            await self._step(self._bridge.idle(), core.seeked, tp, off)
        for tp in rest:
            del unstarted[tp]
        await self._step(self._bridge.idle(), core.unpause_assigned, rest)

    async def _client_reset(self, keys: List[TP]) -> None:
        """aiokafka's own ``auto_offset_reset`` for ``keys`` (no commit, no
        layout-aware start), as its fetcher applies it: ``none`` raises its
        ``NoOffsetForPartitionError``."""
        if not keys:
            return
        parts = self._port.partitions(keys)
        policy = self._options.reset
        if policy == "earliest":
            await self._consumer.seek_to_beginning(*parts)
        elif policy == "latest":
            await self._consumer.seek_to_end(*parts)
        else:
            raise NoOffsetForPartitionError(parts[0])

    def assignment(self) -> Set[TopicPartition]:
        """``AIOKafkaConsumer.assignment``: every assigned partition, including
        those held at a gate."""
        return self._consumer.assignment()

    # -- consuming

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: Optional[int] = None) -> Dict[TopicPartition, List[ConsumerRecord]]:
        """``AIOKafkaConsumer.getmany``: deliverable records by partition ({}
        while partitions wait at gates). Raises, once, the error of a read
        of the group's commits that failed for good when partitions were
        assigned (a :class:`~kafka_ordered.errors.KafkaOrderedError`); those
        partitions stay paused, never fetched ungated, until the next
        rebalance. Starts the partitions :meth:`assign` gave first, waiting
        for that at most ``timeout_ms`` (see there); a start that failed is
        raised once, and its partitions stay paused until the next one."""
        if self._closed:
            raise ConsumerStoppedError()
        if timeout_ms < 0:
            raise ValueError("timeout_ms must not be negative")
        if self._unstarted or self._revoke_all:
            await self._started(timeout_ms / 1000.0)
        self._raise_start_error()
        core = self._core
        calm = core.calm
        if calm.quiet:
            # Nothing to gate: the client's own fetch, its records untouched
            # until the calm's deadline (see kafka_ordered._fastpath.fast_fetch).
            began = time.monotonic()
            given = timeout_ms / 1000.0
            wait = calm_wait(calm, given, began)
            if wait is not None:
                raw = await self._consumer.getmany(*partitions, timeout_ms=int(wait * 1000), max_records=max_records)
                if raw:
                    if calm.quiet and time.monotonic() < calm.until and admits_runs(calm, raw, _replace_headers):
                        return raw
                    return await self._unharmed(self._decide_late(raw), {
                        (tp.topic, tp.partition): recs[0].offset for tp, recs in raw.items() if recs})
                rest = calm_rest(given, wait, began, time.monotonic())
                if rest is None:
                    if calm.quiet and time.monotonic() < calm.until:
                        return raw
                    return await self._decide_late(raw)
                # Nothing came before the calm's end (held partitions' gates
                # are looked at again then): the rest of the wait on the full path.
                timeout_ms = math.ceil(rest * 1000)
        firsts: Dict[TP, int] = {}
        return await self._unharmed(self._cycle(partitions, timeout_ms, max_records, firsts), firsts)

    async def _unharmed(self, cycle: Awaitable[Dict[TopicPartition, List[ConsumerRecord]]],
                        firsts: Dict[TP, int]) -> Dict[TopicPartition, List[ConsumerRecord]]:
        """``cycle``'s result; when the caller is cancelled (``wait_for``,
        a task's cancel) after records were fetched, they are fetched again
        by the next call, never lost (``firsts``: the first fetched or
        in-hand offset of each partition, as the cycle fills it on the
        worker; read there too, after a decision still running, whose
        result nobody receives)."""
        try:
            return await cycle
        except asyncio.CancelledError:
            await self._bridge.run(_rewind_noted, self._core, firsts)
            raise

    def _on_loop(self, raw: Optional[Dict[TopicPartition, List[ConsumerRecord]]] = None) -> bool:
        """Whether the next core step (a poll's start, or the decision of
        the fetch ``raw``) may run on the loop itself: the worker runs
        nothing, and the step makes no blocking call (no catch-up owed or
        asked for by ``raw``, no key listener). A hop to the worker and back
        costs more than deciding most fetches."""
        core = self._core
        return (self._bridge.idle() and not core.poll_may_block()
                and (not raw or not needs_catch_up(core, raw)))

    async def _step(self, on_loop: bool, fn: Callable[..., T], *args: Any, snapshot: bool = False) -> T:
        """``fn(*args)`` on the loop when ``on_loop`` (see :meth:`_on_loop`),
        else on the worker; ``snapshot``: a hop reads the positions first
        (see :meth:`_ConsumerPort.snapshot`)."""
        if on_loop:
            return fn(*args)
        if not snapshot:
            return await self._bridge.run(fn, *args)
        port = self._port
        port.snapshot()
        try:
            return await self._bridge.run(fn, *args)
        finally:
            port.forget()

    async def _decide_late(self, raw: Dict[TopicPartition, List[ConsumerRecord]]
                           ) -> Dict[TopicPartition, List[ConsumerRecord]]:
        core = self._core
        if not raw:
            await self._step(self._on_loop(), core.idle)
            return raw
        core.fetched_late()
        return await self._step(self._on_loop(raw), take, core, raw, {}, _replace_headers)

    async def _cycle(self, partitions: Sequence[TopicPartition], timeout_ms: int, max_records: Optional[int],
                     firsts: Dict[TP, int]) -> Dict[TopicPartition, List[ConsumerRecord]]:
        among = {(tp.topic, tp.partition) for tp in partitions} if partitions else None
        # One step starts the cycle, one per fetch decides it; each also
        # decides the records in hand of released partitions.
        cycle, out, done = await self._step(self._on_loop(), _begun, self._core, timeout_ms / 1000.0, {}, firsts,
                                            max_records, among, snapshot=True)
        while not done:
            wait = cycle.wait()
            raw = await self._consumer.getmany(*partitions, timeout_ms=int((wait or 0.0) * 1000),
                                               max_records=max_records)
            _note_fetched(firsts, raw)
            out, done = await self._step(self._on_loop(raw), _decided, cycle, raw, out, firsts, max_records, among)
        return out

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """``AIOKafkaConsumer.getone``: the next deliverable record (waits for one)."""
        while True:
            got = await self.getmany(*partitions, timeout_ms=_FETCH_SLICE_MS, max_records=1)
            for recs in got.values():
                if recs:
                    return recs[0]

    def __aiter__(self) -> "OrderedAIOKafkaConsumer":
        if self._closed:
            raise ConsumerStoppedError()
        return self

    async def __anext__(self) -> ConsumerRecord:
        """aiokafka's ``async for``: :meth:`getone` until the consumer stops."""
        try:
            return await self.getone()
        except ConsumerStoppedError:
            raise StopAsyncIteration() from None

    # -- offsets

    async def commit(self, offsets: Optional[Mapping[TopicPartition, Any]] = None) -> None:
        """``AIOKafkaConsumer.commit``. Without ``offsets`` commits the positions
        of every record returned so far. Commits that move a partition past a
        gate opened inside this consumer also carry the source offsets it
        waited on."""
        core = self._core
        core.last_commit = time.monotonic()
        if offsets is None:
            want = core.processed_offsets()
        else:
            want = {(tp.topic, tp.partition): (om[0] if isinstance(om, tuple) else int(om))
                    for tp, om in offsets.items()}
        if not want:
            return
        await self._bridge.run(core.commit, want, False)

    async def committed(self, partition: TopicPartition) -> Optional[int]:
        """``AIOKafkaConsumer.committed``; plain delegation. Records held at a
        gate are never committed."""
        return await self._consumer.committed(partition)

    async def position(self, partition: TopicPartition) -> int:
        """Position after the records returned so far (held records do not
        count); partitions :meth:`assign` gave are started first."""
        await self._assignment_started()
        key = (partition.topic, partition.partition)
        known = await self._bridge.run(self._core.positions, [key])
        if key in known:
            return known[key]
        return await self._consumer.position(partition)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """``AIOKafkaConsumer.seek``; the new position counts as processed for
        gates (a partition :meth:`assign` gave and not started yet starts
        there)."""
        self._consumer.seek(partition, offset)
        key = (partition.topic, partition.partition)
        if key in self._unstarted:
            self._unstarted[key] = offset
            return
        self._core.seeked(key, offset)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """``AIOKafkaConsumer.seek_to_beginning`` (all assigned partitions when
        none are given); the reset position counts as processed once known."""
        await self._assignment_started()
        await self._consumer.seek_to_beginning(*partitions)
        self._reset_positions(partitions)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """``AIOKafkaConsumer.seek_to_end`` (all assigned partitions when none
        are given); the reset position counts as processed once known."""
        await self._assignment_started()
        await self._consumer.seek_to_end(*partitions)
        self._reset_positions(partitions)

    async def seek_to_committed(self, *partitions: TopicPartition) -> Dict[TopicPartition, Optional[int]]:
        """``AIOKafkaConsumer.seek_to_committed``; the positions count as processed."""
        await self._assignment_started()
        result = await self._consumer.seek_to_committed(*partitions)
        for tp, off in result.items():
            self._core.seeked((tp.topic, tp.partition), -1 if off is None else off)
        return result

    def _reset_positions(self, partitions: Sequence[TopicPartition]) -> None:
        keys = [(p.topic, p.partition) for p in partitions] if partitions else list(self._core.owned)
        for key in keys:
            self._core.seeked(key, -1)

    def pause(self, *partitions: TopicPartition) -> None:
        """``AIOKafkaConsumer.pause``; kept across rebalances and gate releases."""
        self._core.user_pause([(p.topic, p.partition) for p in partitions])
        self._consumer.pause(*partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        """``AIOKafkaConsumer.resume``; a partition held at a gate resumes when
        the gate opens, not before; one :meth:`assign` gave, once started."""
        ok = set(self._core.user_resume([(p.topic, p.partition) for p in partitions])) - self._unstarted.keys()
        self._consumer.resume(*[p for p in partitions if (p.topic, p.partition) in ok])

    def paused(self) -> Set[TopicPartition]:
        """Partitions paused by the application (not those held at gates)."""
        return {tp for tp in self._consumer.paused() if self._core.paused_by_user((tp.topic, tp.partition))}

    # -- plain delegations (cannot affect order)

    async def beginning_offsets(self, partitions: List[TopicPartition]) -> Dict[TopicPartition, int]:
        """``AIOKafkaConsumer.beginning_offsets``; plain delegation."""
        return await self._consumer.beginning_offsets(partitions)

    async def end_offsets(self, partitions: List[TopicPartition]) -> Dict[TopicPartition, int]:
        """``AIOKafkaConsumer.end_offsets``; plain delegation."""
        return await self._consumer.end_offsets(partitions)

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> Dict[TopicPartition, Any]:
        """``AIOKafkaConsumer.offsets_for_times``; plain delegation (seek to the
        result with :meth:`seek`, which the gates see)."""
        return await self._consumer.offsets_for_times(timestamps)

    def highwater(self, partition: TopicPartition) -> Optional[int]:
        """``AIOKafkaConsumer.highwater``; plain delegation."""
        return self._consumer.highwater(partition)

    def last_stable_offset(self, partition: TopicPartition) -> Optional[int]:
        """``AIOKafkaConsumer.last_stable_offset``; plain delegation."""
        return self._consumer.last_stable_offset(partition)

    def last_poll_timestamp(self, partition: TopicPartition) -> Optional[int]:
        """``AIOKafkaConsumer.last_poll_timestamp``; plain delegation."""
        return self._consumer.last_poll_timestamp(partition)

    async def topics(self) -> Set[str]:
        """``AIOKafkaConsumer.topics``; plain delegation."""
        return await self._consumer.topics()

    def partitions_for_topic(self, topic: str) -> Optional[Set[int]]:
        """``AIOKafkaConsumer.partitions_for_topic``: physical partitions,
        including draining and spare ones; plain delegation."""
        return self._consumer.partitions_for_topic(topic)
