"""Layout-aware assignment (KIP-253 §6): completeness, balance, parent
colocation, determinism; and the kafka-python adapter on fake metadata."""

from __future__ import annotations

import itertools
import random
from collections import namedtuple
from typing import Dict, FrozenSet, List, Mapping, Optional, Set

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_ordered.assignment import assign_partitions
from kafka_ordered.kafka_python import OrderedAssignor
from kafka_ordered.kafka_python._assignor import register_layouts, unregister_layouts
from kafka_ordered.layout import Layout

FAST = settings(deadline=None, max_examples=150)


# -- helpers ------------------------------------------------------------------

def owners(result: Mapping[str, Mapping[str, List[int]]], topic: str) -> Dict[int, str]:
    out: Dict[int, str] = {}
    for mem, topics in result.items():
        for p in topics.get(topic, ()):
            assert p not in out, f"partition {p} of {topic} assigned twice"
            out[p] = mem
    return out


def colocated(own: Mapping[int, str], layout: Layout, count: int) -> int:
    return sum(1 for c in range(count) if (q := layout.parent(c)) is not None and own[c] == own[q])


def spread(values: List[int]) -> int:
    return max(values) - min(values)


def layout_of(topic: str, n0: int, n: int, phys: int, draining: FrozenSet[int] = frozenset()) -> Layout:
    return Layout(topic, 1, n0, n, phys, draining=draining)


@st.composite
def layouts_st(draw: st.DrawFn, topic: str = "t") -> Layout:
    n0 = draw(st.integers(1, 6))
    n = draw(st.integers(n0, n0 * 5))
    phys = draw(st.integers(n, n + 8))
    draining = frozenset(draw(st.sets(st.integers(n, max(n, phys - 1)), max_size=phys - n)) if phys > n else set())
    return layout_of(topic, n0, n, phys, frozenset(p for p in draining if n <= p < phys))


@st.composite
def scenario(draw: st.DrawFn):
    members = [f"member-{i}" for i in range(draw(st.integers(1, 6)))]
    topics = [f"topic-{i}" for i in range(draw(st.integers(1, 3)))]
    layouts: Dict[str, Layout] = {}
    counts: Dict[str, int] = {}
    for t in topics:
        if draw(st.booleans()) or len(topics) == 1:
            lay = draw(layouts_st(t))
            layouts[t] = lay
            counts[t] = lay.physical_partitions
        else:
            counts[t] = draw(st.integers(1, 30))
    subs = {m: set(draw(st.sets(st.sampled_from(topics), min_size=1))) for m in members}
    return members, counts, layouts, subs


# -- completeness and balance --------------------------------------------------

@FAST
@given(scenario())
def test_every_partition_assigned_exactly_once_to_a_subscriber(sc) -> None:
    members, counts, layouts, subs = sc
    res = assign_partitions(members, counts, layouts, subs)
    assert set(res) == set(members)
    for t, count in counts.items():
        own = owners(res, t)
        subscribed = [m for m in members if t in subs[m]]
        if not subscribed:
            assert own == {}
            continue
        assert sorted(own) == list(range(count)), "every physical partition (draining, spare too)"
        assert all(t in subs[m] for m in own.values()), "only subscribers get a topic's partitions"
    for mem, topics in res.items():
        for t, ps in topics.items():
            assert ps == sorted(ps) and ps, "partition lists are sorted and non-empty"


@FAST
@given(scenario())
def test_undeleted_then_draining_then_totals_evenly_spread(sc) -> None:
    members, counts, layouts, subs = sc
    res = assign_partitions(members, counts, layouts, subs)
    for t, count in counts.items():
        subscribed = [m for m in members if t in subs[m]]
        if not subscribed:
            continue
        own = owners(res, t)
        lay = layouts.get(t)
        n = lay.partitions if lay is not None else count
        draining = lay.draining if lay is not None else frozenset()
        undel = [sum(1 for p in range(n) if own[p] == m) for m in subscribed]
        drain = [sum(1 for p in draining if own[p] == m) for m in subscribed]
        total = [sum(1 for p in range(count) if own[p] == m) for m in subscribed]
        assert spread(undel) <= 1, f"undeleted partitions unevenly spread: {undel}"
        assert spread(drain) <= 1, f"draining partitions unevenly spread: {drain}"
        assert spread(total) <= 1, f"totals unevenly spread: {total}"


