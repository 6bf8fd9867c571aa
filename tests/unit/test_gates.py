"""Unit tests of the pure gate decisions (kafka_ordered.gates)."""

from __future__ import annotations

import random
from typing import Dict, List, Mapping, Tuple

import pytest

from kafka_ordered.gates import (
    GateKeeper,
    GateStatus,
    delivery_limit,
    gate_open,
    pending_waits,
    plan_end_offsets,
    processed_offset,
)
from kafka_ordered.history import Gate

T = "t"


def gate(p: int, start: int, wait: Mapping[int, int], offset: int = 0, topic: str = T,
         producer: str = "prod", epoch: int = 2) -> Gate:
    return Gate(topic, p, start, dict(wait), producer, epoch, offset)


def tp(p: int, topic: str = T) -> Tuple[str, int]:
    return (topic, p)


# -- processed_offset


@pytest.mark.parametrize("candidates, expected", [
    ((), -1),
    ((None,), -1),
    ((None, None, None), -1),
    ((5,), 5),
    ((0,), 0),
    ((3, None, 7), 7),
    ((None, 2, 1), 2),
    ((-5, None), -1),  # below "unknown" stays unknown
    ((4, 4), 4),
])
def test_processed_offset(candidates: tuple, expected: int) -> None:
    assert processed_offset(*candidates) == expected


# -- gate_open


def test_gate_open_boundaries() -> None:
    g = gate(4, 10, {0: 5, 1: 7})
    assert not gate_open(g, {})
    assert not gate_open(g, {0: 5})  # 1 unknown
    assert not gate_open(g, {0: 4, 1: 7})  # one short by one
    assert not gate_open(g, {0: 5, 1: 6})
    assert gate_open(g, {0: 5, 1: 7})  # processed == wait opens
    assert gate_open(g, {0: 50, 1: 70, 9: 0})  # extra partitions ignored


def test_gate_open_without_sources_is_open() -> None:
    assert gate_open(gate(4, 10, {}), {})


def test_gate_open_wait_zero_needs_a_known_processed_offset() -> None:
    g = gate(4, 0, {0: 0})
    assert not gate_open(g, {})  # unknown (-1) is short of 0
    assert gate_open(g, {0: 0})


# -- delivery_limit


def test_delivery_limit_none_without_gates_or_when_all_open() -> None:
    assert delivery_limit([], {}) is None
    gs = [gate(4, 10, {0: 5}), gate(4, 20, {1: 3})]
    assert delivery_limit(gs, {0: 5, 1: 3}) is None


def test_delivery_limit_smallest_closed_start() -> None:
    gs = [gate(4, 30, {0: 5}, 1), gate(4, 10, {1: 3}, 2), gate(4, 20, {2: 9}, 3)]
    assert delivery_limit(gs, {}) == 10
    assert delivery_limit(gs, {1: 3}) == 20  # the earliest one opened
    assert delivery_limit(gs, {1: 3, 2: 9}) == 30
    assert delivery_limit(list(reversed(gs)), {1: 3}) == 20  # order of the gates does not matter


def test_delivery_limit_open_gate_with_smaller_start_is_ignored() -> None:
    gs = [gate(4, 5, {0: 1}), gate(4, 8, {1: 1})]
    assert delivery_limit(gs, {0: 1}) == 8
    assert delivery_limit(gs, {1: 1}) == 5  # a later gate open does not lift an earlier closed one


def test_delivery_limit_equal_starts() -> None:
    gs = [gate(4, 7, {0: 1}, 1), gate(4, 7, {1: 1}, 2)]
    assert delivery_limit(gs, {0: 1}) == 7
    assert delivery_limit(gs, {0: 1, 1: 1}) is None


# -- pending_waits


def test_pending_waits() -> None:
    gs = [gate(4, 10, {0: 5, 1: 3}, 1), gate(5, 12, {0: 9}, 2), gate(6, 0, {2: 4}, 3)]
    assert pending_waits(gs, {}) == {0: 9, 1: 3, 2: 4}
    assert pending_waits(gs, {0: 5}) == {0: 9, 1: 3, 2: 4}
    assert pending_waits(gs, {0: 9, 2: 4}) == {1: 3}  # satisfied sources drop out
    assert pending_waits(gs, {0: 9, 1: 3, 2: 4}) == {}
    assert pending_waits([], {}) == {}


def test_pending_waits_keeps_unsatisfied_source_of_partially_open_gate() -> None:
    gs = [gate(4, 10, {0: 5, 1: 3})]
    assert pending_waits(gs, {1: 3}) == {0: 5}


