"""The gating consumer on a real broker (issue 4)."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any, Callable, Dict, List, Tuple

import pytest
from confluent_kafka import TopicPartition

from kafka_ordered import (
    ConfigError,
    LayoutAdmin,
    OrderedConsumer,
    OrderedProducer,
    PartitionKeyRebalanceListener,
    partition_for,
)
from kafka_ordered.cli import main as cli_main
from kafka_ordered.testing import OrderingOracle

from .support import answer_of, commit_as_group, one_split
from ..conftest import spare

KEYS = [f"key-{i:04d}".encode() for i in range(200)]
_clock = itertools.count()


class Recorder(PartitionKeyRebalanceListener):
    """Puts listener calls into a shared event list."""

    def __init__(self, name: str, events: List[Tuple[int, str, str, int]]) -> None:
        self.name, self.events = name, events

    def on_partition_key_maybe_revoked(self, partitions: List[Any]) -> None:
        self.events += [(next(_clock), self.name, "maybe_revoked", p.partition) for p in partitions]

    def on_partition_key_assigned(self, partitions: List[Any]) -> None:
        self.events += [(next(_clock), self.name, "assigned", p.partition) for p in partitions]


def _drain(consumers: Dict[str, OrderedConsumer], want: int, events: List[Tuple[int, str, str, int]],
           timeout: float = 30.0) -> OrderingOracle:
    oracle = OrderingOracle()
    got = 0
    deadline = time.monotonic() + timeout
    while got < want and time.monotonic() < deadline:
        for name, c in consumers.items():
            for m in c.consume(100, 0.05):
                assert m.error() is None, m.error()
                events.append((next(_clock), name, "record", m.partition() * 10**9 + m.offset()))
                oracle.delivered_value(m.key(), m.value(), f"{name} p{m.partition()}@{m.offset()}")
                got += 1
    assert got == want, f"delivered {got} of {want}"
    return oracle


def test_listener_hand_off_between_members(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str, unique: Callable[[str], str],
) -> None:
    producer = make_producer()
    start, wait = one_split(admin, producer, topic)
    group = unique("g")
    events: List[Tuple[int, str, str, int]] = []
    owner_q, waiter_p = make_consumer(group), make_consumer(group)
    owner_q.assign([TopicPartition(topic, 0)], listener=Recorder("q", events))
    waiter_p.assign([TopicPartition(topic, 1)], listener=Recorder("p", events))
    oracle = _drain({"p": waiter_p, "q": owner_q}, 6 * len(KEYS), events)
    assert oracle.violations == []

    revoked = [e for e in events if e[2] == "maybe_revoked"]
    assigned = [e for e in events if e[2] == "assigned"]
    assert [(e[1], e[3]) for e in revoked][:1] == [("q", 0)]
    assert [(e[1], e[3]) for e in assigned] == [("p", 1)]
    assert revoked[0][0] < assigned[0][0]
    gated = [e for e in events if e[2] == "record" and e[3] >= 10**9 + start]
    last_source = max(e[0] for e in events if e[2] == "record" and e[3] < wait)
    assert gated and assigned[0][0] < gated[0][0]  # state loaded before the first record behind the gate
    assert last_source < revoked[0][0] < gated[0][0]  # every source record before the gate's records
    assert waiter_p.stall_seconds  # it really waited


def test_listener_order_inside_one_consumer(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str,
) -> None:
    producer = make_producer()
    start, wait = one_split(admin, producer, topic)
    events: List[Tuple[int, str, str, int]] = []
    c = make_consumer()
    c.subscribe([topic], listener=Recorder("c", events))
    oracle = _drain({"c": c}, 6 * len(KEYS), events)
    assert oracle.violations == []
    kinds = [(e[2], e[3]) for e in events if e[2] != "record"]
    assert kinds[:2] == [("maybe_revoked", 0), ("assigned", 1)]
    first_gated = min(e[0] for e in events if e[2] == "record" and e[3] >= 10**9 + start)
    assert max(e[0] for e in events if e[2] == "record" and e[3] < wait) < first_gated


def test_two_groups_gate_independently(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str, unique: Callable[[str], str], bootstrap: str, layout_topic: str, capsys: pytest.CaptureFixture[str],
) -> None:
    producer = make_producer()
    start, wait = one_split(admin, producer, topic)
    g1, g2 = unique("g1"), unique("g2")
    reader = make_consumer(g1)
    reader.assign([TopicPartition(topic, 0)])
    events: List[Tuple[int, str, str, int]] = []
    _drain({"r": reader}, 6 * len(KEYS) - _count_p1(admin, topic), events)
    reader.close()  # commits p0 for g1
    p1_g1, p1_g2 = make_consumer(g1), make_consumer(g2)
    p1_g1.assign([TopicPartition(topic, 1)])
    p1_g2.assign([TopicPartition(topic, 1)])
    deadline = time.monotonic() + 5
    got1 = got2 = 0
    while time.monotonic() < deadline:
        got1 += len(p1_g1.consume(100, 0.05))
        got2 += len(p1_g2.consume(100, 0.05))
    assert got1 == _count_p1(admin, topic) and got2 == 0
    status = p1_g2.gate_status()
    assert [(s.partition, s.start, dict(s.waiting_on)) for s in status] == [(1, start, {0: (wait, 0)})]
    assert cli_main(["describe", topic, "--group", g2, "--bootstrap", bootstrap, "--layout-topic", layout_topic,
                     "--json"]) == 0
    gates = json.loads(capsys.readouterr().out)["gates"]
    assert [(g["partition"], g["open"], g["waiting_on"]["0"]["wait"]) for g in gates] == [(1, False, wait)]
    assert cli_main(["describe", topic, "--group", g1, "--bootstrap", bootstrap, "--layout-topic", layout_topic,
                     "--json"]) == 0
    assert [g["open"] for g in json.loads(capsys.readouterr().out)["gates"]] == [True]


def _count_p1(admin: LayoutAdmin, topic: str) -> int:
    lay = admin.layout(topic)
    return 3 * sum(1 for k in KEYS if lay.partition_for(k) == 1)


def test_crash_while_held_loses_nothing(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str, unique: Callable[[str], str],
) -> None:
    producer = make_producer()
    start, wait = one_split(admin, producer, topic)
    group = unique("g")
    c = make_consumer(group, **{"auto.commit.interval.ms": 100})
    c.assign([TopicPartition(topic, 1)])
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        assert c.consume(100, 0.05) == []  # fetched, held at the gate, never delivered
    assert c.gate_status() and c.gate_status()[0].start == start
    committed = c.committed([TopicPartition(topic, 1)], timeout=5)[0].offset
    assert committed <= start  # held records were not committed
    c.consumer.close()  # crash: no final commit, no wrapper cleanup
    survivor = make_consumer(group)
    survivor.subscribe([topic])
    events: List[Tuple[int, str, str, int]] = []
    oracle = _drain({"s": survivor}, 6 * len(KEYS), events)
    assert oracle.violations == [] and oracle.duplicates == 0


def test_group_starting_at_latest_does_not_wait_forever(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str,
) -> None:
    producer = make_producer()
    start, wait = one_split(admin, producer, topic)
    c = make_consumer(**{"auto.offset.reset": "latest"})
    c.subscribe([topic])
    got: List[Any] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(got) < _count_p1(admin, topic):
        got += c.consume(100, 0.1)
    # The old partition starts at its end (latest); the new one at its start,
    # and its gate opens because the group's start on p0 is committed.
    assert {m.partition() for m in got} == {1}
    assert len(got) == _count_p1(admin, topic)
    assert c.committed([TopicPartition(topic, 0)], timeout=5)[0].offset >= wait


def test_consumer_config_errors(ordered_config: Dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="group.id"):
        OrderedConsumer(dict(ordered_config))
    with pytest.raises(ConfigError, match="not a OrderedConsumer option"):
        OrderedConsumer({**ordered_config, "group.id": "g", "ordered.producer.id": "x"})


def test_a_setting_the_client_refuses_gives_back_the_shared_clients(admin: LayoutAdmin,
                                                                   ordered_config: Dict[str, Any]) -> None:
    """The client is made after the process's shared layout-log clients (its
    first metadata request then names the assigned topics): when librdkafka
    refuses a consumer setting, the reference taken on them is given back."""
    from kafka_ordered import _log

    def refs() -> Dict[Any, int]:
        return {key: s._refs for key, s in _log._registry.items()}

    before = refs()
    assert before, "the admin's set is open: the consumer joins it"
    with pytest.raises(ConfigError, match="session.timeout.ms"):
        OrderedConsumer({**ordered_config, "group.id": "g", "session.timeout.ms": "soon"})
    assert refs() == before


def test_partition_held_across_a_rebalance_is_delivered_after_it(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str, unique: Callable[[str], str],
) -> None:
    """librdkafka keeps a paused partition paused through an eager rebalance;
    a gate hold from before it must not leave the partition stuck."""
    producer = make_producer()
    start, wait = one_split(admin, producer, topic)
    group = unique("g")
    assignments: List[int] = []
    member = make_consumer(group)
    member.subscribe([topic], on_assign=lambda c, ps: assignments.append(len(ps)))
    deadline = time.monotonic() + 10
    while not assignments and time.monotonic() < deadline:
        member.consume(100, 0.1)
    member.pause([TopicPartition(topic, 0)])  # the source is not processed, so p1 stays held
    got: List[Any] = []
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        got += member.consume(100, 0.05)
    assert member.gate_status() and all(m.partition() == 0 for m in got)
    other = make_consumer(group)  # joins: eager rebalance, every partition revoked and reassigned
    other.subscribe([topic])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(assignments) < 2:
        member.consume(100, 0.05)
        other.consume(100, 0.05)
    other.close()  # leaves: member gets both partitions back
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (len(assignments) < 3 or assignments[-1] != 2):
        member.consume(100, 0.05)
    assert len(assignments) >= 3 and assignments[-1] == 2, assignments
    assert member.consume(100, 0.5) == []  # the application's pause survives the rebalance
    member.resume([TopicPartition(topic, 0)])
    got = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(m.partition() == 1 and m.offset() >= start for m in got):
        got += member.consume(100, 0.05)
    assert any(m.partition() == 1 and m.offset() >= start for m in got)


def _values(consumer: OrderedConsumer, n: int, within: float = 15.0) -> List[bytes]:
    got: List[bytes] = []
    deadline = time.monotonic() + within
    while len(got) < n and time.monotonic() < deadline:
        got += [m.value() for m in consumer.consume(10, 0.1) if m.error() is None]
    return got


@pytest.mark.parametrize("reset", ["latest", "earliest"])
def test_assign_honours_logical_start_offsets(
    admin: LayoutAdmin, make_consumer: Callable[..., OrderedConsumer], topic: str, bootstrap: str,
    unique: Callable[[str], str], reset: str,
) -> None:
    """``assign`` at OFFSET_BEGINNING starts at the log start and at OFFSET_END
    at the end, whatever ``auto.offset.reset`` and the group's commit say (as
    with a raw Consumer); found when OFFSET_BEGINNING with the default reset
    "latest" silently skipped every record already in the partition."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Producer

    admin.create_topic(topic, 2)
    raw = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        raw.produce(topic, b"old-%d" % i, b"k", partition=0)
    assert raw.flush(10) == 0
    group = unique("group")
    committer = make_consumer(group, **{"auto.offset.reset": reset})
    committer.assign([TopicPartition(topic, 0, 2)])
    assert _values(committer, 1) == [b"old-2"]
    committer.commit(asynchronous=False)
    committer.close()

    beginning = make_consumer(group, **{"auto.offset.reset": reset})
    beginning.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    assert _values(beginning, 3) == [b"old-0", b"old-1", b"old-2"]

    end = make_consumer(group, **{"auto.offset.reset": reset})
    end.assign([TopicPartition(topic, 0, OFFSET_END)])
    deadline = time.monotonic() + 10
    while not end.assignment() or end.position(end.assignment())[0].offset < 0:
        end.consume(10, 0.1)
        assert time.monotonic() < deadline
    raw.produce(topic, b"new", b"k", partition=0)
    assert raw.flush(10) == 0
    assert _values(end, 1) == [b"new"]


