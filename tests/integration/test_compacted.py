"""Compacted topics (issue 26 §1, KIP-253 §9): move tombstones, the gap rule
under real compaction, the snapshots topic, and a 10,000-key changelog
rebuilt from earliest across expand/shrink/expand.

The embedded broker accepts ``cleanup.policy=compact`` but never compacts:
the tests that need compaction to run skip there; the others run on both."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import pytest
from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer, partition_for
from kafka_ordered.layout_log import LayoutFollower
from kafka_ordered.snapshots import snapshot_topic
from kafka_ordered.tombstones import HEADER as MOVED

from .support import read_all
from .test_causal_tokens import OWN_FOLLOWER, _freeze, _mover
from ..conftest import on_embedded_broker, spare

#: Compaction that runs within seconds; per topic, never as broker defaults.
FAST_COMPACTION = {
    "cleanup.policy": "compact",
    "segment.bytes": "1048576",  # the smallest Apache Kafka 4 accepts
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "max.compaction.lag.ms": "100",
    "delete.retention.ms": "100",
    "file.delete.delay.ms": "100",
}
NEVER_COMPACTS = "the embedded broker accepts cleanup.policy=compact but never compacts"
ROLL = b"__roll__"


def _needs_compaction() -> None:
    if on_embedded_broker():
        pytest.skip(NEVER_COMPACTS)


def _moved(m: Any) -> bool:
    return any(k == MOVED for k, _ in (m.headers() or []))


def _roll(bootstrap: str, topic: str, partitions: Iterable[int]) -> None:
    """Close the partitions' active segments (never compacted): one record
    with a fresh key per partition after ``segment.ms``."""
    time.sleep(0.3)
    raw = Producer({"bootstrap.servers": bootstrap})
    stamp = str(time.monotonic_ns()).encode()
    for p in partitions:
        raw.produce(topic, b"roll", ROLL + stamp + b"-%d" % p, partition=p)
    assert raw.flush(10) == 0


def _compacted(bootstrap: str, topic: str, partitions: int, timeout: float = 90.0,
               ready: Optional[Callable[[Dict[int, List[Any]]], bool]] = None,
               unique: bool = True) -> Dict[int, List[Any]]:
    """Wait until no partition holds two records of one key (compaction ran
    over everything but the roll records; ``unique=False``: skip this check)
    and ``ready`` holds; the records then."""
    deadline = time.monotonic() + timeout
    while True:
        got = read_all(bootstrap, topic, partitions)
        done = not unique or all(len({m.key() for m in ms}) == len(ms) for ms in got.values())
        if done and (ready is None or ready(got)):
            return got
        assert time.monotonic() < deadline, f"compaction of {topic} did not finish within {timeout:.0f} s"
        time.sleep(1.0)


def _rebuild(consumer: OrderedConsumer, topic: str, partitions: int, expect: int,
             timeout: float = 60.0) -> Tuple[Dict[bytes, bytes], List[Tuple[bytes, Optional[bytes]]]]:
    """A table rebuilt from earliest through ``consumer`` (assigned every
    partition) until ``expect`` keys are present; also every delivery."""
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    table: Dict[bytes, bytes] = {}
    seen: List[Tuple[bytes, Optional[bytes]]] = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    while True:
        msgs = consumer.consume(1000, 0.2)
        for m in msgs:
            assert m.error() is None, m.error()
            k, v = m.key(), m.value()
            if k.startswith(ROLL):
                continue
            seen.append((k, v))
            if v is None:
                table.pop(k, None)
            else:
                table[k] = v
        if len(table) >= expect:
            # a little longer: anything delivered late would show up now
            quiet_until = quiet_until or time.monotonic() + 1.0
            if time.monotonic() >= quiet_until:
                return table, seen
        assert time.monotonic() < deadline, f"rebuilt {len(table)} of {expect} keys"


def _until_epoch(producer: OrderedProducer, topic: str, epoch: int) -> None:
    deadline = time.monotonic() + 10
    while producer.history.current(topic).epoch != epoch:  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the producer did not see the layout change"
        time.sleep(0.01)


def _phase_of(v: bytes) -> int:
    return int(v.split(b":")[0])


def _write(producer: OrderedProducer, topic: str, keys: List[bytes], phase: int) -> None:
    for k in keys:
        producer.produce(topic, b"%d:%s" % (phase, k), k)
        producer.poll(0)
    assert producer.flush(30) == 0


@pytest.mark.parametrize("policy", ["compact", "delete"])
def test_a_key_that_moved_is_tombstoned_once_in_each_partition_it_left(
    policy: str, admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer],
    make_consumer: Callable[..., OrderedConsumer], bootstrap: str, topic: str,
) -> None:
    """On a compacted topic the first record of a moved key under the new
    layout is followed by one tombstone in the partition it left (none for a
    second record, none for keys that stayed, none on a topic that is not
    compacted); ordered consumers never deliver them, plain ones do, and a
    table rebuilt from earliest holds every key's latest value."""
    admin.create_topic(topic, 2, physical_partitions=spare(4), config={"cleanup.policy": policy})
    keys = [f"key-{i:03d}".encode() for i in range(200)]
    producer = make_producer()
    _write(producer, topic, keys, 0)
    admin.expand(topic, 4)
    _until_epoch(producer, topic, 2)
    _write(producer, topic, keys, 1)
    _write(producer, topic, keys, 2)

    got = read_all(bootstrap, topic, 4)
    tombstones = [(m.partition(), m.key(), m.offset()) for ms in got.values() for m in ms if m.value() is None]
    movers = {k for k in keys if partition_for(k, 2, 2) != partition_for(k, 2, 4)}
    assert movers and len(movers) < len(keys)
    if policy == "delete":
        assert tombstones == []
    else:
        assert sorted((p, k) for p, k, _ in tombstones) == sorted((partition_for(k, 2, 2), k) for k in movers)
        assert all(_moved(m) for ms in got.values() for m in ms if m.value() is None)
        last_old = {m.key(): m.offset() for ms in got.values() for m in ms if m.value() is not None
                    and _phase_of(m.value()) == 0}
        assert all(off > last_old[k] for _, k, off in tombstones)  # after the stale value

    table, seen = _rebuild(make_consumer(), topic, 4, len(keys))
    assert table == {k: b"2:%s" % k for k in keys}
    assert all(v is not None for _, v in seen), "an ordered consumer delivered a move tombstone"
    by_key: Dict[bytes, List[int]] = defaultdict(list)
    for k, v in seen:
        by_key[k].append(_phase_of(v))  # type: ignore[arg-type]
    assert all(ps == sorted(ps) for ps in by_key.values()), "a stale value was delivered after a newer one"