# -- plan_end_offsets (Spark micro-batch planning)


def test_plan_end_offsets_without_gates_is_latest() -> None:
    assert plan_end_offsets([], {0: 1, 1: 2}, {0: 10, 1: 20}) == {0: 10, 1: 20}


def test_plan_end_offsets_caps_at_closed_gate() -> None:
    gs = [gate(1, 5, {0: 8})]
    assert plan_end_offsets(gs, {0: 3, 1: 0}, {0: 10, 1: 20}) == {0: 10, 1: 5}
    # once the committed start of 0 covers the wait, the gate no longer caps
    assert plan_end_offsets(gs, {0: 8, 1: 5}, {0: 10, 1: 20}) == {0: 10, 1: 20}


def test_plan_end_offsets_never_below_own_start() -> None:
    # A closed gate that starts before where the query already is: no progress, no regress.
    gs = [gate(1, 5, {0: 8})]
    assert plan_end_offsets(gs, {0: 3, 1: 7}, {0: 10, 1: 20}) == {0: 10, 1: 7}
    # latest below start (should not happen) still never goes backwards
    assert plan_end_offsets([], {0: 9}, {0: 4}) == {0: 9}


def test_plan_end_offsets_missing_start_is_zero() -> None:
    gs = [gate(1, 2, {0: 0})]
    # 0 missing from start counts as processed 0: a wait of 0 is satisfied
    assert plan_end_offsets(gs, {}, {0: 4, 1: 6}) == {0: 4, 1: 6}
    gs = [gate(1, 2, {0: 1})]
    assert plan_end_offsets(gs, {}, {0: 4, 1: 6}) == {0: 4, 1: 2}


def test_plan_end_offsets_source_outside_the_query_is_unknown() -> None:
    # A source neither in start nor latest is unknown (-1): the gate stays closed.
    gs = [gate(1, 2, {7: 0})]
    assert plan_end_offsets(gs, {1: 0}, {1: 6}) == {1: 2}


def test_plan_end_offsets_only_partitions_in_latest() -> None:
    gs = [gate(3, 1, {0: 5})]
    assert plan_end_offsets(gs, {0: 0, 3: 0}, {0: 5}) == {0: 5}


def test_plan_end_offsets_source_in_the_same_batch_does_not_open() -> None:
    # Records of 0 up to 8 are in this batch, not yet processed: 1 stops at its gate.
    gs = [gate(1, 4, {0: 8})]
    ends = plan_end_offsets(gs, {0: 0, 1: 0}, {0: 8, 1: 9})
    assert ends == {0: 8, 1: 4}
    # the next batch starts where this one ended: now the gate opens
    assert plan_end_offsets(gs, ends, {0: 8, 1: 9}) == {0: 8, 1: 9}


def test_plan_end_offsets_chain_of_gates() -> None:
    gs = [gate(1, 4, {0: 8}, 1), gate(2, 2, {1: 6}, 2)]
    b1 = plan_end_offsets(gs, {0: 0, 1: 0, 2: 0}, {0: 8, 1: 9, 2: 5})
    assert b1 == {0: 8, 1: 4, 2: 2}
    b2 = plan_end_offsets(gs, b1, {0: 8, 1: 9, 2: 5})
    assert b2 == {0: 8, 1: 9, 2: 2}  # 1 reached only 4 < 6
    b3 = plan_end_offsets(gs, b2, {0: 8, 1: 9, 2: 5})
    assert b3 == {0: 8, 1: 9, 2: 5}


# -- GateKeeper


def test_keeper_add_gates_ignores_known_ones() -> None:
    k = GateKeeper()
    g1, g2 = gate(4, 10, {0: 5}, offset=1), gate(5, 3, {1: 2}, offset=1)
    assert k.add_gates([g1, g2]) == 2
    assert k.add_gates([g1, g2]) == 0
    # identity is (registration offset, partition): a re-read copy is ignored
    assert k.add_gates([gate(4, 99, {0: 99}, offset=1)]) == 0
    assert k.limit(tp(4)) == 10
    assert k.add_gates([gate(4, 99, {0: 99}, offset=2)]) == 1
    assert k.add_gates([]) == 0


