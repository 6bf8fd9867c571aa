"""The broker-free simulation of registrations and gates (design §6).

Findings kept as tests:

* the prescribed registration (waits read before starts) never deadlocks and
  never reorders a key over hundreds of random interleavings with concurrent
  registrations, non-atomic offset reads, stale producers, restarts,
  rebalances and consumer crashes, and delivers every acknowledged record;
* reading the starts first deadlocks: random search finds it, and
  :func:`crossing_scenario` builds it by hand;
* without gating (or without the freshness rule) the oracle reports
  violations, so it can fail;
* the causal-token rule: skipping the consumer's catch-up on a stamp (step 2)
  lets a member with a late layout-log follower deliver a record behind a
  gate it does not know; with the step, the same seeds are clean;
* the producers and members are the shipped cores: a defect planted in the
  producer core (it stops stamping) is caught like the control that drops
  stamps; the members' polls take the adapters' calm path while the core's
  calm lasts, and a calm check planted to admit everything is caught.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Dict, Tuple

import pytest

from kafka_ordered.layout import Layout, transition_sources
from kafka_ordered.tokens import HEADER as STAMP_HEADER
from kafka_ordered.testing.simulation import TOPIC, Simulation, SimulationResult, crossing_scenario, find_seed, run

# 4 -> 8 -> 4 -> 8: shrink then expand, every partition both gains and loses keys.
SHRINK_EXPAND: Dict[str, Any] = dict(layouts=(8, 4, 8))
# A seed whose starts-first run deadlocks with SHRINK_EXPAND (found by the search below).
REVERSED_DEADLOCK_SEED = 81

CONFIGS = {
    # name: (knobs, seeds); 300 runs in all
    "4-5-6-8-6-8": ({}, range(0, 150)),
    "4-8-4-8": (SHRINK_EXPAND, range(0, 300)),
    "anonymous restarts, short window": (dict(window=40, producer_restarts=6), range(0, 30)),
    "stable ids, restarts, 5 members": (dict(stable_producers=3, producer_restarts=6, members=5, rebalances=10),
                                        range(0, 20)),
    "5 producers, late followers": (dict(producers=5, stable_producers=2, consumer_weight=0.25), range(0, 40)),
}


def _check_ok(r: SimulationResult) -> None:
    assert not r.deadlock, f"seed {r.seed}: {r.detail}"
    assert r.violations == 0, f"seed {r.seed}: {r.violations} violation(s), first: {r.detail}"
    assert r.undelivered == 0 and r.lost == 0, f"seed {r.seed}: {r.undelivered} acknowledged record(s) never delivered"
    assert r.produced > 0 and r.delivered >= r.produced
    assert r.ok


@pytest.mark.parametrize("name", list(CONFIGS))
def test_prescribed_order_never_deadlocks_or_reorders(name: str) -> None:
    knobs, seeds = CONFIGS[name]
    results = [run(s, **knobs) for s in seeds]
    for r in results:
        _check_ok(r)
    # The runs exercised what they claim to (else passing would prove nothing).
    n = len(results)
    assert sum(r.concurrent_registrations >= 2 for r in results) >= 0.8 * n
    assert sum(r.gate_holds > 0 for r in results) >= 0.5 * n
    assert sum(r.registrations for r in results) >= 2 * n
    assert sum(r.layout_changes for r in results) == n * len(knobs.get("layouts", (5, 6, 8, 6, 8)))
    assert any(r.replays > 0 for r in results)
    assert any(r.consumer_crashes > 0 for r in results)
    assert any(r.producer_restarts > 0 for r in results)
    assert any(r.rebalances > 0 for r in results)
    assert sum(r.stamped for r in results) >= n  # the token rule was exercised: stamps ...
    assert any(r.stamp_catch_ups > 0 for r in results)  # ... that a late member had to catch up on
    assert sum(r.calm_fetches > 0 for r in results) >= 0.8 * n  # the adapters' calm path
    if knobs.get("window"):
        assert any(r.lineage_breaks > 0 for r in results)


def test_reversed_reads_deadlock_fixed_seed() -> None:
    r = run(REVERSED_DEADLOCK_SEED, reverse_reads=True, **SHRINK_EXPAND)
    assert r.deadlock
    assert r.undelivered > 0 and r.lost == 0
    assert r.violations == 0  # gating only delays: the deadlock does not reorder anything
    assert r.detail.startswith("deadlock:") and r.detail.count("held at") >= 2  # a cycle needs two gates
    # Same seed, prescribed order: completes.
    _check_ok(run(REVERSED_DEADLOCK_SEED, **SHRINK_EXPAND))


def test_reversed_reads_search_finds_deadlocks() -> None:
    seeds = range(600)
    found = [s for s in seeds if run(s, reverse_reads=True, **SHRINK_EXPAND).deadlock]
    # The prescribed order on the same seeds finds none (CONFIGS["4-8-4-8"]).
    assert len(found) >= 3, found
    assert found[0] < 100
    assert REVERSED_DEADLOCK_SEED in found


def test_find_seed_returns_first_match() -> None:
    r = find_seed(lambda x: x.deadlock, range(100), reverse_reads=True, **SHRINK_EXPAND)
    assert r is not None and r.deadlock and r.seed == REVERSED_DEADLOCK_SEED
    assert find_seed(lambda x: x.deadlock, range(3), **SHRINK_EXPAND) is None


def test_crossing_scenario_deadlocks_with_starts_first() -> None:
    sim = crossing_scenario(reverse_reads=True)
    r = sim.result()
    assert r.deadlock and r.violations == 0
    gates = {(g.partition, g.producer_id): g for g in sim.members[0].view.history.gates(TOPIC)}
    a = gates[(2, "anon-0.0")]  # A: 2 gains keys back from 6
    b = gates[(6, "anon-1.0")]  # B: 6 gains keys from 2
    # The cycle: each gate holds its partition below the other's wait.
    assert b.start < a.wait[6] and a.start < b.wait[2]
    assert "p2 held at 2" in r.detail and "p6 held at 1" in r.detail


def test_crossing_scenario_completes_with_waits_first() -> None:
    sim = crossing_scenario(reverse_reads=False)
    r = sim.result()
    _check_ok(r)
    assert r.gate_holds >= 1  # the same interleaving: gates did hold, then opened
    gates = {(g.partition, g.producer_id): g for g in sim.members[0].view.history.gates(TOPIC)}
    a, b = gates[(2, "anon-0.0")], gates[(6, "anon-1.0")]
    assert b.start >= a.wait[6] and b.wait[2] <= a.start


def test_gating_disabled_finds_violations() -> None:
    results = [run(s, gating=False) for s in range(60)]
    bad = [r for r in results if r.violations]
    assert len(bad) >= 5
    assert all(not r.deadlock and r.undelivered == 0 for r in results)
    assert "delivered before" in bad[0].detail or "rollback" in bad[0].detail
    # The same seed with gates: clean.
    _check_ok(run(bad[0].seed))


def test_freshness_disabled_finds_violations() -> None:
    # Delivering records written after a registration the member has not read yet.
    assert any(run(s, freshness=False).violations for s in range(30))


@pytest.mark.parametrize("knobs", [{}, dict(producers=5)], ids=["3 producers", "5 producers"])
def test_skipping_the_catch_up_on_a_stamp_finds_violations(knobs: Dict[str, Any]) -> None:
    """Step 2 of the token rule is needed: without it a member whose follower
    lags delivers a stamped record (and those after it) before it knows the
    gate; with it, the same seeds are clean."""
    seeds = range(100)
    without = [run(s, catch_up_on_stamp=False, **knobs) for s in seeds]
    bad = [r for r in without if r.violations]
    assert len(bad) >= 3, [r.seed for r in bad]
    assert all(r.stamp_catch_ups == 0 for r in without)
    assert "delivered before" in bad[0].detail or "rollback" in bad[0].detail
    for r in bad:
        _check_ok(run(r.seed, **knobs))
    with_step = [run(s, **knobs) for s in seeds]
    assert all(r.violations == 0 for r in with_step)
    assert sum(r.stamp_catch_ups for r in with_step) > 0


def test_a_producer_core_that_stamps_nothing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The producers are the shipped ``RegisteringCore``: when it stops
    stamping (a defect planted in the shipped rule's home, or the fake
    client dropping the header) the late members deliver behind gates they
    do not know, on the same seeds."""
    from kafka_ordered import _registering

    seeds = range(40)
    dropped = {r.seed for r in (run(s, stamps=False) for s in seeds) if r.violations}
    assert len(dropped) >= 2, dropped
    monkeypatch.setattr(_registering, "partitions_to_stamp", lambda *args: (frozenset(), None))
    planted = [run(s) for s in seeds]
    assert {r.seed for r in planted if r.violations} == dropped
    assert all(r.stamped == 0 for r in planted)
    monkeypatch.undo()
    for s in sorted(dropped):
        _check_ok(run(s))


