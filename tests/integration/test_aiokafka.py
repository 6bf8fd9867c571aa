"""The aiokafka (asyncio) adapter on a real broker: order across expand and
shrink for a backlog and for a two-member group, the plain aiokafka control
the oracle flags, async key listeners, pauses across rebalances, offsets."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

import pytest

pytest.importorskip("aiokafka")

from aiokafka import AIOKafkaConsumer  # noqa: E402
from aiokafka.errors import IllegalOperation, IllegalStateError, NoOffsetForPartitionError  # noqa: E402
from aiokafka.structs import TopicPartition  # noqa: E402

from kafka_ordered import ConfigError, OrderedConsumer, OrderedProducer, PartitionOverrideError  # noqa: E402
from kafka_ordered.admin import LayoutAdmin  # noqa: E402
from kafka_ordered.aiokafka import OrderedAIOKafkaConsumer, OrderedAIOKafkaProducer  # noqa: E402
from kafka_ordered.listener import PartitionKeyRebalanceListener  # noqa: E402
from kafka_ordered.testing import OrderingOracle, encode_value  # noqa: E402

from .support import commit_as_group, one_split  # noqa: E402
from ..conftest import spare  # noqa: E402

KEYS = [b"key-%03d" % i for i in range(40)]


@pytest.fixture
def opts(layout_topic: str) -> Dict[str, Any]:
    return {"ordered.layout.topic": layout_topic}


@pytest.fixture
def layout_admin(bootstrap: str, layout_topic: str) -> Iterator[LayoutAdmin]:
    with LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}) as a:
        yield a


@pytest.fixture
def idempotent_producers(embedded: bool) -> None:
    """The aiokafka producer tests need Apache Kafka: aiokafka's idempotent
    producer asks InitProducerId v0, which the embedded broker answers with
    UNKNOWN_SERVER_ERROR (a plain ``AIOKafkaProducer(enable_idempotence=True)``
    fails there the same way), and the wrapper forces idempotence."""
    if embedded:
        pytest.skip("aiokafka's idempotent producer fails on the embedded broker (InitProducerId v0)")


@pytest.fixture
def consumer_config(bootstrap: str, opts: Dict[str, Any], unique: Callable[[str], str],
                    group_settings_kafka_python: Dict[str, Any]) -> Dict[str, Any]:
    return {"bootstrap_servers": bootstrap, "group_id": unique("group"), "auto_offset_reset": "earliest",
            "fetch_max_wait_ms": 50, **group_settings_kafka_python, **opts}


def _backlog(layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
             closing: Callable[[Any], Any], changes: Sequence[Tuple[str, int]] = (("expand", 4), ("shrink", 3),
                                                                                ("expand", 5)),
             partitions: int = 2, physical: int = 6, per_step: int = 4) -> OrderingOracle:
    """Per-key sequences written through ``partitions`` and then each of
    ``changes`` (by default 2 -> 4 -> 3 -> 5 partitions), ``per_step`` rounds
    of every key before and after each, before any consumer starts: a
    consumer may fetch new partitions before old ones, so only the gates
    keep the order."""
    layout_admin.create_topic(topic, partitions, spare(physical))
    oracle = OrderingOracle()
    p = closing(OrderedProducer({"bootstrap.servers": bootstrap, "linger.ms": 20, **opts}))
    seq: Dict[bytes, int] = {}
    sent: List[Tuple[bytes, bytes]] = []

    def rounds(n: int) -> None:
        for _ in range(n):
            for k in KEYS:
                v = encode_value("P1", seq.get(k, 0))
                seq[k] = seq.get(k, 0) + 1
                p.produce(topic, key=k, value=v)
                sent.append((k, v))

    rounds(per_step)
    for op, n in changes:
        getattr(layout_admin, op)(topic, n)
        deadline = time.monotonic() + 10
        while p.history.current(topic).epoch < layout_admin.layout(topic).epoch:  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the producer never saw the new layout"
            time.sleep(0.01)
        rounds(per_step)
    assert p.flush(30) == 0
    for k, v in sent:
        oracle.acknowledged_value(k, v)
    return oracle


class AsyncKeyEvents(PartitionKeyRebalanceListener):
    """A key listener whose callbacks are coroutines (they must be awaited)."""

    def __init__(self) -> None:
        self.events: List[Tuple[str, int]] = []

    async def on_partition_key_maybe_revoked(self, partitions: List[Any]) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        self.events += [("revoked", p.partition) for p in partitions]

    async def on_partition_key_assigned(self, partitions: List[Any]) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        self.events += [("assigned", p.partition) for p in partitions]


async def _drain(consumers: List[Any], oracle: OrderingOracle, expected: int, timeout: float = 60.0) -> None:
    """Until every acknowledged record was delivered at least once (a
    rebalance may deliver some twice: at-least-once)."""
    deadline = time.monotonic() + timeout
    while oracle.report().unique < expected and time.monotonic() < deadline:
        for c in consumers:
            batch = await c.getmany(timeout_ms=100, max_records=25)
            for tp, recs in batch.items():
                for r in recs:
                    oracle.delivered_value(r.key, r.value, where=f"{tp.partition}@{r.offset}")


def test_a_backlog_across_expand_and_shrink_is_delivered_in_order(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
        consumer_config: Dict[str, Any], closing: Callable[[Any], Any]) -> None:
    oracle = _backlog(layout_admin, topic, bootstrap, opts, closing)
    expected = oracle.report().acknowledged

    async def run() -> Tuple[AsyncKeyEvents, Dict[int, int]]:
        keys = AsyncKeyEvents()
        c = OrderedAIOKafkaConsumer(**consumer_config)
        c.subscribe([topic], key_listener=keys)
        async with c:
            await _drain([c], oracle, expected)
            await c.getmany(timeout_ms=100)
            await c.commit()
            committed = {q: (await c.committed(TopicPartition(topic, q))) or 0 for q in range(6)}
        return keys, committed

    keys, committed = asyncio.run(run())
    report = oracle.report()
    assert report.violations == (), report.violations[:5]
    assert report.missing == 0, f"{report.missing} acknowledged records not delivered"
    # The async key listener was awaited: every opened gate announced its target after a source.
    assigned = [i for i, e in enumerate(keys.events) if e[0] == "assigned"]
    assert {keys.events[i][1] for i in assigned} >= {2, 3}, keys.events
    assert min(i for i, e in enumerate(keys.events) if e[0] == "revoked") < assigned[0], keys.events
    # Offsets are the wrapper's: what was returned reaches the group.
    assert sum(committed.values()) == report.acknowledged


def test_plain_aiokafka_consumers_reorder_the_same_backlog(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
        consumer_config: Dict[str, Any], closing: Callable[[Any], Any]) -> None:
    """Control: the same backlog through a plain ``AIOKafkaConsumer`` (proof the oracle can fail)."""
    oracle = _backlog(layout_admin, topic, bootstrap, opts, closing)
    expected = oracle.report().acknowledged
    plain = {k: v for k, v in consumer_config.items() if not k.startswith("ordered.")}

    async def run() -> None:
        c = AIOKafkaConsumer(topic, **plain)
        await c.start()
        try:
            await _drain([c], oracle, expected)
        finally:
            await c.stop()

    asyncio.run(run())
    report = oracle.report()
    assert report.missing == 0
    assert report.violations, "expected reordering without gates"


def test_a_two_member_group_keeps_order_with_getone_and_async_for(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
        consumer_config: Dict[str, Any], closing: Callable[[Any], Any]) -> None:
    """Two members of one group (one reads with ``getone``, the other with
    ``async for``), joined while the backlog waits: the rebalance between
    them moves partitions held at gates; aiokafka forgets pauses then."""
    oracle = _backlog(layout_admin, topic, bootstrap, opts, closing)
    expected = oracle.report().acknowledged

    async def run() -> None:
        a = OrderedAIOKafkaConsumer(topic, **consumer_config)
        b = OrderedAIOKafkaConsumer(topic, **consumer_config)
        deadline = time.monotonic() + 90

        def done() -> bool:
            return oracle.report().unique >= expected or time.monotonic() > deadline

        async with a, b:

            async def iterate() -> None:
                async for r in b:
                    oracle.delivered_value(r.key, r.value, where=f"{r.partition}@{r.offset}")
                    if done():
                        return

            task = asyncio.ensure_future(iterate())
            while not done() and not task.done():
                try:
                    r = await asyncio.wait_for(a.getone(), 0.5)
                except asyncio.TimeoutError:
                    continue
                oracle.delivered_value(r.key, r.value, where=f"{r.partition}@{r.offset}")
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(run())
    report = oracle.report()
    assert report.violations == (), report.violations[:5]
    assert report.missing == 0, f"{report.missing} acknowledged records not delivered"


def test_an_application_pause_survives_a_rebalance_and_a_gate(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
        consumer_config: Dict[str, Any], closing: Callable[[Any], Any]) -> None:
    """aiokafka forgets pauses at every rebalance: the wrapper applies the
    application's own pause again, and nothing of the paused partition is
    delivered until the application resumes it."""
    _backlog(layout_admin, topic, bootstrap, opts, closing)

    async def run() -> Tuple[int, int]:
        a = OrderedAIOKafkaConsumer(**consumer_config)
        async with a:
            a.assign([TopicPartition(topic, q) for q in range(2)])
            paused = TopicPartition(topic, 0)
            a.pause(paused)
            got = 0
            for _ in range(20):
                batch = await a.getmany(timeout_ms=100)
                got += len(batch.get(paused, []))
            assert a.paused() == {paused}
            a.resume(paused)
            after = 0
            for _ in range(40):
                after += len((await a.getmany(timeout_ms=100)).get(paused, []))
                if after:
                    break
            return got, after

    # assign() before start() is refused with a clear error
    async def early() -> None:
        c = OrderedAIOKafkaConsumer(**consumer_config)
        with pytest.raises(ConfigError, match="start"):
            c.assign([TopicPartition(topic, 0)])

    asyncio.run(early())
    got, after = asyncio.run(run())
    assert got == 0, "a paused partition delivered records"
    assert after > 0, "the resumed partition never delivered"


def test_group_id_is_required(bootstrap: str) -> None:
    async def make() -> None:
        OrderedAIOKafkaConsumer(bootstrap_servers=bootstrap)

    with pytest.raises(ConfigError, match="group_id"):
        asyncio.run(make())


def test_a_cancelled_getmany_loses_no_record(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
        consumer_config: Dict[str, Any], closing: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelling ``getmany`` (``wait_for`` with a short timeout, as
    applications do) while the gates decide a fetch: its records come with
    a later call, in order. (Each decision is slowed down, as on a loaded
    machine, so that timeouts land inside decisions.)"""
    from kafka_ordered.aiokafka import _consumer as adapter

    decide = adapter.take

    def slow_take(*args: Any) -> Any:
        time.sleep(0.02)
        return decide(*args)

    monkeypatch.setattr(adapter, "take", slow_take)
    oracle = _backlog(layout_admin, topic, bootstrap, opts, closing)
    expected = oracle.report().acknowledged

    async def run() -> int:
        rng = random.Random(7)
        cancelled = 0
        c = OrderedAIOKafkaConsumer(topic, **consumer_config)
        async with c:
            deadline = time.monotonic() + 60
            while oracle.report().unique < expected and time.monotonic() < deadline:
                try:
                    batch = await asyncio.wait_for(c.getmany(timeout_ms=50, max_records=7), rng.uniform(0.001, 0.04))
                except asyncio.TimeoutError:
                    cancelled += 1
                    continue
                for tp, recs in batch.items():
                    for r in recs:
                        oracle.delivered_value(r.key, r.value, where=f"{tp.partition}@{r.offset}")
        return cancelled

    cancelled = asyncio.run(run())
    report = oracle.report()
    assert cancelled > 0
    assert report.violations == (), report.violations[:5]
    assert report.missing == 0, f"{report.missing} acknowledged records not delivered"


