"""Causal freshness tokens on a real broker (issue 12): the kafka-ordered.reg
stamp, the consumer's catch-up on it, the protocol-version record, and the
cost of an idle process."""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kafka_ordered import (
    LayoutAdmin,
    OrderedConsumer,
    OrderedProducer,
    ProtocolVersionError,
    UnsupportedLayoutVersionError,
    partition_for,
)
from kafka_ordered import _log
from kafka_ordered.cli import main as cli_main
from kafka_ordered.layout import Layout
from kafka_ordered.records import encode_layout
from kafka_ordered.tokens import HEADER, decode

from .support import read_all
from ..conftest import create_plain_topic, spare

KEYS = [f"key-{i:04d}".encode() for i in range(200)]
# A connection setting that changes nothing but gives a client its own
# layout-log resources (its own follower) in this process.
OWN_FOLLOWER = {"socket.keepalive.enable": True}


def _wait(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def _freeze(consumer: OrderedConsumer) -> None:
    """Stop the consumer's background follower: its view stays where it is
    unless the consumer itself reads the log (an artificially late follower)."""
    follower = consumer._shared.follower
    follower._stop.set()
    t = follower._thread
    assert t is not None
    t.join(5)
    assert not t.is_alive()


def _stamps(msgs: List[Any]) -> List[Optional[Tuple[str, int]]]:
    out = []
    for m in msgs:
        vals = [v for k, v in (m.headers() or []) if k == HEADER]
        out.append(decode(vals[0]) if vals else None)
    return out


def _mover(old: int, new: int, n_old: int = 2, n_new: int = 4) -> bytes:
    return next(k for k in KEYS if partition_for(k, n_old, n_old) == old and partition_for(k, n_old, n_new) == new)


def test_a_late_consumer_holds_a_stamped_record_until_it_read_the_registration(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    bootstrap: str, topic: str,
) -> None:
    """The consumer's follower learns nothing by itself (frozen); it has
    already fetched partition 2 (so no first-fetch catch-up applies), and
    partition 0 (the source) is paused. The stamped record on 2 makes it read
    the registration and hold 2 at the gate; without the stamp rule it would
    deliver key k's second record before its first."""
    admin.create_topic(topic, 2, physical_partitions=4)
    k = _mover(0, 2)
    producer = make_producer()
    producer.produce(topic, b"k-0", k)
    assert producer.flush(10) == 0
    # Another writer's record in the spare partition 2: the consumer fetches 2 before the change.
    raw = Producer({"bootstrap.servers": bootstrap})
    raw.produce(topic, b"other", None, partition=2)
    assert raw.flush(10) == 0

    consumer = make_consumer(**OWN_FOLLOWER)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(4)])
    consumer.pause([TopicPartition(topic, 0)])
    got: List[Any] = []
    deadline = time.monotonic() + 15
    while not any(m.partition() == 2 for m in got):
        assert time.monotonic() < deadline
        got += consumer.consume(10, 0.1)
    assert [m.value() for m in got] == [b"other"]
    _freeze(consumer)
    view_before = consumer.history.next_offset

    admin.expand(topic, 4)
    _wait(lambda: producer.history.current(topic).epoch == 2)  # type: ignore[union-attr]
    producer.produce(topic, b"k-1", k)  # registers: gate on 2 waiting on 0, then the stamped record
    assert producer.flush(10) == 0
    reg = producer.registrations[-1]
    assert 2 in reg.gates and reg.offset is not None and reg.offset >= view_before
    stamped = read_all(bootstrap, topic, 4)[2]
    assert _stamps(stamped)[-1] == (consumer._shared.follower.log_id, reg.offset)

    end = time.monotonic() + 3
    while time.monotonic() < end:
        got += consumer.consume(10, 0.1)
    assert b"k-1" not in [m.value() for m in got], "delivered a record behind a gate its view did not know"
    assert consumer.history.next_offset > reg.offset  # it read the registration itself
    assert consumer._core.freshness.catch_ups >= 1
    assert [(g.partition, g.start) for g in consumer.gate_status()] == [(2, 1)]

    consumer.resume([TopicPartition(topic, 0)])
    deadline = time.monotonic() + 15
    while b"k-1" not in [m.value() for m in got]:
        assert time.monotonic() < deadline
        got += consumer.consume(10, 0.1)
    values = [m.value() for m in got if m.key() == k]
    assert values == [b"k-0", b"k-1"]


