"""``OrderedKafkaConsumer``: kafka-python's ``KafkaConsumer`` over the gating core."""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Type

from kafka import KafkaConsumer
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener, ConsumerRebalanceListener
from kafka.errors import IllegalStateError, KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition

from .. import _log
from .._gating import GatingCore, GatingOptions, StartRead
from .._ports import TP, OffsetsPort, Pending
from ._assignor import OrderedAssignor, register_layouts, unregister_layouts
from ..config import (
    CONSUMER_OPTIONS, KAFKA_PYTHON_OPTIONS, kafka_python_connection_config, metrics_client_id, split_config, truthy,
)
from ..errors import ConfigError, translate
from ..gates import GateStatus, reset_policy
from ..history import LayoutHistory
from ..listener import PartitionKeyRebalanceListener
from ..metrics import ConsumerMetrics
from .._fastpath import admits_runs, calm_rest, calm_wait, replace_headers
from .._grouped import from_hand, released_in_hand, serialized_bytes, take
from ._compat import (call_listener, collect_finished_join, dotted, io_sleep, off_loop, resume_discarding_parked,
                      subscription_positions)

__all__ = ["OrderedKafkaConsumer"]

log = logging.getLogger("kafka_ordered.consumer")

_MAX_TIMEOUT_MS = 2**31 - 1  # what a poll can wait at most (kafka-python's consumer_timeout_ms may be inf)


def _commits(res: Mapping[TopicPartition, Any]) -> Dict[TP, int]:
    """The coordinator's answer of committed offsets as the core's: partitions
    without a commit are left out."""
    return {(tp.topic, tp.partition): om.offset for tp, om in res.items() if om is not None and om.offset >= 0}