def _produce_async(layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
                   oracle: OrderingOracle, ordered: bool) -> None:
    """Per-key sequences from several tasks of one aiokafka producer
    (``send``, ``send_and_wait``), through 2 -> 4 -> 3 -> 5 partitions."""
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        if ordered:
            p: Any = OrderedAIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **opts)
        else:
            # Sees new partitions within half a second (as any producer does after metadata.max.age.ms).
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all", enable_idempotence=True,
                                 metadata_max_age_ms=500)
        seq: Dict[bytes, int] = {}
        futs: List[Tuple[bytes, bytes, Any]] = []
        await p.start()
        try:
            async def rounds(keys: List[bytes], n: int) -> None:
                for i in range(n):
                    for k in keys:
                        v = encode_value("A1", seq.get(k, 0))
                        seq[k] = seq.get(k, 0) + 1
                        if i == 0 and k == keys[0]:
                            await p.send_and_wait(topic, key=k, value=v)
                            oracle.acknowledged_value(k, v)
                        else:
                            futs.append((k, v, await p.send(topic, key=k, value=v)))

            async def all_rounds(n: int) -> None:  # two tasks, disjoint keys
                await asyncio.gather(rounds(KEYS[::2], n), rounds(KEYS[1::2], n))

            await all_rounds(4)
            for step in (lambda: layout_admin.expand(topic, 4), lambda: layout_admin.shrink(topic, 3),
                         lambda: layout_admin.expand(topic, 5)):
                await asyncio.get_running_loop().run_in_executor(None, step)
                if ordered:
                    deadline = time.monotonic() + 10
                    while p.history.current(topic).epoch < layout_admin.layout(topic).epoch:
                        assert time.monotonic() < deadline, "the producer never saw the new layout"
                        await asyncio.sleep(0.01)
                else:
                    await asyncio.sleep(1.5)
                await all_rounds(4)
            await p.flush()
            for k, v, f in futs:
                await f
                oracle.acknowledged_value(k, v)
        finally:
            await p.stop()

    asyncio.run(run())