@pytest.mark.parametrize("send", ["produce", "produce_batch"])
def test_stamps_reach_plain_consumers_only_on_the_first_records_and_wrapped_consumers_never(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    bootstrap: str, topic: str, send: str,
) -> None:
    admin.create_topic(topic, 2, physical_partitions=spare(4))
    producer = make_producer()
    movers = [k for k in KEYS if partition_for(k, 2, 2) != partition_for(k, 2, 4)]
    producer.produce(topic, b"before", movers[0], headers=[("app", b"1")])
    producer.flush(10)
    admin.expand(topic, 4)
    _wait(lambda: producer.history.current(topic).epoch == 2)  # type: ignore[union-attr]
    if send == "produce":
        for i in range(60):
            producer.produce(topic, f"after-{i}".encode(), movers[i % len(movers)], headers=[("app", b"1")])
            if i == 29:
                producer.flush(10)  # the first ones are acknowledged: later ones carry no stamp
    else:
        batch = [{"value": f"after-{i}".encode(), "key": movers[i % len(movers)], "headers": [("app", b"1")]}
                 for i in range(30)]
        assert producer.produce_batch(topic, batch) == 30
        producer.flush(10)
        producer.produce_batch(topic, [{"value": f"after-{i}".encode(), "key": movers[i % len(movers)],
                                        "headers": [("app", b"1")]} for i in range(30, 60)])
    assert producer.flush(10) == 0
    reg = producer.registrations[-1]
    assert set(reg.gates) == {2, 3}

    plain = read_all(bootstrap, topic, 4)
    log_id = producer._shared.follower.log_id
    for p in (2, 3):
        stamps = _stamps(plain[p])
        assert stamps[0] == (log_id, reg.offset), "the first record under the new layout is stamped"
        assert stamps[-1] is None, "stamps stop once a stamped record was acknowledged"
        n = stamps.index(None)
        assert all(s == (log_id, reg.offset) for s in stamps[:n]) and all(s is None for s in stamps[n:])
        assert all(("app", b"1") in (m.headers() or []) for m in plain[p])
    assert all(s is None for p in (0, 1) for s in _stamps(plain[p]))  # ungated partitions: never

    consumer = make_consumer()
    consumer.subscribe([topic])
    got: List[Any] = []
    deadline = time.monotonic() + 20
    while len(got) < 61:
        assert time.monotonic() < deadline, f"got {len(got)} of 61"
        got += [m for m in consumer.consume(100, 0.1) if m.error() is None]
    assert all(HEADER not in [k for k, _ in (m.headers() or [])] for m in got)
    assert all(m.headers() == [("app", b"1")] for m in got)


def test_a_stamp_of_another_log_is_ignored_and_stripped(
    admin: LayoutAdmin, make_consumer: Callable[..., OrderedConsumer], bootstrap: str, topic: str,
) -> None:
    admin.create_topic(topic, 2)
    raw = Producer({"bootstrap.servers": bootstrap})
    # A mirrored topic's stamp: names another log, at an offset this log never reaches.
    raw.produce(topic, b"mirrored", b"k", partition=0, headers=[(HEADER, b"someotherlogid:999999")])
    raw.produce(topic, b"next", b"k", partition=0)
    assert raw.flush(10) == 0
    consumer = make_consumer(**{"ordered.metadata.timeout.ms": 3000})
    consumer.subscribe([topic])
    got: List[Any] = []
    deadline = time.monotonic() + 15
    while len(got) < 2:
        assert time.monotonic() < deadline
        got += consumer.consume(10, 0.1)
    assert [m.value() for m in got] == [b"mirrored", b"next"]
    assert got[0].headers() is None
    assert consumer._core.freshness.catch_ups == 0


def test_a_restarting_stable_id_stamps_what_its_last_registration_gated(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], bootstrap: str, topic: str,
) -> None:
    admin.create_topic(topic, 2, physical_partitions=spare(4))
    k = _mover(0, 2)
    first = make_producer(**{"ordered.producer.id": "billing"})
    first.produce(topic, b"a", k)
    first.flush(10)
    admin.expand(topic, 4)
    _wait(lambda: first.history.current(topic).epoch == 2)  # type: ignore[union-attr]
    first.produce(topic, b"b", k)
    first.flush(10)
    reg = first.registrations[-1]
    assert 2 in reg.gates
    first.close()
    # Same epoch: the new incarnation registers nothing, and still stamps (the
    # previous one might have died before its stamped record was acknowledged).
    second = make_producer(**{"ordered.producer.id": "billing"})
    second.produce(topic, b"c", k)
    second.flush(10)
    assert second.registrations[-1].offset is None and second.registrations[-1].gates == {}
    assert _stamps(read_all(bootstrap, topic, 4)[2]) == [(first._shared.follower.log_id, reg.offset)] * 2