def test_a_calm_check_that_admits_every_fetch_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The members' polls take the adapters' calm path while the core's
    calm lasts: a calm check planted to admit every fetch (stamps the view
    does not include, gaps, held partitions: it only strips the stamps and
    moves the expected offsets) delivers records behind gates the member
    does not know, and the oracle reports it; the shipped check, on the
    same seeds, keeps the order."""
    from kafka_ordered import _fastpath
    from kafka_ordered.testing import simulation

    def admits_everything(calm: Any, fetched: Any, replace: Any) -> bool:
        ends = []
        for tp, recs in fetched.items():
            recs[:] = [replace(r, [h for h in r.headers if h[0] != STAMP_HEADER]) for r in recs]
            ends.append(((tp.topic, tp.partition), recs[-1].offset + 1))
        _fastpath._moved(calm, ends)
        return True

    seeds = range(40)
    shipped = [run(s) for s in seeds]
    assert all(r.violations == 0 for r in shipped) and sum(r.calm_fetches for r in shipped) > 0
    monkeypatch.setattr(simulation, "admits_runs", admits_everything)
    bad = [r for r in (run(s) for s in seeds) if r.violations]
    assert len(bad) >= 2, "a calm path that checks nothing went unnoticed"


def test_a_stamp_makes_a_late_member_read_the_registration_before_delivering() -> None:
    """Scripted: member 0 owns everything and reads nothing of the log by
    itself. After the expansion the producer's first record on the new
    partition is stamped; delivering it makes the member read the log past
    the registration, and the gate holds it until the source is processed."""
    # catch_up_on_jump=False: as if the member had fetched every partition
    # before (the catch-up after an assignment would read the log anyway).
    sim = Simulation(0, layouts=(8,), producers=1, stable_producers=0, records_per_producer=0, members=1,
                     producer_restarts=0, consumer_crashes=0, rebalances=0, catch_up_on_jump=False)
    k = _moved_key(sim, 1, 2)
    old, new = sim.partition_of(1, k), sim.partition_of(2, k)
    sim.send(0, k)
    sim.register(0)
    sim.ack_all(0)
    sim.follow(0)  # the member read the log so far
    sim.admin_step()
    sim.observe(0, len(sim.log))
    sim.send(0, k)
    sim.register(0)
    sim.ack_all(0)
    stamped = sim.logs[new][0]
    assert stamped.stamp == len(sim.log) - 1  # the registration's offset
    view = sim.members[0].view.applied
    assert view <= stamped.stamp
    assert sim.deliver(0, new) == 0  # held: the gate waits for the record on the old partition
    assert sim.members[0].view.applied > stamped.stamp and sim.result().stamp_catch_ups == 1
    assert sim.deliver(0, old) == 1 and sim.deliver(0, new) == 1
    assert sim.result().violations == 0
    # The same interleaving without the catch-up delivers k#1 before k#0.
    sim2 = Simulation(0, layouts=(8,), producers=1, stable_producers=0, records_per_producer=0, members=1,
                      producer_restarts=0, consumer_crashes=0, rebalances=0, catch_up_on_stamp=False,
                      catch_up_on_jump=False)
    sim2.send(0, k)
    sim2.register(0)
    sim2.ack_all(0)
    sim2.follow(0)
    sim2.admin_step()
    sim2.observe(0, len(sim2.log))
    sim2.send(0, k)
    sim2.register(0)
    sim2.ack_all(0)
    assert sim2.deliver(0, new) == 1
    sim2.deliver(0, old)
    assert sim2.result().violations == 1


def test_shrink_then_expand_every_partition_gains_and_loses() -> None:
    lays = [Layout(TOPIC, 1, 4, 4, 8)]
    for n in SHRINK_EXPAND["layouts"]:
        lays.append(lays[-1].expanded(n) if n > lays[-1].partitions else lays[-1].shrunk(n))
    gains: set = set()
    loses: set = set()
    for before, after in zip(lays, lays[1:]):
        for p, qs in transition_sources(before, after).items():
            gains.add(p)
            loses |= qs
    assert gains == loses == set(range(8))

    gated: Counter = Counter()
    waited: Counter = Counter()
    for s in range(200, 230):
        sim = Simulation(s, **SHRINK_EXPAND)
        _check_ok(sim.run())
        for g in sim.members[0].view.history.gates(TOPIC):
            gated[g.partition] += 1
            waited.update(g.wait)
    assert set(gated) == set(waited) == set(range(8))


def test_result_is_frozen_and_deterministic() -> None:
    r = run(7)
    assert isinstance(r, SimulationResult)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.delivered = 0  # type: ignore[misc]
    assert run(7) == r
    assert run(8) != r


# -- the oracle itself, on scripted interleavings


def _moved_key(sim: Simulation, epoch_from: int, epoch_to: int) -> bytes:
    return next(k for k in sim.keys if sim.partition_of(epoch_from, k) != sim.partition_of(epoch_to, k))


def _two_partition_history(gating: bool) -> tuple:
    """One producer writes k to its old partition, expands, writes k to the new one."""
    sim = Simulation(0, layouts=(5,), producers=1, stable_producers=0, records_per_producer=0, members=2,
                     gating=gating, producer_restarts=0, consumer_crashes=0, rebalances=0)
    k = _moved_key(sim, 1, 2)
    old, new = sim.partition_of(1, k), sim.partition_of(2, k)
    sim.send(0, k)
    sim.register(0)
    sim.ack_all(0)
    sim.admin_step()
    sim.observe(0)
    sim.send(0, k)
    sim.register(0)
    sim.ack_all(0)
    for j in range(2):
        sim.follow(j)
    return sim, old, new


def test_oracle_flags_a_record_delivered_before_an_earlier_one() -> None:
    sim, old, new = _two_partition_history(gating=False)
    owner_new = sim.owner[new].index
    assert sim.deliver(owner_new, new) == 1
    assert sim.violations == 1 and "delivered before" in sim.detail


def test_gate_holds_the_new_partition_until_the_old_one_is_committed() -> None:
    sim, old, new = _two_partition_history(gating=True)
    owner_old = sim.owner[old].index
    sim.move_partition(new, 1 - owner_old)  # another member: the gate needs a commit to open
    owner_new = sim.owner[new].index
    assert owner_new != owner_old
    assert sim.deliver(owner_new, new) == 0
    assert sim.deliver(owner_old, old) == 1
    assert sim.deliver(owner_new, new) == 0  # delivered but not committed yet
    sim.commit(owner_old)
    assert sim.deliver(owner_new, new) == 1
    assert sim.violations == 0


def test_gate_opens_on_own_position_when_one_member_owns_both() -> None:
    sim, old, new = _two_partition_history(gating=True)
    sim.move_partition(new, sim.owner[old].index)
    j = sim.owner[old].index
    assert sim.deliver(j, new) == 0
    assert sim.deliver(j, old) == 1
    assert sim.deliver(j, new) == 1  # no commit needed: processed includes the own position
    sim.crash_member(j)  # both roll back together: no hole
    assert sim.violations == 0
    assert sim.deliver(j, new) == 0  # the fresh GateKeeper holds again until the replay
    assert sim.deliver(j, old) == 1 and sim.deliver(j, new) == 1
    assert sim.result().replays == 2 and sim.violations == 0


def test_oracle_allows_replay_of_an_uncommitted_suffix() -> None:
    sim = Simulation(0, layouts=(), producers=1, records_per_producer=0, members=1, consumer_crashes=0)
    k = sim.keys[0]
    for _ in range(4):
        sim.send(0, k)
        sim.register(0)
    sim.ack_all(0)
    p = sim.partition_of(1, k)
    # The first fetch makes the assignment's one catch-up (after its
    # positions were fixed); later fetches make none (docs/protocol.md, one
    # catch-up per assignment).
    assert sim.deliver(0, p, 1) == 1
    assert sim.result().jump_catch_ups == 1
    sim.commit(0)
    assert sim.deliver(0, p) == 3
    assert sim.result().jump_catch_ups == 1
    sim.crash_member(0)
    assert sim.deliver(0, p) == 3  # 1, 2, 3 again
    r = sim.result()
    assert r.replays == 3 and r.violations == 0 and r.delivered == 7


def test_oracle_flags_a_rollback_behind_a_committed_later_record() -> None:
    sim, old, new = _two_partition_history(gating=False)
    sim.move_partition(new, 1 - sim.owner[old].index)
    owner_new, owner_old = sim.owner[new].index, sim.owner[old].index
    sim.deliver(owner_old, old)  # k#0, not committed
    sim.deliver(owner_new, new)  # k#1: fine so far
    sim.commit(owner_new)
    assert sim.violations == 0
    sim.crash_member(owner_old)  # k#0 will be replayed after the committed k#1
    assert sim.violations == 1 and "rollback" in sim.detail


def test_stable_producer_restart_registers_from_its_last_epoch() -> None:
    sim = Simulation(0, layouts=(5,), producers=1, stable_producers=1, records_per_producer=0, members=1,
                     producer_restarts=0, consumer_crashes=0, rebalances=0, window=0)
    k = _moved_key(sim, 1, 2)
    sim.send(0, k)
    sim.register(0)  # stable: appends a gate-less registration for epoch 1
    sim.ack_all(0)
    sim.admin_step()
    sim.advance(10)
    sim.restart_producer(0)  # window=0: only the stable id's last registration covers the change
    sim.send(0, k)
    sim.register(0)
    sim.ack_all(0)
    sim.follow(0)
    regs = sim.members[0].view.history.registrations(TOPIC)
    assert [(r.from_epoch, r.epoch, bool(r.gates)) for r in regs] == [(1, 1, False), (1, 2, True)]
    sim.finish()
    _check_ok(sim.result())
    assert sim.result().lineage_breaks == 0


@pytest.mark.parametrize("window, breaks, gated", [(10**9, 0, True), (20, 0, True), (5, 1, False)])
def test_anonymous_restart_inside_and_outside_the_window(window: int, breaks: int, gated: bool) -> None:
    sim = Simulation(0, layouts=(5,), producers=1, stable_producers=0, records_per_producer=0, members=1,
                     producer_restarts=0, consumer_crashes=0, rebalances=0, window=window)
    k = _moved_key(sim, 1, 2)
    sim.send(0, k)
    sim.register(0)  # anonymous, nothing to register: no record
    sim.ack_all(0)
    assert len(sim.log) == 1
    sim.admin_step()
    sim.advance(10)
    sim.restart_producer(0)
    sim.send(0, k)
    sim.register(0)
    sim.ack_all(0)
    sim.finish()
    r = sim.result()
    _check_ok(r)
    assert r.lineage_breaks == breaks
    assert (r.registrations == 1) is gated


# -- a key that moves twice (issue 10, item 0b) --------------------------------

QUICK_SUCCESSIVE: Dict[str, Any] = dict(initial_partitions=2, layouts=(3, 7), burst=1.0, producers=2,
                                        stable_producers=1, keys=6, consumer_weight=0.05, reg_weight=2.0,
                                        records_per_producer=30)


def _double_move_trace() -> Tuple[Simulation, int]:
    """2 -> 3 -> 7: the producer writes A (key k) to p0, registers for 3
    writing only to p1, registers for 7 and writes B (k) to p6. Returns the
    simulation and the member that owns p2 and p6 but not p0."""
    sim = Simulation(0, initial_partitions=2, layouts=(3, 7), producers=1, stable_producers=0,
                     records_per_producer=0, members=2, producer_restarts=0, consumer_crashes=0, rebalances=0)
    k = next(k for k in sim.keys
             if (sim.partition_of(1, k), sim.partition_of(2, k), sim.partition_of(3, k)) == (0, 2, 6))
    other = next(k for k in sim.keys if sim.partition_of(2, k) == 1 and sim.partition_of(3, k) == 1)
    sim.send(0, k)  # A -> p0
    sim.register(0)
    sim.ack_all(0)
    sim.admin_step()  # epoch 2: 3 partitions
    sim.observe(0, len(sim.log))
    sim.send(0, other)  # registers for epoch 2, writes nothing to p2
    sim.register(0)
    sim.ack_all(0)
    sim.admin_step()  # epoch 3: 7 partitions
    sim.observe(0, len(sim.log))
    sim.send(0, k)  # registers for epoch 3, B -> p6
    sim.register(0)
    sim.ack_all(0)
    waiter = sim.owner[6].index
    sim.move_partition(0, 1 - waiter)
    sim.move_partition(2, waiter)
    return sim, waiter


def test_key_moving_twice_waits_for_its_first_partition() -> None:
    sim, waiter = _double_move_trace()
    sim.follow(waiter)
    assert sim.deliver(waiter, 6) == 0, "B delivered while A still waits on p0"
    source = sim.owner[0].index
    sim.follow(source)
    assert sim.deliver(source, 0) == 1
    sim.commit(source)
    assert sim.deliver(waiter, 6) == 1
    sim.finish()
    assert sim.violations == 0 and not sim.deadlock


def test_key_moving_twice_is_caught_without_inherited_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same trace and the random driver with quick successive changes
    find the violation when waits are not inherited: the simulation can fail."""
    from kafka_ordered import registration

    monkeypatch.setattr(registration, "inherited_waits", lambda p, start, waits, own: dict(waits))
    sim, waiter = _double_move_trace()
    sim.follow(waiter)
    assert sim.deliver(waiter, 6) == 1
    assert sim.violations == 1
    assert any(run(s, **QUICK_SUCCESSIVE).violations for s in range(100))


