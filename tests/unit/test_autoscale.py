"""The pure autoscaling policy: validation, the linear-hashing load model,
sustain times, hysteresis, cooldown, max_step, bounds, capacity, gates, lag
and retire (kafka_ordered.autoscale)."""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_ordered.autoscale import (
    GATE_PENDING_BOUND_S,
    GROW_AT,
    LAG_HOLD_S,
    GROW_TO,
    SHRINK_AT,
    AutoscalePolicy,
    Decision,
    Observation,
    PolicyState,
    decide,
    predict,
)
from kafka_ordered.errors import ConfigError, KafkaOrderedError
from kafka_ordered.layout import partitions_for

TARGET = 1000.0


def policy(**kw: object) -> AutoscalePolicy:
    args = dict(min_partitions=4, max_partitions=64, target_records_per_s=TARGET, scale_up_after=60.0,
                scale_down_after=600.0, cooldown=120.0, groups=("g",))
    args.update(kw)
    return AutoscalePolicy(**args)  # type: ignore[arg-type]


def obs(t: float, rates: Sequence[float], *, n0: int = 4, epoch: int = 1, **kw: object) -> Observation:
    return Observation(time=t, epoch=epoch, initial_partitions=n0, partitions=len(rates), rates=tuple(rates),
                       **kw)  # type: ignore[arg-type]


def run(p: AutoscalePolicy, rates: Sequence[float], times: Sequence[float], state: PolicyState = PolicyState(),
        **kw: object) -> List[Decision]:
    out = []
    for t in times:
        d = decide(p, obs(t, rates, **kw), state)
        state = d.state
        out.append(d)
    return out


# -- validation