def test_kafka_python_clients_stamp_and_strip(
    admin: LayoutAdmin, bootstrap: str, layout_topic: str, topic: str, unique: Callable[[str], str],
    group_settings_kafka_python: Dict[str, Any],
) -> None:
    from kafka_ordered.kafka_python import OrderedKafkaConsumer, OrderedKafkaProducer

    admin.create_topic(topic, 2, physical_partitions=spare(4))
    k = _mover(0, 2)
    conf = {"bootstrap_servers": bootstrap, "ordered.layout.topic": layout_topic}
    producer = OrderedKafkaProducer(**conf)
    try:
        producer.send(topic, b"a", k).get(10)
        admin.expand(topic, 4)
        _wait(lambda: producer.history.current(topic).epoch == 2)  # type: ignore[union-attr]
        producer.send(topic, b"b", k, headers=[("app", b"1")])
        producer.flush(10)
        reg = producer.registrations[-1]
        producer.send(topic, b"c", k)
        producer.flush(10)
    finally:
        producer.close(5)
    plain = read_all(bootstrap, topic, 4)[2]
    log_id = admin._shared.follower.log_id
    assert _stamps(plain) == [(log_id, reg.offset), None]
    assert ("app", b"1") in plain[0].headers()

    consumer = OrderedKafkaConsumer(topic, **conf, group_id=unique("g"), auto_offset_reset="earliest",
                                    **group_settings_kafka_python)
    try:
        got: List[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 3:
            assert time.monotonic() < deadline
            for recs in consumer.poll(200).values():
                got += recs
        assert [r.value for r in got] == [b"a", b"b", b"c"]
        assert [list(r.headers) for r in got] == [[], [("app", b"1")], []]
    finally:
        consumer.close()


# -- the protocol-version record ------------------------------------------------


def _v1_log(bootstrap: str, layout_topic: str, topic: str) -> None:
    """A layout log as protocol 1 clients left it: version-1 records, no protocol record."""
    LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}).close()  # creates it, empty
    d = json.loads(encode_layout(Layout(topic, 1, 2, 2, 4), "create", "old-admin")[1])
    d["v"], d["layout"]["settle_ms"] = 1, 100
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    p.produce(layout_topic, json.dumps(d).encode(), topic.encode(), partition=0)
    assert p.flush(10) == 0


def test_a_fresh_log_starts_with_the_protocol_record(admin: LayoutAdmin, topic: str) -> None:
    assert admin.protocol is None  # empty
    admin.create_topic(topic, 2)
    assert admin.history.protocol == 2 and admin.history.protocol_offset == 0
    assert admin.history.changes(topic)[0].offset == 1


def test_a_protocol_1_log_is_refused_until_upgraded(
    bootstrap: str, layout_topic: str, topic: str, ordered_config: Dict[str, Any], group_config: Dict[str, Any],
    capsys: pytest.CaptureFixture,
) -> None:
    create_plain_topic(bootstrap, topic, 4, 1)
    _v1_log(bootstrap, layout_topic, topic)
    before = _log.active_count()
    with OrderedProducer(ordered_config) as unstarted:  # construction reads no log (issue 27)...
        with pytest.raises(ProtocolVersionError, match="upgrade-protocol") as info:
            unstarted.produce(topic, b"v", KEYS[0])  # ...the first send does
        assert info.value.protocol is None and "protocol 1" in str(info.value)
    with pytest.raises(ProtocolVersionError, match="upgrade-protocol") as info:
        OrderedConsumer({**ordered_config, **group_config})
    assert info.value.protocol is None and "protocol 1" in str(info.value)
    assert _log.active_count() == before  # nothing left running
    with LayoutAdmin(ordered_config) as admin:  # the admin reads it: it is how the log gets upgraded
        assert admin.layout(topic).epoch == 1
        with pytest.raises(ProtocolVersionError):
            admin.expand(topic, 3)
    base = ["--bootstrap", bootstrap, "--layout-topic", layout_topic, "--json"]
    assert cli_main(["upgrade-protocol", *base]) == 0
    assert json.loads(capsys.readouterr().out) == {"layout_topic": layout_topic, "protocol": 2, "offset": 1,
                                                   "changed": True}
    with LayoutAdmin(ordered_config) as admin:
        assert admin.upgrade_protocol() is None  # already upgraded
        admin.expand(topic, 3)  # the old layout record still counts
        assert admin.layout(topic).epoch == 2
    producer = OrderedProducer(ordered_config)
    try:
        producer.produce(topic, b"v", KEYS[0])
        assert producer.flush(10) == 0
    finally:
        producer.close()


