"""A synthetic day of traffic through the autoscaling policy, against a topic
provisioned statically for the peak and against models of the anchors'
policies (Kinesis on-demand, Pulsar's scalable topics).

    python benchmarks/autoscale.py [--days 5] [--peak 32] [--initial 4]

Pure simulation, no broker: :func:`kafka_ordered.autoscale.decide` is fed
an observation every ``--step`` seconds (10 by default) and its decisions are
applied at once. Each day (one per seed):

- traffic: a diurnal curve (quiet night at ~5% of the day's peak, a morning
  and an afternoon peak, an evening shoulder), five bursts of 1.3-1.8x lasting
  2-15 minutes, AR(1) noise; the peak is ``--peak`` times the per-partition
  target;
- keys: 20,000 keys with Zipf(0.7) weights (the hottest key carries ~1.6%
  of the topic), hashed with murmur2 as the producers do;
- capacity model of a partition: its load is the topic's rate times the
  weights of the keys it holds under the layout of the moment (linear hashing
  over the real key hashes, not the policy's prediction); it runs *over
  target* when that load exceeds the per-partition target.

Contenders, all with the same keys, curve and target:

- ``ours``: :class:`~kafka_ordered.autoscale.AutoscalePolicy` with its
  defaults (scale_up_after 60 s, scale_down_after 600 s, cooldown 120 s),
  ``min_partitions = --initial``, ``max_partitions`` 256; a shrunk
  partition is drained after 60 s and then retired by the policy;
- ``static``: plain Kafka (``murmur2 % N``) with the smallest N whose hottest
  partition stays under target at the day's highest rate;
- ``kinesis``: on-demand mode, capacity for twice the previous peak (the
  previous day is the same curve, so the 30-day peak is known at midnight),
  shards splitting the hash range evenly, never scaling down within the day;
- ``pulsar``: scalable topics, the hottest hash-range segment split when it is
  above the same grow threshold as ours (at most one split per 60 s), two
  sibling segments merged when their sum is under ours shrink threshold (at
  most one merge per 300 s), at most 64 segments, starting from ``--initial``.

Measured per day: partition-hours (undeleted partitions, plus draining ones
until retired; spares hold no traffic and are not counted — Kafka never
deletes a physical partition, so they stay in the cluster's metadata), the
share of partition-time spent over target, and the number of key-moving
layout changes (grow and shrink; retires are counted apart). Reported: the
median over the days with the min-max spread. BENCH lines:

- ``autoscale_partition_hours_vs_static``: ours / static (target <= 0.6);
- ``autoscale_time_over_target``: ours (target <= 0.01);
- ``autoscale_changes_per_day``: ours (``target=report``: printed for the
  record, always PASS).

Then, in words, whether ours beats both anchor models on partition-hours at
equal or lower time over target.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from _common import bench, machine  # noqa: E402
from kafka_ordered import _hashing  # noqa: E402
from kafka_ordered.autoscale import GROW_AT, SHRINK_AT, AutoscalePolicy, Observation, PolicyState, decide  # noqa: E402
from kafka_ordered.layout import partitions_for  # noqa: E402

DAY = 86_400
TARGET = 1000.0  # records/s per partition
KEYS = 20_000
ZIPF = 0.7
DRAIN_S = 60.0
PULSAR_SPLIT_COOLDOWN, PULSAR_MERGE_COOLDOWN, PULSAR_MAX = 60.0, 300.0, 64


def curve(seed: int, step: float, peak: float) -> np.ndarray:
    """The topic's total rate (records/s) at every step of one day."""
    rng = np.random.default_rng(seed)
    t = np.arange(0, DAY, step) / 3600.0
    shift = rng.normal(0, 0.5)
    base = (0.05 + 0.75 * np.exp(-((t - 10.5 - shift) / 2.2) ** 2) + 0.95 * np.exp(-((t - 15.5 - shift) / 2.6) ** 2)
            + 0.3 * np.exp(-((t - 20.5 - shift) / 1.5) ** 2))
    base /= base.max()
    bursts = np.ones_like(t)
    for _ in range(5):
        at, length, height = rng.uniform(7, 22), rng.uniform(2, 15) / 60, rng.uniform(1.3, 1.8)
        ramp = 0.5 / 60
        up = np.clip((t - at) / ramp, 0, 1) * np.clip((at + length - t) / ramp, 0, 1)
        bursts = np.maximum(bursts, 1 + (height - 1) * up)
    noise = np.empty_like(t)
    x = 0.0
    for i in range(len(t)):
        x = 0.9 * x + rng.normal(0, 0.02)
        noise[i] = math.exp(x)
    rate = base * bursts * noise
    return rate / base.max() * peak * TARGET / rate.max() * base.max()