@pytest.mark.parametrize("kw, words", [
    (dict(min_partitions=8, max_partitions=4), "min_partitions (8) is above max_partitions (4)"),
    (dict(target_records_per_s=0), "target_records_per_s must be > 0"),
    (dict(target_records_per_s=-5.0), "target_records_per_s must be > 0"),
    (dict(target_records_per_s=math.inf), "finite"),
    (dict(target_records_per_s=math.nan), "finite"),
    (dict(target_records_per_s=None), "exactly one of"),
    (dict(target_bytes_per_s=100.0), "exactly one of"),
    (dict(target_records_per_s=None, target_bytes_per_s=0), "target_bytes_per_s must be > 0"),
    (dict(target_records_per_s="1000"), "must be a number"),
    (dict(target_records_per_s=True), "must be a number"),
    (dict(min_partitions=0), "min_partitions must be an int >= 1"),
    (dict(max_partitions=2.5), "max_partitions must be an int >= 1"),
    (dict(min_partitions=True), "min_partitions must be an int >= 1"),
    (dict(scale_up_after=-1), "scale_up_after must be >= 0"),
    (dict(scale_down_after=math.inf), "scale_down_after"),
    (dict(cooldown=-0.5), "cooldown must be >= 0"),
    (dict(max_step=0), "max_step must be an int >= 1"),
    (dict(groups="g"), "groups must be a sequence of group ids"),
    (dict(groups=("g", "")), "not a group id: ''"),
    (dict(groups=(1,)), "not a group id: 1"),
])
def test_bad_policies_raise_a_clear_config_error(kw: dict, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        policy(**kw)
    assert words in str(e.value)
    assert isinstance(e.value, KafkaOrderedError) and isinstance(e.value, ValueError)


def test_policy_is_frozen_with_the_issue_s_field_names() -> None:
    names = [f.name for f in dataclasses.fields(AutoscalePolicy)]
    assert names == ["min_partitions", "max_partitions", "target_records_per_s", "target_bytes_per_s",
                     "scale_up_after", "scale_down_after", "cooldown", "max_step", "groups"]
    p = policy(groups=["a", "b", "a"])
    assert p.groups == ("a", "b")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.min_partitions = 2  # type: ignore[misc]
    assert (p.unit, p.target) == ("records", TARGET)
    b = policy(target_records_per_s=None, target_bytes_per_s=5e6)
    assert (b.unit, b.target) == ("bytes", 5e6)


def test_observation_checks_its_rates() -> None:
    with pytest.raises(ValueError, match="3 rates for 4"):
        Observation(0.0, 1, 4, 4, (1.0, 2.0, 3.0))
    with pytest.raises(ValueError, match="finite"):
        obs(0.0, [1.0, -1.0, 0, 0])


# -- the load model


def test_predict_splits_in_linear_hashing_order() -> None:
    # N0=2: 2 -> 3 splits partition 0, 3 -> 4 splits partition 1, 4 -> 5 splits partition 0 again.
    assert predict([100, 40], 2, 3) == [50, 40, 50]
    assert predict([100, 40], 2, 4) == [50, 20, 50, 20]
    assert predict([100, 40], 2, 5) == [25, 20, 50, 20, 25]
    # Growing past N0 * 2^k leaves the unsplit partitions as hot as before.
    assert max(predict([100] * 4, 4, 5)) == 100 and max(predict([100] * 4, 4, 8)) == 50


def test_predict_merges_exactly() -> None:
    assert predict([25, 20, 50, 20, 25], 2, 4) == [50, 20, 50, 20]
    assert predict([25, 20, 50, 20, 25], 2, 2) == [100, 40]
    with pytest.raises(ValueError):
        predict([1, 1, 1], 2, 1)


@given(st.integers(1, 8), st.data())
@settings(max_examples=200, deadline=None)
def test_predict_keeps_the_total_and_round_trips(n0: int, data: st.DataObject) -> None:
    n = data.draw(st.integers(n0, 4 * n0 + 3))
    m = data.draw(st.integers(n0, 4 * n0 + 3))
    rates = data.draw(st.lists(st.floats(0, 1e6), min_size=n, max_size=n))
    out = predict(rates, n0, m)
    assert len(out) == m
    assert sum(out) == pytest.approx(sum(rates), rel=1e-9, abs=1e-6)
    if m <= n:  # merging then splitting restores what merging lost only on average; merging back is exact
        assert predict(predict(rates, n0, n), n0, m) == pytest.approx(out)


def test_predict_matches_real_keys_moving_under_linear_hashing() -> None:
    """With many evenly hashed keys, the model's split shares are what the
    layout math really does (it chooses a count, the hash chooses the keys)."""
    keys = [f"key-{i}".encode() for i in range(40_000)]
    n0 = 3
    before = partitions_for(keys, n0, 3)
    rates = [float((before == p).sum()) for p in range(3)]
    for m in (4, 5, 6, 7, 12):
        real = partitions_for(keys, n0, m)
        counts = [float((real == p).sum()) for p in range(m)]
        assert predict(rates, n0, m) == pytest.approx(counts, rel=0.05)


# -- growing


def test_grows_only_after_the_load_stayed_high_for_scale_up_after() -> None:
    p = policy()
    ds = run(p, [900.0] * 4, [0, 30, 59])
    assert [d.kind for d in ds] == ["hold"] * 3
    assert "for 59 of 60 s" in ds[-1].reason
    d = decide(p, obs(60, [900.0] * 4), ds[-1].state)
    assert d.kind == "grow" and d.partitions_to == 8 and d.partitions == 4 and d.epoch == 1
    assert d.predicted_hottest == 450.0 and d.hottest == 900.0 and d.total == 3600.0
    assert "above 80% of the target" in d.reason and "60 s" in d.reason
    assert d.state.last_change == 60 and d.state.above_since is None


def test_a_dip_restarts_the_sustain_time() -> None:
    p = policy()
    s = run(p, [900.0] * 4, [0, 50])[-1].state
    s = decide(p, obs(55, [100.0] * 4), s).state
    ds = run(p, [900.0] * 4, [60, 100, 119], state=s)
    assert [d.kind for d in ds] == ["hold"] * 3
    assert decide(p, obs(120, [900.0] * 4), ds[-1].state).kind == "grow"


def test_grows_to_the_smallest_count_the_model_puts_under_grow_to() -> None:
    p = policy()
    # Only partition 1 is hot: 4 -> 6 splits partitions 0 and 1.
    d = decide(p, obs(100, [100.0, 1200.0, 100.0, 100.0]), PolicyState(above_since=0.0))
    assert d.kind == "grow" and d.partitions_to == 6
    assert d.predicted_hottest == 600.0 <= GROW_TO * TARGET
    # Twice as hot: two split levels (1 splits into 1 and 5 at 6, 1 into 1 and 9 at 10, 5 into 5 and 13 at 14).
    d = decide(p, obs(100, [100.0, 2400.0, 100.0, 100.0]), PolicyState(above_since=0.0))
    assert d.kind == "grow" and d.partitions_to == 14 and d.predicted_hottest == 600.0


def test_max_step_limits_a_grow_even_when_the_model_wants_more() -> None:
    d = decide(policy(max_step=2), obs(100, [900.0] * 4), PolicyState(above_since=0.0))
    assert d.kind == "grow" and d.partitions_to == 6 and d.predicted_hottest == 900.0


@pytest.mark.parametrize("capacity, words", [(None, "max_partitions (8)"), (6, "capacity for this topic (6)")])
def test_never_above_max_partitions_or_capacity(capacity: Optional[int], words: str) -> None:
    p = policy(max_partitions=8)
    d = decide(p, obs(100, [900.0] * 4, capacity=capacity), PolicyState(above_since=0.0))
    assert d.kind == "grow" and d.partitions_to == (8 if capacity is None else 6)
    at = [900.0] * (8 if capacity is None else 6)
    d = decide(p, obs(200, at, capacity=capacity), PolicyState(above_since=0.0))
    assert d.kind == "hold" and words in d.reason


def test_cooldown_blocks_the_next_change() -> None:
    p = policy()
    s = PolicyState(above_since=0.0, last_change=50.0)
    d = decide(p, obs(100, [900.0] * 4), s)
    assert d.kind == "hold" and "cooldown: 70 s left" in d.reason
    assert decide(p, obs(170, [900.0] * 4), d.state).kind == "grow"


def test_grow_waits_for_gates_closed_beyond_the_bound_only() -> None:
    p = policy()
    d = decide(p, obs(1000, [900.0] * 4, gates_pending_since=1000 - GATE_PENDING_BOUND_S + 1),
               PolicyState(above_since=0.0))
    assert d.kind == "grow"
    d = decide(p, obs(1000, [900.0] * 4, gates_pending_since=1000 - GATE_PENDING_BOUND_S - 1),
               PolicyState(above_since=0.0))
    assert d.kind == "hold" and "stuck or down" in d.reason and "g" in d.reason


# -- shrinking


def test_shrinks_after_scale_down_after_to_the_largest_minimal_count_of_the_run() -> None:
    p = policy()
    s = PolicyState()
    # 8 partitions at 150/s each: 4 predicted at 300/s <= 40% of 1000.
    d = decide(p, obs(0, [150.0] * 8), s)
    assert d.kind == "hold" and d.state.shrink_to == 4 and "for 0 of 600 s" in d.reason
    # A moment where only 6 would do (partitions 0 and 1 busier): the run remembers 6.
    d = decide(p, obs(300, [300.0, 300.0, 50.0, 50.0, 300.0, 300.0, 50.0, 50.0]), d.state)
    assert d.kind == "hold" and d.state.shrink_to == 6
    d = decide(p, obs(600, [150.0] * 8), d.state)
    assert d.kind == "shrink" and d.partitions_to == 6 and d.predicted_hottest == 300.0
    assert "600 s" in d.reason and d.state.last_change == 600


def test_a_run_remembered_from_a_larger_count_never_shrinks_to_the_current_one() -> None:
    # The topic was shrunk by hand from 8 to 6 while the run remembered 6.
    d = decide(policy(scale_down_after=0), obs(0, [10.0] * 6), PolicyState(below_since=-5.0, shrink_to=6))
    assert d.kind == "shrink" and d.partitions_to == 4


def test_hysteresis_no_flapping_between_grow_and_shrink() -> None:
    """A load that stays inside the band never changes the topic."""
    p = policy(scale_up_after=0, scale_down_after=0, cooldown=0)
    for rate in (GROW_AT * TARGET, (SHRINK_AT * TARGET) / 2 + 1, 500.0):
        ds = run(p, [rate] * 8, range(0, 3600, 10))
        assert {d.kind for d in ds} == {"hold"}, rate
    # A grow lands at or below GROW_TO, far from the shrink threshold of the count grown to.
    d = decide(p, obs(0, [810.0] * 4), PolicyState())
    assert d.kind == "grow" and d.predicted_hottest <= GROW_TO * TARGET
    after = predict([810.0] * 4, 4, d.partitions_to)
    assert decide(p, obs(1, after), d.state).kind == "hold"


@given(rates=st.lists(st.floats(0, 3000), min_size=4, max_size=32), steps=st.integers(1, 40))
@settings(max_examples=150, deadline=None)
def test_a_steady_load_settles_after_one_change_at_most(rates: List[float], steps: int) -> None:
    """Fed back its own predictions, the policy never reverses a change
    (grow then shrink, or shrink then grow) under a steady load."""
    p = policy(max_partitions=256, scale_up_after=0, scale_down_after=0, cooldown=0)
    n0, cur, s = 4, list(rates), PolicyState()
    kinds = []
    for t in range(steps):
        d = decide(p, obs(t, cur, n0=n0), s)
        s = d.state
        assert p.min_partitions <= d.partitions_to <= p.max_partitions
        if d.kind in ("grow", "shrink"):
            kinds.append(d.kind)
            cur = predict(cur, n0, d.partitions_to)
    assert not ("grow" in kinds and "shrink" in kinds), kinds


def test_never_below_min_or_the_initial_count() -> None:
    p = policy(min_partitions=6, scale_down_after=0)
    d = decide(p, obs(0, [0.0] * 8), PolicyState())
    assert d.kind == "shrink" and d.partitions_to == 6
    assert decide(p, obs(0, [0.0] * 6), PolicyState()).kind == "hold"
    low = policy(min_partitions=1, scale_down_after=0)
    assert decide(low, obs(0, [0.0] * 4), PolicyState()).kind == "hold"  # initial count 4


def test_max_step_limits_a_shrink() -> None:
    d = decide(policy(max_step=3, scale_down_after=0), obs(0, [0.0] * 16), PolicyState())
    assert d.kind == "shrink" and d.partitions_to == 13


def test_lagging_groups_hold_shrinking() -> None:
    p = policy(scale_down_after=0)
    d = decide(p, obs(0, [10.0] * 8, lag_s={"g": LAG_HOLD_S + 1}), PolicyState())
    assert d.kind == "hold" and f"g more than {LAG_HOLD_S:.0f} s behind" in d.reason
    assert decide(p, obs(0, [10.0] * 8, lag_s={"g": math.inf}), PolicyState()).kind == "hold"
    assert decide(p, obs(0, [10.0] * 8, lag_s={"g": LAG_HOLD_S - 1}), PolicyState()).kind == "shrink"
    # Lag of a group the policy does not name does not count.
    assert decide(p, obs(0, [10.0] * 8, lag_s={"other": 1e9}), PolicyState()).kind == "shrink"


def test_shrink_waits_for_every_gate_of_the_previous_transition() -> None:
    p = policy(scale_down_after=0)
    d = decide(p, obs(100, [10.0] * 8, gates_pending_since=99.0), PolicyState())
    assert d.kind == "hold" and "gate of the previous transition is still closed" in d.reason


# -- retiring and bounds


def test_retires_drained_partitions_at_once_without_cooldown() -> None:
    p = policy()
    d = decide(p, obs(10, [10.0] * 4, drained=frozenset({5, 4})), PolicyState(last_change=5.0))
    assert d.kind == "retire" and d.retire == {4, 5} and d.partitions_to == 4
    assert d.state.last_change == 5.0  # retiring moves no key: no cooldown
    assert "4, 5" in d.reason


def test_a_needed_grow_comes_before_a_retire_and_a_blocked_one_does_not_block_it() -> None:
    d = decide(policy(), obs(100, [900.0] * 4, drained=frozenset({4})), PolicyState(above_since=0.0))
    assert d.kind == "grow"
    at_max = policy(max_partitions=4)
    d = decide(at_max, obs(100, [900.0] * 4, drained=frozenset({4})), PolicyState(above_since=0.0))
    assert d.kind == "retire" and d.retire == {4}
    d = decide(at_max, obs(100, [900.0] * 4), d.state)
    assert d.kind == "hold" and "max_partitions (4)" in d.reason


def test_a_topic_outside_the_bounds_walks_back_in() -> None:
    d = decide(policy(min_partitions=8), obs(0, [0.0] * 4), PolicyState())
    assert d.kind == "grow" and d.partitions_to == 8 and "outside the policy's bounds" in d.reason
    d = decide(policy(max_partitions=8, max_step=4), obs(0, [0.0] * 16), PolicyState())
    assert d.kind == "shrink" and d.partitions_to == 12


def test_decisions_are_pure_and_serialisable() -> None:
    p, o = policy(), obs(100, [900.0] * 4)
    s = PolicyState(above_since=0.0)
    a, b = decide(p, o, s), decide(p, o, s)
    assert a == b
    d = a.to_dict()
    assert d["kind"] == "grow" and d["partitions_to"] == 8 and d["unit"] == "records" and "state" not in d


# -- the exporter


def test_prometheus_exports_the_autoscaler_metrics() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from kafka_ordered.metrics import AutoscalerMetrics
    from kafka_ordered.prometheus import OrderedCollector

    class Fake:
        def ordered_metrics(self) -> AutoscalerMetrics:
            return AutoscalerMetrics("orders", "autoscaler-a", True, "records", {0: 120.5, 1: 80.0},
                                     {"grow": 2, "hold": 7}, 1700000000.0, "grow")

    registry = prometheus_client.CollectorRegistry()
    OrderedCollector.register(Fake(), registry=registry)
    text = prometheus_client.generate_latest(registry).decode()
    assert 'kafka_ordered_autoscaler_rate{partition="0",topic="orders",unit="records"} 120.5' in text
    assert 'kafka_ordered_autoscaler_decisions_total{kind="grow",topic="orders"} 2.0' in text
    assert 'kafka_ordered_autoscaler_decisions_total{kind="shrink",topic="orders"} 0.0' in text
    assert 'kafka_ordered_autoscaler_last_decision{topic="orders"} 1.7e+09' in text
    assert 'kafka_ordered_autoscaler_leader{autoscaler="autoscaler-a",topic="orders"} 1.0' in text


def test_the_exporters_table_lists_every_metric_it_exports() -> None:
    """The module docstring's table (a reStructuredText simple table: top
    border, header, border, rows, bottom border) names every metric the
    collector exports, as a scrape names it (a counter with ``_total``),
    with its type."""
    prometheus_client = pytest.importorskip("prometheus_client")
    import re

    import kafka_ordered.prometheus as prometheus

    doc = prometheus.__doc__ or ""
    lines = doc.splitlines()
    borders = [i for i, line in enumerate(lines) if line.startswith("=====") and set(line) <= {"=", " "}]
    assert len(borders) == 3, f"a simple table needs 3 border lines, found {len(borders)}"
    assert len(lines[borders[0]]) == len(lines[borders[1]]) == len(lines[borders[2]])
    rows = {line.split()[0].strip("`"): line.split()[1] for line in lines[borders[1] + 1:borders[2]]
            if line.startswith("``")}
    registry = prometheus_client.CollectorRegistry()
    prometheus.OrderedCollector.register(registry=registry)
    scraped = dict(re.findall(r"^# TYPE (kafka_ordered_\w+) (\w+)$", prometheus_client.generate_latest(registry).decode(),
                              re.M))
    assert len(scraped) == 17
    assert rows == scraped