def test_quick_successive_changes_never_reorder() -> None:
    results = [run(s, **QUICK_SUCCESSIVE) for s in range(300)]
    for r in results:
        _check_ok(r)
    assert sum(r.gate_holds > 0 for r in results) >= 0.5 * len(results)


# -- compacted changelogs (KIP-253 §9: move tombstones) --------------------------

COMPACTED_SEEDS = range(0, 150)


def _compacted_totals(seeds: Any, **knobs: Any) -> Counter:
    totals: Counter = Counter()
    for seed in seeds:
        r = run(seed, compacted=True, **knobs)
        for f in ("violations", "lost", "table_errors", "rebuilt_table_errors", "stale_copies",
                  "unexplained_stale_copies", "tombstones", "compacted_away", "gap_catch_ups"):
            totals[f] += getattr(r, f)
        totals["deadlocks"] += r.deadlock
        totals["not ok"] += not r.ok
    return totals


def test_compacted_changelog_keeps_every_latest_value_and_one_live_copy() -> None:
    """With the shipped move tombstones, the cleaner compacting as everything
    runs: no violation, nothing lost, the group's table and a table rebuilt
    from earliest after the final compaction hold every key's last
    acknowledged value, and no stale copy survives that a crash does not
    explain."""
    t = _compacted_totals(COMPACTED_SEEDS)
    assert t["tombstones"] > 300 and t["compacted_away"] > 5000 and t["gap_catch_ups"] > 10, t
    assert t["not ok"] == 0 and t["deadlocks"] == 0, t