@FAST
@given(scenario(), st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_input_order(sc, rnd: random.Random) -> None:
    members, counts, layouts, subs = sc
    first = assign_partitions(members, counts, layouts, subs)
    shuffled = list(members)
    rnd.shuffle(shuffled)
    counts2 = dict(sorted(counts.items(), key=lambda kv: rnd.random()))
    subs2 = {m: set(subs[m]) for m in reversed(list(subs))}
    assert assign_partitions(shuffled, counts2, dict(layouts), subs2) == first
    assert assign_partitions(members, counts, layouts, subs) == first


# -- parent colocation ---------------------------------------------------------

@FAST
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(0, 3))
def test_whole_families_stay_together_when_counts_divide(members_n: int, per_member: int, levels: int,
                                                         extra_levels: int) -> None:
    # N0 a multiple of the member count and N a multiple of N0: every member can
    # take whole families (a root and all its linear-hashing descendants).
    n0 = members_n * per_member
    n = n0 * levels
    lay = layout_of("t", n0, n, n)
    members = [f"m{i}" for i in range(members_n)]
    res = assign_partitions(members, {"t": n}, {"t": lay}, {m: {"t"} for m in members})
    own = owners(res, "t")
    for c in range(n):
        q = lay.parent(c)
        if q is not None:
            assert own[c] == own[q], f"partition {c} separated from its parent {q}: {res}"


@FAST
@given(layouts_st(), st.integers(1, 5))
def test_no_balanced_move_or_swap_to_a_parent_improves_colocation(lay: Layout, members_n: int) -> None:
    """Local optimality: moving a child to its parent's member, or swapping it
    with a partition there, never colocates more pairs while keeping every
    balance bound (the assignment keeps children with parents when balance allows)."""
    count = lay.physical_partitions
    members = [f"m{i}" for i in range(members_n)]
    res = assign_partitions(members, {"t": count}, {"t": lay}, {m: {"t"} for m in members})
    own = owners(res, "t")
    base = colocated(own, lay, count)

    def balanced(o: Mapping[int, str]) -> bool:
        undel = [sum(1 for p in range(lay.partitions) if o[p] == m) for m in members]
        drain = [sum(1 for p in lay.draining if o[p] == m) for m in members]
        total = [sum(1 for p in range(count) if o[p] == m) for m in members]
        return spread(undel) <= 1 and spread(drain) <= 1 and spread(total) <= 1

    for c in range(count):
        q = lay.parent(c)
        if q is None or own[c] == own[q]:
            continue
        target = own[q]
        moved = dict(own)
        moved[c] = target
        if balanced(moved):
            assert colocated(moved, lay, count) <= base, f"moving {c} to its parent's member improves {res}"
        for b in [p for p, m in own.items() if m == target]:
            swapped = dict(own)
            swapped[c], swapped[b] = target, own[c]
            if balanced(swapped):
                assert colocated(swapped, lay, count) <= base, f"swapping {c}<->{b} improves {res}"


def _best_colocation(lay: Layout, count: int, m: int) -> int:
    best = 0
    for combo in itertools.product(range(m), repeat=count):
        o = dict(enumerate(combo))
        undel = [combo[: lay.partitions].count(i) for i in range(m)]
        drain = [sum(1 for p in lay.draining if combo[p] == i) for i in range(m)]
        total = [combo.count(i) for i in range(m)]
        if spread(undel) <= 1 and spread(drain) <= 1 and spread(total) <= 1:
            best = max(best, colocated(o, lay, count))
    return best


