"""Shared pieces of the broker benchmarks."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from kafka_ordered.testing import BOOTSTRAP_ENV, EmbeddedBroker  # noqa: E402


@contextlib.contextmanager
def broker() -> Iterator[str]:
    """``$KAFKA_ORDERED_BOOTSTRAP``, else a fresh embedded broker."""
    external = os.environ.get(BOOTSTRAP_ENV)
    if external:
        yield external
        return
    with EmbeddedBroker() as b:
        yield b.bootstrap_servers


def bench(name: str, value: float, op: str, target: float, fmt: str = "{:.3g}") -> str:
    ok = value >= target if op == ">=" else value < target if op == "<" else value <= target
    line = f"BENCH {name} value={fmt.format(value)} target={op}{target:g} {'PASS' if ok else 'MISS'}"
    return line


def percentile(values: List[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]