def test_the_tombstones_knob_turns_them_off(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], bootstrap: str, topic: str,
) -> None:
    admin.create_topic(topic, 2, physical_partitions=spare(4), config={"cleanup.policy": "compact"})
    keys = [f"key-{i:03d}".encode() for i in range(50)]
    producer = make_producer(**{"ordered.tombstones": False})
    _write(producer, topic, keys, 0)
    admin.expand(topic, 4)
    _until_epoch(producer, topic, 2)
    _write(producer, topic, keys, 1)
    got = read_all(bootstrap, topic, 4)
    assert not [m for ms in got.values() for m in ms if m.value() is None]


def test_a_move_tombstone_waits_until_the_keys_new_value_is_written(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], bootstrap: str, topic: str,
) -> None:
    """A moved key's new record that the broker refuses (larger than the
    topic's ``max.message.bytes``) gets no tombstone: sent anyway, it would
    let compaction delete the key's last written value. The key's next
    record that is written gets it, once."""
    if on_embedded_broker():
        pytest.skip("the embedded broker does not enforce max.message.bytes")
    admin.create_topic(topic, 2, physical_partitions=spare(4),
                       config={"cleanup.policy": "compact", "max.message.bytes": "2000"})
    keys = [f"key-{i:03d}".encode() for i in range(40)]
    movers = [k for k in keys if partition_for(k, 2, 2) != partition_for(k, 2, 4)]
    producer = make_producer()
    _write(producer, topic, keys, 0)
    admin.expand(topic, 4)
    _until_epoch(producer, topic, 2)
    errors: List[Any] = []
    for k in movers:
        producer.produce(topic, b"x" * 5000, k, on_delivery=lambda err, m: errors.append(err))
    assert producer.flush(30) == 0
    assert len(errors) == len(movers) and all(e is not None for e in errors), errors
    got = read_all(bootstrap, topic, 4)
    assert [m.key() for ms in got.values() for m in ms if m.value() is None] == [], \
        "a tombstone was written for a key whose new value was refused"
    _write(producer, topic, movers, 1)
    got = read_all(bootstrap, topic, 4)
    tombstones = sorted((m.partition(), m.key()) for ms in got.values() for m in ms if m.value() is None)
    assert tombstones == sorted((partition_for(k, 2, 2), k) for k in movers)


