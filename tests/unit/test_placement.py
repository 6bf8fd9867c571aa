"""Replica placement: KIP-36 worked examples and properties, KIP-578 capacity
limits, degraded creation and healing, input validation; the cluster adapter
over a fake AdminClient.

Expected values are the KIPs' worked examples, Kafka's own unit-test values,
and an independent transcription of Kafka's ``AdminUtils`` written here."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import json
import random
from types import SimpleNamespace
from typing import Any, Dict, List, Mapping, Optional, Sequence

import pytest
from hypothesis import assume, given, settings
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from hypothesis import strategies as st

from kafka_ordered.admin import _cluster
from kafka_ordered.errors import (
    BrokerUnavailableError,
    GuardRailsError,
    KafkaOrderedError,
    PlacementError,
    TopicAlreadyManagedError,
    UnknownTopicError,
    UnsupportedBrokerApiError,
)
from kafka_ordered.placement import (
    HealPlan,
    PlacementPlan,
    assign_replicas,
    plan_heal,
    plan_partitions,
    rack_alternated_brokers,
    remaining_capacity,
)

FAST = settings(deadline=None, max_examples=60)

KIP36_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
KIP36_TABLE = {
    0: [0, 3, 1],
    1: [3, 1, 5],
    2: [1, 5, 4],
    3: [5, 4, 2],
    4: [4, 2, 0],
    5: [2, 0, 3],
    6: [0, 4, 2],
    7: [3, 2, 0],
    8: [1, 0, 3],
    9: [5, 3, 1],
    10: [4, 1, 5],
    11: [2, 5, 4],
}
UNEVEN_RACKS = {0: "rack1", 1: "rack2", 2: "rack2"}
KIP578_BROKERS = {1: None, 2: None, 3: None}


# -- an independent transcription of Kafka's AdminUtils.assignReplicasToBrokers


def ref_replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def ref_alternated(racks: Mapping[int, str]) -> List[int]:
    by_rack: Dict[str, List[int]] = {}
    for b in sorted(racks):
        by_rack.setdefault(racks[b], []).append(b)
    iters = {r: iter(bs) for r, bs in by_rack.items()}
    names = sorted(iters)
    out: List[int] = []
    i = 0
    while len(out) < len(racks):
        nxt = next(iters[names[i]], None)
        if nxt is not None:
            out.append(nxt)
        i = (i + 1) % len(names)
    return out


def ref_unaware(brokers: Sequence[int], n_parts: int, rf: int, start: int, shift: int, first_pid: int) -> Dict[int, List[int]]:
    arr = sorted(brokers)
    out: Dict[int, List[int]] = {}
    pid = first_pid
    for _ in range(n_parts):
        if pid > 0 and pid % len(arr) == 0:
            shift += 1
        first = (pid + start) % len(arr)
        reps = [arr[first]]
        for j in range(rf - 1):
            reps.append(arr[ref_replica_index(first, shift, j, len(arr))])
        out[pid] = reps
        pid += 1
    return out


def ref_aware(racks: Mapping[int, str], n_parts: int, rf: int, start: int, shift: int, first_pid: int) -> Dict[int, List[int]]:
    arranged = ref_alternated(racks)
    num_racks = len(set(racks.values()))
    n = len(arranged)
    out: Dict[int, List[int]] = {}
    pid = first_pid
    for _ in range(n_parts):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        leader = arranged[first]
        reps = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                b = arranged[ref_replica_index(first, shift * num_racks, k, n)]
                k += 1
                if (racks[b] not in racks_used or len(racks_used) == num_racks) and (
                    b not in brokers_used or len(brokers_used) == n
                ):
                    reps.append(b)
                    racks_used.add(racks[b])
                    brokers_used.add(b)
                    break
        out[pid] = reps
        pid += 1
    return out


# -- strategies


@st.composite
def rack_maps(draw: st.DrawFn, max_brokers: int = 12, with_racks: bool = True) -> Dict[int, Optional[str]]:
    ids = draw(st.lists(st.integers(0, 60), min_size=1, max_size=max_brokers, unique=True))
    if not with_racks:
        return {b: None for b in ids}
    n_racks = draw(st.integers(1, max(1, len(ids))))
    return {b: f"r{draw(st.integers(0, n_racks - 1))}" for b in ids}


def per_broker(assignment: Mapping[int, Sequence[int]]) -> Dict[int, int]:
    out: Dict[int, int] = {}
    for reps in assignment.values():
        for b in reps:
            out[b] = out.get(b, 0) + 1
    return out


# -- KIP-36 worked examples


def test_rack_alternated_list_of_the_kip() -> None:
    assert rack_alternated_brokers(KIP36_RACKS) == [0, 3, 1, 5, 4, 2]


def test_six_brokers_twelve_partitions_table_with_shifted_followers() -> None:
    assert assign_replicas(KIP36_RACKS, 12, 3, start_index=0) == KIP36_TABLE


def test_uneven_racks_example() -> None:
    assert rack_alternated_brokers(UNEVEN_RACKS) == [0, 1, 2]
    got = assign_replicas(UNEVEN_RACKS, 3, 2, start_index=0)
    assert got == {0: [0, 1], 1: [1, 0], 2: [2, 0]}
    assert per_broker(got) == {0: 3, 1: 2, 2: 1}
    assert sorted(reps[0] for reps in got.values()) == [0, 1, 2]


def test_kafka_rack_unaware_reference_values() -> None:
    # Kafka's AdminTest.testReplicaAssignment (5 brokers, 10 partitions, RF 3, start 0).
    expected = {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }
    assert assign_replicas({b: None for b in range(5)}, 10, 3, start_index=0) == expected


def test_racks_are_taken_in_name_order_not_insertion_order() -> None:
    assert rack_alternated_brokers({7: "b", 3: "a", 9: "b", 1: "c"}) == [3, 7, 1, 9]


def test_start_partition_continues_the_table() -> None:
    later = assign_replicas(KIP36_RACKS, 6, 3, start_index=0, start_partition=6)
    assert later == {p: KIP36_TABLE[p] for p in range(6, 12)}


def test_plan_for_added_partitions_continues_the_round_robin() -> None:
    existing = {p: KIP36_TABLE[p] for p in range(6)}
    plan = plan_partitions(KIP36_RACKS, 6, 3, topic="orders", existing=existing)
    assert plan.existing_partitions == 6 and plan.total_partitions == 12
    assert dict(plan.assignment) == {p: tuple(KIP36_TABLE[p]) for p in range(6, 12)}


def test_random_start_is_reproducible_with_an_rng_and_varies_without_one() -> None:
    racks = {b: None for b in range(6)}
    a = assign_replicas(racks, 6, 2, rng=random.Random(7))
    assert a == assign_replicas(racks, 6, 2, rng=random.Random(7))
    assert sorted(reps[0] for reps in a.values()) == list(range(6))
    starts = {assign_replicas(racks, 1, 2)[0][0] for _ in range(60)}
    assert len(starts) > 1


def test_ignore_racks_gives_the_rack_unaware_placement() -> None:
    mixed = {0: "a", 1: None, 2: "b", 3: None}
    with pytest.raises(PlacementError, match=r"\[1, 3\] have no rack.*ignore_racks=True"):
        assign_replicas(mixed, 4, 2, start_index=0)
    with pytest.raises(PlacementError, match="have no rack"):
        rack_alternated_brokers(mixed)
    got = assign_replicas(mixed, 4, 2, start_index=0, ignore_racks=True)
    assert got == ref_unaware([0, 1, 2, 3], 4, 2, 0, 0, 0)


# -- KIP-36 properties


@FAST
@given(racks=rack_maps(), data=st.data())
def test_rack_aware_matches_kafka_transcription(racks: Dict[int, Optional[str]], data: st.DataObject) -> None:
    n = len(racks)
    rf = data.draw(st.integers(1, n))
    parts = data.draw(st.integers(1, 3 * n + 2))
    start = data.draw(st.integers(0, n - 1))
    shift = data.draw(st.integers(0, 2 * n))
    first = data.draw(st.integers(0, 20))
    got = assign_replicas(racks, parts, rf, start_index=start, replica_shift=shift, start_partition=first)
    assert got == ref_aware(racks, parts, rf, start, shift, first)  # type: ignore[arg-type]


@FAST
@given(racks=rack_maps(with_racks=False), data=st.data())
def test_rack_unaware_matches_kafka_transcription(racks: Dict[int, Optional[str]], data: st.DataObject) -> None:
    n = len(racks)
    rf = data.draw(st.integers(1, n))
    parts = data.draw(st.integers(1, 3 * n + 2))
    start = data.draw(st.integers(0, n - 1))
    shift = data.draw(st.integers(0, 2 * n))
    first = data.draw(st.integers(0, 20))
    got = assign_replicas(racks, parts, rf, start_index=start, replica_shift=shift, start_partition=first)
    assert got == ref_unaware(list(racks), parts, rf, start, shift, first)


@FAST
@given(racks=rack_maps(max_brokers=15), data=st.data())
def test_distinct_brokers_max_racks_and_balanced_leaders(racks: Dict[int, Optional[str]], data: st.DataObject) -> None:
    n = len(racks)
    rf = data.draw(st.integers(1, n))
    rounds = data.draw(st.integers(1, 4))
    got = assign_replicas(racks, n * rounds, rf, rng=random.Random(data.draw(st.integers(0, 10**6))))
    n_racks = len(set(racks.values()))
    assert sorted(got) == list(range(n * rounds))
    for reps in got.values():
        assert len(reps) == rf and len(set(reps)) == rf
        assert set(reps) <= set(racks)
        assert len({racks[b] for b in reps}) == min(rf, n_racks)
    leaders = per_broker({p: [reps[0]] for p, reps in got.items()})
    assert set(leaders) == set(racks) and set(leaders.values()) == {rounds}


@FAST
@given(data=st.data())
def test_equal_racks_give_equal_replica_counts(data: st.DataObject) -> None:
    n_racks = data.draw(st.integers(1, 4))
    per_rack = data.draw(st.integers(1, 4))
    racks = {b: f"rack{b % n_racks}" for b in range(n_racks * per_rack)}
    rf = data.draw(st.integers(1, len(racks)))
    got = assign_replicas(racks, len(racks) * data.draw(st.integers(1, 3)), rf, rng=random.Random(data.draw(st.integers(0, 99))))
    assert len(set(per_broker(got).values())) == 1


# -- KIP-578 guard rails


def test_kip578_eight_six_nine_of_ten() -> None:
    current = {1: 8, 2: 6, 3: 9}
    plan = plan_partitions(KIP578_BROKERS, 1, 3, max_partitions=10, current_replicas=current)
    after = {b: current[b] + plan.replicas_per_broker()[b] for b in current}
    assert after == {1: 9, 2: 7, 3: 10}
    assert dict(plan.remaining) == {1: 1, 2: 3, 3: 0}

    with pytest.raises(GuardRailsError) as full:
        plan_partitions(KIP578_BROKERS, 1, 3, max_partitions=10, current_replicas=after)
    assert str(full.value) == (
        "Not possible to satisfy request due to guard rails: placing 1 new partition(s) with replication "
        "factor 3 (3 replicas) would exceed the partition limit of some broker; nothing was placed. "
        "Remaining partition capacity per broker: {1: 1, 2: 3, 3: 0}"
    )
    assert full.value.remaining == {1: 1, 2: 3, 3: 0}
    assert isinstance(full.value, PlacementError) and isinstance(full.value, ValueError)

    two = plan_partitions(KIP578_BROKERS, 1, 2, max_partitions=10, current_replicas=after, rng=random.Random(3))
    assert sorted(two.assignment[0]) == [1, 2]

    with pytest.raises(GuardRailsError) as whole:
        plan_partitions(KIP578_BROKERS, 2, 3, max_partitions=10, current_replicas=current)
    assert whole.value.remaining == {1: 2, 2: 4, 3: 1}
    assert "Remaining partition capacity per broker: {1: 2, 2: 4, 3: 1}" in str(whole.value)


def test_capacity_per_broker_mapping_and_unlimited_brokers() -> None:
    racks = {0: None, 1: None, 2: None}
    assert remaining_capacity(racks, {0: 5, 1: 2}, {0: 7, 1: 1}) == {0: 0, 1: 1, 2: None}
    got = assign_replicas(racks, 1, 2, max_partitions={0: 5, 1: 2}, current_replicas={0: 7, 1: 1}, start_index=0)
    assert per_broker(got) == {1: 1, 2: 1}
    single = assign_replicas(racks, 4, 1, max_partitions={0: 5, 1: 2}, current_replicas={0: 7, 1: 1}, start_index=0)
    assert per_broker(single) == {1: 1, 2: 3}
    with pytest.raises(GuardRailsError, match=r"\{0: 0, 1: 1, 2: unlimited\}") as e:
        assign_replicas(racks, 2, 2, max_partitions={0: 5, 1: 2}, current_replicas={0: 7, 1: 1})
    assert e.value.remaining == {0: 0, 1: 1}


def test_kafka_assignment_is_kept_when_it_fits() -> None:
    got = assign_replicas(KIP36_RACKS, 12, 3, start_index=0, max_partitions=6, current_replicas={0: 0})
    assert got == KIP36_TABLE


@FAST
@given(racks=rack_maps(max_brokers=8), data=st.data())
def test_capacity_is_never_exceeded_and_refusal_is_exact(racks: Dict[int, Optional[str]], data: st.DataObject) -> None:
    n = len(racks)
    rf = data.draw(st.integers(1, n))
    parts = data.draw(st.integers(1, 12))
    limits = {b: data.draw(st.integers(0, 12)) for b in racks}
    current = {b: data.draw(st.integers(0, 6)) for b in racks}
    cap = {b: max(0, limits[b] - current[b]) for b in racks}
    fits = sum(min(c, parts) for c in cap.values()) >= parts * rf
    kwargs = dict(max_partitions=limits, current_replicas=current, start_index=data.draw(st.integers(0, n - 1)))
    if not fits:
        with pytest.raises(GuardRailsError) as e:
            assign_replicas(racks, parts, rf, **kwargs)  # type: ignore[arg-type]
        assert e.value.remaining == cap
        return
    got = assign_replicas(racks, parts, rf, **kwargs)  # type: ignore[arg-type]
    assert sorted(got) == list(range(parts))
    for reps in got.values():
        assert len(set(reps)) == len(reps) == rf
    for b, used in per_broker(got).items():
        assert used <= cap[b]
    plain = assign_replicas(racks, parts, rf, start_index=kwargs["start_index"])  # type: ignore[arg-type]
    if all(used <= cap[b] for b, used in per_broker(plain).items()):
        assert got == plain


# -- degraded creation (brokers down) and healing


def test_refuses_without_degraded_mode_and_says_how_many() -> None:
    racks = {0: "a", 1: "b", 2: "c"}
    with pytest.raises(PlacementError, match=r"replication factor 3 needs 3 live brokers but only 2 are live \(0, 1\)"):
        plan_partitions(racks, 2, 3, live_brokers=[0, 1])
    with pytest.raises(PlacementError, match=r"only 1 broker\(s\) live \(2\): at least 2 needed"):
        plan_partitions(racks, 2, 3, live_brokers=[2], min_required_replication_factor=2)
    with pytest.raises(PlacementError, match="at least 2 needed"):
        plan_partitions(racks, 2, 3, live_brokers=[2], min_required_replication_factor="min.insync.replicas", min_insync_replicas=2)
    with pytest.raises(PlacementError, match="needs the topic's min_insync_replicas"):
        plan_partitions(racks, 2, 3, live_brokers=[0, 1], min_required_replication_factor="min.insync.replicas")
    with pytest.raises(PlacementError, match=r"min_required_replication_factor \(4\) is larger"):
        plan_partitions(racks, 2, 3, live_brokers=[0, 1], min_required_replication_factor=4)


def test_degraded_creation_records_missing_replicas_and_heals() -> None:
    racks = {0: "a", 1: "b", 2: "c"}
    plan = plan_partitions(
        racks, 3, 3, topic="orders", live_brokers=[0, 2], min_required_replication_factor="min.insync.replicas",
        min_insync_replicas=2, start_index=0,
    )
    assert plan.under_replicated and dict(plan.missing) == {0: 1, 1: 1, 2: 1}
    assert all(sorted(reps) == [0, 2] for reps in plan.assignment.values())
    assert [reps[0] for reps in plan.assignment.values()] == [0, 2, 0]
    assert "partitions 0-2 lack replicas" in plan.describe()

    still_down = plan_heal(plan.assignment, racks, 3, live_brokers=[0, 2])
    assert still_down.target == {} and dict(still_down.still_missing) == {0: 1, 1: 1, 2: 1}

    heal = plan_heal(plan.assignment, racks, 3, topic="orders")
    assert heal.complete
    assert {p: reps for p, reps in heal.target.items()} == {p: tuple(plan.assignment[p]) + (1,) for p in range(3)}
    assert heal.added == {0: (1,), 1: (1,), 2: (1,)}
    doc = json.loads(heal.to_reassignment_json())
    assert doc["version"] == 1 and doc["partitions"][1] == {"topic": "orders", "partition": 1, "replicas": [2, 0, 1]}


def test_min_insync_floor_applies_with_an_explicit_minimum() -> None:
    racks = {b: None for b in range(5)}
    with pytest.raises(PlacementError, match="at least 3 needed"):
        plan_partitions(racks, 1, 4, live_brokers=[0, 1], min_required_replication_factor=1, min_insync_replicas=3)
    ok = plan_partitions(racks, 1, 4, live_brokers=[0, 1, 2], min_required_replication_factor=1, min_insync_replicas=3)
    assert dict(ok.missing) == {0: 1} and len(ok.assignment[0]) == 3


def test_heal_prefers_unused_racks_then_least_loaded() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "c", 4: "c"}
    current = {0: [0], 1: [0], 2: [2, 0]}
    heal = plan_heal(current, racks, 3, current_replicas={0: 3, 1: 0, 2: 1, 3: 5, 4: 2})
    for p, reps in heal.target.items():
        assert len({racks[b] for b in reps}) == 3, (p, reps)
    assert heal.target[2] == (2, 0, 4)
    assert heal.target[0][:1] == (0,) and heal.target[1][:1] == (0,)
    assert {heal.target[0][1], heal.target[1][1]} == {2}
    assert {heal.target[0][2], heal.target[1][2]} <= {4, 3}


def test_heal_uses_an_exact_search_when_the_greedy_choice_would_block() -> None:
    racks = {0: None, 1: None, 2: None}
    current = {0: [2], 1: [0]}
    heal = plan_heal(current, racks, 2, max_partitions={0: 2, 1: 1, 2: 1}, current_replicas={0: 1, 1: 0, 2: 1})
    assert dict(heal.target) == {0: (2, 0), 1: (0, 1)}
    assert dict(heal.remaining) == {0: 0, 1: 0, 2: 0}
    with pytest.raises(GuardRailsError, match=r"\{0: 1, 1: 0, 2: 0\}"):
        plan_heal(current, racks, 2, max_partitions={0: 2, 1: 0, 2: 1}, current_replicas={0: 1, 1: 0, 2: 1})


@FAST
@given(racks=rack_maps(max_brokers=9), data=st.data())
def test_degraded_then_heal_restores_replication_with_rack_awareness(racks: Dict[int, Optional[str]], data: st.DataObject) -> None:
    n = len(racks)
    assume(n >= 2)
    rf = data.draw(st.integers(2, n))
    live = data.draw(st.lists(st.sampled_from(sorted(racks)), min_size=1, max_size=rf, unique=True))
    parts = data.draw(st.integers(1, 10))
    plan = plan_partitions(racks, parts, rf, live_brokers=live, min_required_replication_factor=1, rng=random.Random(1))
    for p, reps in plan.assignment.items():
        assert set(reps) <= set(live) and len(set(reps)) == len(reps)
        assert len(reps) + plan.missing.get(p, 0) == rf
    heal = plan_heal(plan.assignment, racks, rf)
    assert heal.complete
    all_racks = set(racks.values())
    for p, reps in plan.assignment.items():
        final = heal.target.get(p, tuple(reps))
        assert len(final) == len(set(final)) == rf
        assert final[: len(reps)] == tuple(reps)
        before = len({racks[b] for b in reps})
        assert len({racks[b] for b in final}) == min(before + rf - len(reps), len(all_racks))


def _brute_force_fits(current: Mapping[int, Sequence[int]], brokers: Sequence[int], rf: int, cap: Mapping[int, int]) -> bool:
    choices = []
    for p, reps in current.items():
        free = [b for b in brokers if b not in reps]
        choices.append(list(itertools.combinations(free, min(rf - len(reps), len(free)))))
    for combo in itertools.product(*choices):
        used = per_broker(dict(enumerate(combo)))
        if all(used[b] <= cap[b] for b in used):
            return True
    return False


@settings(deadline=None, max_examples=80)
@given(data=st.data())
def test_heal_under_capacity_is_exact(data: st.DataObject) -> None:
    brokers = list(range(data.draw(st.integers(2, 4))))
    rf = data.draw(st.integers(2, len(brokers)))
    current = {
        p: data.draw(st.lists(st.sampled_from(brokers), min_size=1, max_size=rf, unique=True))
        for p in range(data.draw(st.integers(1, 4)))
    }
    limits = {b: data.draw(st.integers(0, 6)) for b in brokers}
    counts = per_broker(current)
    cap = {b: max(0, limits[b] - counts.get(b, 0)) for b in brokers}
    racks = {b: None for b in brokers}
    if not _brute_force_fits(current, brokers, rf, cap):
        with pytest.raises(GuardRailsError):
            plan_heal(current, racks, rf, max_partitions=limits)
        return
    heal = plan_heal(current, racks, rf, max_partitions=limits)
    assert heal.complete
    added = per_broker(heal.added)
    assert all(added[b] <= cap[b] for b in added)
    for p, reps in current.items():
        final = heal.target.get(p, tuple(reps))
        assert len(set(final)) == len(final) == rf and final[: len(reps)] == tuple(reps)


# -- plans as values


def test_plan_describe_and_to_dict() -> None:
    plan = plan_partitions(KIP36_RACKS, 2, 3, topic="orders", start_index=0, max_partitions=4)
    text = plan.describe()
    assert text.splitlines()[0] == "orders: 2 new partition(s), 0 -> 2, replication factor 3, rack-aware"
    assert "0, 3, 1" in text and "rack1, rack2, rack3" in text
    assert "0: 1/3" in text and "2: 0/4" in text
    d = plan.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["partitions"][1] == {"partition": 1, "replicas": [3, 1, 5], "racks": ["rack2", "rack3", "rack1"], "missing_replicas": 0}
    assert d["remaining_capacity"]["0"] == 3 and d["total_partitions"] == 2
    assert plan.replica_assignment() == [[0, 3, 1], [3, 1, 5]]
    assert plan.leaders == {0: 0, 1: 3}
    assert plan.replica_racks[0] == ("rack1", "rack2", "rack3")


def test_plans_are_frozen() -> None:
    plan = plan_partitions({0: None, 1: None}, 1, 2, start_index=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.topic = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.assignment[5] = (0,)  # type: ignore[index]
    heal = plan_heal({0: [0]}, {0: None, 1: None}, 2)
    assert isinstance(heal, HealPlan) and isinstance(plan, PlacementPlan)
    with pytest.raises(PlacementError, match="no topic"):
        heal.to_reassignment_json()
    assert "0 -> 0, 1" in heal.describe()


# -- bad input


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(partitions=2, replication_factor=4), r"replication factor 4 is larger than the number of brokers \(3"),
        (dict(partitions=0, replication_factor=1), r"partitions must be >= 1, got 0"),
        (dict(partitions=-2, replication_factor=1), r"partitions must be >= 1, got -2"),
        (dict(partitions=1, replication_factor=0), r"replication_factor must be >= 1, got 0"),
        (dict(partitions=True, replication_factor=1), r"partitions must be an int, got bool"),
        (dict(partitions=1, replication_factor=1, current_replicas={9: 1}), r"current_replicas names unknown broker\(s\) \[9\]"),
        (dict(partitions=1, replication_factor=1, max_partitions={0: 3, 7: 1}), r"max_partitions names unknown broker\(s\) \[7\]"),
        (dict(partitions=1, replication_factor=1, max_partitions=-1), r"max_partitions must be >= 0"),
        (dict(partitions=1, replication_factor=1, current_replicas={0: -1}), r"current_replicas\[0\] must be >= 0"),
        (dict(partitions=1, replication_factor=1, start_index=-1), r"start_index must be >= 0"),
    ],
)
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(PlacementError, match=message):
        assign_replicas({0: None, 1: None, 2: None}, **kwargs)


def test_bad_brokers_and_racks() -> None:
    with pytest.raises(PlacementError, match="racks is empty"):
        assign_replicas({}, 1, 1)
    with pytest.raises(PlacementError, match="rack of broker 1 must be a non-empty string"):
        assign_replicas({0: "a", 1: ""}, 1, 1)
    with pytest.raises(PlacementError, match="broker id must be >= 0"):
        assign_replicas({-1: None}, 1, 1)
    with pytest.raises(PlacementError, match=r"live_brokers names unknown broker\(s\) \[5\]"):
        plan_partitions({0: None}, 1, 1, live_brokers=[5])
    with pytest.raises(PlacementError, match=r"existing\[0\] lists a broker twice"):
        plan_partitions({0: None, 1: None}, 1, 2, existing={0: [1, 1]})
    with pytest.raises(PlacementError, match=r"existing partitions must be numbered 0\.\.1"):
        plan_partitions({0: None, 1: None}, 1, 2, existing={0: [0, 1], 2: [1, 0]})
    with pytest.raises(PlacementError, match="replication_factor must be >= 1"):
        plan_heal({0: [0]}, {0: None}, 0)


# -- the cluster adapter over a fake AdminClient (the error paths a single Tansu cannot show)


class FakeAdmin:
    """Answers like confluent-kafka's AdminClient from canned values."""

    def __init__(self, *, topics: Optional[Dict[str, Dict[int, List[int]]]] = None, fail: Optional[int] = None,
                 election: Optional[dict] = None) -> None:
        self.topics = topics or {}
        self.fail = fail
        self.election = election or {}
        self.calls: List[tuple] = []

    def _future(self, value: object) -> "concurrent.futures.Future[object]":
        f: concurrent.futures.Future[object] = concurrent.futures.Future()
        if self.fail is not None:
            f.set_exception(KafkaException(KafkaError(self.fail, "canned failure")))
        else:
            f.set_result(value)
        return f

    def create_topics(self, new: list, **kw: object) -> dict:
        self.calls.append(("create_topics", new[0].topic, new[0].replica_assignment))
        if self.fail is None:
            self.topics[new[0].topic] = {p: list(r) for p, r in enumerate(new[0].replica_assignment)}
        return {new[0].topic: self._future(None)}

    def create_partitions(self, new: list, **kw: object) -> dict:
        self.calls.append(("create_partitions", new[0].topic, new[0].new_total_count, new[0].replica_assignment))
        if self.fail is None:
            t = self.topics[new[0].topic]
            for r in new[0].replica_assignment:
                t[len(t)] = list(r)
        return {new[0].topic: self._future(None)}

    def list_topics(self, timeout: float = -1) -> SimpleNamespace:
        parts = lambda t: {p: SimpleNamespace(replicas=r) for p, r in t.items()}  # noqa: E731
        return SimpleNamespace(
            brokers={1: None, 2: None},
            topics={n: SimpleNamespace(error=None, partitions=parts(t)) for n, t in self.topics.items()},
        )

    def elect_leaders(self, election_type: ElectionType, partitions: Optional[list]) -> "concurrent.futures.Future[object]":
        self.calls.append(("elect_leaders", election_type, partitions))
        return self._future(self.election)


