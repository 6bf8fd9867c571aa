"""Per-call cost of the scalar key hash and of ``Layout.partition_for``: the C
speed-ups against the ``murmurhash2`` package (the previous implementation,
if still installed) and the pure-Python fallback, alone and with one busy
pure-Python thread (``while not stop: sum(range(1000))``) in the process.

    python benchmarks/hashing.py [--keys 200000] [--seconds 0.5]

"before" is ``Layout.partition_for`` with the per-key closure the project
used until the C speed-ups (``murmurhash2.murmurhash2(key, seed)``, which
releases and re-takes the GIL on every call); "after" is the current one.
Keys are random bytes of length 0..40. Each contender runs for about
``--seconds`` (the slow GIL-releasing calls under load stop early) and
reports wall-clock ns per call, loop overhead (``map``) included.

Ends with one line per target::

    BENCH <name> value=<x> target=<op><y> PASS|MISS
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from itertools import repeat
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from _common import BusyThread  # noqa: E402
from kafka_ordered import Layout, _hashing, speedups_enabled  # noqa: E402
from kafka_ordered.layout import _as_bytes, _compile_py  # noqa: E402

try:
    import murmurhash2 as _mm2_pkg  # the previous dependency, if still installed
except ImportError:
    _mm2_pkg = None

INITIAL, PARTITIONS = 8, 12


def old_layout_fn(initial: int, partitions: int) -> Callable[[Any], int]:
    """The per-key closure Layout used for murmur2 before the C speed-ups."""
    m = initial << ((partitions // initial).bit_length() - 1)
    split, m2 = partitions - m, m << 1
    mm2, seed = _mm2_pkg.murmurhash2, _hashing._SEED

    def linear_murmur2(key: Any) -> int:
        if type(key) is not bytes:
            key = _as_bytes(key)
        h = mm2(key, seed) & 0x7FFFFFFF
        b = h % m
        return h % m2 if b < split else b

    return linear_murmur2


def ns_per_call(run: Callable[[List[bytes]], Any], keys: List[bytes], seconds: float) -> float:
    """Wall-clock ns per key of ``run(chunk)`` over chunks of ``keys`` for about ``seconds``."""
    chunk = 64
    done, t0 = 0, time.perf_counter()
    while True:
        lo = done % len(keys)
        part = keys[lo : lo + chunk]
        run(part)
        done += len(part)
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return elapsed * 1e9 / done
        chunk = min(chunk * 2, 16384)


def contenders() -> Iterator[Tuple[str, Optional[Callable[[List[bytes]], Any]]]]:
    c = _hashing._C
    yield "murmur2 C _speedups.murmur2", (lambda ks: list(map(c.murmur2, ks))) if c else None
    yield "murmur2 murmurhash2 package", (
        (lambda ks: list(map(_mm2_pkg.murmurhash2, ks, repeat(_hashing._SEED)))) if _mm2_pkg else None
    )
    yield "murmur2 pure Python fallback", lambda ks: list(map(_hashing.murmur2_py, ks))
    lay = Layout("t", 0, INITIAL, PARTITIONS, PARTITIONS)
    if _mm2_pkg:
        before = Layout("t", 0, INITIAL, PARTITIONS, PARTITIONS)
        object.__setattr__(before, "_fn", old_layout_fn(INITIAL, PARTITIONS))
        yield "Layout.partition_for before (murmurhash2)", lambda ks: list(map(before.partition_for, ks))
    else:
        yield "Layout.partition_for before (murmurhash2)", None
    yield "Layout.partition_for after", lambda ks: list(map(lay.partition_for, ks))
    fallback = Layout("t", 0, INITIAL, PARTITIONS, PARTITIONS)
    object.__setattr__(fallback, "_fn", _compile_py(INITIAL, PARTITIONS, "murmur2"))
    yield "Layout.partition_for pure Python fallback", lambda ks: list(map(fallback.partition_for, ks))


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--seconds", type=float, default=0.5, help="time per contender and condition (default 0.5)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    rnd = random.Random(args.seed)
    keys = [rnd.randbytes(rnd.randrange(41)) for _ in range(args.keys)]
    print(f"python {platform.python_version()} on {platform.machine()}; C speed-ups enabled: {speedups_enabled()}; "
          f"murmurhash2 package: {'yes' if _mm2_pkg else 'not installed'}; layout {INITIAL} -> {PARTITIONS}; "
          f"switch interval {sys.getswitchinterval() * 1e3:g} ms")

    results: Dict[Tuple[str, str], float] = {}
    for cond in ("alone", "busy thread"):
        for label, run in contenders():
            if run is None:
                continue
            run(keys[:1000])  # warm up
            if cond == "alone":
                results[label, cond] = ns_per_call(run, keys, args.seconds)
            else:
                with BusyThread():
                    results[label, cond] = ns_per_call(run, keys, args.seconds)
    print(f"  {'ns per call':<44} {'alone':>12} {'busy thread':>14}")
    for label, _ in contenders():
        if (label, "alone") in results:
            print(f"  {label:<44} {results[label, 'alone']:>12,.0f} {results[label, 'busy thread']:>14,.0f}")

    lines: List[Tuple[str, float, str, float]] = []
    if speedups_enabled():
        lines += [
            ("c_murmur2_ns", results["murmur2 C _speedups.murmur2", "alone"], "<", 100),
            ("layout_partition_for_ns", results["Layout.partition_for after", "alone"], "<", 200),
            ("layout_partition_for_busy_thread_ns", results["Layout.partition_for after", "busy thread"], "<", 1000),
        ]
    for name, value, op, target in lines:
        ok = value < target
        print(f"BENCH {name} value={value:.0f} target={op}{target:g} {'PASS' if ok else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
