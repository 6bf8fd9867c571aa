"""The registering producer on a real broker (issue 3)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Tuple

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kafka_ordered import (
    BrokerUnavailableError,
    ConfigError,
    LayoutAdmin,
    OrderedProducer,
    PartitionOverrideError,
    RegistrationError,
    partition_for,
)
from kafka_ordered.testing import EmbeddedBroker

from .support import produce_keys, read_all
from ..conftest import create_plain_topic, spare

KEYS = [f"key-{i:04d}".encode() for i in range(400)]


def _wait(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_switches_within_2s_and_registers_true_end_offsets(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], bootstrap: str, topic: str, embedded: bool
) -> None:
    admin.create_topic(topic, 4, physical_partitions=spare(8))
    producer = make_producer()
    acks: List[Tuple[bytes, int, int, int]] = []
    seqs: Dict[bytes, int] = {}
    for _ in range(5):  # multi-record batches (linger.ms=5): the embedded broker's ListOffsets goes wrong
        produce_keys(producer, topic, KEYS, seqs, acks)
    producer.flush(10)
    true_end = {p: 1 + max(o for _, _, part, o in acks if part == p) for p in range(4)}
    if embedded:
        # The trap the thresholds avoid: ListOffsets(latest) is below the real end here.
        a = AdminClient({"bootstrap.servers": bootstrap})
        fs = a.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()})
        assert next(iter(fs.values())).result().offset < true_end[0]

    expanded_at = time.monotonic()
    admin.expand(topic, 6)
    # Sending before the follower saw the change would (rightly) write more
    # under the old layout and move the true end; wait so it is known exactly.
    _wait(lambda: producer.history.current(topic).epoch == 2)  # type: ignore[union-attr]
    first_new: Dict[str, float] = {}

    def cb(err: Any, msg: Any) -> None:
        if msg.partition() >= 4 and "t" not in first_new:
            first_new["t"] = time.monotonic()
        acks.append((msg.key(), 0, msg.partition(), msg.offset()))

    while "t" not in first_new:
        for k in KEYS[:50]:
            producer.produce(topic, b"after", k, on_delivery=cb)
        producer.poll(0.01)
        assert time.monotonic() - expanded_at < 10
    producer.flush(10)
    assert first_new["t"] - expanded_at < 2.0, "producer did not switch within 2 s of expand()"

    reg = producer.registrations[-1]
    assert (reg.from_epoch, reg.epoch) == (1, 2)
    assert set(reg.gates) == {4, 5}  # 4 split from 0, 5 from 1
    assert reg.gates[4] == (0, {0: true_end[0]}) and reg.gates[5] == (0, {1: true_end[1]})

    # The registration in the log matches, and was written before any record moved.
    logged = admin.sync().registrations(topic)
    assert [(r.epoch, r.producer_id) for r in logged][-1] == (2, producer.producer_id)
    gates = {g.partition: g for g in logged[-1].gates}
    assert gates[4].wait == {0: true_end[0]} and gates[4].start == 0
    records = read_all(bootstrap, topic, 6)
    moved = records[4] + records[5]
    assert moved and all(m.value() == b"after" for m in moved)
    registered_ms = logged[-1].timestamp_ms
    assert min(m.timestamp()[1] for m in moved) >= registered_ms - 1  # after the registration, with no pause
    for p in (0, 1):  # everything written before the switch is below the wait offset
        before = [m for m in records[p] if m.value() != b"after"]
        assert max(m.offset() for m in before) < gates[p + 4].wait[p]


def test_threshold_check_catches_a_low_end_offset(bootstrap: str, embedded: bool, topic: str) -> None:
    """Why the producer reads ends from fetches: on the embedded broker the
    ListOffsets answer is lower than the true end after a multi-record batch,
    and a gate built from it would let moved keys overtake their last
    records. The OffsetReader used by registrations returns the true end."""
    from confluent_kafka import Producer

    from kafka_ordered._kafka import OffsetReader

    create_plain_topic(bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(100):
        p.produce(topic, b"x", partition=0)
    p.flush(10)
    reader = OffsetReader({"bootstrap.servers": bootstrap})
    try:
        assert reader.end_offsets([(topic, 0)]) == {(topic, 0): 100}
    finally:
        reader.close()
    a = AdminClient({"bootstrap.servers": bootstrap})
    listed = next(iter(a.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()}).values())).result().offset
    if embedded:
        assert listed < 100
    else:
        assert listed == 100


def test_stable_id_restart_registers_from_its_last_epoch(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], topic: str
) -> None:
    admin.create_topic(topic, 2, physical_partitions=spare(4))
    first = make_producer(**{"ordered.producer.id": "billing-1"})
    acks: List[Tuple[bytes, int, int, int]] = []
    produce_keys(first, topic, KEYS, {}, acks)
    first.close()
    assert [(r.epoch, r.gates) for r in first.registrations] == [(1, {})]
    admin.expand(topic, 3)
    admin.expand(topic, 4)
    second = make_producer(**{"ordered.producer.id": "billing-1"})
    produce_keys(second, topic, KEYS[:10], {})
    second.flush(10)
    reg = second.registrations[-1]
    assert (reg.from_epoch, reg.epoch) == (1, 3)
    end = {p: 1 + max(o for _, _, part, o in acks if part == p) for p in (0, 1)}
    assert reg.gates == {2: (0, {0: end[0]}), 3: (0, {1: end[1]})}
    third = make_producer(**{"ordered.producer.id": "billing-1"})
    produce_keys(third, topic, KEYS[:10], {})
    third.flush(10)
    assert third.registrations[-1].gates == {}  # same epoch as its last registration: nothing to wait for


def test_anonymous_restart_uses_the_transition_window(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], topic: str
) -> None:
    admin.create_topic(topic, 2, physical_partitions=spare(4))
    admin.expand(topic, 3)
    inside = make_producer()
    produce_keys(inside, topic, KEYS[:20], {})
    inside.flush(10)
    assert (inside.registrations[-1].from_epoch, sorted(inside.registrations[-1].gates)) == (1, [2])
    outside = make_producer(**{"ordered.transition.window.ms": 0})
    produce_keys(outside, topic, KEYS[:20], {})
    outside.flush(10)
    assert outside.registrations[-1].gates == {}


def test_records_sent_during_a_switch_keep_their_order(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], bootstrap: str, topic: str
) -> None:
    """Records still in flight when a switch starts, records a delivery callback
    sends during the switch's flush, and records other threads send meanwhile
    all arrive once, in send order, without deadlock."""
    admin.create_topic(topic, 2, physical_partitions=spare(4))
    movers = [k for k in KEYS if partition_for(k, 2, 2) != partition_for(k, 2, 4)]
    chain, other_key = movers[0], movers[1]
    producer = make_producer(**{"linger.ms": 400})
    produce_keys(producer, topic, KEYS[:10], {})
    assert producer.flush(10) == 0
    resent: List[str] = []

    def resend(err: Any, msg: Any) -> None:
        assert err is None
        if len(resent) < 50:
            resent.append(f"cb-{len(resent)}")
            producer.produce(topic, resent[-1].encode(), chain)

    for i in range(200):
        producer.produce(topic, f"pre-{i}".encode(), chain, on_delivery=resend)
    admin.expand(topic, 4)
    _wait(lambda: producer.history.current(topic).epoch == 2)  # type: ignore[union-attr]
    stop = threading.Event()
    sent_by_other: List[str] = []

    def other_thread() -> None:
        while not stop.is_set():
            sent_by_other.append(f"t-{len(sent_by_other)}")
            producer.produce(topic, sent_by_other[-1].encode(), other_key)
            time.sleep(0.001)

    t = threading.Thread(target=other_thread)
    t.start()
    producer.produce(topic, b"trigger", chain)  # first keyed send under the new layout: switches
    time.sleep(0.2)
    stop.set()
    t.join(10)
    assert producer.flush(20) == 0
    assert producer.registrations[-1].epoch == 2
    records = read_all(bootstrap, topic, 4)

    def in_order(key: bytes) -> List[str]:
        old, new = partition_for(key, 2, 2), partition_for(key, 2, 4)
        return [m.value().decode() for p in (old, new) for m in records[p]
                if m.key() == key and not m.value().startswith(b"P:")]

    got = in_order(chain)
    # Sends are ordered by when produce() was called; the trigger and the
    # callbacks' sends race (the other thread may start the switch), the
    # records in flight before the switch come first either way.
    assert got[:200] == [f"pre-{i}" for i in range(200)]
    assert len(resent) == 50 and [v for v in got[200:] if v != "trigger"] == resent
    assert sorted(got[200:]) == sorted(resent + ["trigger"])
    assert in_order(other_key) == sent_by_other


def test_explicit_partition_refused_and_unmanaged_passthrough(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], bootstrap: str, topic: str,
    unique: Callable[[str], str],
) -> None:
    admin.create_topic(topic, 2, physical_partitions=4)
    producer = make_producer()
    with pytest.raises(PartitionOverrideError, match="per-key ordering"):
        producer.produce(topic, b"v", b"k", partition=1)
    producer.produce(topic, b"unkeyed-explicit", partition=3)  # allowed: no key, no order to break
    for _ in range(40):
        producer.produce(topic, b"unkeyed")
    plain = unique("plain")
    create_plain_topic(bootstrap, plain, 3)
    producer.produce(plain, b"v", b"k", partition=2)  # unmanaged: anything goes
    assert producer.flush(10) == 0
    records = read_all(bootstrap, topic, 4)
    assert {m.partition() for p in (0, 1) for m in records[p] if m.value() == b"unkeyed"} <= {0, 1}
    assert sum(1 for p in (0, 1) for m in records[p] if m.value() == b"unkeyed") == 40
    assert [m.value() for m in records[3]] == [b"unkeyed-explicit"]
    assert [m.partition() for m in read_all(bootstrap, plain, 3)[2]] == [2]


def test_str_keys_hash_like_their_utf8_bytes(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], bootstrap: str, topic: str
) -> None:
    admin.create_topic(topic, 3, physical_partitions=spare(3))
    producer = make_producer()
    for i in range(100):
        producer.produce(topic, b"v", f"clé-{i}")
    producer.flush(10)
    for p, msgs in read_all(bootstrap, topic, 3).items():
        assert all(partition_for(m.key(), 3, 3) == p for m in msgs)


def test_forced_settings_and_bad_config(ordered_config: Dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="acks"):
        OrderedProducer({**ordered_config, "acks": 1})
    with pytest.raises(ConfigError, match="enable.idempotence"):
        OrderedProducer({**ordered_config, "enable.idempotence": False})
    with pytest.raises(ConfigError, match="unknown configuration key 'ordered.switch.timeout'"):
        OrderedProducer({**ordered_config, "ordered.switch.timeout": 5})
    # Construction needs no broker (issue 27); the first send that needs the layouts fails.
    with OrderedProducer({"bootstrap.servers": "127.0.0.1:1", "ordered.metadata.timeout.ms": 1500}) as unreachable:
        with pytest.raises(BrokerUnavailableError, match="127.0.0.1:1"):
            unreachable.produce("t", b"v", b"k")


def test_registration_failure_keeps_records_buffered(unique: Callable[[str], str]) -> None:
    try:
        broker = EmbeddedBroker().start()
    except Exception as e:  # pragma: no cover
        pytest.skip(f"needs a private embedded broker to stop: {e}")
    conf = {"bootstrap.servers": broker.bootstrap_servers, "ordered.metadata.timeout.ms": 1500}
    topic = unique("t")
    admin = LayoutAdmin(conf)
    producer = OrderedProducer({**conf, "linger.ms": 1, "ordered.switch.timeout.ms": 3000,
                                "message.timeout.ms": 3000})
    try:
        admin.create_topic(topic, 2, physical_partitions=4)
        producer.produce(topic, b"v", b"k")
        assert producer.flush(10) == 0
        admin.expand(topic, 4)
        _wait(lambda: producer.history.current(topic).epoch == 2)  # type: ignore[union-attr]
        broker.stop()
        keys = [k for k in KEYS if admin.history.current(topic).partition_for(k) >= 2][:3]  # type: ignore[union-attr]
        with pytest.raises(RegistrationError, match="stay buffered"):
            producer.produce(topic, b"moved", keys[0])
        assert len(producer) >= 1  # kept, in order, for the next send or flush
    finally:
        with pytest.raises(RegistrationError):
            producer.close(0)  # the buffered record cannot be sent: close says so
        admin.close()
        broker.stop()
