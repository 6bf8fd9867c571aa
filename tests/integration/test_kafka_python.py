"""The kafka-python wrappers on a real broker: OrderedKafkaProducer switches
layouts and registers correct thresholds, OrderedKafkaConsumer delivers in
order across expand/shrink, callbacks that send during a switch do not
deadlock, and groups use the layout-aware assignor."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest
from confluent_kafka.admin import AdminClient
from kafka.structs import TopicPartition

from kafka_ordered import ConfigError, OrderedProducer, PartitionOverrideError
from kafka_ordered.admin import LayoutAdmin
from kafka_ordered.assignment import assign_partitions
from kafka_ordered.kafka_python import BufferedRecordFuture, OrderedKafkaConsumer, OrderedKafkaProducer
from kafka_ordered.layout import Layout
from kafka_ordered.listener import PartitionKeyRebalanceListener
from kafka_ordered.testing import OrderingOracle, encode_value

from .support import answer_of, commit_as_group, one_split
from ..conftest import create_plain_topic, spare

KEYS = [b"key-%03d" % i for i in range(40)]


@pytest.fixture
def opts(layout_topic: str) -> Dict[str, Any]:
    return {"ordered.layout.topic": layout_topic}


@pytest.fixture
def layout_admin(bootstrap: str, layout_topic: str) -> Iterator[LayoutAdmin]:
    with LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}) as a:
        yield a


@pytest.fixture
def make_producer(bootstrap: str, opts: Dict[str, Any], closing: Callable[[Any], Any]) -> Callable[..., OrderedKafkaProducer]:
    def make(**extra: Any) -> OrderedKafkaProducer:
        return closing(OrderedKafkaProducer(bootstrap_servers=bootstrap, **opts, **{"linger_ms": 5, **extra}))

    return make


@pytest.fixture
def make_consumer(bootstrap: str, opts: Dict[str, Any], closing: Callable[[Any], Any],
                  unique: Callable[[str], str],
                  group_settings_kafka_python: Dict[str, Any]) -> Callable[..., OrderedKafkaConsumer]:
    def make(*topics: str, **extra: Any) -> OrderedKafkaConsumer:
        conf = {"bootstrap_servers": bootstrap, "group_id": unique("group"), "auto_offset_reset": "earliest",
                "fetch_max_wait_ms": 50, **group_settings_kafka_python, **opts, **extra}
        return closing(OrderedKafkaConsumer(*topics, **conf))

    return make


def wait_for_epoch(producer: OrderedKafkaProducer, topic: str, epoch: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while producer.history.current(topic).epoch < epoch:  # type: ignore[union-attr]
        assert time.monotonic() < deadline, f"producer never saw epoch {epoch} of {topic}"
        time.sleep(0.01)


def moved_keys(before: Layout, after: Layout) -> List[bytes]:
    return [k for k in KEYS if before.partition_for(k) != after.partition_for(k)]


# -- configuration ----------------------------------------------------------------


def test_forced_settings_aliases_and_partition_override(bootstrap: str, layout_admin: LayoutAdmin, opts: Dict[str, Any],
                                                        make_producer: Callable[..., OrderedKafkaProducer],
                                                        unique: Callable[[str], str]) -> None:
    with pytest.raises(ConfigError):
        OrderedKafkaProducer(bootstrap_servers=bootstrap, acks=1, **opts)
    with pytest.raises(ConfigError):
        OrderedKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, **opts)
    with pytest.raises(ConfigError):
        OrderedKafkaProducer(bootstrap_servers=bootstrap, ordered_layout_topic="other", **opts)  # conflicting alias
    with pytest.raises(ConfigError):
        OrderedKafkaProducer(bootstrap_servers=bootstrap, ordered_no_such_option=1, **opts)
    with pytest.raises(ConfigError):
        OrderedKafkaConsumer(bootstrap_servers=bootstrap, **opts)  # no group_id

    managed, plain = unique("managed"), unique("plain")
    layout_admin.create_topic(managed, 2, 4)
    create_plain_topic(bootstrap, plain, 3, 1)
    enc: Callable[[Optional[str]], Optional[bytes]] = lambda s: None if s is None else s.encode()
    p = make_producer(ordered_producer_id=unique("stable"), key_serializer=enc, value_serializer=enc)
    assert p.stable_id and p.producer.config["acks"] == -1 and p.producer.config["enable_idempotence"]
    with pytest.raises(PartitionOverrideError):
        p.send(managed, key="k", value="v", partition=1)
    md = p.send(managed, key="k", value="v").get(10)  # serialized key is what the layout hashes
    assert md.partition == Layout(managed, 1, 2, 2, 4).partition_for(b"k")
    assert p.send(managed, value="unkeyed", partition=3).get(10).partition == 3  # unkeyed may pick
    assert p.send(plain, key="k", value="v", partition=2).get(10).partition == 2  # unmanaged: pass-through
    assert p.registrations and p.registrations[0].offset is not None, "a stable id registers at first send"


# -- producer ---------------------------------------------------------------------


def test_producer_switches_within_two_seconds_of_expand(layout_admin: LayoutAdmin, topic: str,
                                                       make_producer: Callable[..., OrderedKafkaProducer]) -> None:
    before = layout_admin.create_topic(topic, 2, spare(8))
    p = make_producer()
    for k in KEYS:
        p.send(topic, key=k, value=b"before")
    p.flush(10)
    after = layout_admin.expand(topic, 4)
    began = time.monotonic()
    probe = moved_keys(before, after)[0]
    while True:
        md = p.send(topic, key=probe, value=b"probe").get(10)
        if md.partition == after.partition_for(probe):
            break
        assert md.partition == before.partition_for(probe)
        assert time.monotonic() - began < 2.0, "no switch within 2 s of expand()"
        time.sleep(0.02)
    assert time.monotonic() - began < 2.0
    reg = p.registrations[-1]
    assert (reg.from_epoch, reg.epoch) == (1, 2) and set(reg.gates) == {2, 3}


def test_thresholds_cover_own_writes_and_new_partitions_wait_for_the_registration(
        layout_admin: LayoutAdmin, topic: str, make_producer: Callable[..., OrderedKafkaProducer]) -> None:
    lay1 = layout_admin.create_topic(topic, 2, spare(6))
    # Multi-record batches: the embedded broker's ListOffsets is wrong for them.
    p = make_producer(linger_ms=30, batch_size=1 << 16)
    acked: List[Tuple[float, int, int, bytes]] = []  # (ack time, partition, offset, key)
    sends: List[Tuple[float, int]] = []  # (time the record entered the client, partition)
    appends: List[Tuple[float, int]] = []  # (time the layout log acknowledged, log offset)

    inner_send = p.producer.send

    def spy_send(topic_: str, **kw: Any) -> Any:
        sends.append((time.monotonic(), kw.get("partition")))
        return inner_send(topic_, **kw)

    p.producer.send = spy_send  # type: ignore[method-assign]
    writer = p._shared.writer  # the process's layout-log writer
    log_append = writer.append

    def spy_append(key: bytes, value: bytes, topic: Optional[str] = None) -> int:
        off = log_append(key, value, topic=topic)
        if topic is None:  # not a snapshot (the admin shares this writer)
            appends.append((time.monotonic(), off))
        return off

    writer.append = spy_append  # type: ignore[method-assign]

    def burst(tag: bytes, rounds: int = 5) -> List[Tuple[float, int, int, bytes]]:
        futs = [(k, p.send(topic, key=k, value=tag)) for _ in range(rounds) for k in KEYS]
        out = []
        for k, f in futs:
            md = f.get(10)
            out.append((time.monotonic(), md.partition, md.offset, k))
        acked.extend(out)
        return out

    def true_ends() -> Dict[int, int]:
        ends: Dict[int, int] = {}
        for _, part, off, _ in acked:
            ends[part] = max(ends.get(part, 0), off + 1)
        return ends

    burst(b"e1")
    ends1 = true_ends()
    lay2 = layout_admin.expand(topic, 4)
    wait_for_epoch(p, topic, 2)
    under2 = burst(b"e2")
    reg2 = p.registrations[-1]
    assert (reg2.from_epoch, reg2.epoch) == (1, 2)
    for target, (start, waits) in reg2.gates.items():
        assert start >= ends1.get(target, 0)
        for q, w in waits.items():
            assert w >= ends1[q] > 0, f"wait on {q} ({w}) below the producer's own end {ends1[q]}"
    assert set(reg2.gates) == {2, 3}

    ends2 = true_ends()
    lay3 = layout_admin.shrink(topic, 3)  # 3 drains back into 1
    wait_for_epoch(p, topic, 3)
    under3 = burst(b"e3")
    reg3 = p.registrations[-1]
    assert set(reg3.gates) == {1}
    start1, waits1 = reg3.gates[1]
    assert start1 >= ends2[1] > 0 and waits1[3] >= ends2[3] > 0
    # Exact on a single-writer topic: the thresholds are the true ends (not
    # the embedded broker's too-low ListOffsets).
    assert start1 == ends2[1] and waits1 == {3: ends2[3]}

    # No keyed record entered a gate's target before its registration was acknowledged...
    ack2 = next(t for t, off in appends if off == reg2.offset)
    assert not [s for s in sends if s[1] in (2, 3) and s[0] < ack2]
    # ...and under the new layout every moved key lands at or after the gate's start.
    for reg, old, new, written in ((reg2, lay1, lay2, under2), (reg3, lay2, lay3, under3)):
        ack = next(t for t, off in appends if off == reg.offset)
        for t, part, off, k in written:
            if old.partition_for(k) != new.partition_for(k) and part == new.partition_for(k):
                assert off >= reg.gates[part][0], f"{k!r} at {part}@{off} before the gate start"
                assert t > ack


def test_callback_sending_during_a_switch_does_not_deadlock(
        layout_admin: LayoutAdmin, topic: str, make_producer: Callable[..., OrderedKafkaProducer],
        unique: Callable[[str], str], bootstrap: str) -> None:
    layout_admin.create_topic(topic, 2, spare(8))
    side = unique("side")  # an unmanaged topic
    create_plain_topic(bootstrap, side, 1, 1)
    # Records linger until a flush: the tests decide when callbacks fire.
    p = make_producer(linger_ms=10_000)
    p.send(topic, key=KEYS[0], value=b"warm")
    p.send(side, value=b"warm")
    p.flush(10)
    resent: List[Tuple[bytes, Any]] = []
    errors: List[BaseException] = []
    on_sender: List[bool] = []

    def resend(key: bytes) -> Callable[[Any], None]:
        def cb(md: Any) -> None:
            on_sender.append(threading.current_thread() is p.producer._sender)
            try:
                resent.append((key, p.send(topic, key=key, value=b"again")))
            except BaseException as e:  # surfaced below
                errors.append(e)
        return cb

    def within(seconds: float, *steps: Callable[[], Any]) -> bool:
        done = threading.Event()

        def run() -> None:
            for step in steps:
                step()
            done.set()

        threading.Thread(target=run, daemon=True).start()
        return done.wait(seconds)

    # Round 1: the main thread's send starts a switch; its flush fires the
    # callbacks of the lingering records, which send again during the switch.
    first = [p.send(topic, key=k, value=b"one").add_callback(resend(k)) for k in KEYS]
    expanded = layout_admin.expand(topic, 4)
    wait_for_epoch(p, topic, 2)
    assert within(25, lambda: p.send(topic, key=KEYS[1], value=b"trigger"), lambda: p.flush(20)), \
        "send/flush deadlocked against callbacks sending during the switch"
    assert not errors and len(on_sender) == len(KEYS) and all(on_sender)
    assert all(f.get(1) for f in first)
    assert len(resent) == len(KEYS)
    assert all(isinstance(f, BufferedRecordFuture) for _, f in resent), "callback sends are buffered by the switch"
    for k, f in resent:
        assert f.get(5).partition == expanded.partition_for(k)
    assert p.registrations[-1].epoch == 2

    # Round 2: after the next change the first send to the managed topic comes
    # from a callback on the sender thread: the switch must run elsewhere.
    resent.clear()
    shrunk = layout_admin.shrink(topic, 3)
    wait_for_epoch(p, topic, 3)
    second = [p.send(side, value=k).add_callback(resend(k)) for k in KEYS]
    assert within(25, lambda: p.flush(20)), "flush deadlocked against a switch started by a callback"
    assert not errors and all(f.get(1) for f in second)
    assert len(resent) == len(KEYS)
    assert p.registrations[-1].epoch == 3, "the callback's send switched layouts"
    for k, f in resent:
        assert f.get(1).partition == shrunk.partition_for(k)


# -- consumer -----------------------------------------------------------------------


class KeyEvents(PartitionKeyRebalanceListener):
    def __init__(self, fail_once: bool = False) -> None:
        self.events: List[Tuple[str, int]] = []
        self.fail_once = fail_once

    def on_partition_key_maybe_revoked(self, partitions: List[Any]) -> None:
        self.events += [("revoked", p.partition) for p in partitions]

    def on_partition_key_assigned(self, partitions: List[Any]) -> None:
        self.events += [("assigned", p.partition) for p in partitions]
        if self.fail_once:
            self.fail_once = False
            raise RuntimeError("state store unavailable")


def _produce_through(layout_admin: LayoutAdmin, topic: str, p: OrderedKafkaProducer,
                     oracle: OrderingOracle, pid: str, steps: List[Callable[[], Any]], per_step: int = 4) -> None:
    """Produce per-key sequences; between rounds apply each layout step."""
    seq: Dict[bytes, int] = {}
    futs: List[Tuple[bytes, bytes, Any]] = []

    def rounds(n: int) -> None:
        for _ in range(n):
            for k in KEYS:
                v = encode_value(pid, seq.get(k, 0))
                seq[k] = seq.get(k, 0) + 1
                futs.append((k, v, p.send(topic, key=k, value=v)))

    rounds(per_step)
    for step in steps:
        step()
        wait_for_epoch(p, topic, layout_admin.layout(topic).epoch)
        rounds(per_step)
    p.flush(20)
    for k, v, f in futs:
        f.get(10)
        oracle.acknowledged_value(k, v)


def _backlog_run(layout_admin: LayoutAdmin, topic: str, make_producer: Callable[..., OrderedKafkaProducer],
                 make_consumer: Callable[..., OrderedKafkaConsumer], fail_once: bool = False, iterate: bool = False,
                 **consumer_extra: Any) -> Tuple[OrderingOracle, OrderedKafkaConsumer, KeyEvents, int]:
    """Produce through 2 -> 4 -> 3 -> 5 partitions, then consume the whole backlog.

    The backlog is there before the consumer starts, so it can fetch new
    partitions before the old ones: only the gates keep the order."""
    layout_admin.create_topic(topic, 2, spare(6))
    oracle = OrderingOracle()
    p = make_producer(linger_ms=20)
    _produce_through(layout_admin, topic, p, oracle, "P1", [
        lambda: layout_admin.expand(topic, 4),
        lambda: layout_admin.shrink(topic, 3),
        lambda: layout_admin.expand(topic, 5),
    ])
    keys = KeyEvents(fail_once)
    c = make_consumer(max_poll_records=25, **consumer_extra)
    c.subscribe([topic], key_listener=keys)
    expected = oracle.report().acknowledged
    deadline = time.monotonic() + 45
    seen = failures = 0
    if iterate:
        for r in c:  # kafka-python's iterator (consumer_timeout_ms ends it)
            oracle.delivered_value(r.key, r.value, where=f"{r.partition}@{r.offset}")
            seen += 1
            if seen >= expected or time.monotonic() > deadline:
                break
        return oracle, c, keys, failures
    while seen < expected and time.monotonic() < deadline:
        try:
            batch = c.poll(timeout_ms=200)
        except RuntimeError:  # the listener's failure: nothing of that fetch is lost
            failures += 1
            continue
        for tp, recs in batch.items():
            for r in recs:
                oracle.delivered_value(r.key, r.value, where=f"{tp.partition}@{r.offset}")
                seen += 1
    return oracle, c, keys, failures


def test_ordering_oracle_across_expand_and_shrink(layout_admin: LayoutAdmin, topic: str,
                                                  make_producer: Callable[..., OrderedKafkaProducer],
                                                  make_consumer: Callable[..., OrderedKafkaConsumer]) -> None:
    oracle, c, keys, failures = _backlog_run(layout_admin, topic, make_producer, make_consumer, fail_once=True)
    assert failures == 1, f"the key listener's exception propagates out of poll ({oracle.report()})"
    report = oracle.report()
    assert report.violations == (), report.violations[:5]
    assert report.missing == 0, f"{report.missing} acknowledged records not delivered"
    physical = layout_admin.layout(topic).physical_partitions  # 6 with spares, 5 where expand created them
    assert c.assignment() == {TopicPartition(topic, q) for q in range(physical)}, "every physical partition assigned"
    # State hand-off: each opened gate announced its target after a source.
    assigned = [i for i, e in enumerate(keys.events) if e[0] == "assigned"]
    assert {keys.events[i][1] for i in assigned} >= {2, 3}
    first_revoked = min(i for i, e in enumerate(keys.events) if e[0] == "revoked")
    assert first_revoked < assigned[0], keys.events
    # Offsets are the wrapper's: what was returned reaches the group.
    c.poll(timeout_ms=100)
    c.commit()
    assert sum(c.committed(TopicPartition(topic, q)) or 0 for q in range(6)) == report.acknowledged


def test_iterator_keeps_the_order_and_hands_out_positions_per_record(
        layout_admin: LayoutAdmin, topic: str, make_producer: Callable[..., OrderedKafkaProducer],
        make_consumer: Callable[..., OrderedKafkaConsumer]) -> None:
    """``for record in consumer`` goes through the gates per fetched batch:
    order kept across expand/shrink, every record once, and a commit after
    the loop covers exactly what was handed out."""
    oracle, c, keys, _ = _backlog_run(layout_admin, topic, make_producer, make_consumer, iterate=True,
                                      consumer_timeout_ms=5000)
    report = oracle.report()
    assert report.violations == (), report.violations[:5]
    assert report.missing == 0, f"{report.missing} acknowledged records not delivered"
    assert report.duplicates == 0
    assert any(e[0] == "assigned" for e in keys.events), "gates opened while iterating"
    c.commit()
    assert sum(c.committed(TopicPartition(topic, q)) or 0 for q in range(6)) == report.acknowledged


def test_oracle_sees_violations_when_gating_is_off(layout_admin: LayoutAdmin, topic: str,
                                                   make_producer: Callable[..., OrderedKafkaProducer],
                                                   make_consumer: Callable[..., OrderedKafkaConsumer]) -> None:
    # Control: the same run without gates reorders keys (proof the oracle can fail).
    oracle, _, _, _ = _backlog_run(layout_admin, topic, make_producer, make_consumer, **{"ordered.gating": False})
    report = oracle.report()
    assert report.missing == 0
    assert report.violations, "expected reordering without gates"


def test_a_groups_commit_reader_is_closed_with_the_last_consumer_of_that_group(
        bootstrap: str, topic: str, unique: Callable[[str], str],
        make_consumer: Callable[..., OrderedKafkaConsumer]) -> None:
    """As for confluent-kafka's OrderedConsumer: the librdkafka client that
    reads a group's commits for its gates is closed with the last consumer
    of that group in this process, while other clients keep the shared ones."""
    create_plain_topic(bootstrap, topic, 1)
    group = unique("g")
    first, second, other = make_consumer(group_id=group), make_consumer(group_id=group), make_consumer()
    offsets = other._shared.offsets
    commit_as_group(bootstrap, group, topic, 0, 4)

    assert answer_of(offsets.group_commits(group, [(topic, 0)], 10.0)) == {(topic, 0): 4}
    answer_of(offsets.group_commits(other._group_id, [(topic, 0)], 10.0))
    first.close()
    time.sleep(0.3)
    assert set(offsets._group_readers) == {group, other._group_id}, "another consumer of it is open"
    second.close()
    deadline = time.monotonic() + 5
    while group in offsets._group_readers and time.monotonic() < deadline:
        time.sleep(0.01)
    assert set(offsets._group_readers) == {other._group_id}


def test_two_member_group_uses_the_layout_aware_assignor(layout_admin: LayoutAdmin, topic: str,
                                                         make_producer: Callable[..., OrderedKafkaProducer],
                                                         make_consumer: Callable[..., OrderedKafkaConsumer],
                                                         unique: Callable[[str], str]) -> None:
    layout_admin.create_topic(topic, 2, spare(8))
    oracle = OrderingOracle()
    p = make_producer()
    _produce_through(layout_admin, topic, p, oracle, "P2", [lambda: layout_admin.expand(topic, 4)], per_step=2)
    layout = layout_admin.layout(topic)
    physical = layout.physical_partitions  # 8 with spares, 4 where expand created them
    group = unique("group")
    members = [make_consumer(topic, group_id=group), make_consumer(topic, group_id=group)]
    expected = oracle.report().acknowledged
    seen = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for i, c in enumerate(members):
            for tp, recs in c.poll(timeout_ms=50).items():
                for r in recs:  # the group's delivery order
                    oracle.delivered_value(r.key, r.value, where=f"member{i}:{tp.partition}@{r.offset}")
                    seen += 1
        gens = {c.consumer._coordinator._generation.generation_id for c in members}
        owned = [c.assignment() for c in members]
        if len(gens) == 1 and all(owned) and sum(len(o) for o in owned) == physical and seen >= expected:
            break
    coords = [c.consumer._coordinator for c in members]
    assert {co._generation.protocol for co in coords} == {"ordered"}
    ids = [co._generation.member_id for co in coords]
    plan = assign_partitions(ids, {topic: physical}, {topic: layout}, {i: {topic} for i in ids})
    for c, mid in zip(members, ids):
        assert c.assignment() == {TopicPartition(topic, q) for q in plan[mid].get(topic, [])}
    owner = {tp.partition: i for i, c in enumerate(members) for tp in c.assignment()}
    assert sorted(owner) == list(range(physical))
    assert owner[0] != owner[1], "undeleted partitions spread first"
    assert owner[2] == owner[0] and owner[3] == owner[1], "new partitions kept with their parents"
    report = oracle.report()
    assert report.violations == () and report.missing == 0, report


def test_partition_held_across_a_rebalance_is_delivered_after_it(
        layout_admin: LayoutAdmin, topic: str, make_producer: Callable[..., OrderedKafkaProducer],
        make_consumer: Callable[..., OrderedKafkaConsumer], unique: Callable[[str], str]) -> None:
    """A partition held at a gate when it is revoked is not left paused in the
    inner KafkaConsumer: when it comes back, its records are delivered once
    the gate opens (issue 10, item 1)."""
    before = layout_admin.create_topic(topic, 2, spare(4))
    group = unique("group")
    member = make_consumer(topic, group_id=group)
    p0 = TopicPartition(topic, 0)
    got: List[Any] = []
    deadline = time.monotonic() + 15
    while len(member.assignment()) < before.physical_partitions and time.monotonic() < deadline:
        got += [r for rs in member.poll(timeout_ms=50).values() for r in rs]
    member.pause(p0)  # the source stays unprocessed, so p2 will be held at its gate
    p = make_producer()
    for k in KEYS:
        p.send(topic, key=k, value=b"1")
    p.flush(10)
    after = layout_admin.expand(topic, 3)
    wait_for_epoch(p, topic, 2)
    moved = [k for k in KEYS if before.partition_for(k) == 0 and after.partition_for(k) == 2]
    for k in moved:
        p.send(topic, key=k, value=b"2")
    p.flush(10)
    # Without spares p2 is new: the member learns it from the layout and rebalances onto it.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not member.gate_status():
        got += [r for rs in member.poll(timeout_ms=50).values() for r in rs]
    assert member.gate_status(), "p2 is held"
    other = make_consumer(topic, group_id=group)  # joins: every partition revoked and reassigned
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not other.assignment():
        got += [r for rs in member.poll(timeout_ms=50).values() for r in rs]
        other.poll(timeout_ms=50)
    other.close()  # leaves: member gets everything back
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(member.assignment()) < 4:
        got += [r for rs in member.poll(timeout_ms=50).values() for r in rs]
    member.resume(p0)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not any(r.partition == 2 for r in got):
        got += [r for rs in member.poll(timeout_ms=50).values() for r in rs]
    assert any(r.partition == 2 and r.value == b"2" for r in got), "p2 stayed paused after the rebalance"


def test_refused_record_during_a_switch_fails_alone(layout_admin: LayoutAdmin, topic: str,
                                                    make_producer: Callable[..., OrderedKafkaProducer]) -> None:
    """A record the client refuses (too large) while a switch buffers sends
    fails alone; later records are delivered and the switch completes
    (issue 10, item 2)."""
    from kafka.errors import MessageSizeTooLargeError

    layout_admin.create_topic(topic, 2, spare(4))
    p = make_producer(max_request_size=10_000)
    p.send(topic, key=KEYS[0], value=b"v").get(10)
    layout_admin.expand(topic, 3)
    wait_for_epoch(p, topic, 2)
    with pytest.raises(MessageSizeTooLargeError):
        p.send(topic, key=KEYS[1], value=b"x" * 20_000).get(10)
    futs = [p.send(topic, key=k, value=b"ok") for k in KEYS[2:12]]
    p.flush(10)
    assert all(f.get(10).offset >= 0 for f in futs)


def test_an_ssl_context_is_an_error_unless_the_internal_clients_get_librdkafka_settings(
        bootstrap: str, opts: Dict[str, Any], make_producer: Callable[..., OrderedKafkaProducer],
        make_consumer: Callable[..., OrderedKafkaConsumer]) -> None:
    """kafka-python's ``ssl_context`` (an object) cannot reach the internal
    librdkafka clients that read the layout log: a clear ConfigError that
    starts nothing, not a layout log read without TLS. With
    ``ordered_librdkafka_config`` the internal clients get those settings."""
    import ssl

    ctx = ssl.create_default_context()
    threads = threading.active_count()
    with pytest.raises(ConfigError, match="ssl_context.*ordered.librdkafka.config"):
        OrderedKafkaProducer(bootstrap_servers=bootstrap, ssl_context=ctx, **opts)
    with pytest.raises(ConfigError, match="ssl_context.*ordered.librdkafka.config"):
        OrderedKafkaConsumer(bootstrap_servers=bootstrap, group_id="g", ssl_context=ctx, **opts)
    assert threading.active_count() == threads
    internal = {"socket.keepalive.enable": True}
    p = make_producer(ssl_context=ctx, ordered_librdkafka_config=internal)
    c = make_consumer(ssl_context=ctx, **{"ordered.librdkafka.config": internal})
    for client in (p, c):
        assert client._shared._conn["socket.keepalive.enable"] is True
        assert client._shared._conn["bootstrap.servers"] == bootstrap


def _poll_until_assigned(consumers: Dict[Any, TopicPartition], timeout: float) -> None:
    """Poll each consumer without waiting (its IO thread runs a join between
    the polls) until it holds its partition, or until the deadline. The
    polls are 0.2 s apart: a round that completes inside a poll is collected
    by kafka-python itself, so the plain control strands only when none
    runs (at 20 ms apart, a loaded CI machine saw it collected once)."""
    deadline = time.monotonic() + timeout
    waiting = dict(consumers)
    while waiting and time.monotonic() < deadline:
        for consumer, tp in list(waiting.items()):
            consumer.poll(timeout_ms=0)
            if tp in consumer.assignment():
                del waiting[consumer]
        time.sleep(0.2)


def test_rejoin_after_partitions_are_added_completes_between_polls(
        cluster_or_skip: Any, bootstrap: str, layout_admin: LayoutAdmin, topic: str, unique: Callable[[str], str],
        make_consumer: Callable[..., OrderedKafkaConsumer], closing: Callable[[Any], Any],
        group_settings_kafka_python: Dict[str, Any]) -> None:
    """kafka-python 3.0.12 strands a JoinGroup/SyncGroup round that a metadata
    change started and that completes while no poll waits on it: the leader's
    assignment makes its snapshots equal again, so no later poll collects the
    round and the member never takes the new assignment (dpkp/kafka-python
    #2855). A plain consumer shows it; the wrapper collects the round."""
    from confluent_kafka.admin import NewPartitions
    from kafka import KafkaConsumer

    layout_admin.create_topic(topic, 2)
    plain_topic = unique("plain")
    create_plain_topic(bootstrap, plain_topic, 2)
    plain = closing(KafkaConsumer(plain_topic, bootstrap_servers=bootstrap, group_id=unique("group"),
                                  metadata_max_age_ms=1000, **group_settings_kafka_python))
    member = make_consumer(topic, metadata_max_age_ms=1000)
    _poll_until_assigned({plain: TopicPartition(plain_topic, 1), member: TopicPartition(topic, 1)}, 15)
    assert member.assignment() == {TopicPartition(topic, p) for p in (0, 1)}

    raw_admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the future resolves
    raw_admin.create_partitions([NewPartitions(plain_topic, 3)])[plain_topic].result(30)
    layout_admin.expand(topic, 3)
    _poll_until_assigned({plain: TopicPartition(plain_topic, 2), member: TopicPartition(topic, 2)}, 15)
    assert member.assignment() == {TopicPartition(topic, p) for p in (0, 1, 2)}, "the wrapper never took partition 2"
    assert plain.assignment() != {TopicPartition(plain_topic, p) for p in (0, 1, 2)}, (
        "kafka-python collected the round itself: collect_finished_join may no longer be needed")


def _watch_pauses_and_seeks(c: OrderedKafkaConsumer) -> List[str]:
    """The pauses and seeks the core asks of the consumer's client from now on."""
    port = c._core.port  # type: ignore[attr-defined]
    calls: List[str] = []
    pause, seek = port.pause, port.seek
    port.pause = lambda tps: (calls.append(f"pause {tps}"), pause(tps))
    port.seek = lambda tp, off: (calls.append(f"seek {tp} {off}"), seek(tp, off))
    return calls


def test_a_split_replay_holds_in_hand_without_a_pause_or_a_seek(
        layout_admin: LayoutAdmin, topic: str, make_producer: Callable[..., OrderedKafkaProducer],
        make_consumer: Callable[..., OrderedKafkaConsumer]) -> None:
    """A new group replays both partitions of a split through poll():
    partition 1 waits at its gate for partition 0, which the same consumer
    delivers a moment later. Its records are kept in hand, not dropped by
    a pause and fetched again after a seek; they come out in offset order,
    and commits cover exactly what was delivered."""
    layout_admin.create_topic(topic, 1, spare(2))
    oracle = OrderingOracle()
    _produce_through(layout_admin, topic, make_producer(linger_ms=20), oracle, "P1",
                     [lambda: layout_admin.expand(topic, 2)], per_step=3)
    assert [g.partition for g in layout_admin.sync().gates(topic)] == [1]
    expected = oracle.report().acknowledged
    c = make_consumer(max_poll_records=25)
    c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    calls = _watch_pauses_and_seeks(c)
    last: Dict[int, int] = {}
    seen = 0
    deadline = time.monotonic() + 30
    while seen < expected and time.monotonic() < deadline:
        for tp, recs in c.poll(timeout_ms=100).items():
            for r in recs:
                assert r.offset > last.get(tp.partition, -1), "offsets of a partition go up"
                last[tp.partition] = r.offset
                oracle.delivered_value(r.key, r.value, where=f"{tp.partition}@{r.offset}")
                seen += 1
    report = oracle.report()
    assert report.violations == () and report.duplicates == 0 and report.missing == 0, report
    assert c.stall_seconds, "partition 1 was held at its gate"
    assert calls == [], "held in hand: nothing was dropped to be fetched again"
    c.commit()
    assert [c.committed(TopicPartition(topic, q)) for q in (0, 1)] == [last[0] + 1, last[1] + 1]


def test_a_gate_another_member_opens_is_seen_within_a_long_poll(
        layout_admin: LayoutAdmin, topic: str, bootstrap: str, opts: Dict[str, Any], unique: Callable[[str], str],
        make_consumer: Callable[..., OrderedKafkaConsumer], closing: Callable[[Any], Any]) -> None:
    """As for the confluent wrapper: while its only partition waits at a gate
    on a partition another member owns, ``poll(timeout_ms=5000)`` returns
    the held records soon after that member commits, not at the timeout."""
    start, wait = one_split(layout_admin, closing(OrderedProducer({"bootstrap.servers": bootstrap, **opts})), topic)
    group = unique("group")
    c = make_consumer(group_id=group)
    c.assign([TopicPartition(topic, 1)])
    deadline = time.monotonic() + 15
    while not (c._core.held() and c._core.calm.quiet):  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the partition was never held at its gate"
        assert all(r.offset < start for recs in c.poll(timeout_ms=200).values() for r in recs)
    commit_as_group(bootstrap, group, topic, 0, wait)
    committed = time.monotonic()
    got: Dict[Any, List[Any]] = {}
    while not got and time.monotonic() - committed < 10:
        got = c.poll(timeout_ms=5000)
    assert [r.offset for r in got.get(TopicPartition(topic, 1), [])][:1] == [start]
    assert time.monotonic() - committed < 2.5, "the gate's opening waited for the poll's timeout"
