"""The randomized fault suite (``make chaos SEEDS=0-49``); ``make test`` runs
two fixed seeds and the plain-client control."""

from __future__ import annotations

import pytest

from .scenarios import describe, run_seed, scenario_for

# Two seeds that between them cover both clients on both sides, manual
# commits, poison records, stable and anonymous ids, a SIGKILLed producer and
# consumer, a joining member and a corrupt layout-log record.
FIXED_SEEDS = (8, 21)


def _check(bootstrap: str, seed: int, embedded: bool) -> None:
    r = run_seed(bootstrap, seed, embedded=embedded)
    rep = r.report
    detail = f"seed {seed} ({describe(scenario_for(seed))}): {rep} {list(r.missing_detail)}"
    assert rep.acknowledged > 500, detail
    assert rep.violations == (), detail
    assert rep.missing == 0, detail
    if r.scenario.poison:
        assert r.refused > 0 and r.poison_skipped > 0, f"no poison record reached the clients: {detail}"


@pytest.mark.parametrize("seed", FIXED_SEEDS)
def test_fixed_seed_keeps_order_and_loses_nothing(bootstrap: str, embedded: bool, seed: int) -> None:
    _check(bootstrap, seed, embedded)


def test_plain_clients_break_order_under_the_same_faults(bootstrap: str, embedded: bool) -> None:
    """The control: the same scenario through plain clients shows violations."""
    r = run_seed(bootstrap, FIXED_SEEDS[0], plain=True, embedded=embedded)
    assert r.report.violations, f"the oracle saw no violation with plain clients: {r.report}"


@pytest.mark.chaos
@pytest.mark.parametrize("seed", [s for s in range(50) if s not in FIXED_SEEDS])
def test_seed(bootstrap: str, embedded: bool, seed: int) -> None:
    _check(bootstrap, seed, embedded)
