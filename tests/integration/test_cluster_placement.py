"""Placement against a real broker: reading brokers/racks/replica counts,
creating topics and partitions with planned assignments, preferred leader
election, and clear errors for what the broker or client cannot do.

The embedded Tansu (one broker) accepts CreateTopics but ignores an explicit
replica assignment (it makes its default 3 partitions on its only broker),
lacks CreatePartitions, ElectLeaders and AlterPartitionReassignments, and
reports no racks. Tests that need more skip with the reason; with
KAFKA_ORDERED_BOOTSTRAP pointing at a multi-broker Apache Kafka they run."""

from __future__ import annotations

import gc
import time
from typing import Any, Callable, Dict, Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from kafka_ordered.admin import _cluster
from kafka_ordered.errors import (
    BrokerUnavailableError,
    PlacementError,
    TopicAlreadyManagedError,
    UnknownTopicError,
    UnsupportedBrokerApiError,
)
from kafka_ordered.placement import plan_partitions

TANSU_PARTITIONS = 3  # what Tansu creates when the request carries a replica assignment


@pytest.fixture(autouse=True)
def _free_clients() -> Iterator[None]:
    # pytest.raises keeps the test frame, and so its AdminClient, in a reference cycle; a client
    # still connected when the session ends delays Tansu's shutdown by 5 s.
    yield
    gc.collect()


def _replication(admin: AdminClient) -> int:
    return min(3, len(_cluster.describe_brokers(admin)))


def test_reads_brokers_racks_and_replica_counts(client_config: Dict[str, Any], unique: Callable[[str], str], embedded: bool) -> None:
    admin = AdminClient(client_config)
    state = _cluster.read_cluster(admin)
    assert state.racks and all(isinstance(b, int) and b >= 0 for b in state.racks)
    assert state.controller is None or state.controller in state.racks
    assert set(state.racks) <= set(state.replica_counts)
    assert state.offline == frozenset(b for b in state.replica_counts if b not in state.racks)
    assert _cluster.describe_brokers(admin) == dict(state.racks)
    if embedded:
        assert list(state.racks.values()) == [None]

    topic = unique("placed")
    plan = plan_partitions(state.racks, TANSU_PARTITIONS, 1, topic=topic, start_index=0)
    _cluster.apply_plan(admin, plan)
    wanted = {b: state.replica_counts.get(b, 0) + n for b, n in plan.replicas_per_broker().items()}
    # Each broker answers Metadata from its own cache, which learns the new topic a moment later.
    deadline = time.monotonic() + 15
    while True:
        after = _cluster.replica_counts(admin)
        if all(after.get(b, 0) >= n for b, n in wanted.items()) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert all(after.get(b, 0) >= n for b, n in wanted.items()), (after, wanted)


def test_create_topic_with_planned_assignment(client_config: Dict[str, Any], unique: Callable[[str], str]) -> None:
    admin = AdminClient(client_config)
    state = _cluster.read_cluster(admin)
    rf = _replication(admin)
    topic = unique("placed")
    plan = plan_partitions(state.racks, TANSU_PARTITIONS, rf, topic=topic, current_replicas=state.live_replica_counts)
    got = _cluster.apply_plan(admin, plan, config={"retention.ms": "3600000"})
    assert got == {p: list(reps) for p, reps in plan.assignment.items()}
    assert _cluster.topic_assignment(admin, topic) == got


def test_create_topic_checks_the_broker_applied_the_assignment(
    client_config: Dict[str, Any], unique: Callable[[str], str], embedded: bool
) -> None:
    admin = AdminClient(client_config)
    racks = _cluster.describe_brokers(admin)
    topic = unique("placed")
    plan = plan_partitions(racks, 2, 1, topic=topic, start_index=0)
    if embedded:
        with pytest.raises(UnsupportedBrokerApiError, match="did not apply the explicit replica assignment") as e:
            _cluster.apply_plan(admin, plan, timeout=10)
        assert e.value.api == "CreateTopics replica_assignment"
        assert len(_cluster.topic_assignment(admin, topic)) == TANSU_PARTITIONS
    else:
        assert _cluster.apply_plan(admin, plan) == {0: list(plan.assignment[0]), 1: list(plan.assignment[1])}


def test_rack_aware_assignment_on_several_brokers(client_config: Dict[str, Any], unique: Callable[[str], str]) -> None:
    admin = AdminClient(client_config)
    state = _cluster.read_cluster(admin)
    if len(state.racks) < 2:
        pytest.skip(f"needs at least 2 brokers; the cluster has {len(state.racks)} (the embedded Tansu has one)")
    topic = unique("placed")
    n = 2 * len(state.racks)
    plan = plan_partitions(state.racks, n, _replication(admin), topic=topic, ignore_racks=None in state.racks.values())
    assert _cluster.apply_plan(admin, plan) == {p: list(r) for p, r in plan.assignment.items()}
    leaders = [reps[0] for reps in plan.assignment.values()]
    assert {leaders.count(b) for b in state.racks} == {2}


