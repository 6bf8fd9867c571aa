"""Snapshots of the layout log on a real broker (issue 12): admin operations
write them, a reader starts from the newest valid one and replays only the
tail, a damaged one is a WARNING and an older one (or the whole log) is used,
a missing snapshots topic means a full replay, and a client whose start
replayed a long tail writes one."""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Iterator, List

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from kafka_ordered import LayoutAdmin, layout_log
from kafka_ordered.layout_log import LayoutFollower, LayoutLog
from kafka_ordered.records import encode_registration
from kafka_ordered.snapshots import snapshot_topic


@pytest.fixture
def follow(bootstrap: str, layout_topic: str) -> Iterator[Callable[..., LayoutFollower]]:
    made: List[LayoutFollower] = []

    def make(**kw: Any) -> LayoutFollower:
        f = LayoutFollower({"bootstrap.servers": bootstrap}, layout_topic, **kw).start()
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def _state(f: LayoutFollower, topic: str) -> Dict[str, Any]:
    h = f.history
    return {"next": h.next_offset, "layouts": h.layouts(topic), "gates": h.gates(topic),
            "last": h.last_registration(topic, "svc-0"), "protocol": h.protocol}


def _registrations(bootstrap: str, layout_topic: str, topic: str, n: int, epoch: int) -> None:
    """``n`` registrations of stable ids restarting, as producers write them
    (through the layout log's one writer, one record per batch)."""
    writer = LayoutLog({"bootstrap.servers": bootstrap}, layout_topic)
    try:
        for i in range(n):
            writer.append(*encode_registration(topic, f"svc-{i % 3}", True, epoch, epoch, {}))
    finally:
        writer.close()


def test_a_reader_starts_from_the_admins_snapshot_and_replays_only_the_tail(
    admin: LayoutAdmin, follow: Callable[..., LayoutFollower], bootstrap: str, layout_topic: str, topic: str,
) -> None:
    admin.create_topic(topic, 2, physical_partitions=4)
    _registrations(bootstrap, layout_topic, topic, 30, 1)
    admin.expand(topic, 3)  # appends, then writes a snapshot covering everything so far
    covered = admin.sync().next_offset
    _registrations(bootstrap, layout_topic, topic, 5, 2)  # the tail
    reader = follow()
    assert reader.snapshot_offset == covered
    assert reader.replayed == 5
    full = LayoutFollower({"bootstrap.servers": bootstrap}, layout_topic)
    full._load_snapshot = lambda c: None  # type: ignore[method-assign]  # a replay from offset 0
    try:
        full.start()
        assert full.replayed == reader.history.next_offset
        assert _state(reader, topic) == _state(full, topic)
    finally:
        full.close()


def test_a_damaged_snapshot_is_a_warning_and_an_older_one_is_used(
    admin: LayoutAdmin, follow: Callable[..., LayoutFollower], bootstrap: str, layout_topic: str, topic: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin.create_topic(topic, 2, physical_partitions=4)
    admin.expand(topic, 3)
    older = admin.sync().next_offset
    # a newer snapshot whose payload does not match its checksum
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(snapshot_topic(layout_topic), b"kafka-ordered-snapshot\n" + b"0" * 64 + b"\nxx", b"snapshot",
              partition=0)
    assert p.flush(10) == 0
    with caplog.at_level(logging.WARNING, logger="kafka_ordered.layout_log"):
        reader = follow()
    assert reader.snapshot_offset == older
    assert any("is not used: checksum mismatch" in r.getMessage() for r in caplog.records)
    assert reader.history.current(topic).partitions == 3  # type: ignore[union-attr]


class _FirstLookFails:
    """A consumer whose first watermark read of the snapshots topic fails, as a
    topic created a moment ago fails on a cluster whose brokers have not all
    learnt of it yet."""

    def __init__(self, consumer: Any) -> None:
        self._c, self._failed = consumer, False

    def get_watermark_offsets(self, tp: Any, *args: Any, **kw: Any) -> Any:
        if tp.topic.endswith(".snapshots") and not self._failed:
            self._failed = True
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
        return self._c.get_watermark_offsets(tp, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)


def test_a_failed_first_look_at_the_snapshots_topic_does_not_stop_snapshots(
    follow: Callable[..., LayoutFollower], bootstrap: str, layout_topic: str, topic: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    load = LayoutFollower._load_snapshot
    monkeypatch.setattr(LayoutFollower, "_load_snapshot", lambda self, c: load(self, _FirstLookFails(c)))
    first = follow()
    assert first.snapshot_offset is None  # the look failed: a whole replay
    with LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}) as a:
        a.create_topic(topic, 2)
    first.sync()
    assert first.write_snapshot() is True
    monkeypatch.undo()
    assert follow().snapshot_offset == first.history.next_offset


def test_without_a_snapshots_topic_the_log_is_replayed_whole(
    follow: Callable[..., LayoutFollower], bootstrap: str, layout_topic: str, topic: str,
) -> None:
    with LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}) as a:
        a.create_topic(topic, 2)
    # the same log read by a client that may not create topics, with no snapshots topic to read
    from confluent_kafka.admin import AdminClient

    raw_admin = AdminClient({"bootstrap.servers": bootstrap})
    raw_admin.delete_topics([snapshot_topic(layout_topic)])[snapshot_topic(layout_topic)].result(10)
    reader = follow(create=False)
    assert reader.snapshot_offset is None and reader.replayed == reader.history.next_offset > 0
    assert reader.history.current(topic) is not None
    assert reader.write_snapshot() is False  # nowhere to write: nothing raised


def test_a_client_that_replayed_a_long_tail_writes_a_snapshot(
    admin: LayoutAdmin, follow: Callable[..., LayoutFollower], bootstrap: str, layout_topic: str, topic: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admin.create_topic(topic, 2)
    _registrations(bootstrap, layout_topic, topic, 40, 1)
    monkeypatch.setattr(layout_log, "SNAPSHOT_TAIL", 20)
    first = follow()
    assert first.replayed > 20
    second = follow()
    assert second.snapshot_offset == first.history.next_offset and second.replayed == 0
    assert _state(second, topic) == _state(first, topic)