def _consume_ordered(topic: str, group_config: Dict[str, Any], opts: Dict[str, Any], oracle: OrderingOracle,
                     closing: Callable[[Any], Any]) -> None:
    c = closing(OrderedConsumer({**group_config, "auto.offset.reset": "earliest", **opts}))
    c.subscribe([topic])
    expected = oracle.report().acknowledged
    deadline = time.monotonic() + 60
    while oracle.report().unique < expected and time.monotonic() < deadline:
        for m in c.consume(50, 0.2):
            if m.error() is None:
                oracle.delivered_value(m.key(), m.value(), where=f"{m.partition()}@{m.offset()}")


def test_the_aiokafka_producer_keeps_order_across_expand_and_shrink(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
        group_config: Dict[str, Any], closing: Callable[[Any], Any], idempotent_producers: None) -> None:
    layout_admin.create_topic(topic, 2, spare(6))
    oracle = OrderingOracle()
    _produce_async(layout_admin, topic, bootstrap, opts, oracle, ordered=True)
    _consume_ordered(topic, group_config, opts, oracle, closing)
    report = oracle.report()
    assert report.acknowledged == 4 * 4 * len(KEYS)
    assert report.violations == (), report.violations[:5]
    assert report.missing == 0, f"{report.missing} acknowledged records not delivered"