def test_keeper_limit_is_smallest_closed_start() -> None:
    k = GateKeeper()
    assert k.limit(tp(4)) is None
    k.add_gates([gate(4, 30, {0: 1}, 1), gate(4, 10, {1: 1}, 2), gate(4, 20, {2: 1}, 3)])
    assert k.limit(tp(4)) == 10
    assert k.limit(tp(5)) is None
    assert k.limit(("other", 4)) is None
    k.update({tp(1): 1})
    assert k.limit(tp(4)) == 20
    k.update({tp(0): 1, tp(2): 1})
    assert k.limit(tp(4)) is None


def test_keeper_equal_starts_ordered_by_offset() -> None:
    k = GateKeeper()
    k.add_gates([gate(4, 7, {0: 1}, 9), gate(4, 7, {1: 1}, 3)])
    assert k.limit(tp(4)) == 7
    k.update({tp(1): 1})
    assert k.limit(tp(4)) == 7
    st = k.status({})
    assert len(st) == 1 and st[0].waiting_on == {0: (1, -1)}


def test_keeper_update_returns_newly_opened_once() -> None:
    k = GateKeeper()
    g1, g2 = gate(4, 10, {0: 5, 1: 2}, 1), gate(5, 3, {0: 9}, 2)
    k.add_gates([g1, g2])
    assert k.update({}) == []
    assert k.update({tp(0): 5}) == []  # 1 still short
    assert k.update({tp(0): 5, tp(1): 2}) == [g1]
    assert k.update({tp(0): 5, tp(1): 2}) == []  # not again
    assert k.update({tp(0): 9}) == [g2]
    assert k.closed_partitions() == []


def test_keeper_opened_gate_stays_open_when_processed_goes_back() -> None:
    k = GateKeeper()
    k.add_gates([gate(4, 10, {0: 5})])
    k.update({tp(0): 5})
    assert k.limit(tp(4)) is None
    assert k.update({tp(0): 0}) == []
    assert k.limit(tp(4)) is None


def test_keeper_update_is_per_topic() -> None:
    k = GateKeeper()
    ga = gate(1, 4, {0: 3}, 1, topic="a")
    gb = gate(1, 4, {0: 3}, 2, topic="b")
    k.add_gates([ga, gb])
    assert k.update({("a", 0): 3}) == [ga]
    assert k.limit(("a", 1)) is None and k.limit(("b", 1)) == 4
    assert k.sources() == frozenset({("b", 0)})


def test_keeper_gate_without_sources_opens_on_first_update() -> None:
    k = GateKeeper()
    g = gate(4, 10, {})
    k.add_gates([g])
    assert k.limit(tp(4)) == 10  # closed until evaluated
    assert k.update({}) == [g]
    assert k.limit(tp(4)) is None


def test_keeper_sources_are_those_of_closed_gates() -> None:
    k = GateKeeper()
    assert k.sources() == frozenset()
    k.add_gates([gate(4, 10, {0: 5, 1: 2}, 1), gate(5, 3, {2: 9}, 2)])
    assert k.sources() == frozenset({tp(0), tp(1), tp(2)})
    k.update({tp(2): 9})
    assert k.sources() == frozenset({tp(0), tp(1)})


def test_keeper_announce_once_per_opened_gate() -> None:
    k = GateKeeper()
    k.add_gates([gate(4, 5, {0: 1}, 1), gate(4, 10, {1: 1}, 2)])
    assert not k.announce(tp(4), 7)  # nothing opened yet
    k.update({tp(0): 1, tp(1): 1})
    assert not k.announce(tp(4), 4)  # before the first start: not yet
    assert k.announce(tp(4), 7)  # first record past start 5
    assert not k.announce(tp(4), 8)
    assert not k.announce(tp(4), 9)
    assert k.announce(tp(4), 10)  # the second gate
    assert not k.announce(tp(4), 11)
    assert not k.announce(tp(5), 0)


def test_keeper_announce_consumes_every_start_passed() -> None:
    k = GateKeeper()
    k.add_gates([gate(4, 5, {0: 1}, 1), gate(4, 10, {1: 1}, 2)])
    k.update({tp(0): 1, tp(1): 1})
    assert k.announce(tp(4), 12)  # one announcement covers both
    assert not k.announce(tp(4), 13)
    assert tp(4) not in k.watched()


def test_keeper_forget_announcements() -> None:
    k = GateKeeper()
    k.add_gates([gate(4, 5, {0: 1}, 1), gate(4, 10, {1: 1}, 2)])
    k.update({tp(0): 1, tp(1): 1})
    k.forget_announcements(tp(4), 10)  # start 5 delivered by someone else; 10 is still ahead
    assert tp(4) in k.watched()
    assert k.announce(tp(4), 10)
    k.forget_announcements(tp(4), 100)
    k.forget_announcements(tp(9), 100)  # unknown: no-op
    assert k.watched() == frozenset()