def test_a_protocol_1_writer_after_start_stops_the_clients(
    bootstrap: str, layout_topic: str, topic: str, ordered_config: Dict[str, Any],
) -> None:
    producer = OrderedProducer({**ordered_config, "ordered.metadata.timeout.ms": 3000})  # an empty log
    try:
        _v1_log(bootstrap, layout_topic, topic)  # an old admin writes into it
        with pytest.raises(ProtocolVersionError, match="protocol 1"):
            producer.produce(topic, b"v", KEYS[0])  # the first send to the topic reads the log
    finally:
        producer.close(1)


def test_protocol_1_readers_stop_at_the_protocol_record(admin: LayoutAdmin, bootstrap: str, layout_topic: str,
                                                        topic: str) -> None:
    """What an old client's reader sees: the first record has a version it does not read."""
    admin.create_topic(topic, 2)
    first = read_all(bootstrap, layout_topic, 1)[0][0]
    assert json.loads(first.value())["type"] == "protocol"
    with pytest.raises(UnsupportedLayoutVersionError):
        from kafka_ordered.history import LayoutHistory

        v = json.loads(first.value())
        v["v"] = 3  # a protocol-1 client (format 1) sees format 2 exactly as we see format 3
        LayoutHistory().apply(0, first.key(), json.dumps(v).encode())


# -- what an idle process costs ---------------------------------------------------


def _rdkafka_instances() -> int:
    """librdkafka client instances in this process: each has one ``rdk:main`` thread."""
    n = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                n += f.read().strip() == "rdk:main"
        except OSError:
            pass
    return n


def _settled_rdkafka_instances() -> int:
    """:func:`_rdkafka_instances` once earlier tests' garbage is gone: clients
    they left to the garbage collector would otherwise end inside the
    measurement (CI, the pure-Python pass: 15 ended during it)."""
    gc.collect()
    n, deadline = _rdkafka_instances(), time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.2)
        prev, n = n, _rdkafka_instances()
        if n == prev:
            break
    return n


def test_an_idle_producer_and_consumer_cost_one_thread_and_two_clients(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    topic: str,
) -> None:
    admin.create_topic(topic, 2, physical_partitions=spare(4))
    admin.close()  # the test's own admin: not part of the process under test
    time.sleep(0.5)
    assert _log.active_count() == 0
    instances = _settled_rdkafka_instances()
    threads = threading.active_count()
    producer = make_producer()
    consumer = make_consumer()
    consumer.subscribe([topic])
    for i in range(20):
        producer.produce(topic, b"v", KEYS[i])
    assert producer.flush(10) == 0
    got = 0
    deadline = time.monotonic() + 20
    while got < 20:
        assert time.monotonic() < deadline
        got += len(consumer.consume(100, 0.1))
    time.sleep(1.0)  # idle
    # Clients made on demand (the catch-up reader's consumer: the first send
    # and the first fetch read the log's end through it) are closed by the
    # follower thread's housekeeping after IDLE_CLOSE_S unused; run that
    # chore as it runs then, with the second of idleness this test waited.
    assert producer._shared is consumer._shared
    producer._shared.close_idle(0.5)
    extra_threads = threading.active_count() - threads
    extra_instances = _rdkafka_instances() - instances - 2  # minus the application's producer and consumer
    assert extra_threads <= 1, [t.name for t in threading.enumerate()]
    assert extra_instances <= 2
    assert _log.client_count() == extra_instances  # the registry accounts for every internal client


