"""Transactions and read_committed (issue 26 §2): a transactional ordered
producer across layout changes inside and between transactions, aborted
stamped records, read_committed ordered consumers whose gates wait behind an
open transaction (and ``describe --group`` saying so), kafka-python's
transactional producer.

The embedded broker returns aborted records to read_committed consumers and
has no last stable offset: tests that need either skip there."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer, partition_for
from kafka_ordered.cli import main as cli_main

from .support import read_all
from .test_causal_tokens import _mover
from .test_compacted import _until_epoch
from ..conftest import on_embedded_broker, spare

NO_READ_COMMITTED = "the embedded broker returns aborted records to read_committed consumers (no last stable offset)"


def _drain(consumer: Any, want: int, timeout: float = 30.0, settle: float = 1.0) -> List[Any]:
    """Consume until ``want`` records arrived, then ``settle`` seconds more."""
    got: List[Any] = []
    deadline = time.monotonic() + timeout
    quiet = None
    while True:
        for m in consumer.consume(100, 0.1):
            assert m.error() is None, m.error()
            got.append(m)
        if len(got) >= want:
            quiet = quiet or time.monotonic() + settle
            if time.monotonic() >= quiet:
                return got
        assert time.monotonic() < deadline, f"got {len(got)} of {want} records"


def _tx_producer(make_producer: Callable[..., OrderedProducer], unique: Callable[[str], str]) -> OrderedProducer:
    p = make_producer(**{"transactional.id": unique("tx")})
    p.init_transactions(30)
    return p


def test_a_switch_inside_an_open_transaction_registers_without_leaving_it(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    bootstrap: str, topic: str, unique: Callable[[str], str],
) -> None:
    """Layout changes between transactions and inside one: the registration
    happens inside the open transaction (its flush is the transaction's),
    the transaction commits as one, and a read_committed ordered group gets
    every key's records in order."""
    admin.create_topic(topic, 2, physical_partitions=spare(8))
    keys = [f"key-{i:03d}".encode() for i in range(100)]
    producer = _tx_producer(make_producer, unique)

    producer.begin_transaction()
    for k in keys:
        producer.produce(topic, b"0:" + k, k)
    producer.commit_transaction(30)
    admin.expand(topic, 4)  # between transactions
    _until_epoch(producer, topic, 2)
    producer.begin_transaction()
    for k in keys:
        producer.produce(topic, b"1:" + k, k)
    admin.expand(topic, 6)  # inside the open transaction
    _until_epoch(producer, topic, 3)
    for k in keys:
        producer.produce(topic, b"2:" + k, k)
    producer.commit_transaction(30)
    assert [(r.from_epoch, r.epoch) for r in producer.registrations] == [(1, 1), (1, 2), (2, 3)]
    assert all(r.offset is not None for r in producer.registrations[1:])

    # Apache Kafka writes the commit markers after commit_transaction() returns:
    # until then the last stable offset, where read_committed reads end, is below them.
    deadline = time.monotonic() + 15
    while True:
        committed = read_all(bootstrap, topic, 6)
        if sum(len(ms) for ms in committed.values()) >= 3 * len(keys) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sum(len(ms) for ms in committed.values()) == 3 * len(keys)
    consumer = make_consumer(**{"isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(6)])
    got = _drain(consumer, 3 * len(keys))
    per_key: Dict[bytes, List[bytes]] = {}
    for m in got:
        per_key.setdefault(m.key(), []).append(m.value()[:1])
    assert per_key == {k: [b"0", b"1", b"2"] for k in keys}


def test_an_aborted_transaction_across_a_switch_is_never_delivered(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    bootstrap: str, topic: str, unique: Callable[[str], str],
) -> None:
    """A transaction that switched layouts and wrote stamped records is
    aborted: read_committed ordered consumers never see its records (the
    holes its records and markers leave are gaps the catch-up handles), and
    the next transaction stamps again (the aborted stamps did not count)."""
    if on_embedded_broker():
        pytest.skip(NO_READ_COMMITTED)
    admin.create_topic(topic, 2)
    k = _mover(0, 2)
    producer = _tx_producer(make_producer, unique)
    producer.begin_transaction()
    producer.produce(topic, b"a", k)
    producer.commit_transaction(30)
    admin.expand(topic, 4)
    _until_epoch(producer, topic, 2)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", k)  # registers inside the transaction; stamped
    assert producer.flush(10) == 0  # (abort would purge it unsent otherwise)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"b", k)
    producer.commit_transaction(30)
    uncommitted = read_all(bootstrap, topic, 4, isolation="read_uncommitted")[2]
    assert [m.value() for m in uncommitted] == [b"aborted", b"b"]
    assert all(any(h == "kafka-ordered.reg" for h, _ in (m.headers() or [])) for m in uncommitted)

    consumer = make_consumer(**{"isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(4)])
    got = _drain(consumer, 2)
    assert [m.value() for m in got] == [b"a", b"b"]


@pytest.mark.parametrize("client", ["ordered", "plain"])
def test_a_gate_waits_behind_an_open_transaction_on_its_source_and_describe_says_so(
    client: str, admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer],
    make_consumer: Callable[..., OrderedConsumer], bootstrap: str, topic: str, unique: Callable[[str], str],
    group_settings: Dict[str, Any], layout_topic: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """Another producer's transaction is open on partition 0 when key k (on
    0) moves to 2. A read_committed group cannot read k's first record (it
    lies beyond the open transaction) until the transaction ends; the gate on
    2 waits for it, and describe --group names the open transaction. Plain
    clients deliver k's second record first (the control)."""
    if on_embedded_broker():
        pytest.skip(NO_READ_COMMITTED)
    admin.create_topic(topic, 2, physical_partitions=4)
    k = _mover(0, 2)
    other = next(f"o{i}".encode() for i in range(1000) if partition_for(f"o{i}".encode(), 2, 4) == 0)
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("other-tx")})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce(topic, b"open", other, partition=0)
    tx.flush(10)

    if client == "ordered":
        producer = make_producer()
        producer.produce(topic, b"k-0", k)
        assert producer.flush(10) == 0
        admin.expand(topic, 4)
        _until_epoch(producer, topic, 2)
        producer.produce(topic, b"k-1", k)
        assert producer.flush(10) == 0
        group = unique("g")
        consumer: Any = make_consumer(group, **{"isolation.level": "read_committed"})
        consumer.subscribe([topic])
    else:
        plain = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        plain.produce(topic, b"k-0", k, partition=0)
        assert plain.flush(10) == 0
        admin.expand(topic, 4)
        plain.produce(topic, b"k-1", k, partition=2)
        assert plain.flush(10) == 0
        group = unique("g")
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "isolation.level": "read_committed", **group_settings})
        consumer.subscribe([topic])

    tx_open = True
    try:
        got: List[Any] = []
        end = time.monotonic() + 12
        while time.monotonic() < end and not got:
            got += [m for m in consumer.consume(10, 0.2) if m.error() is None]
        if client == "plain":
            assert [m.value() for m in got] == [b"k-1"], "the control did not deliver out of order"
            return
        assert got == [], "delivered a record behind a gate that waits for an open transaction"
        desc = admin.describe(topic, group=group)
        waiting = [g for g in desc.gates if not g.open]
        assert [g.partition for g in waiting] == [2]
        assert waiting[0].sources[0].open_transaction == 0  # the transaction's first record holds the LSO
        assert cli_main(["describe", topic, "--group", group, "--bootstrap", bootstrap,
                         "--layout-topic", layout_topic]) == 0
        out = capsys.readouterr().out
        assert "behind an open transaction: read_committed readers stop at offset 0 of partition 0" in out

        tx.commit_transaction(30)
        tx_open = False
        got += _drain(consumer, 3)
        values = [m.value() for m in got if m.key() == k]
        assert values == [b"k-0", b"k-1"]
    finally:
        if client == "plain":
            consumer.close()
        if tx_open:
            tx.abort_transaction(30)


def test_kafka_python_transactional_producer_across_switches_and_an_abort(
    admin: LayoutAdmin, make_consumer: Callable[..., OrderedConsumer], bootstrap: str, layout_topic: str,
    topic: str, unique: Callable[[str], str],
) -> None:
    """kafka-python's transactional producer (3.x): a switch between
    transactions and one inside an open transaction, then an aborted
    transaction; a read_committed ordered group gets the committed records
    of every key in order (the aborted ones only on the embedded broker,
    which returns them: there the test checks order only)."""
    from kafka_ordered.kafka_python import OrderedKafkaProducer

    admin.create_topic(topic, 2, physical_partitions=spare(8))
    keys = [f"key-{i:03d}".encode() for i in range(50)]
    producer = OrderedKafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique("kp-tx"),
                                    **{"ordered.layout.topic": layout_topic})
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for k in keys:
            producer.send(topic, b"0:" + k, k)
        producer.commit_transaction()
        admin.expand(topic, 4)
        _until_epoch(producer, topic, 2)  # type: ignore[arg-type]
        producer.begin_transaction()
        for k in keys:
            producer.send(topic, b"1:" + k, k)
        admin.expand(topic, 6)
        _until_epoch(producer, topic, 3)  # type: ignore[arg-type]
        for k in keys:
            producer.send(topic, b"2:" + k, k)
        producer.commit_transaction()
        producer.begin_transaction()
        for k in keys:
            producer.send(topic, b"3:" + k, k)
        producer.flush()
        producer.abort_transaction()
        assert [(r.from_epoch, r.epoch) for r in producer.registrations][-2:] == [(1, 2), (2, 3)]
    finally:
        producer.close(5)

    consumer = make_consumer(**{"isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(6)])
    aborted_delivered = on_embedded_broker()
    got = _drain(consumer, (4 if aborted_delivered else 3) * len(keys))
    per_key: Dict[bytes, List[bytes]] = {}
    for m in got:
        per_key.setdefault(m.key(), []).append(m.value()[:1])
    want = [b"0", b"1", b"2", b"3"] if aborted_delivered else [b"0", b"1", b"2"]
    assert per_key == {k: want for k in keys}


def test_a_read_committed_consumer_starting_at_latest_gets_an_open_transaction_once_it_commits(
    admin: LayoutAdmin, make_consumer: Callable[..., OrderedConsumer], bootstrap: str, topic: str,
    unique: Callable[[str], str],
) -> None:
    """"latest" is the last stable offset for read_committed readers (as for
    the plain client): a transaction open when the consumer starts is
    delivered once it commits, not skipped."""
    if on_embedded_broker():
        pytest.skip(NO_READ_COMMITTED)
    admin.create_topic(topic, 1)
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx")})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce(topic, b"in-tx", b"k", partition=0)
    tx.flush(10)
    consumer = make_consumer(**{"isolation.level": "read_committed", "auto.offset.reset": "latest"})
    consumer.assign([TopicPartition(topic, 0)])
    assert [m for m in consumer.consume(10, 2.0) if m.error() is None] == []
    tx.commit_transaction(30)
    got = _drain(consumer, 1)
    assert [m.value() for m in got] == [b"in-tx"]
