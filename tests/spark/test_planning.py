"""Micro-batch planning without a SparkSession: the pure helpers, and the
stream reader's offset methods driven by hand against the broker."""

from __future__ import annotations

import pickle
from typing import Any, Callable, Dict

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from kafka_ordered.admin import LayoutAdmin
from kafka_ordered.errors import ConfigError
from kafka_ordered.history import Gate
from spark_connector.options import parse_options
from spark_connector.planning import extend_target, from_json, gated_ends, rate_limit, split_range, to_json
from spark_connector.source import KafkaOrderedStreamReader, kafka_schema

from ..conftest import spare
from .conftest import SeqProducers

T = "t"


def gate(p: int, start: int, wait: Dict[int, int], offset: int = 0) -> Gate:
    return Gate(T, p, start, wait, "prod", 2, offset)


# ----------------------------------------------------------------- pure


def test_offsets_json_round_trip() -> None:
    offs = {("a", 0): 5, ("a", 10): 7, ("b", 1): 0}
    j = to_json(offs)
    assert j == {"a": {"0": 5, "10": 7}, "b": {"1": 0}}
    assert from_json(j) == offs


def test_gated_end_stops_at_first_closed_gate() -> None:
    gates = {T: [gate(2, 40, {0: 100}), gate(2, 10, {0: 50}, offset=1)]}
    latest = {(T, 0): 200, (T, 2): 60}
    # p0 processed up to 30: both gates closed, p2 stops at the earlier one.
    assert gated_ends(gates, {(T, 0): 30, (T, 2): 0}, latest) == {(T, 0): 200, (T, 2): 10}
    # p0 at 50 opens the first gate only.
    assert gated_ends(gates, {(T, 0): 50, (T, 2): 10}, latest)[(T, 2)] == 40
    # p0 at 100 opens both.
    assert gated_ends(gates, {(T, 0): 100, (T, 2): 40}, latest)[(T, 2)] == 60
    # A partition already read past a gate's start (other producers' records,
    # read before the registration was known) stays where it is until the
    # gate opens: the registering producer's own records come later.
    assert gated_ends(gates, {(T, 0): 0, (T, 2): 45}, latest)[(T, 2)] == 45
    assert gated_ends(gates, {(T, 0): 100, (T, 2): 45}, latest)[(T, 2)] == 60
    # Topics without gates pass through.
    assert gated_ends({}, {("u", 0): 3}, {("u", 0): 9}) == {("u", 0): 9}


def test_rate_limit_is_proportional_and_never_starves() -> None:
    start = {(T, 0): 0, (T, 1): 0, (T, 2): 0}
    end = {(T, 0): 10_000, (T, 1): 1, (T, 2): 0}
    capped = rate_limit(start, end, 100)
    assert capped[(T, 0)] == 99  # floor of its share
    assert capped[(T, 1)] == 1  # a share below one still advances by one
    assert capped[(T, 2)] == 0
    assert rate_limit(start, end, 1_000_000) == end


def test_rate_limit_after_gating_opens_every_gate_eventually() -> None:
    """p2 waits on p0's backlog; a tiny cap must still let p0 reach the wait."""
    gates = {T: [gate(2, 0, {0: 500})]}
    latest = {(T, 0): 1000, (T, 1): 1000, (T, 2): 300}
    cur = {(T, 0): 0, (T, 1): 0, (T, 2): 0}
    batches = 0
    p2_moved_at = None
    while cur != latest:
        end = rate_limit(cur, gated_ends(gates, cur, latest), 7)
        assert end != cur, "livelock: nothing advances"
        if end[(T, 2)] > 0 and p2_moved_at is None:
            p2_moved_at = cur[(T, 0)]
        cur = end
        batches += 1
        assert batches < 1000
    assert p2_moved_at is not None and p2_moved_at >= 500


def test_available_now_target_extends_to_the_waits_of_included_gates() -> None:
    gates = {T: [gate(2, 5, {0: 120})]}
    target = {(T, 0): 100, (T, 2): 9}
    latest = {(T, 0): 150, (T, 2): 9}
    assert extend_target(target, latest, gates) == {(T, 0): 120, (T, 2): 9}
    # A gate beyond the target does not extend anything.
    assert extend_target({(T, 0): 100, (T, 2): 5}, latest, gates) == {(T, 0): 100, (T, 2): 5}