def test_keeper_forget_announcements_past_all() -> None:
    k = GateKeeper()
    k.add_gates([gate(4, 5, {0: 1})])
    k.update({tp(0): 1})
    k.forget_announcements(tp(4), 6)
    assert not k.announce(tp(4), 6)
    assert k.watched() == frozenset()


def test_keeper_crossed() -> None:
    k = GateKeeper()
    k.add_gates([gate(4, 5, {0: 10}, 1), gate(5, 5, {0: 20, 1: 3}, 2)])
    assert not k.crossed(tp(0), 0, 9)
    assert k.crossed(tp(0), 0, 10)  # reaching the wait counts
    assert not k.crossed(tp(0), 10, 19)  # already at 10: only 20 is ahead
    assert k.crossed(tp(0), 9, 25)
    assert k.crossed(tp(0), 19, 20)
    assert not k.crossed(tp(0), 20, 100)
    assert not k.crossed(tp(0), 15, 15)
    assert not k.crossed(tp(0), 15, 12)  # backwards
    assert k.crossed(tp(1), -1, 3)
    assert not k.crossed(tp(2), -1, 100)
    k.update({tp(0): 20, tp(1): 3})  # opened gates still count (the hand-off happens once crossed)
    assert k.crossed(tp(0), 0, 10)


def test_keeper_needs_commit() -> None:
    k = GateKeeper()
    assert not k.needs_commit(tp(0), -1)
    k.add_gates([gate(4, 5, {0: 10}, 1), gate(5, 5, {0: 20}, 2)])
    assert k.needs_commit(tp(0), -1)
    assert k.needs_commit(tp(0), 19)
    assert not k.needs_commit(tp(0), 20)
    assert not k.needs_commit(tp(1), -1)
    # an open gate still needs its source committed (durability of the hand-off)
    k.update({tp(0): 20})
    assert k.needs_commit(tp(0), 10)


def test_keeper_watched() -> None:
    k = GateKeeper()
    assert k.watched() == frozenset()
    k.add_gates([gate(4, 5, {0: 1}, 1), gate(5, 5, {1: 1}, 2)])
    assert k.watched() == frozenset({tp(4), tp(5)})
    k.update({tp(0): 1})
    assert k.watched() == frozenset({tp(4), tp(5)})  # 4 opened, not announced yet
    k.announce(tp(4), 5)
    assert k.watched() == frozenset({tp(5)})


def test_keeper_status() -> None:
    k = GateKeeper()
    k.add_gates([gate(4, 10, {0: 5, 1: 3}, 1), gate(4, 20, {2: 1}, 2)], now=12.5)
    k.add_gates([gate(2, 0, {3: 7}, 3, topic="a")], now=13.0)
    st = k.status({tp(0): 5, tp(1): 1})
    assert st == [
        GateStatus("a", 2, 0, {3: (7, -1)}, 13.0),
        GateStatus(T, 4, 10, {1: (3, 1)}, 12.5),  # only the first closed gate, only short sources
    ]
    k.update({tp(0): 5, tp(1): 3})
    st = k.status({})
    assert [(s.topic, s.partition, s.start, dict(s.waiting_on)) for s in st] == [
        ("a", 2, 0, {3: (7, -1)}),
        (T, 4, 20, {2: (1, -1)}),
    ]
    assert k.closed_partitions() == [("a", 2), (T, 4)]


def test_keeper_status_empty() -> None:
    assert GateKeeper().status({}) == []
    assert GateKeeper().closed_partitions() == []


# -- the keeper and the stateless functions agree


def _random_gates(rng: random.Random, n: int) -> List[Gate]:
    gs = []
    for i in range(n):
        p = rng.randrange(4)
        srcs = rng.sample([q for q in range(6) if q != p], rng.randint(0, 3))
        gs.append(gate(p, rng.randrange(30), {q: rng.randrange(20) for q in srcs}, offset=i))
    return gs