def test_with_offsets_stored_by_the_application_a_gate_waits_for_the_stored_source_offsets(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str,
) -> None:
    """``enable.auto.offset.store=false``: the application stores what it
    finished. Key k's first record A (partition 0) was returned but not
    stored; a commit must never carry partition 0 past A (a crash would then
    skip it), so the gate in front of k's second record B (partition 2)
    waits until A is stored, and commits move partition 0 only as far as
    the application stored."""
    admin.create_topic(topic, 2, physical_partitions=spare(4))
    k = next(k for k in KEYS if partition_for(k, 2, 2) == 0 and partition_for(k, 2, 4) == 2)
    producer = make_producer()
    producer.produce(topic, b"A", k)
    assert producer.flush(10) == 0
    admin.expand(topic, 4)
    deadline = time.monotonic() + 10
    while producer.history.current(topic).epoch != 2:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    producer.produce(topic, b"B", k)
    assert producer.flush(10) == 0

    consumer = make_consumer(**{"enable.auto.offset.store": False, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p) for p in range(4)])
    got: Dict[bytes, Any] = {}
    end = time.monotonic() + 4
    while time.monotonic() < end:
        for m in consumer.consume(10, 0.1):
            got[m.value()] = m
    assert b"A" in got
    if b"B" in got:  # the application finished B, not A
        consumer.store_offsets(message=got[b"B"])
        consumer.commit(asynchronous=False)
    committed = {p.partition: p.offset for p in consumer.committed([TopicPartition(topic, 0)], timeout=10)}
    assert committed[0] < 1, "committed partition 0 past a record the application never stored"
    assert b"B" not in got, "B delivered while A, in front of it, was not finished"

    consumer.store_offsets(message=got[b"A"])
    deadline = time.monotonic() + 15
    while b"B" not in got:
        assert time.monotonic() < deadline, "B stayed held after A was stored"
        for m in consumer.consume(10, 0.1):
            got[m.value()] = m
    consumer.store_offsets(message=got[b"B"])
    consumer.commit(asynchronous=False)
    committed = {p.partition: p.offset
                 for p in consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 2)], timeout=10)}
    assert committed == {0: 1, 2: got[b"B"].offset() + 1}