def test_compacted_changelog_without_tombstones_keeps_stale_copies() -> None:
    t = _compacted_totals(range(0, 20), tombstones=False)
    assert t["unexplained_stale_copies"] > 20, t
    assert t["table_errors"] == 0 and t["rebuilt_table_errors"] == 0, t  # gates still order the stale value first


def test_a_consumer_that_applies_move_tombstones_deletes_new_values() -> None:
    """A move tombstone is written after the key's new value, above every
    gate's wait: a consumer applying it (as a plain one does) may delete the
    new value."""
    t = _compacted_totals(range(0, 20), hide_tombstones=False)
    assert t["table_errors"] > 5, t


def _key_moving_at_8(first: Layout) -> bytes:
    after = first.expanded(8)
    return next(k for k in (f"key-{i}".encode() for i in range(64))
                if first.partition_for(k) != after.partition_for(k))


@pytest.mark.parametrize("after_ack", [True, False])
def test_a_tombstone_waits_for_its_keys_new_record(after_ack: bool) -> None:
    """A producer moves key K (p_old -> p_new) and dies with the new record
    unacknowledged. Sent at once, the move tombstone could be acknowledged
    alone: compaction then deletes K's last acknowledged value, and a table
    rebuilt from earliest loses K. The shipped producer sends it only once
    the new record is acknowledged."""
    first = Layout(TOPIC, 1, 4, 4, 8)
    key = _key_moving_at_8(first)
    sim = Simulation(0, compacted=True, producers=1, stable_producers=1, keys=[key], layouts=(8,),
                     members=1, tombstones_after_ack=after_ack)
    old, new = sim.partition_of(1, key), sim.partition_of(2, key)
    sim.send(0, key)
    sim.register(0)  # the first registration (gate-less)
    sim.ack_all(0)
    sim.admin_step()
    sim.observe(0, len(sim.log))
    sim.send(0, key)  # starts the switch; the record waits in the buffer
    sim.register(0)
    inflight = {p: len(q) for p, q in sim.producers[0].inflight.items() if q}
    assert inflight == ({new: 1} if after_ack else {new: 1, old: 1})
    sim.restart_producer(0, acked={old: 1})  # the tombstone (if sent) made it, the new value did not
    sim.finish()
    r = sim.result()
    assert r.table_errors == 0
    if after_ack:
        assert r.ok and r.tombstones == 0
    else:
        assert r.tombstones == 1 and r.rebuilt_table_errors == 1 and not r.ok