def test_a_plain_aiokafka_producer_breaks_the_order_an_ordered_consumer_keeps_for_ordered_ones(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
        group_config: Dict[str, Any], closing: Callable[[Any], Any], idempotent_producers: None) -> None:
    """Control: plain aiokafka producers hash keys over the new partition
    count at once (no switch, no registration): the same consumer sees
    reordered keys (proof the oracle can fail)."""
    layout_admin.create_topic(topic, 2, spare(6))
    oracle = OrderingOracle()
    _produce_async(layout_admin, topic, bootstrap, opts, oracle, ordered=False)
    _consume_ordered(topic, group_config, opts, oracle, closing)
    report = oracle.report()
    assert report.missing == 0
    assert report.violations, "expected reordering from plain producers"


def test_the_aiokafka_producer_refuses_what_would_break_the_order(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any], idempotent_producers: None) -> None:
    layout_admin.create_topic(topic, 2, spare(4))

    async def run() -> None:
        with pytest.raises(ConfigError, match="transaction"):
            OrderedAIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="t", **opts)
        with pytest.raises(ConfigError, match="acks"):
            OrderedAIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, **opts)
        async with OrderedAIOKafkaProducer(bootstrap_servers=bootstrap, **opts) as p:
            with pytest.raises(PartitionOverrideError):
                await p.send(topic, key=b"k", value=b"v", partition=1)
            batch = p.create_batch()
            batch.append(key=b"k", value=b"v", timestamp=None)
            with pytest.raises(PartitionOverrideError):
                await p.send_batch(batch, topic, partition=0)
            with pytest.raises(IllegalOperation):  # no transactional_id: as a plain AIOKafkaProducer
                await p.begin_transaction()
            md = await p.send_and_wait(topic, key=b"k", value=b"v")
            assert md.partition == layout_admin.layout(topic).partition_for(b"k")

    asyncio.run(run())