@dataclass
class Keys:
    weights: np.ndarray  # sums to 1
    hashes: np.ndarray  # murmur2 & 0x7fffffff, int64
    keys: List[bytes]


def keyspace(seed: int) -> Keys:
    rng = np.random.default_rng(seed + 1000)
    keys = [f"k{seed}-{i}".encode() for i in range(KEYS)]
    w = 1.0 / np.arange(1, KEYS + 1) ** ZIPF
    rng.shuffle(w)
    h = np.asarray(_hashing.hash_batch(keys, "murmur2"), dtype=np.int64) & 0x7FFFFFFF
    return Keys(w / w.sum(), h, keys)


@dataclass
class Result:
    partition_hours: float
    over_target: float  # share of partition-time above target
    changes: int
    retires: int = 0
    peak_partitions: int = 0


def _account(loads: np.ndarray, extra: int, step: float, acc: List[float]) -> None:
    acc[0] += (len(loads) + extra) * step
    acc[1] += float((loads > TARGET).sum()) * step


def run_static(k: Keys, rates: np.ndarray, step: float) -> Result:
    top = float(rates.max())
    n = 1
    while top * np.bincount(k.hashes % n, weights=k.weights, minlength=n).max() > TARGET:
        n += 1
    shares = np.bincount(k.hashes % n, weights=k.weights, minlength=n)
    acc = [0.0, 0.0]
    for r in rates:
        _account(r * shares, 0, step, acc)
    return Result(acc[0] / 3600, acc[1] / acc[0], 0, 0, n)


def run_ours(k: Keys, rates: np.ndarray, step: float, n0: int) -> Result:
    policy = AutoscalePolicy(min_partitions=n0, max_partitions=256, target_records_per_s=TARGET, groups=("g",))
    shares: Dict[int, np.ndarray] = {}

    def share(n: int) -> np.ndarray:
        if n not in shares:
            shares[n] = np.bincount(partitions_for(k.keys, n0, n), weights=k.weights, minlength=n)
        return shares[n]

    n, epoch, state = n0, 1, PolicyState()
    draining: Dict[int, float] = {}  # partition -> drained at
    acc = [0.0, 0.0]
    changes = retires = 0
    peak = n
    for i, r in enumerate(rates):
        now = i * step
        loads = r * share(n)
        _account(loads, len(draining), step, acc)
        drained = frozenset(p for p, at in draining.items() if at <= now)
        d = decide(policy, Observation(now, epoch, n0, n, tuple(loads), {"g": 0.0}, drained), state)
        state = d.state
        if d.kind == "grow":
            for p in range(n, d.partitions_to):
                draining.pop(p, None)
            n, epoch, changes = d.partitions_to, epoch + 1, changes + 1
        elif d.kind == "shrink":
            for p in range(d.partitions_to, n):
                draining[p] = now + DRAIN_S
            n, epoch, changes = d.partitions_to, epoch + 1, changes + 1
        elif d.kind == "retire":
            for p in d.retire:
                del draining[p]
            epoch, retires = epoch + 1, retires + 1
        peak = max(peak, n)
    return Result(acc[0] / 3600, acc[1] / acc[0], changes, retires, peak)


def range_shares(k: Keys, bounds: Sequence[int]) -> np.ndarray:
    """Weights of hash-range segments [bounds[i], bounds[i+1])."""
    order = np.argsort(k.hashes)
    hs, cw = k.hashes[order], np.concatenate([[0.0], np.cumsum(k.weights[order])])
    idx = np.searchsorted(hs, np.asarray(bounds), side="left")
    return np.diff(cw[idx])


def run_kinesis(k: Keys, rates: np.ndarray, step: float, n0: int) -> Result:
    # The previous day's peak is known; capacity follows 2x the running peak (the previous day's at first).
    prev_peak = float(rates.max())
    acc = [0.0, 0.0]
    n = max(n0, math.ceil(2 * prev_peak / TARGET))
    bounds = [round(i * 2**31 / n) for i in range(n + 1)]
    shares = range_shares(k, bounds)
    for r in rates:
        _account(r * shares, 0, step, acc)
    return Result(acc[0] / 3600, acc[1] / acc[0], 0, 0, n)