def test_a_tombstone_due_when_the_process_dies_is_an_explained_stale_copy() -> None:
    first = Layout(TOPIC, 1, 4, 4, 8)
    key = _key_moving_at_8(first)
    sim = Simulation(0, compacted=True, producers=1, stable_producers=1, keys=[key], layouts=(8,), members=1)
    new = sim.partition_of(2, key)
    sim.send(0, key)
    sim.register(0)  # the first registration (gate-less)
    sim.ack_all(0)
    sim.admin_step()
    sim.observe(0, len(sim.log))
    sim.send(0, key)
    sim.register(0)
    sim.restart_producer(0, acked={new: 1})  # acknowledged as it died: the tombstone is never sent
    sim.finish()
    r = sim.result()
    assert (r.stale_copies, r.unexplained_stale_copies, r.table_errors, r.rebuilt_table_errors) == (1, 0, 0, 0)
    assert r.ok


def test_compaction_removes_superseded_records_and_old_tombstones_and_keeps_offsets() -> None:
    first = Layout(TOPIC, 1, 4, 4, 8)
    key = _key_moving_at_8(first)
    sim = Simulation(0, compacted=True, producers=1, stable_producers=1, keys=[key], layouts=(8,), members=1)
    old = sim.partition_of(1, key)
    for _ in range(3):
        sim.send(0, key)
    sim.register(0)
    sim.ack_all(0)
    assert sim.compact(old, 2, retention_elapsed=False) == 1  # offset 0 superseded by 1; 2 is not cleanable
    assert sim.compact(old, 3, retention_elapsed=False) == 1  # now offset 1 by 2
    sim.admin_step()
    sim.observe(0, len(sim.log))
    sim.send(0, key)
    sim.register(0)
    sim.ack_all(0)  # the new record, then its tombstone at old:3
    assert [rec.offset for rec in sim.logs[old]] == [0, 1, 2, 3] and sim.logs[old][3].tombstone
    assert sim.compact(old, 4, retention_elapsed=False) == 1  # the value at 2 goes, the tombstone stays
    assert sim.compact(old, 4, retention_elapsed=True) == 1  # then the tombstone
    sim.finish()
    assert sim.result().ok and sim.result().stale_copies == 0