@pytest.mark.parametrize("seed", range(40))
def test_keeper_matches_delivery_limit_and_pending_waits(seed: int) -> None:
    rng = random.Random(seed)
    gs = _random_gates(rng, rng.randint(0, 12))
    k = GateKeeper()
    k.add_gates(gs[: len(gs) // 2])
    k.add_gates(gs)  # overlapping re-adds
    processed: Dict[int, int] = {}
    for _ in range(8):
        # processed only moves forward, as committed offsets do
        for q in range(6):
            if rng.random() < 0.5:
                processed[q] = max(processed.get(q, -1), rng.randrange(-1, 22))
        opened = k.update({tp(q): w for q, w in processed.items()})
        assert all(gate_open(g, processed) for g in opened)
        for p in range(4):
            mine = [g for g in gs if g.partition == p]
            assert k.limit(tp(p)) == delivery_limit(mine, processed)
        closed = [g for g in gs if not gate_open(g, processed)]
        # sources still short of a closed gate's wait (met ones need no more reads)
        assert k.sources() == frozenset(tp(q) for g in closed for q, w in g.wait.items() if processed.get(q, -1) < w)
        assert sorted(k.closed_partitions()) == sorted({tp(g.partition) for g in closed})
        pw = pending_waits(gs, processed)
        for q, w in pw.items():
            assert processed.get(q, -1) < w and k.needs_commit(tp(q), processed.get(q, -1))


def test_keeper_status_carries_wall_clock_times() -> None:
    k = GateKeeper()
    k.add_gates([gate(4, 10, {0: 5}, 1)], now=12.5, wall=1_795_000_000.25)
    k.add_gates([gate(5, 3, {1: 2}, 2)], now=13.0)  # no wall clock given
    st = {s.partition: s for s in k.status({})}
    assert (st[4].since, st[4].since_wall, st[4].held_since) == (12.5, 1_795_000_000.25, None)
    assert st[5].since_wall is None


# -- the indexed keeper against a plain model (any order of adds, drops,
#    partial updates, processed offsets going back and forth)


class _Model:
    """The keeper's contract written plainly: a closed gate opens when all its
    sources are processed far enough at the same time; opened stays open; a
    source's processed offset is remembered while a closed gate waits on it."""

    def __init__(self) -> None:
        self.closed: Dict[Tuple[int, int], Gate] = {}
        self.processed: Dict[Tuple[str, int], int] = {}

    def add(self, gs: List[Gate]) -> None:
        for g in gs:
            self.closed.setdefault((g.offset, g.partition), g)

    def drop(self, target: Tuple[str, int]) -> None:
        self.closed = {k: g for k, g in self.closed.items() if (g.topic, g.partition) != target}
        self._forget()

    def _forget(self) -> None:
        waited = {(g.topic, q) for g in self.closed.values() for q in g.wait}
        self.processed = {s: v for s, v in self.processed.items() if s in waited}

    def update(self, processed: Mapping[Tuple[str, int], int]) -> List[Gate]:
        waited = {(g.topic, q) for g in self.closed.values() for q in g.wait}
        self.processed.update({s: v for s, v in processed.items() if s in waited})
        opened = [g for g in self.closed.values()
                  if all(self.processed.get((g.topic, q), -1) >= w for q, w in g.wait.items())]
        for g in opened:
            del self.closed[(g.offset, g.partition)]
        self._forget()
        return opened

    def limit(self, target: Tuple[str, int]) -> "int | None":
        starts = [g.start for g in self.closed.values() if (g.topic, g.partition) == target]
        return min(starts) if starts else None


@pytest.mark.parametrize("seed", range(60))
def test_indexed_keeper_matches_the_plain_model(seed: int) -> None:
    rng = random.Random(1000 + seed)
    k, m = GateKeeper(), _Model()
    pool = _random_gates(rng, 40)
    for _ in range(60):
        r = rng.random()
        if r < 0.3:
            batch = rng.sample(pool, rng.randint(1, 6))
            k.add_gates(batch)
            m.add(batch)
        elif r < 0.4:
            target = tp(rng.randrange(4))
            k.drop(target)
            m.drop(target)
        else:
            # a few sources, anywhere (backwards too); the others keep their value
            processed = {tp(q): rng.randrange(-1, 22) for q in rng.sample(range(6), rng.randint(0, 3))}
            got = k.update(processed)
            want = m.update(processed)
            assert sorted(_key(g) for g in got) == sorted(_key(g) for g in want)
        for p in range(4):
            assert k.limit(tp(p)) == m.limit(tp(p))
        short = {tp(q) for g in m.closed.values() for q, w in g.wait.items() if m.processed.get(tp(q), -1) < w}
        assert k.sources() == frozenset(short)
        assert k.closed_partitions() == sorted({tp(g.partition) for g in m.closed.values()})


def _key(g: Gate) -> Tuple[int, int]:
    return (g.offset, g.partition)


def test_keeper_keeps_nothing_once_every_gate_opened() -> None:
    k = GateKeeper()
    gs = [gate(p, 10 * i, {(p + 1) % 4: i, (p + 2) % 4: 2 * i}, offset=4 * i + p) for i in range(500) for p in range(4)]
    k.add_gates(gs, waits_for={})
    assert len(k.closed_partitions()) == 4 and k.sources()
    k.update({tp(q): 600 for q in range(4)})
    assert len(k.closed_partitions()) == 4
    k.update({tp(q): 1000 for q in range(4)})
    assert k.closed_partitions() == [] and k.sources() == frozenset()
    for tp_ in [tp(p) for p in range(4)]:
        k.forget_announcements(tp_, 10**9)
        k.drop(tp_)
    internals = (k._gates, k._targets, k._unmet, k._met, k._live, k._processed, k._to_open, k._opened, k._floor,
                 k._waits)
    assert all(len(x) == 0 for x in internals), [len(x) for x in internals]


def test_keeper_index_entries_of_opened_gates_are_compacted() -> None:
    """Gates on one source opening one by one while others stay closed: the
    per-source heaps stay proportional to the closed gates, not to history."""
    k = GateKeeper()
    k.add_gates([gate(1, 0, {0: 10**6}, offset=0)])  # keeps source 0 indexed forever
    for i in range(1, 2001):
        k.add_gates([gate(2, i, {0: i}, offset=i)])
        k.update({tp(0): i})
    assert k.limit(tp(2)) is None and k.limit(tp(1)) == 0
    assert len(k._met.get(tp(0), [])) <= 2 * 0 + 16 + 1 and len(k._unmet[tp(0)]) <= 16 + 2


def test_keeper_unchanged_update_leaves_the_index_alone() -> None:
    k = GateKeeper()
    k.add_gates([gate(p % 8, i, {(p + 1) % 8: 100 + i}, offset=i) for i, p in enumerate(range(10_000))])
    k.update({tp(q): 50 for q in range(8)})
    heaps = {src: (id(h), len(h)) for src, h in k._unmet.items()}
    assert k.update({tp(q): 50 for q in range(8)}) == []
    assert {src: (id(h), len(h)) for src, h in k._unmet.items()} == heaps and not k._met


def test_keeper_waits_for_owned_sources_only_and_pruned_by_commits() -> None:
    k = GateKeeper()
    g1, g2 = gate(4, 10, {0: 5, 1: 7}, 1), gate(5, 3, {0: 9, 2: 4}, 2)
    k.add_gates([g1], waits_for={tp(0): -1})  # member owns 0 (and 4), not 1
    k.add_waits([g2], waits_for={tp(0): -1, tp(2): 4})  # 5 is another member's; 2 committed at 4 already
    assert k.waited_on() == frozenset({tp(0)})
    assert k.crossed(tp(0), 0, 5) and k.crossed(tp(0), 5, 9) and not k.crossed(tp(1), 0, 7)
    assert k.sources() == frozenset({tp(0), tp(1)})  # g1 needs both to open; g2 is not tracked
    assert k.limit(tp(5)) is None
    k.prune_waits(tp(0), 5)
    assert k.needs_commit(tp(0), 5) and not k.crossed(tp(0), 0, 5)
    k.prune_waits(tp(0), 9)
    assert k.waited_on() == frozenset() and not k.needs_commit(tp(0), -1)


def test_keeper_drop_forgets_a_target_and_its_waits() -> None:
    k = GateKeeper()
    k.add_gates([gate(4, 10, {0: 5}, 1), gate(4, 20, {1: 5}, 2), gate(6, 1, {0: 50}, 3)])
    k.drop(tp(4))
    assert k.limit(tp(4)) is None and k.limit(tp(6)) == 1
    assert k.sources() == frozenset({tp(0)})
    k.drop(tp(0))  # no longer owned as a source: its hand-off waits go
    assert tp(0) not in k.waited_on()
    assert k.update({tp(0): 50}) == [gate(6, 1, {0: 50}, 3)]


def test_keeper_gates_opening_below_the_floor_are_not_announced() -> None:
    k = GateKeeper()
    k.forget_announcements(tp(4), 15)  # assigned at 15: records before are someone else's
    k.add_gates([gate(4, 10, {0: 1}, 1), gate(4, 20, {0: 2}, 2)])
    k.update({tp(0): 2})
    assert not k.announce(tp(4), 15)
    assert k.next_announcement(tp(4)) == 20 and k.announce(tp(4), 20)