class _ConsumerPort:
    """:class:`~kafka_ordered._ports.ConsumerPort` over a ``KafkaConsumer``."""

    def __init__(self, consumer: KafkaConsumer, timeout: float, group: str, reader: OffsetsPort) -> None:
        self.consumer = consumer
        self.timeout = timeout
        self.group = group
        self.reader = reader
        self.coordinator: Any = getattr(consumer, "_coordinator", None)
        # Inside a rebalance callback commits are collected here and awaited there.
        self.defer: Optional[Dict[TopicPartition, OffsetAndMetadata]] = None
        self.commit_cb: Optional[Callable[..., Any]] = None

    def partitions(self, tps: List[TP]) -> List[TopicPartition]:
        return [TopicPartition(t, p) for t, p in tps]

    def pause(self, tps: List[TP]) -> None:
        self.consumer.pause(*self.partitions(tps))

    def resume(self, tps: List[TP]) -> None:
        resume_discarding_parked(self.consumer, self.partitions(tps))

    def seek(self, tp: TP, offset: int) -> None:
        self.consumer.seek(TopicPartition(*tp), offset)

    def positions(self, tps: List[TP]) -> Dict[TP, int]:
        return {(tp.topic, tp.partition): off
                for tp, off in subscription_positions(self.consumer, self.partitions(tps)).items()}

    def learn_partitions(self, topic: str) -> None:
        # The next poll sends the Metadata request; its coordinator then rejoins
        # the group when the subscribed topic gained partitions.
        self.consumer._client.cluster.request_update()

    def committed(self, tps: List[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        wait = self.timeout if timeout is None else timeout
        try:
            res = self.coordinator.fetch_committed_offsets(self.partitions(tps), timeout_ms=int(wait * 1000))
        except KafkaError as e:
            raise translate(e, "reading committed offsets") from e
        return _commits(res)

    def committed_later(self, tps: List[TP], timeout: float) -> Pending[Dict[TP, int]]:
        return self.reader.group_commits(self.group, tps, timeout)

    def commit(self, offsets: Dict[TP, int], asynchronous: bool) -> Any:
        kp = {TopicPartition(t, p): OffsetAndMetadata(off, "", -1) for (t, p), off in sorted(offsets.items())}
        if self.defer is not None:
            self.defer.update(kp)
            return None
        if asynchronous:
            return self.consumer.commit_async(kp, callback=self.commit_cb)
        return self.consumer.commit(kp)


class _Rebalance(AsyncConsumerRebalanceListener):
    """Runs on kafka-python's IO loop: our bookkeeping around the user's listener."""

    def __init__(self, owner: "OrderedKafkaConsumer", user: Any) -> None:
        self.owner = owner
        self.user = user

    async def on_partitions_revoked(self, revoked: Any) -> None:
        try:
            await call_listener(self.user, "on_partitions_revoked", revoked)
        finally:
            await self.owner._on_revoked(revoked, lost=False)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.owner._on_assigned(assigned)
        await call_listener(self.user, "on_partitions_assigned", assigned)

    async def on_partitions_lost(self, lost: Any) -> None:
        try:
            if self.user is not None and hasattr(self.user, "on_partitions_lost"):
                await call_listener(self.user, "on_partitions_lost", lost)
            else:
                await call_listener(self.user, "on_partitions_revoked", lost)
        finally:
            await self.owner._on_revoked(lost, lost=True)


class OrderedKafkaConsumer:
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

    Construction reads the layout log (the process's shared layout-log
    clients), waiting at most ``ordered.metadata.timeout.ms``: it raises
    :class:`~kafka_ordered.errors.BrokerUnavailableError` naming the
    bootstrap servers when the cluster cannot be reached; nothing is left
    open then.
    """

    def __init__(self, *topics: str, **configs: Any) -> None:
        opts, conf = split_config(dotted(configs), CONSUMER_OPTIONS + KAFKA_PYTHON_OPTIONS, "OrderedKafkaConsumer")
        if not conf.get("group_id"):
            raise ConfigError("OrderedKafkaConsumer needs group_id: gates are evaluated per consumer group")
        auto_commit = truthy(conf.pop("enable_auto_commit", True))
        interval = int(conf.pop("auto_commit_interval_ms", 5000)) / 1000.0
        conf["enable_auto_commit"] = False
        conn = kafka_python_connection_config(conf, opts["ordered.librdkafka.config"])
        self._closed = False
        self._group_id = str(conf["group_id"])
        self._client_id = metrics_client_id({"client.id": conf.get("client_id")}, "consumer", self._group_id)
        shared = _log.acquire(conn, opts["ordered.layout.topic"],
                              corrupt_policy=opts["ordered.layout.corrupt.policy"],
                              timeout=opts["ordered.metadata.timeout.ms"] / 1000.0)
        self._shared = shared
        strategies = conf.get("partition_assignment_strategy") or [OrderedAssignor]
        conf["partition_assignment_strategy"] = [
            OrderedAssignor(shared.follower) if s is OrderedAssignor else s for s in strategies
        ]
        register_layouts(shared.follower)
        try:
            self._consumer = KafkaConsumer(**conf)
        except BaseException:
            unregister_layouts(shared.follower)
            shared.release()
            raise
        options = GatingOptions(opts, auto_commit, interval, reset_policy(conf.get("auto_offset_reset", "latest")))
        self._port = _ConsumerPort(self._consumer, options.timeout, self._group_id, shared.offsets)
        self._core = GatingCore(self._port, shared.follower, shared.offsets, options)
        shared.offsets.use_group(self._port.group)
        # Holds in hand: a split replay is not paused and sought back at
        # every gate (kafka-python drops what it fetched of a paused partition).
        self._core.kept_bytes = serialized_bytes
        self._iterator: Optional[Iterator[Any]] = None
        if topics:
            self.subscribe(list(topics))

    @property
    def consumer(self) -> KafkaConsumer:
        """The wrapped ``KafkaConsumer``."""
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

    # -- rebalance (on kafka-python's IO thread; no blocking consumer calls here)

    async def _on_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        parts = sorted(assigned)
        if not parts:
            return
        try:
            committed = await self._read_starts(parts)
            # Start resolution reads offsets (blocking I/O): off the IO loop, so
            # heartbeats go on meanwhile.
            starts = await off_loop(self._consumer, self._core.assigned,
                                    [(tp.topic, tp.partition) for tp in parts], committed)
        except BaseException:
            # kafka-python keeps them assigned and would fetch them ungated.
            self._core.start_failed([(tp.topic, tp.partition) for tp in parts])
            raise
        for tp in parts:
            off = starts.get((tp.topic, tp.partition))
            if off is not None:
                self._consumer.seek(tp, off)
        self._core.unpause_assigned([(tp.topic, tp.partition) for tp in parts])

    async def _read_starts(self, parts: List[TopicPartition]) -> Dict[TP, int]:
        """The group's commits of ``parts``, tried again by :class:`StartRead`'s rule."""
        rule = StartRead()
        while True:
            try:
                res = await self._port.coordinator.fetch_committed_offsets_async(
                    parts, timeout_ms=int(self._core.opts.timeout * 1000))
                return _commits(res)
            except KafkaError as e:
                error = translate(e, "reading committed offsets")
                error.__cause__ = e
                delay = rule.retry_after(error)
            await io_sleep(self._consumer, delay)

    async def _on_revoked(self, revoked: Iterable[TopicPartition], lost: bool) -> None:
        tps = [(tp.topic, tp.partition) for tp in revoked]
        if not lost and self._core.opts.auto_commit:
            offsets = self._core.uncommitted(tps)
            if offsets:
                self._port.defer = {}
                try:
                    self._core.commit(offsets, asynchronous=False)
                    deferred, self._port.defer = self._port.defer, None
                    commit = getattr(self._port.coordinator, "_commit_offsets_sync_async", None)
                    if commit is not None:  # awaited: lands before this member rejoins
                        await commit(deferred, timeout_ms=int(self._core.opts.timeout * 1000))
                    else:  # pragma: no cover - other kafka-python versions
                        self._port.coordinator.commit_offsets_async(deferred)
                except Exception as e:
                    log.warning("commit on revoke failed: %s", e)
                finally:
                    self._port.defer = None
        self._core.revoked(tps)

    # -- subscription

    def subscribe(self, topics: Sequence[str] = (), pattern: Optional[str] = None, listener: Any = None,
                  key_listener: Optional[PartitionKeyRebalanceListener] = None) -> None:
        """``KafkaConsumer.subscribe`` plus ``key_listener`` for per-key state hand-off."""
        if key_listener is not None and not isinstance(key_listener, PartitionKeyRebalanceListener):
            raise TypeError("key_listener must be a PartitionKeyRebalanceListener")
        if listener is not None and not isinstance(listener, (ConsumerRebalanceListener,
                                                               AsyncConsumerRebalanceListener)):
            raise TypeError("listener must be a ConsumerRebalanceListener or AsyncConsumerRebalanceListener")
        self._core.listener = key_listener
        self._core.subscribed = set(topics or ())
        self._consumer.subscribe(topics=topics, pattern=pattern, listener=_Rebalance(self, listener))
        self._core.refresh_gates(force=True)

    def unsubscribe(self) -> None:
        """``KafkaConsumer.unsubscribe``: commits the positions of returned records
        first (with auto-commit) and drops the gate state of every owned partition."""
        self._final_commit()
        self._core.revoked(list(self._core.owned))
        self._consumer.unsubscribe()
        self._iterator = None
        self._core.subscribed = set()

    def subscription(self) -> Optional[Set[str]]:
        """``KafkaConsumer.subscription``; plain delegation."""
        return self._consumer.subscription()

    def assign(self, partitions: List[TopicPartition], *,
               key_listener: Optional[PartitionKeyRebalanceListener] = None) -> None:
        """Manual assignment (no group rebalancing); gates still apply.
        ``key_listener`` as for :meth:`subscribe`."""
        if key_listener is not None:
            if not isinstance(key_listener, PartitionKeyRebalanceListener):
                raise TypeError("key_listener must be a PartitionKeyRebalanceListener")
            self._core.listener = key_listener
        want = {(tp.topic, tp.partition) for tp in partitions}
        self._core.revoked(sorted(self._core.owned - want))
        added = sorted(want - self._core.owned)
        committed = self._port.committed(added) if added else {}
        starts = self._core.assigned(added, committed)
        self._consumer.assign(list(partitions))
        for key, off in starts.items():
            self._consumer.seek(TopicPartition(*key), off)

    def assignment(self) -> Set[TopicPartition]:
        """``KafkaConsumer.assignment``: every assigned partition, including those
        held at a gate."""
        return self._consumer.assignment()

    # -- consuming

    def poll(self, timeout_ms: float = 0, max_records: Optional[int] = None,
             update_offsets: bool = True) -> Dict[TopicPartition, List[Any]]:
        """``KafkaConsumer.poll``: deliverable records by partition ({} while
        partitions wait at gates)."""
        if self._closed:
            raise IllegalStateError("OrderedKafkaConsumer is closed")
        if timeout_ms < 0:
            raise ValueError("Timeout must not be negative")
        core = self._core
        calm = core.calm
        collect_finished_join(self._consumer)
        self._hand(update_offsets)
        if calm.quiet:
            # Nothing to gate: the client's own poll, its records untouched
            # until the calm's deadline (see kafka_ordered._fastpath.fast_fetch).
            began = time.monotonic()
            given = timeout_ms / 1000.0
            wait = calm_wait(calm, given, began)
            if wait is not None:
                raw = self._consumer.poll(timeout_ms=int(wait * 1000), max_records=max_records,
                                          update_offsets=update_offsets)
                if raw:
                    if calm.quiet and time.monotonic() < calm.until and admits_runs(calm, raw, replace_headers):
                        return raw
                    core.fetched_late()
                    return self._take(raw, {})
                rest = calm_rest(given, wait, began, time.monotonic())
                if rest is None:
                    if not (calm.quiet and time.monotonic() < calm.until):
                        core.idle()
                    return raw
                # Nothing came before the calm's end (held partitions' gates
                # are looked at again then): the rest of the wait on the full path.
                timeout_ms = rest * 1000
        if max_records is None:
            max_records = self._consumer.config["max_poll_records"]
        cycle = core.poll_cycle(timeout_ms / 1000.0)
        out: Dict[TopicPartition, List[Any]] = {}
        while True:
            if core.kept and released_in_hand(core):
                # Records in hand of released partitions first, without waiting for the client.
                out = from_hand(core, max_records)
                if out:
                    cycle.done(True)
                    return out
            wait = cycle.wait(full=self._rebalancing())
            raw = self._consumer.poll(timeout_ms=min(int((wait or 0.0) * 1000), _MAX_TIMEOUT_MS),
                                      max_records=max_records, update_offsets=update_offsets)
            collect_finished_join(self._consumer)
            if raw:
                out = self._take(raw, out)
            # (An empty cycle step also keeps the gaps between the client's
            # polls short while it joins: see collect_finished_join.)
            if cycle.done(bool(out)):
                return out

    def _hand(self, update_offsets: bool) -> None:
        """Holds in hand only for polls that move the client's positions past
        what they hand out: the iterator's polls do not (it moves them per
        record), so the client would fetch records kept in hand again. Such
        a poll first gives what is in hand back to the client (holds in hand
        become pauses)."""
        core = self._core
        core.keep_in_hand = update_offsets
        if not update_offsets and core.kept:
            core.rewind({})

    def _rebalancing(self) -> bool:
        co = self._port.coordinator
        try:
            return bool(co is not None and co.need_rejoin())
        except Exception:  # pragma: no cover - internals moved
            return False

    def _take(self, raw: Dict[TopicPartition, List[Any]],
              out: Dict[TopicPartition, List[Any]]) -> Dict[TopicPartition, List[Any]]:
        return take(self._core, raw, out, replace_headers)

    def __iter__(self) -> "OrderedKafkaConsumer":
        return self

    def __next__(self) -> Any:
        """kafka-python's iterator: records of one gated fetch at a time, each
        one moving the partition's position as it is handed out."""
        if self._closed:
            raise StopIteration("OrderedKafkaConsumer closed")
        timeout = self._consumer.config["consumer_timeout_ms"]
        deadline = time.monotonic() + timeout / 1000.0 if timeout >= 0 else float("inf")
        while time.monotonic() < deadline:
            if self._iterator is None:
                self._iterator = self._records(deadline)
            try:
                return next(self._iterator)
            except StopIteration:
                self._iterator = None
        raise StopIteration()

    def _records(self, deadline: float) -> Iterator[Any]:
        """kafka-python's ``_message_generator_v2`` over this wrapper's poll:
        a fetch without moving positions, then per record the position moves
        as it is yielded (a partition paused meanwhile stops, as there; one
        held at a gate hands out the records before its hold)."""
        timeout_ms = 1000 * max(0.0, deadline - time.monotonic())
        records = self.poll(timeout_ms=min(timeout_ms, _MAX_TIMEOUT_MS), update_offsets=False)
        subscription = self._consumer._subscription
        fetchable = subscription.is_fetchable
        assignment = subscription.assignment
        held = self._core.held()
        for tp, recs in records.items():
            for record in recs:
                if not fetchable(tp) and (tp.topic, tp.partition) not in held:
                    break
                assignment[tp].position = OffsetAndMetadata(record.offset + 1, "", record.leader_epoch)
                yield record

    # -- offsets

    def commit(self, offsets: Optional[Mapping[TopicPartition, Any]] = None, timeout_ms: Optional[int] = None) -> None:
        """``KafkaConsumer.commit``. Without ``offsets`` commits the positions
        of every record returned so far. Commits that move a partition past a
        gate opened inside this consumer also carry the source offsets it
        waited on."""
        want = self._wanted(offsets)
        self._core.last_commit = time.monotonic()
        if want:
            self._core.commit(want, asynchronous=False)

    def commit_async(self, offsets: Optional[Mapping[TopicPartition, Any]] = None,
                     callback: Optional[Callable[..., Any]] = None) -> Any:
        """``KafkaConsumer.commit_async`` (same offsets as :meth:`commit`)."""
        want = self._wanted(offsets)
        self._core.last_commit = time.monotonic()
        if not want:
            return None
        self._port.commit_cb = callback
        try:
            return self._core.commit(want, asynchronous=True)
        finally:
            self._port.commit_cb = None

    def _wanted(self, offsets: Optional[Mapping[TopicPartition, Any]]) -> Dict[TP, int]:
        if offsets is None:
            return self._core.processed_offsets()
        return {(tp.topic, tp.partition): (om.offset if isinstance(om, OffsetAndMetadata) else int(om))
                for tp, om in offsets.items()}

    def committed(self, partition: TopicPartition, metadata: bool = False, timeout_ms: Optional[int] = None) -> Any:
        """``KafkaConsumer.committed``: the group's committed offset; plain
        delegation. Records held at a gate are never committed."""
        return self._consumer.committed(partition, metadata=metadata, timeout_ms=timeout_ms)

    def position(self, partition: TopicPartition, timeout_ms: Optional[int] = None) -> Optional[int]:
        """Position after the records returned so far (held records do not count)."""
        key = (partition.topic, partition.partition)
        known = self._core.positions([key])
        if key in known:
            return known[key]
        return self._consumer.position(partition, timeout_ms=timeout_ms)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """``KafkaConsumer.seek``; the new position counts as processed for gates."""
        self._consumer.seek(partition, offset)
        self._iterator = None
        self._core.seeked((partition.topic, partition.partition), offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """``KafkaConsumer.seek_to_beginning`` (all owned partitions when none are
        given); the reset position counts as processed for gates once known."""
        self._consumer.seek_to_beginning(*partitions)
        self._reset_positions(partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """``KafkaConsumer.seek_to_end`` (all owned partitions when none are
        given); the reset position counts as processed for gates once known."""
        self._consumer.seek_to_end(*partitions)
        self._reset_positions(partitions)

    def _reset_positions(self, partitions: Sequence[TopicPartition]) -> None:
        self._iterator = None
        keys = [(p.topic, p.partition) for p in partitions] if partitions else list(self._core.owned)
        for key in keys:
            self._core.seeked(key, -1)

    def pause(self, *partitions: TopicPartition) -> None:
        """``KafkaConsumer.pause``; kept across rebalances and gate releases."""
        self._core.user_pause([(p.topic, p.partition) for p in partitions])
        self._consumer.pause(*partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        """``KafkaConsumer.resume``; a partition held at a gate resumes when the
        gate opens, not before."""
        ok = set(self._core.user_resume([(p.topic, p.partition) for p in partitions]))
        resume_discarding_parked(self._consumer, [p for p in partitions if (p.topic, p.partition) in ok])

    def paused(self) -> Set[TopicPartition]:
        """Partitions paused by the application (not those held at gates)."""
        return {tp for tp in self._consumer.paused() if self._core.paused_by_user((tp.topic, tp.partition))}

    # -- plain delegations (cannot affect order)

    def beginning_offsets(self, partitions: List[TopicPartition], timeout_ms: Optional[int] = None) -> Any:
        """``KafkaConsumer.beginning_offsets``; plain delegation."""
        return self._consumer.beginning_offsets(partitions, timeout_ms=timeout_ms)

    def end_offsets(self, partitions: List[TopicPartition], timeout_ms: Optional[int] = None) -> Any:
        """``KafkaConsumer.end_offsets``; plain delegation (ListOffsets: wrong on
        the embedded broker after multi-record batches, see :meth:`highwater`)."""
        return self._consumer.end_offsets(partitions, timeout_ms=timeout_ms)

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int], timeout_ms: Optional[int] = None) -> Any:
        """``KafkaConsumer.offsets_for_times``; plain delegation (seek to the
        result with :meth:`seek`, which the gates see)."""
        return self._consumer.offsets_for_times(timestamps, timeout_ms=timeout_ms)

    def highwater(self, partition: TopicPartition) -> Optional[int]:
        """``KafkaConsumer.highwater``: the high watermark from the last fetch
        response; plain delegation."""
        return self._consumer.highwater(partition)

    def topics(self) -> Set[str]:
        """``KafkaConsumer.topics``; plain delegation."""
        return self._consumer.topics()

    def partitions_for_topic(self, topic: str) -> Optional[Set[int]]:
        """``KafkaConsumer.partitions_for_topic``: physical partitions, including
        draining and spare ones; plain delegation."""
        return self._consumer.partitions_for_topic(topic)

    def metrics(self, raw: bool = False) -> Any:
        """``KafkaConsumer.metrics``; plain delegation (the ordering protocol's
        own numbers are in :meth:`ordered_metrics`)."""
        return self._consumer.metrics(raw=raw)

    def group_metadata(self) -> Any:
        """``KafkaConsumer.group_metadata``, for
        :meth:`OrderedKafkaProducer.send_offsets_to_transaction`; plain delegation."""
        return self._consumer.group_metadata()

    def bootstrap(self, timeout_ms: Optional[int] = None, refresh: bool = False) -> Any:
        """``KafkaConsumer.bootstrap``; plain delegation."""
        return self._consumer.bootstrap(timeout_ms=timeout_ms, refresh=refresh)

    def bootstrap_connected(self) -> bool:
        """``KafkaConsumer.bootstrap_connected``; plain delegation."""
        return self._consumer.bootstrap_connected()

    def _final_commit(self) -> None:
        if not self._core.opts.auto_commit:
            return
        offsets = self._core.uncommitted()
        if offsets:
            try:
                self._core.commit(offsets, asynchronous=False)
            except Exception as e:
                log.warning("final commit failed: %s", e)

    def close(self, autocommit: bool = True, timeout_ms: Optional[int] = None) -> None:
        """Commit returned records (with auto-commit), leave the group, release
        the layout-log resources."""
        if self._closed:
            return
        self._closed = True
        try:
            if autocommit:
                self._final_commit()
            else:
                self._core.opts.auto_commit = False  # also no commit from the revoke callback
            self._consumer.close(autocommit=False, timeout_ms=timeout_ms)
        finally:
            self._core.close()
            unregister_layouts(self._shared.follower)
            self._shared.offsets.release_group(self._port.group)
            self._shared.release()

    def __enter__(self) -> "OrderedKafkaConsumer":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close(autocommit=exc_type is None)