def test_stamps_are_stripped_and_headers_stay_aiokafkas_tuples(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
        consumer_config: Dict[str, Any], closing: Callable[[Any], Any]) -> None:
    """Every record an ordered aiokafka consumer returns shows the headers a
    plain one shows for it, without the ``kafka-ordered.reg`` stamp, and in
    aiokafka's own shape (a tuple), whether the calm check or the full path
    removed the stamp."""
    from kafka_ordered.tokens import HEADER

    oracle = _backlog(layout_admin, topic, bootstrap, opts, closing, [("expand", 3), ("shrink", 2)], per_step=6)
    expected = oracle.report().acknowledged

    async def read(make: Callable[[], Any]) -> Dict[Tuple[int, int], Any]:
        seen: Dict[Tuple[int, int], Any] = {}
        async with make() as c:
            deadline = time.monotonic() + 30
            while len(seen) < expected and time.monotonic() < deadline:
                for tp, recs in (await c.getmany(timeout_ms=100, max_records=25)).items():
                    seen.update({(tp.partition, r.offset): r.headers for r in recs})
        return seen

    plain_config = {k: v for k, v in consumer_config.items() if k not in opts}
    plain = asyncio.run(read(lambda: AIOKafkaConsumer(topic, **plain_config)))
    ordered = asyncio.run(read(lambda: OrderedAIOKafkaConsumer(
        topic, **{**consumer_config, "group_id": f"{consumer_config['group_id']}-ordered"})))
    assert len(plain) == len(ordered) == expected
    assert any(h and h[0][0] == HEADER for h in plain.values()), "the producer stamped records"
    assert ordered == {at: tuple(h for h in headers if h[0] != HEADER) for at, headers in plain.items()}
    assert all(type(h) is tuple for h in ordered.values())