def test_a_transactional_producer_stamps_until_a_stamped_record_is_committed(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], bootstrap: str, topic: str,
) -> None:
    """Stamped records of an aborted transaction do not count: the next
    transaction stamps again. (Also: the producer's registration inside a
    transaction goes through the layout-log writer, which must not take the
    application's transactional.id.)"""
    admin.create_topic(topic, 2, physical_partitions=spare(4))
    k = _mover(0, 2)
    producer = make_producer(**{"transactional.id": f"tx-{os.getpid()}-{time.monotonic_ns()}", **OWN_FOLLOWER})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, b"a", k)
    producer.commit_transaction(10)
    admin.expand(topic, 4)
    _wait(lambda: producer.history.current(topic).epoch == 2)  # type: ignore[union-attr]
    producer.begin_transaction()
    producer.produce(topic, b"aborted", k)  # registers inside the transaction, then the stamped record
    producer.flush(10)
    producer.abort_transaction(10)
    reg = producer.registrations[-1]
    assert 2 in reg.gates
    producer.begin_transaction()
    producer.produce(topic, b"b", k)  # the aborted stamp did not count: stamped again
    producer.commit_transaction(10)
    producer.begin_transaction()
    producer.produce(topic, b"c", k)  # committed: no stamp any more
    producer.commit_transaction(10)
    records = [m for m in read_all(bootstrap, topic, 4, isolation="read_uncommitted")[2]
               if m.value() in (b"aborted", b"b", b"c")]
    log_id = producer._shared.follower.log_id
    assert [(m.value(), s) for m, s in zip(records, _stamps(records))] == [
        (b"aborted", (log_id, reg.offset)), (b"b", (log_id, reg.offset)), (b"c", None)]


def test_clients_made_for_a_switch_are_closed_when_idle_and_made_again(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], bootstrap: str, topic: str,
) -> None:
    admin.create_topic(topic, 2, physical_partitions=spare(8))
    producer = make_producer(**OWN_FOLLOWER)
    producer.produce(topic, b"v", KEYS[0])
    producer.flush(10)
    shared = producer._shared  # started by the first send
    assert shared is not None
    admin.expand(topic, 4)
    _wait(lambda: producer.history.current(topic).epoch == 2, 15)  # type: ignore[union-attr]
    producer.produce(topic, b"v", KEYS[1])
    producer.flush(10)
    assert producer.registrations[-1].offset is not None
    assert shared.clients() == 4  # follower, admin, offset reader, writer
    shared.close_idle(3600.0)
    assert shared.clients() == 4  # used a moment ago: kept
    shared.close_idle(0.0)
    assert shared.clients() == 2  # an idle process keeps the follower and the admin client
    admin.expand(topic, 6)
    _wait(lambda: producer.history.current(topic).epoch == 3, 15)  # type: ignore[union-attr]
    producer.produce(topic, b"v", KEYS[2])  # the next switch makes them again
    assert producer.flush(10) == 0
    assert producer.registrations[-1].epoch == 3 and producer.registrations[-1].offset is not None


# -- the calm path (a consumer whose transitions are passed) still checks every record


def _fetch(consumer: OrderedConsumer, api: str) -> List[Any]:
    if api == "poll":
        m = consumer.poll(0.1)
        return [] if m is None else [m]
    return consumer.consume(10, 0.1)


def _calm_after(consumer: OrderedConsumer, api: str, got: List[Any], n: int) -> None:
    """Fetch until ``got`` holds ``n`` records, then until the consumer is calm."""
    deadline = time.monotonic() + 15
    while len(got) < n or not consumer._core.calm.quiet:
        assert time.monotonic() < deadline, f"{len(got)} of {n} records, calm {consumer._core.calm.quiet}"
        got += _fetch(consumer, api)