def test_split_range() -> None:
    assert split_range(0, 10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert split_range(5, 7, 10) == [(5, 6), (6, 7)]


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "subscribe"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one"),
        ({"subscribe": "a", "startingOffsets": "{bad"}, "startingOffsets"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, ">= -2"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"subscribe": "a", "ordered.gatng": "false"}, "unknown option"),
        ({"subscribe": "a", "ordered.gating": "maybe"}, "ordered.gating"),
        ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit"),
        ({"subscribe": "a", "kafka.group.id": " "}, "kafka.group.id must not be empty"),
        ({"subscribe": "a", "groupIdPrefix": ""}, "groupIdPrefix must not be empty"),
        ({"subscribe": "a", "fetchOffset.numRetries": "-1"}, "fetchOffset.numRetries"),
        ({"subscribe": "a", "fetchOffset.retryIntervalMs": "soon"}, "fetchOffset.retryIntervalMs"),
        ({"subscribe": "a", "endingOffsets": "latest"}, "endingOffsets is not allowed for a streaming"),
        ({"subscribe": "a", "endingTimestamp": "5"}, "endingTimestamp is not allowed for a streaming"),
    ],
)
def test_bad_options(options: Dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_options({"kafka.bootstrap.servers": "x:1", **options}, streaming=True)


def test_require_managed_option() -> None:
    base = {"kafka.bootstrap.servers": "x:1", "subscribe": "a"}
    assert parse_options(base, streaming=True).require_managed is True
    assert parse_options({**base, "ordered.require.managed": "FALSE"}, streaming=None).require_managed is False
    with pytest.raises(ConfigError, match="ordered.require.managed must be true or false"):
        parse_options({**base, "ordered.require.managed": "maybe"}, streaming=True)


def test_missing_bootstrap() -> None:
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        parse_options({"subscribe": "a"}, streaming=True)


# ------------------------------------------------- reader driven by hand


@pytest.fixture
def transition(bootstrap: str, unique: Callable[[str], str], layout_topic: str) -> Any:
    """A topic with 2 -> 3 partitions: 100 records per key before the
    expansion, 10 after; returns (options, admin, producers)."""
    topic = unique("plan")
    conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
    admin = LayoutAdmin(conf)
    admin.create_topic(topic, 2, physical_partitions=spare(4))
    prod = SeqProducers(conf, topic, 1, [f"k{i}".encode() for i in range(20)])
    prod.phase(100)
    admin.expand(topic, 3)
    prod.await_epoch(2)
    prod.phase(10)
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "ordered.layout.topic": layout_topic,
               "startingOffsets": "earliest"}
    yield topic, options, admin, prod
    prod.close()
    admin.close()


def _moved(admin: LayoutAdmin, topic: str, prod: SeqProducers) -> int:
    """How many of the producers' keys moved to partition 2."""
    layout = admin.layout(topic)
    return sum(1 for k in prod.keys if layout.partition_for(k) == 2)


def _reader(options: Dict[str, str]) -> KafkaOrderedStreamReader:
    return KafkaOrderedStreamReader(parse_options(options, streaming=True), kafka_schema())


def test_reader_holds_new_partition_until_source_processed(transition: Any) -> None:
    topic, options, admin, prod = transition
    gates = [g for g in admin.sync().gates(topic) if g.partition == 2]
    assert gates, "the producer registered no gate on the new partition"
    g = gates[0]
    reader = _reader(options)
    try:
        start = reader.initialOffset()
        assert all(o == 0 for o in from_json(start).values())
        end1 = from_json(reader.latestOffset(start, ReadAllAvailable()))
        # Batch 1: everything of p0/p1, p2 only up to its gate.
        assert end1[(topic, 2)] == g.start
        assert end1[(topic, 0)] >= g.wait[0]
        # No input partition for empty ranges (spares 3, and p2 at its gate start 0).
        parts = reader.partitions(to_json({tp: 0 for tp in end1}), to_json(end1))
        assert {p.range.partition for p in parts} == {tp[1] for tp, e in end1.items() if e > 0}
        # Input partitions and the reader itself travel to executors.
        assert pickle.loads(pickle.dumps(parts[0])).range == parts[0].range
        assert pickle.loads(pickle.dumps(reader))._rt is None
        # Batch 2 (batch 1 committed): the gate opens.
        end2 = from_json(reader.latestOffset(to_json(end1), ReadAllAvailable()))
        assert end2[(topic, 2)] > g.start
        rows = sum(b.num_rows for p in reader.partitions(to_json(end1), to_json(end2)) for b in reader.read(p))
        assert rows == end2[(topic, 2)] - end1[(topic, 2)] == _moved(admin, topic, prod) * 10
    finally:
        reader.stop()