def test_a_split_replay_holds_in_hand_without_a_pause_or_a_seek(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
        consumer_config: Dict[str, Any], closing: Callable[[Any], Any]) -> None:
    """A new group replays both partitions of a split through getmany():
    partition 1 waits at its gate for partition 0, which the same consumer
    delivers a moment later. Its records are kept in hand, not dropped by
    a pause and fetched again after a seek (history replay ran at 0.34x the
    raw client); they come out in offset order, and commits cover exactly
    what was delivered."""
    oracle = _backlog(layout_admin, topic, bootstrap, opts, closing, [("expand", 2)], partitions=1, physical=2,
                      per_step=3)
    expected = oracle.report().acknowledged
    assert [g.partition for g in layout_admin.sync().gates(topic)] == [1]

    async def run() -> Tuple[List[str], Dict[int, int], Dict[int, int], bool]:
        c = OrderedAIOKafkaConsumer(**consumer_config)
        async with c:
            c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            port = c._core.port
            calls: List[str] = []
            pause, seek = port.pause, port.seek
            port.pause = lambda tps: (calls.append(f"pause {tps}"), pause(tps))
            port.seek = lambda tp, off: (calls.append(f"seek {tp} {off}"), seek(tp, off))
            last: Dict[int, int] = {}
            deadline = time.monotonic() + 30
            while oracle.report().unique < expected and time.monotonic() < deadline:
                for tp, recs in (await c.getmany(timeout_ms=100, max_records=25)).items():
                    assert len(recs) <= 25
                    for r in recs:
                        assert r.offset > last.get(tp.partition, -1), "offsets of a partition go up"
                        last[tp.partition] = r.offset
                        oracle.delivered_value(r.key, r.value, where=f"{tp.partition}@{r.offset}")
            await c.commit()
            committed = {q: (await c.committed(TopicPartition(topic, q))) or 0 for q in (0, 1)}
            return calls, last, committed, bool(c.stall_seconds)

    calls, last, committed, stalled = asyncio.run(run())
    report = oracle.report()
    assert report.violations == () and report.duplicates == 0 and report.missing == 0, report
    assert stalled, "partition 1 was held at its gate"
    assert calls == [], "held in hand: nothing was dropped to be fetched again"
    assert committed == {0: last[0] + 1, 1: last[1] + 1}


