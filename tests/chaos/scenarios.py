"""Randomized multi-process fault scenarios, reproducible by seed.

Each seed picks, over the scenario engine of :mod:`kafka_ordered.testing.demo`
(producers and consumers as separate OS processes): how many producers and
consumers, stable or anonymous producer ids, a random walk of expands and
shrinks while the group drains, a producer SIGKILLed (or stopped) and
restarted, a consumer SIGKILLed and maybe restarted, a member joining (a
rebalance), an unparsable record appended to the layout log, which client
each producer uses and which one the group uses (confluent-kafka,
kafka-python or aiokafka; aiokafka producers only on Apache Kafka), auto or manual (synchronous, per batch) commits, and poison
records (one the producer's client refuses, one no consumer can parse), and
on the Apache Kafka cluster a broker SIGKILLed or SIGSTOPped (the layout
log's leader or a data partition's) and brought back. The
ordering oracle checks per-key order per producer and that every
acknowledged record is delivered (the embedded broker's tail holes are
counted apart, see ``kafka_ordered.testing.OrderingOracle``). ``plain=True`` runs the same scenario
through confluent-kafka's own clients: the control that shows the oracle
can fail.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from typing import List, Optional

from kafka_ordered.testing import BOOTSTRAP_ENV, KafkaCluster
from kafka_ordered.testing.demo import Scenario, ScenarioResult, run_scenario


def scenario_for(seed: int, *, plain: bool = False, duration_s: float = 10.0, broker_faults: bool = False,
                 embedded: bool = True) -> Scenario:
    """The scenario of ``seed`` (ordered clients unless ``plain``). With
    ``broker_faults`` (the Apache Kafka cluster) it also SIGKILLs or SIGSTOPs
    a broker, the layout log's leader or a data partition's, and brings it
    back; the other choices of the seed stay the same. aiokafka producers
    are drawn only when not ``embedded`` (aiokafka's idempotent producer
    fails on the embedded broker: its InitProducerId v0 is refused); that
    draw comes after every other, so the rest of the seed is the same on
    both brokers."""
    sc = _client_scenario(seed, plain=plain, duration_s=duration_s, embedded=embedded)
    if not broker_faults:
        return sc
    rng = random.Random(seed ^ 0xB40CE4)
    return replace(sc, broker_fault_at=round(rng.uniform(0.15, 0.7), 2),
                   broker_fault=rng.choice(["kill", "pause"]),
                   broker_fault_target=rng.choice(["layout-leader", "data-leader"]),
                   broker_down_s=round(rng.uniform(2.0, 6.0), 1))


# The group's client, from one draw: kafka-python below the first bound,
# aiokafka below the second, confluent-kafka above.
_KAFKA_PYTHON_GROUP = 0.35
_AIOKAFKA_GROUP = 0.55


def _client_scenario(seed: int, *, plain: bool, duration_s: float, embedded: bool) -> Scenario:
    # The order of the draws is the seed's meaning: new ones go last.
    rng = random.Random(seed)
    initial = rng.choice([2, 3, 4])
    physical = initial * 2
    counts: List[int] = []
    n = initial
    for _ in range(rng.randint(2, 4)):
        choices = [m for m in range(initial, physical + 1) if m != n]
        n = rng.choice(choices)
        counts.append(n)

    def at() -> Optional[float]:
        return round(rng.uniform(0.2, 0.8), 2) if rng.random() < 0.8 else None

    producers = rng.randint(2, 3)
    keys = rng.choice([100, 300, 800])
    rate = rng.choice([400, 800])
    consumers = rng.randint(2, 3)
    consumer_rate = rng.choice([600, 1200])
    producer_restart_at = at()
    consumer_crash_at = at()
    member_join_at = at()
    stable_ids = rng.random() < 0.5
    producer_kill = rng.random() < 0.6
    consumer_restart = rng.random() < 0.5
    corrupt_layout_at = at()
    kafka_python_producers = rng.randint(0, producers)
    group = rng.random()
    manual_commit = rng.random() < 0.5
    poison = rng.random() < 0.5
    aiokafka_producers = 0 if embedded else rng.randint(0, producers - kafka_python_producers)
    return Scenario(
        ordered=not plain,
        producers=producers,
        keys=keys,
        rate=rate,
        duration_s=duration_s,
        consumers=consumers,
        consumer_rate=consumer_rate,
        initial=initial,
        physical=physical,
        layouts=tuple(counts),
        producer_restart_at=producer_restart_at,
        consumer_crash_at=consumer_crash_at,
        member_join_at=member_join_at,
        stable_ids=stable_ids,
        producer_kill=producer_kill,
        consumer_restart=consumer_restart,
        corrupt_layout_at=corrupt_layout_at,
        kafka_python_producers=kafka_python_producers,
        kafka_python_consumers=group < _KAFKA_PYTHON_GROUP,
        aiokafka_producers=aiokafka_producers,
        aiokafka_consumers=_KAFKA_PYTHON_GROUP <= group < _AIOKAFKA_GROUP,
        manual_commit=manual_commit,
        poison=poison,
        seed=seed,
        drain_timeout_s=60.0,
    )


def describe(s: Scenario) -> str:
    """One line: clients (``2p(1kp,1aio)/3c(aio,manual)``: 2 producers, 1 on
    kafka-python and 1 on aiokafka, the rest on confluent-kafka; 3 consumers
    on aiokafka (``ck``, ``kp``, ``aio``) committing by hand), ids, layouts,
    faults."""
    faults = []
    if s.producer_restart_at is not None:
        faults.append(f"producer {'SIGKILL' if s.producer_kill else 'stop'}+restart@{s.producer_restart_at}")
    if s.consumer_crash_at is not None:
        faults.append(f"consumer SIGKILL{'+restart' if s.consumer_restart else ''}@{s.consumer_crash_at}")
    if s.member_join_at is not None:
        faults.append(f"join@{s.member_join_at}")
    if s.corrupt_layout_at is not None:
        faults.append(f"corrupt-log@{s.corrupt_layout_at}")
    if s.broker_fault_at is not None:
        faults.append(f"broker-{'SIGKILL' if s.broker_fault == 'kill' else 'SIGSTOP'}({s.broker_fault_target},"
                      f"{s.broker_down_s}s)@{s.broker_fault_at}")
    if s.poison:
        faults.append("poison")
    layouts = "->".join(str(n) for n in (s.initial, *s.layouts))
    ids = "stable" if s.stable_ids else "anonymous"
    group = "kp" if s.kafka_python_consumers else "aio" if s.aiokafka_consumers else "ck"
    aio = f",{s.aiokafka_producers}aio" if s.aiokafka_producers else ""
    clients = (f"{s.producers}p({s.kafka_python_producers}kp{aio})/{s.consumers}c"
               f"({group},{'manual' if s.manual_commit else 'auto'})")
    return f"{clients} {ids} {layouts} {' '.join(faults) or 'no faults'}"


def run_seed(bootstrap: str, seed: int, *, plain: bool = False, embedded: Optional[bool] = None,
             duration_s: float = 10.0, cluster: Optional[KafkaCluster] = None) -> ScenarioResult:
    """Run seed ``seed``; with ``cluster`` (the Apache Kafka cluster behind
    ``bootstrap``) its broker faults too. ``embedded`` as in
    :func:`~kafka_ordered.testing.demo.run_scenario` (``None``: the embedded
    broker unless ``$KAFKA_ORDERED_BOOTSTRAP`` is set); aiokafka producers
    only elsewhere."""
    if embedded is None:
        embedded = not os.environ.get(BOOTSTRAP_ENV)
    sc = scenario_for(seed, plain=plain, duration_s=duration_s, broker_faults=cluster is not None,
                      embedded=embedded)
    return run_scenario(bootstrap, sc, embedded=embedded, cluster=cluster)


__all__ = ["scenario_for", "describe", "run_seed"]
