"""Run every benchmark and print one table of their BENCH lines (``make bench``).

    python benchmarks/_summary.py [--only NAME ...] [--skip NAME ...] [--markdown]

Each benchmark runs as its own process, its output passed through as it
comes; its ``BENCH <name> value=<x> target=<op><y> PASS|MISS`` lines are
collected. At the end: a table of every line (benchmark, name, value,
target, result), with ``--markdown`` as a Markdown table for the README.
A benchmark that fails (no BENCH line, or a non-zero exit) is listed as
ERROR and makes the exit status 1; a MISS does not.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from typing import List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import machine  # noqa: E402

#: In this order (quick and pure first); each must end with BENCH lines.
BENCHMARKS = ["hashing", "partitioner", "autoscale", "scale", "producer", "consumer", "kafka_python", "expansion",
              "spark_source", "spark_source_builtin", "spark_sink", "spark_pipeline"]

LINE = re.compile(r"^BENCH (\S+) value=(\S+) target=(\S+) (PASS|MISS)\s*$")


def run(name: str) -> Tuple[List[Tuple[str, str, str, str]], int, float]:
    env = dict(os.environ)
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
    a = ap.parse_args()
    names = [n for n in (a.only or BENCHMARKS) if n not in a.skip]
    where = machine()
    rows: List[Tuple[str, str, str, str, str]] = []
    failed = False
    for name in names:
        print(f"\n=== benchmarks/{name}.py", flush=True)
        found, code, seconds = run(name)
        print(f"=== benchmarks/{name}.py: exit {code}, {seconds:.0f} s", flush=True)
        if code != 0 or not found:
            failed = True
            rows.append((name, "-", "-", "-", "ERROR"))
        rows.extend((name, *f) for f in found)
    print(f"\nSummary ({where})")
    if a.markdown:
        print("\n| benchmark | name | value | target | result |\n|---|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(r[i]) for r in rows + [("benchmark", "name", "value", "target", "result")]) for i in range(5)]
        header = ("benchmark", "name", "value", "target", "result")
        print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