def _kexc(code: int) -> KafkaException:
    return KafkaException(KafkaError(code, "canned"))


def test_election_results_per_partition() -> None:
    tp = TopicPartition
    fake = FakeAdmin(election={
        tp("t", 0): None,
        tp("t", 1): _kexc(KafkaError.ELECTION_NOT_NEEDED),
        tp("t", 2): _kexc(KafkaError.PREFERRED_LEADER_NOT_AVAILABLE),
        tp("t", 9): _kexc(KafkaError.UNKNOWN_TOPIC_OR_PART),
    })
    got = _cluster.elect_preferred_leaders(fake, [("t", 2), ("t", 0), ("t", 1), ("t", 9), ("t", 0)])  # type: ignore[arg-type]
    call = fake.calls[0]
    assert call[1] is ElectionType.PREFERRED and [(x.topic, x.partition) for x in call[2]] == [("t", 0), ("t", 1), ("t", 2), ("t", 9)]
    assert [r.status for r in got.values()] == ["elected", "not_needed", "failed", "failed"]
    assert got[("t", 2)].code == 80 and got[("t", 2)].error == "PREFERRED_LEADER_NOT_AVAILABLE" and not got[("t", 2)].ok
    assert got[("t", 9)].code == 3 and got[("t", 1)].ok
    _cluster.elect_preferred_leaders(fake, None)  # type: ignore[arg-type]
    assert fake.calls[1][2] is None


