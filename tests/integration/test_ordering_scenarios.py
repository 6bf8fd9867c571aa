"""The ordering oracle over randomized scenarios with real producer and
consumer processes (issue 4): the ordered clients never break per-key order
or lose an acknowledged record; plain clients through the same scenario do
break it, which shows the oracle can fail."""

from __future__ import annotations

from dataclasses import replace
from typing import List, Tuple

import pytest
from confluent_kafka import Producer

from kafka_ordered.testing import OrderingOracle
from kafka_ordered.testing._oracle import encode_value
from kafka_ordered.testing.demo import Scenario, ScenarioResult, _where_missing, run_scenario
from ..conftest import create_plain_topic

# Small and quick; consumers process a little slower than producers write, so
# the group lags behind as real groups do.
BASE = Scenario(producers=2, keys=150, rate=300, duration_s=6.0, consumers=2, consumer_rate=250,
                initial=4, physical=8, drain_timeout_s=45.0)

SCENARIOS = {
    "expand-restart-crash": replace(BASE, layouts=(5, 6, 8), producer_restart_at=0.4, consumer_crash_at=0.6, seed=1),
    "shrink-expand-while-draining-join": replace(BASE, layouts=(6, 5, 7), producer_restart_at=None,
                                                 consumer_crash_at=None, member_join_at=0.5, seed=2),
    "every-partition-gains-and-loses": replace(BASE, initial=2, physical=4, layouts=(4, 2, 4),
                                               producer_restart_at=0.5, consumer_crash_at=None, seed=3),
    "anonymous-producers": replace(BASE, layouts=(6, 8, 6), stable_ids=False, producer_restart_at=0.5,
                                   consumer_crash_at=0.7, seed=4),
}


def _describe(r: ScenarioResult) -> str:
    rep = r.report
    return (f"acked={rep.acknowledged} unique={rep.unique} dup={rep.duplicates} "
            f"violations={len(rep.violations)} missing={rep.missing} stall={r.stall_s:.2f}s "
            f"first={rep.violations[:2]}")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_ordered_clients_keep_order_and_lose_nothing(bootstrap: str, name: str, embedded: bool) -> None:
    result = run_scenario(bootstrap, SCENARIOS[name], embedded=embedded)
    assert result.report.acknowledged > 1000, _describe(result)
    assert result.layout_changes == len(SCENARIOS[name].layouts)
    assert result.report.violations == (), _describe(result)
    assert result.report.missing == 0, _describe(result)
    assert result.worker_failures == (), list(result.worker_failures)


def test_plain_clients_break_order_in_the_same_scenario(bootstrap: str, embedded: bool) -> None:
    """Proof that the oracle can fail: confluent-kafka's own clients with
    Kafka's default partitioner over the current partition count."""
    result = run_scenario(bootstrap, replace(SCENARIOS["expand-restart-crash"], ordered=False), embedded=embedded)
    assert result.report.missing == 0, _describe(result)
    assert len(result.report.violations) > 0, _describe(result)


def test_a_missing_record_is_located_and_explained(bootstrap: str, topic: str) -> None:
    """A failure names where the broker holds each missing record and what
    was delivered and appended around it (a clean-clone CI run lost one
    record of chaos seed 39 and said no more than that the group skipped it)."""
    create_plain_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap})
    acked: List[Tuple[bytes, int]] = []
    for seq in range(3):
        producer.produce(topic, encode_value("P0", seq), b"k", 0,
                         on_delivery=lambda err, msg: acked.append((msg.value(), msg.offset())))
        producer.flush(10)
    assert [o for _, o in acked] == [0, 1, 2]
    oracle = OrderingOracle(broker_tail_holes=True)
    for seq, (value, offset) in enumerate(acked):
        oracle.acknowledged_value(b"k", value, 0, offset, at_ns=1_000_000 * (seq + 1), sent_ns=0)
    for seq in (0, 2):
        oracle.delivered_value(b"k", acked[seq][0], partition=0, offset=seq, batch="c0@1")
    oracle.acknowledged_value(b"k", encode_value("P0", 9), 0, None, at_ns=1, sent_ns=0)  # the offset unknown
    assert oracle.report().missing == 2
    assert _where_missing(bootstrap, topic, oracle) == (
        "k P0:1 acknowledged at p0@1: holds this record: the group skipped it (p0@1: delivered around it: "
        "p0@0 (c0@1) and p0@2 (c0@1); no higher offset acknowledged before it; "
        "p0@2 (P0) sent -2.0 ms, acknowledged +1.0 ms after its acknowledgement)",
        "k P0:9 acknowledged without an offset")


def test_a_group_still_delivering_when_the_drain_wait_ends_is_waited_for(bootstrap: str, embedded: bool) -> None:
    """The drain waits ``drain_timeout_s`` for progress, not in all: a group
    that processes slower than it was written to, and still delivers when
    that time has passed, has lost nothing (Apache Kafka chaos seed 2 once
    counted 1,699 records of a partition as lost that its only consumer was
    delivering at its processing rate)."""
    slow = replace(BASE, producers=1, rate=600, duration_s=3.0, consumers=1, consumer_rate=200, layouts=(5,),
                   producer_restart_at=None, consumer_crash_at=None, drain_timeout_s=3.0, seed=5)
    result = run_scenario(bootstrap, slow, embedded=embedded)
    assert result.report.acknowledged > 1200, _describe(result)
    assert result.report.missing == 0, _describe(result)
    assert result.report.violations == (), _describe(result)
