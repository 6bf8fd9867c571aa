"""Run every benchmark and print one table of their BENCH lines (``make bench``).

    python benchmarks/_summary.py [--only NAME ...] [--skip NAME ...] [--broker embedded|kafka] [--markdown]

Each benchmark runs as its own process, its output passed through as it
comes; its ``BENCH <name> value=<x> target=<op><y> PASS|MISS`` lines are
collected. At the end: a table of every line (benchmark, name, value,
target, result), with ``--markdown`` as a Markdown table for the README.
A benchmark that fails (no BENCH line, or a non-zero exit) is listed as
ERROR and makes the exit status 1; a MISS does not. ``--broker kafka`` runs
every benchmark against one 3-node Apache Kafka cluster
(:class:`kafka_ordered.testing.KafkaCluster`, through
``KAFKA_ORDERED_BOOTSTRAP``) instead of an embedded broker each; the table
names the broker.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from typing import List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import machine  # noqa: E402

#: In this order (quick and pure first); each must end with BENCH lines.
BENCHMARKS = ["hashing", "partitioner", "autoscale", "scale", "producer", "consumer", "kafka_python",
              "aiokafka_clients", "expansion", "spark_source", "spark_source_builtin", "spark_sink", "spark_pipeline"]

LINE = re.compile(r"^BENCH (\S+) value=(\S+) target=(\S+) (PASS|MISS)\s*$")


def run(name: str, bootstrap: Optional[str] = None) -> Tuple[List[Tuple[str, str, str, str]], int, float]:
    env = dict(os.environ)
    if bootstrap is not None:
        env["KAFKA_ORDERED_BOOTSTRAP"] = bootstrap
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYTHONUNBUFFERED"] = "1"
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, f"{name}.py")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=os.path.dirname(HERE))
    found: List[Tuple[str, str, str, str]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        # librdkafka's own log lines (%3|...) are noise here
        if not line.startswith("%"):
            sys.stdout.write(line)
            sys.stdout.flush()
        m = LINE.match(line.strip())
        if m:
            found.append((m.group(1), m.group(2), m.group(3), m.group(4)))
    return found, proc.wait(), time.monotonic() - began


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None, choices=BENCHMARKS)
    ap.add_argument("--skip", nargs="*", default=[], choices=BENCHMARKS)
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--broker", choices=["embedded", "kafka"], default="embedded",
                    help="embedded: each benchmark starts its own embedded broker (or uses "
                         "$KAFKA_ORDERED_BOOTSTRAP); kafka: one 3-node Apache Kafka cluster for all")
    a = ap.parse_args()
    names = [n for n in (a.only or BENCHMARKS) if n not in a.skip]
    where = machine()
    rows: List[Tuple[str, ...]] = []
    failed = False
    cluster = None
    broker = "kafka" if a.broker == "kafka" or os.environ.get("KAFKA_ORDERED_BOOTSTRAP") else "embedded"
    if a.broker == "kafka":
        from kafka_ordered.testing import KAFKA_VERSION, KafkaCluster

        cluster = KafkaCluster(nodes=3).start()
        broker = f"Apache Kafka {KAFKA_VERSION} (3 nodes)"
    try:
        for name in names:
            print(f"\n=== benchmarks/{name}.py", flush=True)
            found, code, seconds = run(name, cluster.bootstrap_servers if cluster is not None else None)
            print(f"=== benchmarks/{name}.py: exit {code}, {seconds:.0f} s", flush=True)
            if code != 0 or not found:
                failed = True
                rows.append((name, broker, "-", "-", "-", "ERROR"))
            rows.extend((name, broker, *f) for f in found)
    finally:
        if cluster is not None:
            cluster.close()
    print(f"\nSummary ({where})")
    header = ("benchmark", "broker", "name", "value", "target", "result")
    if a.markdown:
        print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
        print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