def run_pulsar(k: Keys, rates: np.ndarray, step: float, n0: int) -> Result:
    bounds = [round(i * 2**31 / n0) for i in range(n0 + 1)]
    last_split = last_merge = -math.inf
    acc = [0.0, 0.0]
    changes, peak = 0, n0
    for i, r in enumerate(rates):
        now = i * step
        loads = r * range_shares(k, bounds)
        _account(loads, 0, step, acc)
        hot = int(np.argmax(loads))
        if loads[hot] > GROW_AT * TARGET and len(loads) < PULSAR_MAX and now - last_split >= PULSAR_SPLIT_COOLDOWN:
            lo, hi = bounds[hot], bounds[hot + 1]
            if hi - lo > 1:
                bounds.insert(hot + 1, (lo + hi) // 2)
                last_split, changes = now, changes + 1
        elif now - last_merge >= PULSAR_MERGE_COOLDOWN and len(loads) > n0:
            # The coolest adjacent pair whose merged range would be a buddy (aligned) range.
            best, best_load = None, math.inf
            for j in range(len(loads) - 1):
                lo, mid, hi = bounds[j], bounds[j + 1], bounds[j + 2]
                if mid - lo == hi - mid and loads[j] + loads[j + 1] < best_load:
                    best, best_load = j, loads[j] + loads[j + 1]
            if best is not None and best_load <= SHRINK_AT * TARGET:
                del bounds[best + 1]
                last_merge, changes = now, changes + 1
        peak = max(peak, len(bounds) - 1)
    return Result(acc[0] / 3600, acc[1] / acc[0], changes, 0, peak)


def spread(values: Sequence[float], fmt: str = "{:.3g}") -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}..{fmt.format(max(values))}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=5, help="simulated days, one seed each (default 5)")
    ap.add_argument("--peak", type=float, default=32, help="the day's peak in per-partition targets (default 32)")
    ap.add_argument("--initial", type=int, default=4, help="initial (and minimum) partitions (default 4)")
    ap.add_argument("--step", type=float, default=10.0, help="seconds between observations (default 10)")
    a = ap.parse_args()
    print(f"# {machine()}")
    print(f"# {a.days} day(s), peak {a.peak:g} x target {TARGET:g} records/s per partition, {KEYS} keys Zipf({ZIPF}), "
          f"initial {a.initial}, step {a.step:g} s")
    runs: Dict[str, Callable[[Keys, np.ndarray], Result]] = {
        "static": lambda k, r: run_static(k, r, a.step),
        "ours": lambda k, r: run_ours(k, r, a.step, a.initial),
        "kinesis": lambda k, r: run_kinesis(k, r, a.step, a.initial),
        "pulsar": lambda k, r: run_pulsar(k, r, a.step, a.initial),
    }
    results: Dict[str, List[Result]] = {name: [] for name in runs}
    for day in range(a.days):
        k, rates = keyspace(day), curve(day, a.step, a.peak)
        row = []
        for name, fn in runs.items():
            res = fn(k, rates)
            results[name].append(res)
            row.append(f"{name} {res.partition_hours:.0f} ph, {res.over_target:.1e} over, {res.changes} changes, "
                       f"peak {res.peak_partitions}")
        print(f"day {day}: " + "; ".join(row))
    static_ph = [r.partition_hours for r in results["static"]]
    print(f"\n{'model':8s} {'partition-hours / static':>28s} {'time over target':>28s} {'changes/day':>22s}")
    ratios: Dict[str, List[float]] = {}
    for name, rs in results.items():
        ratios[name] = [r.partition_hours / s for r, s in zip(rs, static_ph)]
        print(f"{name:8s} {spread(ratios[name]):>28s} {spread([r.over_target for r in rs], '{:.1e}'):>28s} "
              f"{spread([float(r.changes) for r in rs], '{:.0f}'):>22s}")
    print(f"ours: retires/day {spread([float(r.retires) for r in results['ours']], '{:.0f}')}")
    ours_ph = statistics.median(ratios["ours"])
    ours_over = statistics.median(r.over_target for r in results["ours"])
    for anchor in ("kinesis", "pulsar"):
        ph = statistics.median(ratios[anchor])
        over = statistics.median(r.over_target for r in results[anchor])
        beats = ours_ph < ph and ours_over <= over
        print(f"ours vs {anchor}: partition-hours {ours_ph:.3f} vs {ph:.3f}, over target {ours_over:.2e} vs "
              f"{over:.2e}: {'beats it' if beats else 'does NOT beat it'}"
              + ("" if beats else (" (more partition-hours)" if ours_ph >= ph else " (more time over target)")))
    print(bench("autoscale_partition_hours_vs_static", ours_ph, "<=", 0.6))
    print(bench("autoscale_time_over_target", ours_over, "<=", 0.01, "{:.2g}"))
    changes = statistics.median(float(r.changes) for r in results["ours"])
    print(f"BENCH autoscale_changes_per_day value={changes:.0f} target=report PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