def test_reader_without_gating_reads_new_partition_at_once(transition: Any) -> None:
    topic, options, admin, prod = transition
    reader = _reader({**options, "ordered.gating": "false"})
    try:
        start = reader.initialOffset()
        end1 = from_json(reader.latestOffset(start, ReadAllAvailable()))
        # p2 is read in the same batch as the p0 records it should wait for.
        assert end1[(topic, 2)] == _moved(admin, topic, prod) * 10 > 0
    finally:
        reader.stop()


def test_reader_rate_limit_keeps_gate_until_source_caught_up(transition: Any) -> None:
    topic, options, admin, prod = transition
    g = [g for g in admin.sync().gates(topic) if g.partition == 2][0]
    reader = _reader({**options, "maxOffsetsPerTrigger": "300"})
    try:
        assert reader.getDefaultReadLimit() == ReadMaxRows(300)
        cur = from_json(reader.initialOffset())
        batches = 0
        while True:
            end = from_json(reader.latestOffset(to_json(cur), ReadMaxRows(300)))
            if end == cur:
                break
            assert sum(end.values()) - sum(cur.values()) <= 300 + len(end)
            if end[(topic, 2)] > g.start:
                assert cur[(topic, 0)] >= g.wait[0], "p2 read past its gate before p0 reached the wait"
            cur = end
            batches += 1
        assert batches >= 7
        assert sum(cur.values()) == 20 * 110
    finally:
        reader.stop()


def test_reader_min_offsets_waits_for_enough_records(transition: Any) -> None:
    topic, options, admin, prod = transition
    reader = _reader({**options, "minOffsetsPerTrigger": "5000", "maxTriggerDelay": "1h"})
    try:
        assert reader.getDefaultReadLimit() == ReadMinRows(5000)
        start = reader.initialOffset()
        # The first trigger is never delayed (the built-in source's last trigger
        # time starts at 0): 2200 records available, fewer than the minimum.
        first = reader.latestOffset(start, ReadMinRows(5000))
        assert first != start
        prod.phase(1)  # 20 more records: far below the minimum, a batch was just planned
        assert reader.latestOffset(first, ReadMinRows(5000)) == first
        # Trigger.AvailableNow / Once semantics (ReadAllAvailable) ignore the minimum.
        assert reader.latestOffset(first, ReadAllAvailable()) != first
    finally:
        reader.stop()
    reader = _reader({**options, "minOffsetsPerTrigger": "5000", "maxTriggerDelay": "0ms"})
    try:
        start = reader.initialOffset()
        first = reader.latestOffset(start, ReadMinRows(5000))
        prod.phase(1)
        # The delay has passed: a batch runs with what there is.
        assert reader.latestOffset(first, ReadMinRows(5000)) != first
    finally:
        reader.stop()


def test_the_driver_shares_the_process_layout_log_resources(bootstrap: str, unique: Any) -> None:
    """One follower and one admin client per cluster and layout log in a
    process: a query's driver runtime joins the set the process's producers
    and admins use, and gives it back when it stops."""
    from kafka_ordered import LayoutAdmin, resources
    from spark_connector.options import parse_options
    from spark_connector.source import _Runtime

    layout_topic, topic = unique("_kafka_ordered"), unique("shared")
    with LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}) as admin:
        admin.create_topic(topic, 2)
        sets = resources.active_count()
        opts = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                              "ordered.layout.topic": layout_topic}, streaming=True)
        rt = _Runtime(opts)
        try:
            assert resources.active_count() == sets  # no set of its own
            assert rt.follower is admin._shared.follower and rt.admin is admin._shared.admin
        finally:
            rt.close()
            rt.close()  # idempotent
        assert admin.layout(topic).partitions == 2  # the admin's set is still open