def test_colocation_close_to_the_exhaustive_optimum_on_small_topics() -> None:
    cases = optimal = 0
    for n0, n, phys, draining in [
        (2, 2, 4, {2, 3}), (2, 3, 5, {3}), (2, 4, 6, set()), (3, 3, 6, {3, 4}), (3, 5, 6, {5}),
        (4, 4, 7, {4, 5, 6}), (4, 6, 7, set()), (4, 5, 7, {5, 6}), (2, 7, 7, set()), (1, 4, 6, {4}),
    ]:
        lay = layout_of("t", n0, n, phys, frozenset(draining))
        for m in (2, 3):
            members = [f"m{i}" for i in range(m)]
            res = assign_partitions(members, {"t": phys}, {"t": lay}, {x: {"t"} for x in members})
            got = colocated(owners(res, "t"), lay, phys)
            best = _best_colocation(lay, phys, m)
            assert got >= best - 1, f"{lay}, {m} members: {got} colocated pairs, optimum {best}: {res}"
            cases += 1
            optimal += got == best
    assert optimal >= cases * 3 // 4, f"optimal in only {optimal} of {cases} cases"


def test_expansion_example_children_follow_parents() -> None:
    # 4 initial partitions expanded to 6 (4 splits from 0, 5 from 1), 3 members.
    lay = layout_of("t", 4, 6, 6)
    res = assign_partitions(["a", "b", "c"], {"t": 6}, {"t": lay}, {x: {"t"} for x in "abc"})
    own = owners(res, "t")
    assert own[4] == own[0] and own[5] == own[1]
    assert sorted(len(v["t"]) for v in res.values()) == [2, 2, 2]


def test_shrink_example_draining_partitions_follow_the_partitions_they_drain_into() -> None:
    # shrunk from 6 to 4: 4 and 5 drain into 0 and 1.
    lay = layout_of("t", 4, 4, 6, frozenset({4, 5}))
    res = assign_partitions(["a", "b"], {"t": 6}, {"t": lay}, {x: {"t"} for x in "ab"})
    own = owners(res, "t")
    assert own[4] == own[0] and own[5] == own[1]
    assert own[0] != own[1], "draining partitions spread evenly: one each"
    assert [len(res[x]["t"]) for x in "ab"] == [3, 3]


def test_undeleted_spread_first_even_with_many_spares() -> None:
    # 2 undeleted partitions and 6 spares over 2 members: one undeleted each,
    # whatever the spares do (a plain range assignor would give both to one).
    lay = layout_of("t", 2, 2, 8)
    res = assign_partitions(["a", "b"], {"t": 8}, {"t": lay}, {x: {"t"} for x in "ab"})
    own = owners(res, "t")
    assert own[0] != own[1]
    assert [len(res[x]["t"]) for x in "ab"] == [4, 4]


def test_single_member_gets_everything_and_unsubscribed_member_nothing() -> None:
    lay = layout_of("t", 3, 5, 9, frozenset({6}))
    res = assign_partitions(["solo", "idle"], {"t": 9, "other": 2}, {"t": lay},
                            {"solo": {"t"}, "idle": {"other"}})
    assert res["solo"] == {"t": list(range(9))}
    assert res["idle"] == {"other": [0, 1]}


def test_unmanaged_topics_round_robin_balanced_across_topics() -> None:
    members = ["a", "b", "c"]
    counts = {"x": 4, "y": 4, "z": 1}
    res = assign_partitions(members, counts, {}, {m: set(counts) for m in members})
    totals = [sum(len(ps) for ps in res[m].values()) for m in members]
    assert sorted(totals) == [3, 3, 3], res
    for t, count in counts.items():
        assert sorted(owners(res, t)) == list(range(count))


def test_stale_metadata_with_fewer_partitions_than_the_layout() -> None:
    lay = layout_of("t", 2, 6, 8)
    res = assign_partitions(["a", "b"], {"t": 4}, {"t": lay}, {x: {"t"} for x in "ab"})
    assert sorted(owners(res, "t")) == [0, 1, 2, 3]


