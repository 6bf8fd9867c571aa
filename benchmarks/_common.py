"""Shared pieces of the benchmarks.

Every comparison is *paired*: the two arms (the raw client as its users use
it, and the kafka-ordered wrapper) run alternately in the same process, the
order swapped every round, and each round gives one ratio; a benchmark
reports the median of those ratios with their min-max spread, never a
best-of. Each benchmark ends with one line per target::

    BENCH <name> value=<x> target=<op><y> PASS|MISS

``benchmarks/_summary.py`` (``make bench``) collects them into a table.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from kafka_ordered import speedups_enabled  # noqa: E402
from kafka_ordered.testing import BOOTSTRAP_ENV, EmbeddedBroker  # noqa: E402

#: librdkafka postpones the next fetch by fetch.queue.backoff.ms once its
#: pre-fetch queue is full: set equally in every consumer of a comparison.
FETCH_QUEUE_BACKOFF_MS = 10


@contextlib.contextmanager
def broker() -> Iterator[str]:
    """``$KAFKA_ORDERED_BOOTSTRAP``, else a fresh embedded broker."""
    external = os.environ.get(BOOTSTRAP_ENV)
    if external:
        yield external
        return
    with EmbeddedBroker() as b:
        yield b.bootstrap_servers


def machine() -> str:
    """One line saying where and how this ran (for the README's table)."""
    try:
        load = "load average %.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        load = "load average n/a"
    return (f"{time.strftime('%Y-%m-%d %H:%M')} on {platform.node()} ({platform.machine()}, "
            f"{os.cpu_count()} cpus, {load}); python {platform.python_version()}; "
            f"C speed-ups {'on' if speedups_enabled() else 'off'}")


def bench(name: str, value: float, op: str, target: float, fmt: str = "{:.3g}") -> str:
    ok = value >= target if op == ">=" else value < target if op == "<" else value <= target
    return f"BENCH {name} value={fmt.format(value)} target={op}{target:g} {'PASS' if ok else 'MISS'}"


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def paired(label: str, base: Tuple[str, Callable[[], float]], wrapped: Tuple[str, Callable[[], float]],
           rounds: int, unit: str = "records/s") -> List[float]:
    """Run ``base`` and ``wrapped`` (each returns a rate) alternately for
    ``rounds`` pairs, swapping the order every round; print each round and
    the summary; return the per-pair ratios ``wrapped / base``."""
    ratios: List[float] = []
    for r in range(rounds):
        arms = [base, wrapped] if r % 2 == 0 else [wrapped, base]
        rates: Dict[str, float] = {}
        for name, run in arms:
            rates[name] = run()
        ratio = rates[wrapped[0]] / rates[base[0]]
        ratios.append(ratio)
        print(f"  {label} pair {r + 1}: {base[0]} {rates[base[0]]:,.0f} {unit}, {wrapped[0]} "
              f"{rates[wrapped[0]]:,.0f} {unit}, ratio {ratio:.3f}", flush=True)
    print(f"  {label}: ratio median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}) "
          f"over {rounds} pairs", flush=True)
    return ratios


def spread(values: Sequence[float]) -> str:
    return f"median {statistics.median(values):.3f}, min {min(values):.3f}, max {max(values):.3f}"


class BusyThread:
    """One pure-Python application thread holding the GIL whenever it can."""

    def __init__(self) -> None:
        self.stop = False
        self.thread = threading.Thread(target=self._spin, name="busy-python", daemon=True)

    def _spin(self) -> None:
        while not self.stop:
            sum(range(1000))

    def __enter__(self) -> "BusyThread":
        self.thread.start()
        time.sleep(0.05)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop = True
        self.thread.join()