def test_catch_ups_run_on_the_worker_and_other_decisions_on_the_loop(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
        consumer_config: Dict[str, Any], closing: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A new group replays a backlog across expand and shrink (gates, holds,
    stamped records): every read of the layout log runs on the consumer's
    worker thread, never on the event loop, while fetches that need none are
    decided on the loop itself (a hop to the worker costs more than most
    decisions); the order holds."""
    from kafka_ordered._gating import GatingCore

    oracle = _backlog(layout_admin, topic, bootstrap, opts, closing)
    expected = oracle.report().acknowledged
    threads: Dict[str, List[int]] = {"sync": [], "catch_up_past": [], "settle": []}

    def recorded(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            threads[name].append(threading.get_ident())
            return fn(*args, **kwargs)
        return call

    async def run() -> int:
        c = OrderedAIOKafkaConsumer(**consumer_config)
        async with c:
            follower = type(c._core.follower)
            for name in ("sync", "catch_up_past"):
                monkeypatch.setattr(follower, name, recorded(name, getattr(follower, name)))
            monkeypatch.setattr(GatingCore, "settle", recorded("settle", GatingCore.settle))
            c.subscribe([topic])
            await _drain([c], oracle, expected)
        return threading.get_ident()

    loop_thread = asyncio.run(run())
    report = oracle.report()
    assert report.violations == () and report.missing == 0, report
    assert threads["sync"], "the new group's first fetches caught the view up"
    reads = threads["sync"] + threads["catch_up_past"]
    assert loop_thread not in reads, "a read of the layout log blocked the event loop"
    assert loop_thread in threads["settle"], "no poll was decided on the loop"


def test_a_gate_another_member_opens_is_seen_within_a_long_getmany(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
        consumer_config: Dict[str, Any], closing: Callable[[Any], Any]) -> None:
    """As for the confluent wrapper: while its only partition waits at a gate
    on a partition another member owns, ``getmany(timeout_ms=5000)`` returns
    the held records soon after that member commits, not at the timeout."""
    start, wait = one_split(layout_admin, closing(OrderedProducer({"bootstrap.servers": bootstrap, **opts})), topic)

    async def run() -> Tuple[float, List[int]]:
        c = OrderedAIOKafkaConsumer(**consumer_config)
        async with c:
            c.assign([TopicPartition(topic, 1)])
            deadline = time.monotonic() + 15
            while not (c._core.held() and c._core.calm.quiet):
                assert time.monotonic() < deadline, "the partition was never held at its gate"
                got = await c.getmany(timeout_ms=200)
                assert all(r.offset < start for recs in got.values() for r in recs)
            commit_as_group(bootstrap, consumer_config["group_id"], topic, 0, wait)
            committed = time.monotonic()
            got = {}
            while not got and time.monotonic() - committed < 10:
                got = await c.getmany(timeout_ms=5000)
            assert c._shared is not None
            assert consumer_config["group_id"] not in c._shared.offsets._group_readers, \
                "aiokafka's own coordinator reads the group's commits: no librdkafka client for them"
            return time.monotonic() - committed, [r.offset for r in got.get(TopicPartition(topic, 1), [])]

    took, offsets = asyncio.run(run())
    assert offsets[:1] == [start]
    assert took < 2.5, "the gate's opening waited for the getmany's timeout"


def test_assign_is_aiokafkas_and_a_seek_before_the_first_getmany_wins(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
        consumer_config: Dict[str, Any], closing: Callable[[Any], Any]) -> None:
    """``assign`` is not a coroutine, as aiokafka's is not (``c.assign(...)``
    without ``await`` must assign). Each partition starts where the first
    ``getmany`` decides: at a ``seek`` made before it, else at the group's
    commit; until then the client keeps them paused, whatever the
    application resumes, so nothing is fetched ungated. The gate on
    partition 1 still waits for partition 0, which this consumer reads from
    the group's commit."""
    start, wait = one_split(layout_admin, closing(OrderedProducer({"bootstrap.servers": bootstrap, **opts})), topic)
    commit_as_group(bootstrap, consumer_config["group_id"], topic, 0, 2)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    async def run() -> Tuple[Any, Any, List[Tuple[int, int]], List[Any]]:
        c = OrderedAIOKafkaConsumer(**consumer_config)
        async with c:
            fetcher = c.consumer._fetcher
            resolved: List[Any] = []
            resolve = fetcher._update_fetch_positions

            async def spy(assignment: Any, node_id: int, tps: List[Any]) -> Any:
                resolved.extend(tps)
                return await resolve(assignment, node_id, tps)

            fetcher._update_fetch_positions = spy
            c.assign([p0, p1])
            c.seek(p1, start)
            c.resume(p1)
            await asyncio.sleep(0.3)  # the client's fetcher runs meanwhile
            before = (c.consumer.paused(), c.paused())
            got: List[Tuple[int, int]] = []
            deadline = time.monotonic() + 20
            while not any(q == 1 for q, _ in got) and time.monotonic() < deadline:
                for tp, recs in (await c.getmany(timeout_ms=100)).items():
                    got += [(tp.partition, r.offset) for r in recs]
            return before, c.paused(), got, resolved

    before, after, got, resolved = asyncio.run(run())
    assert resolved == [], "the client's fetcher resolved a position itself (a read and a backoff before fetching)"
    assert before == ({p0, p1}, set()), "held paused in the client, not as the application's pause"
    assert after == set()
    first = {q: next(o for p, o in got if p == q) for q in (0, 1)}
    assert first == {0: 2, 1: start}, got
    assert {o for p, o in got[:got.index((1, start))] if p == 0} >= set(range(2, wait)), \
        "partition 1 was delivered before its gate's wait on partition 0"


