"""kafka-python specifics the adapters need: config spelling, serializers,
and the few client internals the gating port reads (kafka-python 3.x)."""

from __future__ import annotations

import inspect
import logging
import threading
from typing import Any, Callable, Dict, List, Optional

from kafka import KafkaConsumer
from kafka.coordinator.base import MemberState
from kafka.future import Future
from kafka.serializer import Serializer
from kafka.structs import OffsetAndMetadata, TopicPartition

from ..config import dotted

__all__ = ["dotted", "serializer", "resume_discarding_parked", "subscription_positions", "call_listener",
           "off_loop", "collect_finished_join"]

log = logging.getLogger("kafka_ordered.consumer")


def serializer(s: Any) -> Optional[Serializer]:
    """kafka-python accepts a ``Serializer`` or a plain callable; return a ``Serializer``."""
    if s is None or isinstance(s, Serializer):
        return s

    class _Wrapped(Serializer):
        def serialize(self, topic: str, headers: Any, data: Any) -> Any:
            return s(data)

    return _Wrapped()


def resume_discarding_parked(consumer: KafkaConsumer, partitions: List[TopicPartition]) -> None:
    """Resume, discarding fetched data the client parked while paused.

    kafka-python 3.0.12 (KAFKA-7548 port) restores parked records only while
    no exhausted record set is "in line", which after the first fetch is
    never: a resumed partition would never be fetched again. Parked data is
    re-fetched from the position instead (also right after a seek, where it
    is obsolete anyway). Partitions no longer assigned are skipped.
    """
    fetcher = getattr(consumer, "_fetcher", None)
    for attr in ("_paused_partition_records", "_paused_completed_fetches"):
        parked = getattr(fetcher, attr, None)
        if isinstance(parked, dict):
            for tp in partitions:
                parked.pop(tp, None)
    assigned = consumer._subscription.assignment
    live = [tp for tp in partitions if tp in assigned]
    if live:
        consumer.resume(*live)


def subscription_positions(consumer: KafkaConsumer, tps: List[TopicPartition]) -> Dict[TopicPartition, int]:
    """Fetch positions from the subscription state, not ``KafkaConsumer.position()``:
    that one may block on the network, and this also runs in rebalance callbacks."""
    assignment = consumer._subscription.assignment
    out: Dict[TopicPartition, int] = {}
    for tp in tps:
        state = assignment.get(tp)
        pos = getattr(state, "position", None) if state is not None else None
        if pos is not None:
            out[tp] = pos.offset if isinstance(pos, OffsetAndMetadata) else int(pos)
    return out


def collect_finished_join(consumer: KafkaConsumer) -> bool:
    """Take on a group join round that completed between two polls; True if there was one.

    kafka-python 3.0.12 drives JoinGroup/SyncGroup as a task that goes on
    while no poll waits on it, but a later poll starts a new round instead of
    collecting a finished one, and collects nothing when ``need_rejoin()`` has
    turned false meanwhile: after a metadata change (partitions added) the
    leader's own assignment makes its snapshots equal again, and the member
    keeps its old assignment (none at all after a first join without
    metadata) while the broker counts it in the group; short polls start
    round after round (dpkp/kafka-python#2855). This finishes a successful
    round as kafka-python's ``join_group_async`` does, and has a failed one
    retried. Call it from the thread that polls, between polls; it does
    nothing when the client's internals are not the expected ones.
    """
    co: Any = getattr(consumer, "_coordinator", None)
    task = getattr(co, "_join_task", None)
    if co is None or task is None or not getattr(task, "is_done", False):
        return False
    if not task.succeeded():
        if not co.need_rejoin():
            co.request_rejoin()
        return False
    gen = co._generation
    log.debug("group %s: taking on join round %s that completed between polls", co.group_id, gen.generation_id)
    co._join_task = None
    with co._lock:
        co.rejoining = False
        co.rejoin_needed = False
        co.state = MemberState.STABLE
        co._enable_heartbeat()
    consumer._net.run(co._on_join_complete_async, gen.generation_id, gen.member_id, gen.protocol, task.value)
    return True


async def call_listener(listener: Any, method: str, arg: Any) -> None:
    """Call a kafka-python rebalance listener method, sync or async."""
    fn = getattr(listener, method, None)
    if fn is None:
        return
    if inspect.iscoroutinefunction(fn):
        await fn(arg)
    else:
        fn(arg)


async def io_sleep(consumer: KafkaConsumer, seconds: float) -> None:
    """Sleep on the consumer's IO loop (heartbeats go on meanwhile)."""
    await consumer._net.sleep(seconds)


def off_loop(consumer: KafkaConsumer, fn: Callable[..., Any], *args: Any) -> Future:
    """Run ``fn`` on a worker thread; the returned future resolves on the
    consumer's IO loop (so heartbeats go on while ``fn`` blocks)."""
    fut = Future()
    net = consumer._net

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