def test_a_stamped_record_removed_by_compaction_leaves_a_gap_that_catches_up(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
    bootstrap: str, topic: str,
) -> None:
    """As test_causal_tokens' late consumer, but compaction removes the
    stamped record before the consumer fetches it: the next record on the
    gated partition has no stamp, and only the gap in its offsets tells the
    consumer to read the log. Without the gap rule it would deliver key k's
    third record before its first."""
    _needs_compaction()
    admin.create_topic(topic, 2, physical_partitions=4, config=FAST_COMPACTION)
    k = _mover(0, 2)
    # (without move tombstones: compaction would remove k-0 too, the record the gate orders)
    producer = make_producer(**{"ordered.tombstones": False})
    producer.produce(topic, b"k-0", k)
    assert producer.flush(10) == 0
    raw = Producer({"bootstrap.servers": bootstrap})
    raw.produce(topic, b"other", b"other", partition=2)  # fetched before the layout change is known
    assert raw.flush(10) == 0
    consumer = make_consumer(**OWN_FOLLOWER)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(4)])
    consumer.pause([TopicPartition(topic, 0)])
    got: List[Any] = []
    deadline = time.monotonic() + 15
    while not any(m.partition() == 2 for m in got):
        assert time.monotonic() < deadline
        got += consumer.consume(10, 0.1)
    consumer.pause([TopicPartition(topic, 2)])
    _freeze(consumer)
    admin.expand(topic, 4)

    _until_epoch(producer, topic, 2)
    producer.produce(topic, b"k-1", k)  # registers: gate on 2 waiting on 0; stamped record at 2@1
    assert producer.flush(10) == 0
    reg = producer.registrations[-1]
    assert 2 in reg.gates and reg.offset is not None
    producer.produce(topic, b"k-2", k)  # not stamped (k-1 was acknowledged): it replaces k-1 under compaction
    assert producer.flush(10) == 0
    _roll(bootstrap, topic, [2])  # (a record on 1 or 3 would be a first fetch there: a catch-up of its own)
    left = _compacted(bootstrap, topic, 4, ready=lambda g: b"k-1" not in [m.value() for m in g[2]])[2]
    assert [m.value() for m in left][:2] == [b"other", b"k-2"] and left[1].offset() == 2
    assert not any(_moved(m) for m in left)

    consumer.resume([TopicPartition(topic, 2)])
    end = time.monotonic() + 3
    while time.monotonic() < end:
        got += consumer.consume(10, 0.1)
    assert b"k-2" not in [m.value() for m in got], "delivered a record behind a gate its view did not know"
    assert consumer.history.next_offset > reg.offset

    consumer.resume([TopicPartition(topic, 0)])
    deadline = time.monotonic() + 15
    while b"k-2" not in [m.value() for m in got]:
        assert time.monotonic() < deadline
        got += consumer.consume(10, 0.1)
    assert [m.value() for m in got if m.key() == k] == [b"k-0", b"k-2"]


def test_the_snapshots_topic_is_compacted_and_a_reader_starts_from_the_newest_snapshot(
    admin: LayoutAdmin, bootstrap: str, layout_topic: str, topic: str,
) -> None:
    """The layout log refuses compaction; its snapshots topic is created
    compacted (all snapshots share one key): compaction leaves the newest,
    and a reader starts from it."""
    admin.create_topic(topic, 2, physical_partitions=spare(8))
    snaps = snapshot_topic(layout_topic)
    kafka_admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.TOPIC, snaps)
    cfg = kafka_admin.describe_configs([res])[res].result()
    assert "compact" in cfg["cleanup.policy"].value
    if on_embedded_broker():
        return  # (it never compacts; the rest needs compaction)
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in FAST_COMPACTION.items() if k != "cleanup.policy"]
    kafka_admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, snaps, incremental_configs=entries)])[
        ConfigResource(ResourceType.TOPIC, snaps)].result()
    for n in (3, 4, 5, 6):
        admin.expand(topic, n)  # each writes a snapshot
    covered = admin.sync().next_offset
    time.sleep(0.3)
    follower = LayoutFollower({"bootstrap.servers": bootstrap}, layout_topic)
    try:
        follower.start()
        assert follower.write_snapshot()  # rolls the segment of the earlier ones
    finally:
        follower.close()
    # (the newest is in the active segment, never compacted: the closed one keeps its own newest).
    # A read while the cleaner swaps segments can come back short (seen once in a loaded
    # CI run: only offset 0): read again until the newest is there, or time out.
    left = _compacted(bootstrap, snaps, 1, unique=False,
                      ready=lambda g: len(g[0]) <= 2 and bool(g[0]) and g[0][-1].offset() >= 4)[0]
    assert left[-1].offset() >= 4
    reader = LayoutFollower({"bootstrap.servers": bootstrap}, layout_topic)
    try:
        reader.start()
        assert reader.snapshot_offset == covered
        assert reader.history.current(topic).partitions == 6  # type: ignore[union-attr]
    finally:
        reader.close()