def test_assign_leaves_a_partition_without_commit_or_layout_to_aiokafkas_reset(
        topic: str, bootstrap: str, consumer_config: Dict[str, Any]) -> None:
    """A partition of a topic no layout manages, without a commit: it starts
    where aiokafka's ``auto_offset_reset`` says (``earliest`` here), and
    with ``none`` every ``getmany`` raises aiokafka's
    ``NoOffsetForPartitionError`` and nothing is fetched."""
    from confluent_kafka import Producer

    from ..conftest import create_plain_topic

    create_plain_topic(bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        p.produce(topic, b"v%d" % i, b"k")
    assert p.flush(10) == 0
    tp = TopicPartition(topic, 0)

    async def run(reset: str) -> Tuple[List[int], List[BaseException]]:
        c = OrderedAIOKafkaConsumer(**{**consumer_config, "group_id": f"{consumer_config['group_id']}-{reset}",
                                       "auto_offset_reset": reset})
        got: List[int] = []
        raised: List[BaseException] = []
        async with c:
            c.assign([tp])
            deadline = time.monotonic() + (1.5 if reset == "none" else 15)
            while len(got) < 3 and time.monotonic() < deadline:
                try:
                    got += [r.offset for r in (await c.getmany(timeout_ms=100)).get(tp, [])]
                except NoOffsetForPartitionError as e:
                    raised.append(e)
        return got, raised

    assert asyncio.run(run("earliest")) == ([0, 1, 2], [])
    got, raised = asyncio.run(run("none"))
    assert got == [] and len(raised) >= 2, (got, raised)


def test_one_start_per_assignment_whatever_calls_or_cancels_meanwhile(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any],
        consumer_config: Dict[str, Any], closing: Callable[[Any], Any]) -> None:
    """The start of an assignment runs once, whoever asks for it: two
    ``position`` calls at once both get the group's commit; a ``getmany``
    cancelled while the group's commits are read does not end it; a
    ``seek`` made while they are read wins over them. ``assign`` on a
    subscribed consumer is refused by aiokafka and changes nothing."""
    one_split(layout_admin, closing(OrderedProducer({"bootstrap.servers": bootstrap, **opts})), topic)
    group = consumer_config["group_id"]
    commit_as_group(bootstrap, group, topic, 0, 2)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    async def run() -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        c = OrderedAIOKafkaConsumer(**consumer_config)
        async with c:
            read = c._port.read_commits
            reads: List[Any] = []

            async def slow(tps: Any, timeout: Any) -> Any:
                reads.append(sorted(tps))
                await asyncio.sleep(0.3)
                return await read(tps, timeout)

            c._port.read_commits = slow  # type: ignore[method-assign]
            c.assign([p0, p1])
            out["positions"] = await asyncio.gather(c.position(p0), c.position(p1))
            out["owned"] = sorted(c._core.owned)
            out["reads"] = list(reads)
            c.assign([p0])
            cancelled = asyncio.ensure_future(c.getmany(timeout_ms=5000))
            await asyncio.sleep(0.1)
            cancelled.cancel()
            c.seek(p0, 4)  # while the group's commit is read
            got: List[int] = []
            deadline = time.monotonic() + 10
            while not got and time.monotonic() < deadline:
                got = [r.offset for r in (await c.getmany(timeout_ms=200)).get(p0, [])]
            out["first"] = got[:1]
            out["owned_after"] = sorted(c._core.owned)
        s = OrderedAIOKafkaConsumer(**{**consumer_config, "group_id": f"{group}-s"})
        async with s:
            s.subscribe([topic])
            with pytest.raises(IllegalStateError):
                s.assign([p0])
            out["subscribed_listener"] = s._consumer._subscription.subscription is not None
        return out

    out = asyncio.run(run())
    assert out["positions"] == [2, 0] and out["owned"] == [(topic, 0), (topic, 1)], out
    assert out["reads"] == [[(topic, 0), (topic, 1)]], "one start: the group's commits were read once"
    assert out["first"] == [4], "the seek made while the commits were read won"
    assert out["owned_after"] == [(topic, 0)]
    assert out["subscribed_listener"]