def test_layout_for_another_topic_is_refused() -> None:
    with pytest.raises(ValueError):
        assign_partitions(["a"], {"t": 2}, {"t": layout_of("u", 2, 2, 2)}, {"a": {"t"}})


# -- kafka-python adapter ------------------------------------------------------

Member = namedtuple("Member", "member_id group_instance_id metadata")
Sub = namedtuple("Sub", "topics")


class FakeCluster:
    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = counts

    def partitions_for_topic(self, topic: str) -> Optional[Set[int]]:
        n = self.counts.get(topic)
        return set(range(n)) if n else None


class FakeFollower:
    def __init__(self, layouts: Mapping[str, Layout]) -> None:
        self.history = self
        self._layouts = layouts

    def current(self, topic: str) -> Optional[Layout]:
        return self._layouts.get(topic)


def _decode(assignment) -> Dict[str, List[int]]:
    return {t: list(ps) for t, ps in assignment.assigned_partitions}


def test_adapter_uses_the_layouts_and_round_robins_unmanaged_topics() -> None:
    from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor

    lay = layout_of("t", 2, 2, 6, frozenset({2, 3}))
    assignor = OrderedAssignor(FakeFollower({"t": lay}))
    assert isinstance(assignor, AbstractPartitionAssignor) and assignor.name == "ordered"
    members = [Member("m-b", None, Sub(["t", "plain"])), Member("m-a", None, Sub(["t", "plain"]))]
    out = assignor.assign(FakeCluster({"t": 6, "plain": 3}), members)
    assert set(out) == {"m-a", "m-b"}
    plans = {mid: _decode(a) for mid, a in out.items()}
    assert plans == {mid: assign_partitions(["m-a", "m-b"], {"t": 6, "plain": 3}, {"t": lay},
                                            {"m-a": {"t", "plain"}, "m-b": {"t", "plain"}})[mid] for mid in out}
    t_owner = {p: mid for mid, plan in plans.items() for p in plan.get("t", [])}
    assert t_owner[0] != t_owner[1], "undeleted spread first (range would give both to one member)"
    assert sorted(t_owner) == list(range(6))
    assert assignor.metadata({"t"}).topics == ["t"]
    assignor.on_assignment(out["m-a"], 1)


def test_adapter_without_follower_reads_the_process_registry() -> None:
    lay = layout_of("reg-topic", 4, 6, 6)
    follower = FakeFollower({"reg-topic": lay})
    members = [Member(x, None, Sub(["reg-topic"])) for x in "xyz"]
    cluster = FakeCluster({"reg-topic": 6})
    # Unregistered: spread like an unmanaged topic (round robin).
    before = {mid: _decode(a) for mid, a in OrderedAssignor().assign(cluster, members).items()}
    register_layouts(follower)
    try:
        after = {mid: _decode(a) for mid, a in OrderedAssignor().assign(cluster, members).items()}
    finally:
        unregister_layouts(follower)
    expected = assign_partitions(list("xyz"), {"reg-topic": 6}, {"reg-topic": lay},
                                 {x: {"reg-topic"} for x in "xyz"})
    assert after == {mid: expected[mid] for mid in after}
    owner = {p: mid for mid, plan in after.items() for p in plan["reg-topic"]}
    assert owner[4] == owner[0] and owner[5] == owner[1]
    before_owner = {p: mid for mid, plan in before.items() for p in plan["reg-topic"]}
    assert before_owner[4] != before_owner[0], "without layouts the parent relation is unknown"
    again = {mid: _decode(a) for mid, a in OrderedAssignor().assign(cluster, members).items()}
    assert again == before, "unregistered followers are no longer used"


def test_adapter_survives_a_failing_layout_source() -> None:
    def boom(topic: str) -> Optional[Layout]:
        raise RuntimeError("follower down")

    out = OrderedAssignor(boom).assign(FakeCluster({"t": 4}), [Member("a", None, Sub(["t"]))])
    assert _decode(out["a"]) == {"t": [0, 1, 2, 3]}