def test_add_partitions_with_planned_assignment(client_config: Dict[str, Any], unique: Callable[[str], str], embedded: bool) -> None:
    admin = AdminClient(client_config)
    state = _cluster.read_cluster(admin)
    topic = unique("grow")
    first = plan_partitions(state.racks, TANSU_PARTITIONS, 1, topic=topic, start_index=0)
    existing = _cluster.apply_plan(admin, first)
    more = plan_partitions(state.racks, 2, 1, topic=topic, existing=existing)
    assert more.partitions == [TANSU_PARTITIONS, TANSU_PARTITIONS + 1]
    try:
        got = _cluster.apply_plan(admin, more)
    except UnsupportedBrokerApiError as e:
        assert e.api == "CreatePartitions" and e.code == KafkaError._UNSUPPORTED_FEATURE
        assert isinstance(e.__cause__, KafkaException)
        if embedded:
            return
        pytest.skip(f"the broker has no CreatePartitions: {e}")
    for p in more.partitions:
        assert got[p] == list(more.assignment[p])


def test_create_existing_topic_and_unknown_topic(client_config: Dict[str, Any], unique: Callable[[str], str]) -> None:
    admin = AdminClient(client_config)
    racks = _cluster.describe_brokers(admin)
    topic = unique("placed")
    plan = plan_partitions(racks, TANSU_PARTITIONS, 1, topic=topic, start_index=0)
    _cluster.apply_plan(admin, plan)
    with pytest.raises(TopicAlreadyManagedError) as e:
        _cluster.apply_plan(admin, plan)
    assert e.value.code == KafkaError.TOPIC_ALREADY_EXISTS and isinstance(e.value.__cause__, KafkaException)

    missing = unique("absent")
    with pytest.raises(UnknownTopicError):
        _cluster.topic_assignment(admin, missing)
    time.sleep(0.3)
    assert missing not in admin.list_topics(timeout=10).topics


def test_broker_rejects_an_assignment_to_an_unknown_broker(
    client_config: Dict[str, Any], unique: Callable[[str], str], embedded: bool
) -> None:
    admin = AdminClient(client_config)
    racks = _cluster.describe_brokers(admin)
    ghost = max(racks) + 1000
    topic = unique("placed")
    assignment = {p: [min(racks), ghost] for p in range(TANSU_PARTITIONS)}
    if embedded:
        with pytest.raises(UnsupportedBrokerApiError, match="did not apply"):
            _cluster.create_topic(admin, topic, assignment, timeout=10)
        return
    with pytest.raises(PlacementError) as e:
        _cluster.create_topic(admin, topic, assignment)
    assert e.value.code == KafkaError.INVALID_REPLICA_ASSIGNMENT


def test_preferred_leader_election(client_config: Dict[str, Any], unique: Callable[[str], str], embedded: bool) -> None:
    admin = AdminClient(client_config)
    racks = _cluster.describe_brokers(admin)
    topic = unique("elect")
    _cluster.apply_plan(admin, plan_partitions(racks, TANSU_PARTITIONS, 1, topic=topic, start_index=0))
    try:
        results = _cluster.elect_preferred_leaders(admin, [(topic, 0), (topic, 0), (topic, 99)], timeout=30)
    except UnsupportedBrokerApiError as e:
        assert e.api == "ElectLeaders" and e.code == KafkaError._UNSUPPORTED_FEATURE
        assert "ElectLeaders" in str(e) and isinstance(e.__cause__, KafkaException)
        if embedded:
            return
        pytest.skip(f"the broker has no ElectLeaders: {e}")
    assert set(results) == {(topic, 0), (topic, 99)}
    assert results[(topic, 0)].ok and results[(topic, 0)].status in ("elected", "not_needed")
    bad = results[(topic, 99)]
    assert not bad.ok and bad.code == KafkaError.UNKNOWN_TOPIC_OR_PART and bad.error == "UNKNOWN_TOPIC_OR_PART"


def test_no_election_requested_means_no_call(client_config: Dict[str, Any]) -> None:
    assert _cluster.elect_preferred_leaders(client_config, []) == {}


def test_reassignment_is_reported_as_unsupported(client_config: Dict[str, Any]) -> None:
    admin = AdminClient(client_config)
    with pytest.raises(UnsupportedBrokerApiError, match="kafka-reassign-partitions.sh") as e:
        _cluster.alter_partition_reassignments(admin, "t", {0: [1, 2, 3]})
    assert e.value.api == "AlterPartitionReassignments"


def test_unreachable_cluster_is_broker_unavailable() -> None:
    with pytest.raises(BrokerUnavailableError) as e:
        _cluster.read_cluster({"bootstrap.servers": "127.0.0.1:1", "log_level": 0}, timeout=1.0)
    assert isinstance(e.value.__cause__, (KafkaException, TimeoutError))
