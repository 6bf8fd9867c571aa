"""A member whose partition waits at a gate on a partition another member
owns reads that partition's group commit now and then. When the group
coordinator cannot answer (a broker failing over, a network cut), a raw
client's poll goes on returning what it has; the ordered one must too: the
gate stays closed and the read is tried again, nothing is raised from the
poll and nothing held is delivered. Each test stops its own embedded broker
(the shared one stays up).

The read of the group's commits that starts an assignment is tried again
while it may succeed; when it fails for good the partitions stay paused and
are never fetched ungated (the clients would fetch them from their commit)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

from kafka_ordered import OrderedConsumer, OrderedProducer
from kafka_ordered.admin import LayoutAdmin
from kafka_ordered.testing import EmbeddedBroker

from .support import one_split

#: The gate's reads of the source's commit are due every 0.1 s: they fail
#: several times while the broker is down. ordered.metadata.timeout.ms keeps
#: its default (10 s): a read that gates wait on may not stall a poll that long.
GATE_OPTS = {"ordered.commit.interval.ms": 200}
DOWN_FOR_S = 6.0
#: The longest a poll of 0.2 s may take while the coordinator cannot answer:
#: a read that opens gates waits GATE_READ_TIMEOUT_S at most.
LONGEST_POLL_S = 3.0


@pytest.fixture
def private_broker() -> Iterator[EmbeddedBroker]:
    try:
        broker = EmbeddedBroker().start()
    except Exception as e:  # pragma: no cover - no Tansu binary on this machine
        pytest.skip(f"needs a private embedded broker to stop: {e}")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def held_split(private_broker: EmbeddedBroker, unique: Callable[[str], str]) -> Dict[str, Any]:
    """A topic split once on the private broker; the gate on partition 1 waits on partition 0."""
    bootstrap = private_broker.bootstrap_servers
    log = unique("_layout")
    opts = {"ordered.layout.topic": log}
    topic = unique("t")
    with LayoutAdmin({"bootstrap.servers": bootstrap, **opts}) as admin:
        producer = OrderedProducer({"bootstrap.servers": bootstrap, **opts})
        try:
            start, _ = one_split(admin, producer, topic, embedded=True)
        finally:
            producer.close()
    return {"bootstrap": bootstrap, "opts": opts, "topic": topic, "start": start, "broker": private_broker}


def _hold_then_stop(held: Dict[str, Any], core: Any, poll: Callable[[], List[int]]) -> List[int]:
    """Poll until partition 1 is held at its gate, stop the broker, poll on
    for :data:`DOWN_FOR_S`; the offsets of partition 1 delivered after the
    stop. Asserts that no poll took longer than :data:`LONGEST_POLL_S`."""
    deadline = time.monotonic() + 20
    while not core.held():
        assert time.monotonic() < deadline, "the partition was never held at its gate"
        assert all(o < held["start"] for o in poll())
    held["broker"].stop()
    after: List[int] = []
    longest = 0.0
    down = time.monotonic()
    while time.monotonic() - down < DOWN_FOR_S:
        began = time.monotonic()
        after.extend(poll())
        longest = max(longest, time.monotonic() - began)
    assert longest < LONGEST_POLL_S, f"a poll stalled {longest:.1f} s on a read of the unreachable coordinator"
    return after


def test_confluent_consume_goes_on_while_the_coordinator_is_unreachable(held_split: Dict[str, Any],
                                                                       unique: Callable[[str], str]) -> None:
    from confluent_kafka import TopicPartition

    c = OrderedConsumer({"bootstrap.servers": held_split["bootstrap"], "group.id": unique("group"),
                         "auto.offset.reset": "earliest", **held_split["opts"], **GATE_OPTS})
    try:
        c.assign([TopicPartition(held_split["topic"], 1)])

        def poll() -> List[int]:
            return [m.offset() for m in c.consume(100, 0.2) if m.error() is None and m.partition() == 1]

        after = _hold_then_stop(held_split, c._core, poll)
        assert all(o < held_split["start"] for o in after)
        assert [g.partition for g in c.gate_status()] == [1]
    finally:
        c.close()


def test_kafka_python_poll_goes_on_while_the_coordinator_is_unreachable(held_split: Dict[str, Any],
                                                                       unique: Callable[[str], str]) -> None:
    from kafka import TopicPartition

    from kafka_ordered.kafka_python import OrderedKafkaConsumer

    c = OrderedKafkaConsumer(bootstrap_servers=held_split["bootstrap"], group_id=unique("group"),
                             auto_offset_reset="earliest", fetch_max_wait_ms=50, request_timeout_ms=1500,
                             **held_split["opts"], **GATE_OPTS)
    try:
        c.assign([TopicPartition(held_split["topic"], 1)])

        def poll() -> List[int]:
            return [r.offset for tp, rs in c.poll(timeout_ms=200).items() if tp.partition == 1 for r in rs]

        after = _hold_then_stop(held_split, c._core, poll)
        assert all(o < held_split["start"] for o in after)
        assert [g.partition for g in c.gate_status()] == [1]
    finally:
        c.close(autocommit=False, timeout_ms=2000)


def test_aiokafka_getmany_goes_on_while_the_coordinator_is_unreachable(held_split: Dict[str, Any],
                                                                      unique: Callable[[str], str]) -> None:
    pytest.importorskip("aiokafka")
    from aiokafka.structs import TopicPartition

    from kafka_ordered.aiokafka import OrderedAIOKafkaConsumer

    async def run() -> None:
        c = OrderedAIOKafkaConsumer(bootstrap_servers=held_split["bootstrap"], group_id=unique("group"),
                                    auto_offset_reset="earliest", fetch_max_wait_ms=50, request_timeout_ms=1500,
                                    **held_split["opts"], **GATE_OPTS)
        await c.start()
        try:
            c.assign([TopicPartition(held_split["topic"], 1)])
            loop = asyncio.get_running_loop()

            def poll() -> List[int]:
                got = asyncio.run_coroutine_threadsafe(c.getmany(timeout_ms=200), loop)
                return [r.offset for tp, rs in got.result(30).items() if tp.partition == 1 for r in rs]

            after = await asyncio.to_thread(_hold_then_stop, held_split, c._core, poll)
            assert all(o < held_split["start"] for o in after)
            assert [g.partition for g in c.gate_status()] == [1]
        finally:
            await asyncio.wait_for(c.stop(), 10)

    asyncio.run(run())


# -- the group's commits not readable when partitions are assigned

def _written(admin: LayoutAdmin, bootstrap: str, opts: Dict[str, Any], topic: str) -> None:
    admin.create_topic(topic, 2)
    producer = OrderedProducer({"bootstrap.servers": bootstrap, **opts})
    try:
        for i in range(20):
            producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
        producer.flush(10)
    finally:
        producer.close()


class _Failing:
    """Stands in for a read of the group's commits that fails ``times`` times
    with ``error``, then reads for real."""

    def __init__(self, read: Callable[..., Any], error: BaseException, times: int) -> None:
        self.read, self.error, self.left, self.calls = read, error, times, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.left:
            self.left -= 1
            raise self.error
        return self.read(*args, **kwargs)


def _delivered_for(consume: Callable[[], List[Any]], seconds: float) -> Tuple[List[Any], List[BaseException]]:
    got: List[Any] = []
    raised: List[BaseException] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        try:
            got.extend(consume())
        except Exception as e:
            raised.append(e)
    return got, raised


@pytest.mark.parametrize("error, times", [("retriable", 2), ("fatal", 1)])
def test_confluent_never_fetches_a_partition_whose_start_it_could_not_read(
        error: str, times: int, bootstrap: str, layout_topic: str, topic: str,
        make_consumer: Callable[..., OrderedConsumer], group_settings: Dict[str, Any]) -> None:
    """librdkafka assigns the partitions itself when the assignment callback
    raises, and would fetch them ungated. A read the cluster may answer later
    is tried again; one that failed for good leaves the partitions paused
    (nothing of them is delivered) and is raised."""
    from kafka_ordered.errors import BrokerUnavailableError, KafkaOrderedError

    opts = {"ordered.layout.topic": layout_topic}
    with LayoutAdmin({"bootstrap.servers": bootstrap, **opts}) as admin:
        _written(admin, bootstrap, opts, topic)
    c = make_consumer()
    cause = BrokerUnavailableError("no coordinator") if error == "retriable" else KafkaOrderedError("not allowed")
    port = c._core.port
    failing = _Failing(port.committed, cause, times)
    port.committed = failing
    c.subscribe([topic])
    got, raised = _delivered_for(lambda: [m for m in c.consume(100, 0.2) if m.error() is None], 8.0)
    assert failing.calls >= times + (error == "retriable")
    if error == "retriable":
        assert raised == [] and len(got) == 20
    else:
        assert [str(e) for e in raised] == ["not allowed"] and got == []


@pytest.mark.parametrize("error, times", [("retriable", 2), ("fatal", 1)])
def test_kafka_python_never_fetches_a_partition_whose_start_it_could_not_read(
        error: str, times: int, bootstrap: str, layout_topic: str, topic: str, unique: Callable[[str], str],
        closing: Callable[[Any], Any], group_settings_kafka_python: Dict[str, Any]) -> None:
    """The same for kafka-python, which keeps the partitions assigned and
    fetches them from their commit when the listener raises."""
    from kafka.errors import KafkaConnectionError, UnknownTopicOrPartitionError

    from kafka_ordered.kafka_python import OrderedKafkaConsumer

    opts = {"ordered.layout.topic": layout_topic}
    with LayoutAdmin({"bootstrap.servers": bootstrap, **opts}) as admin:
        _written(admin, bootstrap, opts, topic)
    c = closing(OrderedKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=unique("group"),
                                     auto_offset_reset="earliest", fetch_max_wait_ms=50,
                                     **group_settings_kafka_python, **opts))
    coordinator = c._port.coordinator
    cause = KafkaConnectionError("111 ECONNREFUSED") if error == "retriable" else UnknownTopicOrPartitionError()
    failing = _Failing(coordinator.fetch_committed_offsets_async, cause, times)
    coordinator.fetch_committed_offsets_async = failing
    got, raised = _delivered_for(lambda: [r for rs in c.poll(timeout_ms=200).values() for r in rs], 8.0)
    assert failing.calls >= times + (error == "retriable")
    if error == "retriable":
        assert raised == [] and len(got) == 20
    else:
        assert len(raised) == 1 and got == []


def test_aiokafka_never_fetches_a_partition_whose_start_it_could_not_read(
        bootstrap: str, layout_topic: str, topic: str, unique: Callable[[str], str],
        group_settings_kafka_python: Dict[str, Any]) -> None:
    """aiokafka tries a retriable failure again itself; after any other it
    logs the listener's error and would fetch the partitions ungated. The
    partitions stay paused and, as on the other clients, the error is
    raised (once) to the application, out of the next getmany."""
    pytest.importorskip("aiokafka")
    from aiokafka.errors import GroupAuthorizationFailedError

    from kafka_ordered.aiokafka import OrderedAIOKafkaConsumer
    from kafka_ordered.errors import KafkaOrderedError

    opts = {"ordered.layout.topic": layout_topic}
    with LayoutAdmin({"bootstrap.servers": bootstrap, **opts}) as admin:
        _written(admin, bootstrap, opts, topic)

    async def run() -> Tuple[int, List[Any], List[BaseException]]:
        c = OrderedAIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=unique("group"),
                                    auto_offset_reset="earliest", fetch_max_wait_ms=50,
                                    **group_settings_kafka_python, **opts)
        await c.start()
        try:
            coordinator = c._consumer._coordinator
            failing = _Failing(coordinator.fetch_committed_offsets, GroupAuthorizationFailedError(), 1)
            coordinator.fetch_committed_offsets = failing
            c.subscribe([topic])
            got: List[Any] = []
            raised: List[BaseException] = []
            until = time.monotonic() + 6.0
            while time.monotonic() < until:
                try:
                    got.extend(r for rs in (await c.getmany(timeout_ms=200)).values() for r in rs)
                except Exception as e:
                    raised.append(e)
            return failing.calls, got, raised
        finally:
            await asyncio.wait_for(c.stop(), 10)

    calls, got, raised = asyncio.run(run())
    assert calls >= 1 and got == []
    assert len(raised) == 1 and isinstance(raised[0], KafkaOrderedError), raised
    assert isinstance(raised[0].__cause__, GroupAuthorizationFailedError)
