"""Reading the layout log: no record is ever skipped silently (issue 10, items 0 and 3).

Each test failed on the follower that accepted offset jumps and kept
reading past a refused record.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, List

import pytest
from confluent_kafka import Producer

from kafka_ordered import (
    CorruptLayoutRecordError,
    LayoutAdmin,
    LayoutFollower,
    OrderedProducer,
    UnsupportedLayoutVersionError,
)
from kafka_ordered.layout_log import LayoutLog
from kafka_ordered.records import encode_registration


def _raw_producer(bootstrap: str, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, **extra})


def test_concurrent_appenders_never_make_the_follower_skip_a_registration(
    admin: LayoutAdmin, bootstrap: str, layout_topic: str, topic: str
) -> None:
    """Several writers (as in several producer processes) append to the
    layout log at once while a follower tails it: every acknowledged
    registration is in the follower's view after ``sync()``, which takes the
    log's end from ListOffsets alone. (The embedded broker hands a tail
    reader a later batch before an earlier one is written; the follower must
    read again, not jump. Its ListOffsets answers the base offset of the
    last batch + 1: right for this log, whose writer sends one record per
    batch.)"""
    admin.create_topic(topic, 2)
    acked: List[int] = []
    lock = threading.Lock()
    per_writer = 1500

    follower = LayoutFollower({"bootstrap.servers": bootstrap}, layout_topic, long_poll_ms=20).start()
    try:
        def append(worker: int) -> None:
            writer = LayoutLog({"bootstrap.servers": bootstrap}, layout_topic)
            try:
                for i in range(per_writer):
                    offset = writer.append(*encode_registration(topic, f"w{worker}-{i}", True, 1, 1, {}))
                    with lock:
                        acked.append(offset)
            finally:
                writer.close()

        workers = [threading.Thread(target=append, args=(w,)) for w in range(3)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        history = follower.sync()
        seen = {r.offset for r in history.registrations(topic)}
        missing = sorted(set(acked) - seen)
        assert len(acked) == 3 * per_writer
        assert missing == [], f"follower skipped {len(missing)} acknowledged registrations, e.g. {missing[:5]}"
        assert history.problems == []
    finally:
        follower.close()


def _write(bootstrap: str, layout_topic: str, values: List[bytes]) -> None:
    """Append ``values`` in one batch (one Fetch returns them together)."""
    p = _raw_producer(bootstrap, **{"linger.ms": 50})
    for v in values:
        p.produce(layout_topic, v, b"k", 0)
    assert p.flush(10) == 0


def test_refuse_policy_stops_with_the_record_named(
    admin: LayoutAdmin, bootstrap: str, layout_topic: str, topic: str
) -> None:
    admin.create_topic(topic, 2)
    conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic,
            "ordered.layout.corrupt.policy": "refuse", "ordered.metadata.timeout.ms": 3000}
    producer = OrderedProducer(conf)
    try:
        producer.produce(topic, b"v", b"k")
        producer.flush(10)
        bad_at = admin.history.next_offset
        good = [encode_registration(topic, f"p{i}", True, 1, 1, {})[1] for i in range(3)]
        _write(bootstrap, layout_topic, [b"not json", *good])
        began = time.monotonic()
        with pytest.raises(CorruptLayoutRecordError) as info:
            while time.monotonic() - began < 10:
                producer.produce(topic, b"v", b"k2")
                time.sleep(0.05)
        assert info.value.offset == bad_at
        assert layout_topic in str(info.value) and str(bad_at) in str(info.value) and "JSON" in str(info.value)
    finally:
        producer.close(1)


def test_skip_policy_skips_exactly_the_bad_record_and_warns(
    admin: LayoutAdmin, bootstrap: str, layout_topic: str, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    admin.create_topic(topic, 2)
    follower = LayoutFollower({"bootstrap.servers": bootstrap}, layout_topic).start()
    try:
        bad_at = follower.history.next_offset
        good = [encode_registration(topic, f"p{i}", True, 1, 1, {})[1] for i in range(3)]
        with caplog.at_level(logging.WARNING, logger="kafka_ordered.layout_log"):
            _write(bootstrap, layout_topic, [b"not json", *good])
            history = follower.sync()
        assert [p.offset for p in history.problems] == [bad_at]
        assert sorted(r.offset for r in history.registrations(topic)) == [bad_at + 1, bad_at + 2, bad_at + 3]
        assert any(str(bad_at) in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)
    finally:
        follower.close()


@pytest.mark.parametrize("policy", ["skip", "refuse"])
def test_newer_record_version_says_upgrade(
    admin: LayoutAdmin, bootstrap: str, layout_topic: str, topic: str, policy: str
) -> None:
    admin.create_topic(topic, 2)
    _write(bootstrap, layout_topic, [b'{"v": 3, "type": "layout"}'])
    began = time.monotonic()
    with pytest.raises(UnsupportedLayoutVersionError, match="upgrade") as info:
        LayoutFollower({"bootstrap.servers": bootstrap}, layout_topic, corrupt_policy=policy,  # type: ignore[arg-type]
                       timeout=5).start()
    assert info.value.version == 3
    assert time.monotonic() - began < 4, "an unreadable record is reported at once, not as a timeout"