def _high_watermark(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafka-ordered-tests-hw", "isolation.level": "read_uncommitted"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


@pytest.mark.parametrize("api", ["poll", "consume"])
def test_a_calm_consumer_still_catches_up_on_a_stamp_and_on_a_gap(
    api: str, admin: LayoutAdmin, make_consumer: Callable[..., OrderedConsumer], bootstrap: str, topic: str,
    unique: Callable[[str], str],
) -> None:
    """Once its transitions are passed a consumer returns the client's fetches
    untouched (the calm path), but a record carrying a stamp beyond its view
    still makes it read the log past the stamp first (and the stamp is
    removed), and a gap in the fetched offsets (here a transaction's commit
    marker) still makes it read the log to its end."""
    admin.create_topic(topic, 1)
    raw = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        raw.produce(topic, b"v%d" % i, b"k", partition=0)
    assert raw.flush(10) == 0
    consumer = make_consumer(**OWN_FOLLOWER)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: List[Any] = []
    _calm_after(consumer, api, got, 3)
    _freeze(consumer)
    view = consumer.history.next_offset
    admin.create_topic(unique("other"), 1)  # one more layout-log record, beyond the frozen view
    mark = admin._shared.follower.sync().next_offset - 1
    assert mark >= view
    log_id = consumer._shared.follower.log_id
    freshness = consumer._core.freshness
    catch_ups, syncs = freshness.catch_ups, freshness.syncs

    raw.produce(topic, b"stamped", b"k", partition=0, headers=[(HEADER, f"{log_id}:{mark}".encode())])
    assert raw.flush(10) == 0
    _calm_after(consumer, api, got, 4)
    assert got[3].value() == b"stamped" and got[3].headers() is None  # the stamp was removed
    assert freshness.catch_ups == catch_ups + 1 and consumer.history.next_offset > mark

    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx")})
    tx.init_transactions(10)
    tx.begin_transaction()
    tx.produce(topic, b"in-tx", b"k", partition=0)
    tx.commit_transaction(10)
    # Apache Kafka writes the commit marker after EndTxn returns: wait for it
    # (the in-transaction record is at 4, the marker at 5) before the next append.
    _wait(lambda: _high_watermark(bootstrap, topic) >= 6)
    raw.produce(topic, b"after-marker", b"k", partition=0)  # one offset after the commit marker
    assert raw.flush(10) == 0
    _calm_after(consumer, api, got, 6)
    assert [m.value() for m in got[4:]] == [b"in-tx", b"after-marker"]
    assert freshness.syncs > syncs


def test_a_calm_kafka_python_consumer_still_catches_up_on_a_stamp(
    admin: LayoutAdmin, bootstrap: str, layout_topic: str, topic: str, unique: Callable[[str], str],
) -> None:
    """The kafka-python adapter's calm path: a stamp beyond the view is still
    caught up on and removed."""
    from kafka import TopicPartition as KTP

    from kafka_ordered.kafka_python import OrderedKafkaConsumer

    admin.create_topic(topic, 1)
    raw = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        raw.produce(topic, b"v%d" % i, b"k", partition=0)
    assert raw.flush(10) == 0
    # client_id gives it its own layout-log resources (a follower we can freeze)
    consumer = OrderedKafkaConsumer(bootstrap_servers=bootstrap, security_protocol="PLAINTEXT",
                                    **{"ordered.layout.topic": layout_topic}, auto_offset_reset="earliest",
                                    group_id=unique("g"), enable_auto_commit=False)
    try:
        consumer.assign([KTP(topic, 0)])
        got: List[Any] = []

        def calm_after(n: int) -> None:
            deadline = time.monotonic() + 15
            while len(got) < n or not consumer._core.calm.quiet:
                assert time.monotonic() < deadline, f"{len(got)} of {n} records"
                for recs in consumer.poll(100).values():
                    got.extend(recs)

        calm_after(3)
        _freeze(consumer)  # type: ignore[arg-type]
        view = consumer.history.next_offset
        admin.create_topic(topic + "-other", 1)
        mark = admin._shared.follower.sync().next_offset - 1
        assert mark >= view
        log_id = consumer._shared.follower.log_id
        raw.produce(topic, b"stamped", b"k", partition=0, headers=[(HEADER, f"{log_id}:{mark}".encode())])
        assert raw.flush(10) == 0
        calm_after(4)
        assert got[3].value == b"stamped" and list(got[3].headers) == []
        assert consumer._shared.follower is not admin._shared.follower, "needs its own follower"
        assert consumer._core.freshness.catch_ups == 1 and consumer.history.next_offset > mark, (
            consumer._core.freshness.syncs, view, mark)
    finally:
        consumer.close()


def test_clients_started_at_once_share_one_follower_set(bootstrap: str, layout_topic: str) -> None:
    """Eight threads acquiring the same (cluster, layout topic) at the same
    moment get one shared set, and the last release closes it."""
    before = _log.active_count()
    barrier = threading.Barrier(8)
    got: List[Any] = []
    errors: List[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            got.append(_log.acquire({"bootstrap.servers": bootstrap}, layout_topic))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert not errors and len(got) == 8
        assert len({id(s) for s in got}) == 1
        assert _log.active_count() == before + 1
    finally:
        for s in got:
            s.release()
    assert _log.active_count() == before


# -- a stamp on a topic the view does not know as managed ----------------------


class _Client:
    """One consumer API, the same scenario: confluent-kafka or kafka-python."""

    def __init__(self, kind: str, bootstrap: str, layout_topic: str, group: str,
                 make_consumer: Callable[..., OrderedConsumer]) -> None:
        self.kind = kind
        if kind == "confluent":
            self.consumer: Any = make_consumer(group=group, **OWN_FOLLOWER)
        else:
            from kafka_ordered.kafka_python import OrderedKafkaConsumer

            # security_protocol gives it its own layout-log resources (a follower we can freeze)
            self.consumer = OrderedKafkaConsumer(
                bootstrap_servers=bootstrap, security_protocol="PLAINTEXT", group_id=group,
                auto_offset_reset="earliest", enable_auto_commit=False, **{"ordered.layout.topic": layout_topic})

    def assign(self, topic: str, partition: int) -> None:
        if self.kind == "confluent":
            self.consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        else:
            from kafka import TopicPartition as KTP

            self.consumer.assign([KTP(topic, partition)])

    def fetch(self) -> List[Tuple[bytes, List[Tuple[str, bytes]]]]:
        """(value, headers) of what one short poll delivers."""
        if self.kind == "confluent":
            return [(m.value(), list(m.headers() or [])) for m in self.consumer.consume(10, 0.1)]
        return [(r.value, list(r.headers or [])) for recs in self.consumer.poll(100).values() for r in recs]

    def close(self) -> None:
        if self.kind != "confluent":
            self.consumer.close()


@pytest.mark.parametrize("kind", ["confluent", "kafka_python"])
def test_a_stamp_on_a_topic_the_view_does_not_know_as_managed_is_caught_up_on(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    bootstrap: str, layout_topic: str, topic: str, unique: Callable[[str], str], kind: str,
) -> None:
    """A consumer assigned to partition 2 of a topic before it is created
    (kafka-python: right after, as its metadata requests create the topic on
    the embedded broker, with a view that missed the creation); its view
    learns nothing by itself (frozen). Key k's first record
    goes to partition 0 under 2 partitions, its second (stamped) to 2 under
    3: the stamp names this consumer's layout log, so the view is stale
    whatever it says about the topic; the consumer catches up, finds the
    gate and holds the record until the group processed partition 0. The
    stamp never reaches the application."""
    group = unique("g")
    client = _Client(kind, bootstrap, layout_topic, group, make_consumer)
    try:
        if kind == "confluent":
            client.assign(topic, 2)
            for _ in range(5):
                client.fetch()
        _freeze(client.consumer)
        k = _mover(0, 2, 2, 3)
        admin.create_topic(topic, 2, physical_partitions=spare(8))
        if kind != "confluent":
            # Its assignment reads the layout log to the end; stand in for the
            # embedded broker's delay in showing a just-appended layout record.
            follower = client.consumer._shared.follower
            follower.sync = lambda: follower.history
            try:
                client.assign(topic, 2)
                for _ in range(5):
                    client.fetch()
            finally:
                del follower.sync
        producer = make_producer()
        producer.produce(topic, b"A", k)
        assert producer.flush(10) == 0
        admin.expand(topic, 3)
        _wait(lambda: producer.history.current(topic).epoch == 2)  # type: ignore[union-attr]
        producer.produce(topic, b"B", k)
        assert producer.flush(10) == 0
        assert _stamps(read_all(bootstrap, topic, 3)[2])[0] is not None, "the record on 2 carries a stamp"
        assert client.consumer.history.current(topic) is None, "the view does not know the topic"

        got: List[Tuple[bytes, List[Tuple[str, bytes]]]] = []
        end = time.monotonic() + 3
        while time.monotonic() < end:
            got += client.fetch()
        assert [v for v, _ in got] == [], "delivered B before the group processed A"
        assert client.consumer.history.current(topic) is not None  # it read the layout itself

        plain = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            plain.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        finally:
            plain.close()
        deadline = time.monotonic() + 20
        while not got:
            assert time.monotonic() < deadline, "B stayed held after its source was processed"
            got += client.fetch()
        assert got == [(b"B", [])], "the stamp reached the application"
    finally:
        client.close()