def test_an_assignment_at_explicit_offsets_the_core_fails_to_record_is_taken_back(
    admin: LayoutAdmin, make_consumer: Callable[..., OrderedConsumer], topic: str, unique: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the core fails to record an assignment, the client must not
    fetch partitions no gate covers."""
    admin.create_topic(topic, 2)
    consumer = make_consumer(unique("group"))

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("layout log unreachable")

    monkeypatch.setattr(consumer._core, "assigned_at", unreachable)
    with pytest.raises(ConnectionError):
        consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    assert consumer.assignment() == []
    with pytest.raises(ConnectionError):
        consumer.incremental_assign([TopicPartition(topic, 0, 0)])
    assert consumer.assignment() == []


def test_a_gate_another_member_opens_is_seen_within_a_long_poll(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str, unique: Callable[[str], str], bootstrap: str,
) -> None:
    """A member whose only partition waits at a gate on a partition another
    member owns may skip its gating work between polls (the calm), but it
    must not sleep through the gate's opening: a ``poll(5.0)`` returns the
    held records soon after the other member commits the source, not when
    its timeout ends."""
    producer = make_producer()
    start, wait = one_split(admin, producer, topic)
    group = unique("group")
    c = make_consumer(group)
    c.assign([TopicPartition(topic, 1, 0)])
    deadline = time.monotonic() + 15
    while not (c._core.held() and c._core.calm.quiet):  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the partition was never held at its gate"
        m = c.poll(0.2)
        assert m is None or m.offset() < start
    commit_as_group(bootstrap, group, topic, 0, wait)  # the member that owns partition 0
    committed = time.monotonic()
    m = c.poll(5.0)
    while m is None and time.monotonic() - committed < 10:
        m = c.poll(5.0)
    assert m is not None and m.partition() == 1 and m.offset() >= start
    assert time.monotonic() - committed < 2.5, "the gate's opening waited for the poll's timeout"


def test_a_gate_that_opens_while_its_partition_is_fetched_costs_no_refetch(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str,
) -> None:
    """A new group replays both partitions of a split: partition 1 is held at
    its gate until partition 0 is processed up to the wait, which the same
    consumer does a moment later. Its held records are kept in hand, not
    dropped by a pause and fetched again: a refetch waits behind the Fetch in
    flight, a long poll of up to fetch.wait.max.ms once partition 0 is
    caught up (the history-replay benchmark lost ~0.5 s at each such release)."""
    producer = make_producer()
    start, wait = one_split(admin, producer, topic)
    c = make_consumer()
    port = c._core.port  # type: ignore[attr-defined]
    calls: List[str] = []
    pause, seek = port.pause, port.seek
    port.pause = lambda tps: (calls.append("pause"), pause(tps))
    port.seek = lambda tp, off: (calls.append("seek"), seek(tp, off))
    c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    events: List[Tuple[int, str, str, int]] = []
    began = time.monotonic()
    oracle = _drain({"c": c}, 6 * len(KEYS), events)
    took = time.monotonic() - began
    assert oracle.violations == [] and oracle.duplicates == 0
    assert c.stall_seconds, "partition 1 was held at its gate"
    assert calls == [], "held without a pause or a seek: nothing was dropped to be fetched again"
    assert took < 2.0


def test_records_kept_in_hand_come_out_one_by_one_through_poll(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str,
) -> None:
    """The same replay through poll(): records kept in hand are delivered one
    per call, in offset order, before anything fetched after them."""
    producer = make_producer()
    one_split(admin, producer, topic)
    c = make_consumer(**{"enable.auto.commit": True, "auto.commit.interval.ms": 50})
    c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    oracle = OrderingOracle()
    last: Dict[int, int] = {}
    got = 0
    deadline = time.monotonic() + 30
    while got < 6 * len(KEYS) and time.monotonic() < deadline:
        m = c.poll(0.05)
        if m is None:
            continue
        assert m.error() is None, m.error()
        assert m.offset() > last.get(m.partition(), -1), "offsets of a partition go up"
        last[m.partition()] = m.offset()
        oracle.delivered_value(m.key(), m.value(), f"p{m.partition()}@{m.offset()}")
        got += 1
    assert got == 6 * len(KEYS) and oracle.violations == [] and oracle.duplicates == 0
    assert c.stall_seconds
    c.commit(asynchronous=False)
    ends = [tp.offset for tp in c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=5)]
    assert ends == [last[0] + 1, last[1] + 1]


def test_a_groups_commits_are_read_without_waiting(bootstrap: str, topic: str, unique: Callable[[str], str]) -> None:
    """What a gate's re-read of other members' commits uses
    (OffsetReader.group_commits): the request is sent at once, the answer
    taken when it came; partitions without a commit are left out, as from
    Consumer.committed."""
    from kafka_ordered._kafka import OffsetReader

    from ..conftest import create_plain_topic

    create_plain_topic(bootstrap, topic, 2)
    group = unique("g")
    commit_as_group(bootstrap, group, topic, 0, 7)
    reader = OffsetReader({"bootstrap.servers": bootstrap})
    try:
        assert answer_of(reader.group_commits(group, [(topic, 1), (topic, 0)], 10.0)) == {(topic, 0): 7}
    finally:
        reader.close()


def test_the_readers_of_groups_commits_are_closed_when_idle_and_made_again(
        bootstrap: str, topic: str, unique: Callable[[str], str]) -> None:
    """The offset reader keeps one client per group whose commits it read;
    like its own consumer, each one not used for the idle time is closed
    (the follower asks every so often), so a process that assigns many
    short-lived groups does not keep a librdkafka client for each."""
    from kafka_ordered._kafka import OffsetReader

    from ..conftest import create_plain_topic

    create_plain_topic(bootstrap, topic, 1)
    groups = [unique("g") for _ in range(3)]
    commit_as_group(bootstrap, groups[0], topic, 0, 4)
    reader = OffsetReader({"bootstrap.servers": bootstrap})

    def read(group: str) -> Dict[Tuple[str, int], int]:
        return answer_of(reader.group_commits(group, [(topic, 0)], 10.0))

    def clients_within(n: int, seconds: float = 5.0) -> int:
        deadline = time.monotonic() + seconds
        while reader.clients != n and time.monotonic() < deadline:
            time.sleep(0.01)
        return reader.clients

    try:
        for g in groups:
            read(g)
        assert reader.clients == 3
        reader.close_if_idle(3600.0)
        assert clients_within(2, 0.3) == 3, "used a moment ago: kept"
        reader.close_if_idle(0.0)
        assert clients_within(0) == 0
        assert read(groups[0]) == {(topic, 0): 4}  # made again on use
        assert reader.clients == 1
    finally:
        reader.close()


def test_closing_a_groups_commit_reader_holds_up_no_read_sent_after_it(
        bootstrap: str, topic: str, unique: Callable[[str], str]) -> None:
    """A group's reader closed with the group's last consumer (librdkafka's
    close can take 100 ms and more) is closed off the thread that sends the
    reads: the read of another group sent right after it answers without
    waiting for that close (a new group's first gate read, next consumer)."""
    import threading

    from kafka_ordered._kafka import OffsetReader

    from ..conftest import create_plain_topic

    create_plain_topic(bootstrap, topic, 1)
    closing_group, reading_group = unique("g"), unique("g")
    commit_as_group(bootstrap, reading_group, topic, 0, 3)
    reader = OffsetReader({"bootstrap.servers": bootstrap})
    release, closed = threading.Event(), threading.Event()
    try:
        reader.use_group(closing_group)
        answer_of(reader.group_commits(closing_group, [(topic, 0)], 10.0))
        real, used = reader._group_readers[closing_group]

        class SlowToClose:
            """The group's client, whose close lasts until the test lets it end."""

            def close(self) -> None:
                release.wait(30)
                real.close()
                closed.set()

        reader._group_readers[closing_group] = (SlowToClose(), used)  # type: ignore[assignment]
        reader.release_group(closing_group)
        assert answer_of(reader.group_commits(reading_group, [(topic, 0)], 10.0)) == {(topic, 0): 3}
        assert not closed.is_set()
        release.set()
        assert closed.wait(10), "the reader was never closed"
    finally:
        release.set()
        reader.close()


def test_a_groups_commit_reader_is_closed_with_the_last_consumer_of_that_group(
        bootstrap: str, topic: str, unique: Callable[[str], str], make_consumer: Callable[..., OrderedConsumer]) -> None:
    """The client made to read a group's commits lives while a consumer of
    that group in this process does: closing the last one closes it at once,
    although the process's other clients keep the shared layout-log clients
    open (it is not left for the idle check, a minute later)."""
    from ..conftest import create_plain_topic

    create_plain_topic(bootstrap, topic, 1)
    group = unique("g")
    first, second, other = make_consumer(group), make_consumer(group), make_consumer()
    offsets = other._shared.offsets
    assert first._shared.offsets is offsets
    commit_as_group(bootstrap, group, topic, 0, 4)
    assert answer_of(offsets.group_commits(group, [(topic, 0)], 10.0)) == {(topic, 0): 4}
    answer_of(offsets.group_commits(other._group_id, [(topic, 0)], 10.0))

    def readers_within(want: set, seconds: float) -> set:
        deadline = time.monotonic() + seconds
        while set(offsets._group_readers) != want and time.monotonic() < deadline:
            time.sleep(0.01)
        return set(offsets._group_readers)

    assert set(offsets._group_readers) == {group, other._group_id}
    first.close()
    assert readers_within({other._group_id}, 0.3) == {group, other._group_id}, "another consumer of it is open"
    second.close()
    assert readers_within({other._group_id}, 5.0) == {other._group_id}
    assert answer_of(offsets.group_commits(group, [(topic, 0)], 10.0)) == {(topic, 0): 4}  # made again on use