def test_a_member_that_owns_every_source_holds_in_hand_without_a_pause_or_a_seek() -> None:
    """Holds in hand, run by the simulation: one member owns every
    partition, so each gate opens on its own deliveries; its partitions are
    held without pausing or seeking the client, and the records kept come
    out in order (the oracle checks every delivery), none lost."""
    holds = 0
    for seed in range(20):
        sim = Simulation(seed, members=1, consumer_crashes=0)
        client = sim.members[0].client
        calls = []
        pause, seek = client.pause, client.seek
        client.pause = lambda tps: (calls.append(("pause", tps)), pause(tps))  # type: ignore[method-assign]
        client.seek = lambda tp, off: (calls.append(("seek", tp, off)), seek(tp, off))  # type: ignore[method-assign]
        r = sim.run()
        assert r.ok and r.undelivered == 0, (seed, r.detail)
        assert calls == [], (seed, calls[:3])
        holds += r.gate_holds
    assert holds > 0, "gates held partitions"


@pytest.mark.parametrize("in_hand", [True, False])
def test_holds_in_hand_and_holds_by_pauses_both_keep_the_order(in_hand: bool) -> None:
    results = [run(s, in_hand=in_hand) for s in range(60)]
    assert all(r.ok for r in results), [(r.seed, r.detail) for r in results if not r.ok][:3]
    assert sum(r.gate_holds for r in results) > 0
    results = [run(s, in_hand=in_hand, compacted=True) for s in range(20)]
    assert all(r.ok for r in results), [(r.seed, r.detail) for r in results if not r.ok][:3]