@pytest.mark.parametrize("tombstones", [True, False], ids=["tombstones", "control-without-tombstones"])
def test_a_changelog_of_10000_keys_rebuilds_exactly_across_expand_shrink_expand_under_compaction(
    tombstones: bool, admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer],
    make_consumer: Callable[..., OrderedConsumer], bootstrap: str, topic: str,
) -> None:
    """Phases 0-3 write every key under 2, 4, 3 and 4 partitions, with
    compaction run between them. A fresh ordered group rebuilds the table
    from earliest: every key's latest value, never a stale one after a newer
    one. After compaction exactly one live copy of each key is left across
    all partitions; without the tombstones (the control) stale copies stay
    in the partitions keys left."""
    _needs_compaction()
    admin.create_topic(topic, 2, config=FAST_COMPACTION)
    keys = [f"key-{i:05d}".encode() for i in range(10_000)]
    producer = make_producer(**{"ordered.tombstones": tombstones, "linger.ms": 20})
    for phase, n in enumerate((2, 4, 3, 4)):
        if phase:
            (admin.expand if n > admin.layout(topic).partitions else admin.shrink)(topic, n)
            _until_epoch(producer, topic, phase + 1)
        _write(producer, topic, keys, phase)
        physical = admin.layout(topic).physical_partitions
        _roll(bootstrap, topic, range(physical))
        if phase < 3:
            _compacted(bootstrap, topic, physical)

    def live(got: Dict[int, List[Any]]) -> Dict[bytes, int]:
        copies: Dict[bytes, int] = defaultdict(int)
        for ms in got.values():
            for m in ms:
                if m.value() is not None and not m.key().startswith(ROLL):
                    copies[m.key()] += 1
        return copies

    if tombstones:
        got = _compacted(bootstrap, topic, 4, ready=lambda g: set(live(g).values()) == {1})
        assert set(live(got)) == set(keys)
    else:
        got = _compacted(bootstrap, topic, 4)
        stale = {k for k, n in live(got).items() if n > 1}
        assert len(stale) > 1000, "the control kept no stale copies: the test could not fail"

    table, seen = _rebuild(make_consumer(), topic, 4, len(keys))
    assert table == {k: b"3:%s" % k for k in keys}
    last: Dict[bytes, int] = {}
    for k, v in seen:
        assert v is not None
        assert _phase_of(v) >= last.get(k, -1), f"{k!r}: a stale value after a newer one"
        last[k] = _phase_of(v)


def test_kafka_python_clients_tombstone_and_hide_them(
    admin: LayoutAdmin, bootstrap: str, layout_topic: str, topic: str, unique: Callable[[str], str],
    group_settings_kafka_python: Dict[str, Any],
) -> None:
    from kafka_ordered.kafka_python import OrderedKafkaConsumer, OrderedKafkaProducer

    admin.create_topic(topic, 2, physical_partitions=spare(4), config={"cleanup.policy": "compact"})
    k = _mover(0, 2)
    conf = {"bootstrap_servers": bootstrap, "ordered.layout.topic": layout_topic}
    producer = OrderedKafkaProducer(**conf)
    try:
        producer.send(topic, b"a", k).get(10)
        admin.expand(topic, 4)
        _until_epoch(producer, topic, 2)  # type: ignore[arg-type]
        producer.send(topic, b"b", k)
        producer.send(topic, b"c", k)
        producer.flush(10)
    finally:
        producer.close(5)
    plain = read_all(bootstrap, topic, 4)
    assert [m.value() for m in plain[0]] == [b"a", None] and _moved(plain[0][1])
    assert [m.value() for m in plain[2]] == [b"b", b"c"]

    consumer = OrderedKafkaConsumer(topic, **conf, group_id=unique("g"), auto_offset_reset="earliest",
                                    **group_settings_kafka_python)
    try:
        got: List[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 3:
            assert time.monotonic() < deadline
            for recs in consumer.poll(200).values():
                got += recs
        end = time.monotonic() + 1
        while time.monotonic() < end:
            for recs in consumer.poll(100).values():
                got += recs
        assert [r.value for r in got] == [b"a", b"b", b"c"]
    finally:
        consumer.close()
