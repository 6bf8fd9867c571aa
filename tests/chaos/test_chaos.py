"""The randomized fault suite (``make chaos SEEDS=0-49``); ``make test`` runs
three fixed seeds and the plain-client controls. On the Apache Kafka cluster
(``KAFKA_ORDERED_BROKER=kafka``) the seeds add broker faults (seed 8 SIGSTOPs
the layout log's leader, seed 21 SIGKILLs a data partition's leader) and
aiokafka producers (seeds 8 and 39 have one each)."""

from __future__ import annotations

import pytest

from typing import Optional

from kafka_ordered.testing import KafkaCluster

from .scenarios import describe, run_seed

# Three seeds that between them cover every client on both sides (aiokafka
# producers only on Apache Kafka), manual commits, poison records, stable and
# anonymous ids, a SIGKILLed producer and consumer (seed 39: in a group of
# aiokafka consumers, and restarted), a joining member and a corrupt
# layout-log record.
FIXED_SEEDS = (8, 21, 39)
# The plain controls: seed 8 (confluent-kafka's group) and seed 39 (aiokafka's).
CONTROL_SEEDS = (8, 39)


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


@pytest.mark.parametrize("seed", CONTROL_SEEDS)
def test_plain_clients_break_order_under_the_same_faults(bootstrap: str, embedded: bool, seed: int,
                                                         kafka_cluster: Optional[KafkaCluster]) -> None:
    """The control: the same scenario through plain clients shows violations
    (seed 39: a group of plain ``AIOKafkaConsumer``)."""
    r = run_seed(bootstrap, seed, plain=True, embedded=embedded, cluster=kafka_cluster)
    assert r.report.violations, f"the oracle saw no violation with plain clients ({describe(r.scenario)}): {r.report}"


@pytest.mark.chaos
@pytest.mark.parametrize("seed", [s for s in range(50) if s not in FIXED_SEEDS])
def test_seed(bootstrap: str, embedded: bool, seed: int, kafka_cluster: Optional[KafkaCluster]) -> None:
    _check(bootstrap, seed, embedded, kafka_cluster)
