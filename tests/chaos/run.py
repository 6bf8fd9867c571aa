"""``python -m tests.chaos.run --seeds 0-49 [--plain]``: one line per seed and a total.

Runs against ``$KAFKA_ORDERED_BOOTSTRAP``, or one broker started for the
whole run: the embedded one, or with ``--broker kafka`` a 3-node Apache
Kafka cluster whose nodes the seeds also SIGKILL and SIGSTOP. Exit status 1 when an ordered run shows a violation or a lost
acknowledged record (or, with ``--plain``, when the control shows none).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List

from kafka_ordered.testing import BOOTSTRAP_ENV, EmbeddedBroker, KafkaCluster

from .scenarios import describe, run_seed, scenario_for


def _seeds(spec: str) -> List[int]:
    out: List[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.chaos.run")
    p.add_argument("--seeds", default="0-9", help="e.g. 0-49 or 3,7,11")
    p.add_argument("--plain", action="store_true",
                   help="plain clients (the control): the seed's confluent-kafka, kafka-python and aiokafka ones")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of producing per seed")
    p.add_argument("--broker", choices=["embedded", "kafka"], default=os.environ.get("KAFKA_ORDERED_BROKER", "embedded"),
                   help="the broker to start (default: embedded; kafka: a 3-node Apache Kafka cluster, "
                        "with broker faults)")
    args = p.parse_args(argv)
    external = os.environ.get(BOOTSTRAP_ENV)
    broker = cluster = None
    if external:
        bootstrap = external
    elif args.broker == "kafka":
        cluster = KafkaCluster(nodes=3).start()
        bootstrap = cluster.bootstrap_servers
    else:
        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap_servers
    totals = {"produced": 0, "delivered": 0, "violations": 0, "missing": 0, "holes": 0, "seeds": 0, "bad": 0}
    try:
        for seed in _seeds(args.seeds):
            sc = scenario_for(seed, plain=args.plain, duration_s=args.duration, broker_faults=cluster is not None,
                              embedded=broker is not None)
            r = run_seed(bootstrap, seed, plain=args.plain, embedded=broker is not None, duration_s=args.duration,
                         cluster=cluster)
            rep = r.report
            bad = (rep.violations or rep.missing or r.worker_failures) if not args.plain else False
            totals["seeds"] += 1
            totals["bad"] += int(bool(bad))
            totals["produced"] += rep.acknowledged
            totals["delivered"] += rep.delivered
            totals["violations"] += len(rep.violations)
            totals["missing"] += rep.missing
            totals["holes"] += rep.tail_holes
            print(f"seed {seed:3d} {'plain' if args.plain else 'ordered':7s} {describe(sc)}: produced "
                  f"{rep.acknowledged} delivered {rep.delivered} violations {len(rep.violations)} "
                  f"lost {rep.missing} broker-tail-holes {rep.tail_holes} poison refused/skipped {r.refused}/{r.poison_skipped}{'  <-- FAIL' if bad else ''}", flush=True)
            for line in r.missing_detail:
                print(f"    missing: {line}", flush=True)
            for line in r.worker_failures:
                print(f"    worker failed: {line}", flush=True)
    finally:
        if broker is not None:
            broker.stop()
        if cluster is not None:
            cluster.close()
    print(f"total: {totals['seeds']} seeds, produced {totals['produced']}, delivered {totals['delivered']}, "
          f"violations {totals['violations']}, lost {totals['missing']}, broker tail holes {totals['holes']}, "
          f"failing seeds {totals['bad']}")
    if args.plain:
        return 0 if totals["violations"] > 0 else 1
    return 1 if totals["bad"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
