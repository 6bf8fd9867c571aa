"""The ordering oracle over randomized scenarios with real producer and
consumer processes (issue 4): the ordered clients never break per-key order
or lose an acknowledged record; plain clients through the same scenario do
break it, which shows the oracle can fail."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kafka_ordered.testing.demo import Scenario, ScenarioResult, run_scenario

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
