"""The randomized fault suite (``make chaos SEEDS=0-49``); ``make test`` runs
two fixed seeds and the plain-client control. On the Apache Kafka cluster
(``KAFKA_ORDERED_BROKER=kafka``) the seeds add broker faults: seed 8 SIGSTOPs
the layout log's leader, seed 21 SIGKILLs a data partition's leader."""

from __future__ import annotations

import pytest

from typing import Optional

from kafka_ordered.testing import KafkaCluster

from .scenarios import describe, run_seed

# Two seeds that between them cover both clients on both sides, manual
# commits, poison records, stable and anonymous ids, a SIGKILLed producer and
# consumer, a joining member and a corrupt layout-log record.
FIXED_SEEDS = (8, 21)


def _check(bootstrap: str, seed: int, embedded: bool, cluster: Optional[KafkaCluster]) -> None:
    r = run_seed(bootstrap, seed, embedded=embedded, cluster=cluster)
    rep = r.report
    detail = f"seed {seed} ({describe(r.scenario)}): {rep} {list(r.missing_detail)}"
    assert rep.acknowledged > 500, detail
    assert rep.violations == (), detail
    assert rep.missing == 0, detail
    assert r.worker_failures == (), f"{detail} {list(r.worker_failures)}"
    if r.scenario.poison:
        assert r.refused > 0 and r.poison_skipped > 0, f"no poison record reached the clients: {detail}"


@pytest.mark.parametrize("seed", FIXED_SEEDS)
def test_fixed_seed_keeps_order_and_loses_nothing(bootstrap: str, embedded: bool, seed: int,
                                                  kafka_cluster: Optional[KafkaCluster]) -> None:
    _check(bootstrap, seed, embedded, kafka_cluster)


def test_plain_clients_break_order_under_the_same_faults(bootstrap: str, embedded: bool,
                                                         kafka_cluster: Optional[KafkaCluster]) -> None:
    """The control: the same scenario through plain clients shows violations."""
    r = run_seed(bootstrap, FIXED_SEEDS[0], plain=True, embedded=embedded, cluster=kafka_cluster)
    assert r.report.violations, f"the oracle saw no violation with plain clients: {r.report}"


@pytest.mark.chaos
@pytest.mark.parametrize("seed", [s for s in range(50) if s not in FIXED_SEEDS])
def test_seed(bootstrap: str, embedded: bool, seed: int, kafka_cluster: Optional[KafkaCluster]) -> None:
    _check(bootstrap, seed, embedded, kafka_cluster)