@pytest.mark.parametrize(
    "code, cls",
    [
        (KafkaError.INVALID_REPLICA_ASSIGNMENT, PlacementError),
        (KafkaError.INVALID_REPLICATION_FACTOR, PlacementError),
        (KafkaError.TOPIC_ALREADY_EXISTS, TopicAlreadyManagedError),
        (KafkaError._UNSUPPORTED_FEATURE, UnsupportedBrokerApiError),
        (KafkaError._TIMED_OUT, BrokerUnavailableError),
        (KafkaError.POLICY_VIOLATION, KafkaOrderedError),
    ],
)
def test_create_topic_translates_client_errors(code: int, cls: type) -> None:
    with pytest.raises(cls) as e:
        _cluster.create_topic(FakeAdmin(fail=code), "t", {0: [1, 2]})  # type: ignore[arg-type]
    assert e.value.code == code and isinstance(e.value.__cause__, KafkaException)
    if cls is UnsupportedBrokerApiError:
        assert e.value.api == "CreateTopics"


def test_elect_errors_name_the_api() -> None:
    with pytest.raises(UnsupportedBrokerApiError) as e:
        _cluster.elect_preferred_leaders(FakeAdmin(fail=KafkaError._UNSUPPORTED_FEATURE), [("t", 0)])  # type: ignore[arg-type]
    assert e.value.api == "ElectLeaders"
    with pytest.raises(KafkaOrderedError) as auth:
        _cluster.elect_preferred_leaders(FakeAdmin(fail=KafkaError.CLUSTER_AUTHORIZATION_FAILED), [("t", 0)])  # type: ignore[arg-type]
    assert auth.value.code == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_create_and_grow_with_an_explicit_assignment_through_the_adapter() -> None:
    fake = FakeAdmin()
    plan = plan_partitions({1: "a", 2: "b"}, 2, 2, topic="t", start_index=0)
    assert _cluster.apply_plan(fake, plan) == {0: [1, 2], 1: [2, 1]}  # type: ignore[arg-type]
    assert fake.calls[0] == ("create_topics", "t", [[1, 2], [2, 1]])
    more = plan_partitions({1: "a", 2: "b"}, 1, 2, topic="t", existing=_cluster.topic_assignment(fake, "t"))  # type: ignore[arg-type]
    assert _cluster.apply_plan(fake, more)[2] == list(more.assignment[2])  # type: ignore[arg-type]
    assert fake.calls[1] == ("create_partitions", "t", 3, [list(more.assignment[2])])
    with pytest.raises(PlacementError, match=r"partition ids must be 0\.\.1"):
        _cluster.create_topic(fake, "u", {1: [1], 2: [2]})  # type: ignore[arg-type]
    with pytest.raises(UnknownTopicError):
        _cluster.topic_assignment(fake, "nope")  # type: ignore[arg-type]
    assert _cluster.replica_counts(fake) == {1: 3, 2: 3}  # type: ignore[arg-type]


@pytest.mark.parametrize("wrap", [lambda e: e, lambda e: __import__("confluent_kafka").KafkaException(e)],
                         ids=["KafkaError", "KafkaException"])
def test_an_election_not_needed_is_not_a_failure_however_the_client_hands_it_over(wrap: Any) -> None:
    """confluent-kafka's ``elect_leaders`` hands a partition's error over as a
    bare ``KafkaError`` (seen on Apache Kafka 4.4: ELECTION_NOT_NEEDED for a
    partition whose preferred replica already leads), not as a
    ``KafkaException``."""
    from confluent_kafka import KafkaError, TopicPartition

    from kafka_ordered.admin._cluster import _election

    res = _election(TopicPartition("t", 0), wrap(KafkaError(KafkaError.ELECTION_NOT_NEEDED)))
    assert res.status == "not_needed" and res.ok and res.code == KafkaError.ELECTION_NOT_NEEDED
    failed = _election(TopicPartition("t", 1), wrap(KafkaError(KafkaError.PREFERRED_LEADER_NOT_AVAILABLE)))
    assert failed.status == "failed" and not failed.ok and failed.error == "PREFERRED_LEADER_NOT_AVAILABLE"
