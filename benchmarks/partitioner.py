"""Key -> partition throughput: kafka-ordered's scalar and batch paths against
kafka-python's DefaultPartitioner, on the same keys, in the same run.

    python benchmarks/partitioner.py [--keys 1000000] [--seed 1]

Keys are a realistic mix: ``b"user-<id>"``, ``b"order-<8 digits>"``, UUID
hex strings, ``b"session:<hex>"`` and random bytes of length 0..63. The
layout is an expanded one (8 initial partitions, 12 undeleted, so the linear
split branch is exercised); kafka-python maps the same keys onto 12
partitions through its real ``partition()`` entry point, called with a
minimal cluster-metadata object (cheaper than its real ClusterMetadata, so
this favours kafka-python). Everything runs in one thread. Each contender
runs ``--repeat`` times in interleaved rounds; reported are the median time
and the median of the per-round ratios to kafka-python (with min-max).

Ends with one line per target::

    BENCH <name> value=<x> target=<op><y> PASS|MISS
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
import uuid
from typing import Any, Callable, Dict, List, Set, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import numpy as np  # noqa: E402
from kafka.partitioner.default import DefaultPartitioner  # noqa: E402
from kafka.partitioner.default import murmur2 as kafka_python_murmur2  # noqa: E402

from kafka_ordered import Layout, partition_for, partitions_for  # noqa: E402

INITIAL, PARTITIONS = 8, 12


class _Cluster:
    """The part of kafka-python's ClusterMetadata its partitioner calls."""

    def __init__(self, topic: str, n: int) -> None:
        self._topics = {topic}
        self._parts: Set[int] = set(range(n))

    def topics(self) -> Set[str]:
        return self._topics

    def partitions_for_topic(self, topic: str) -> Set[int]:
        return self._parts

    def available_partitions_for_topic(self, topic: str) -> Set[int]:
        return self._parts


def make_keys(n: int, seed: int) -> List[bytes]:
    rnd = random.Random(seed)
    keys: List[bytes] = []
    append = keys.append
    for i in range(n):
        r = i % 5
        if r == 0:
            append(b"user-%d" % rnd.randrange(10**7))
        elif r == 1:
            append(b"order-%08d" % rnd.randrange(10**8))
        elif r == 2:
            append(uuid.UUID(int=rnd.getrandbits(128)).hex.encode())
        elif r == 3:
            append(b"session:%x" % rnd.getrandbits(48))
        else:
            append(rnd.randbytes(rnd.randrange(0, 64)))
    return keys


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000, help="number of keys (default 1000000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--repeat", type=int, default=3, help="interleaved rounds; medians are reported (default 3)"
    )
    args = ap.parse_args(argv)
    n = args.keys
    if n < 1 or args.repeat < 1:
        ap.error("--keys and --repeat must be >= 1")

    keys = make_keys(n, args.seed)
    avg = sum(map(len, keys)) / n
    print(f"python {platform.python_version()} numpy {np.__version__} on {platform.machine()}; "
          f"{n} keys, mean length {avg:.1f} bytes; layout {INITIAL} initial -> {PARTITIONS} partitions")

    # correctness first: every path agrees on a sample (and with Kafka's mapping at N == N0)
    sample = keys[:: max(1, n // 2000)]
    cluster = _Cluster("t", PARTITIONS)
    kp = DefaultPartitioner()
    for k in sample:
        assert partition_for(k, PARTITIONS, PARTITIONS) == kp.partition("t", None, k, None, None, cluster)
        assert partition_for(k, PARTITIONS, PARTITIONS) == (kafka_python_murmur2(k) & 0x7FFFFFFF) % PARTITIONS
    for name in ("murmur2", "murmur3"):
        lay = Layout("t", 0, INITIAL, PARTITIONS, PARTITIONS, name)
        batch = partitions_for(sample, INITIAL, PARTITIONS, name).tolist()
        assert batch == [lay.partition_for(k) for k in sample] == [partition_for(k, INITIAL, PARTITIONS, name) for k in sample]

    contenders: List[Tuple[str, Callable[[], Any]]] = []
    for name in ("murmur2", "murmur3"):
        f = Layout("t", 0, INITIAL, PARTITIONS, PARTITIONS, name).partition_for
        contenders += [
            (f"scalar {name} Layout.partition_for loop", lambda f=f: [f(k) for k in keys]),
            (
                f"scalar {name} module partition_for loop",
                lambda name=name: [partition_for(k, INITIAL, PARTITIONS, name) for k in keys],
            ),
            (f"batch {name} partitions_for", lambda name=name: partitions_for(keys, INITIAL, PARTITIONS, name)),
        ]
    part = kp.partition
    contenders.append(
        ("kafka-python DefaultPartitioner.partition", lambda: [part("t", None, k, None, None, cluster) for k in keys])
    )

    # rounds interleave the contenders, so that load from other processes on
    # a shared machine hits them alike; each round gives a rate per contender
    # and a ratio to kafka-python's partitioner; reported: the medians
    times: Dict[str, List[float]] = {label: [] for label, _ in contenders}
    for r in range(args.repeat):
        for label, fn in contenders:
            t0 = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - t0)
    base_label = "kafka-python DefaultPartitioner.partition"
    print(f"median of {args.repeat} interleaved round(s):")
    rate = {}
    for label, _ in contenders:
        seconds = statistics.median(times[label])
        rate[label] = n / seconds
        print(f"  {label:<42} {n / seconds:>14,.0f} keys/s  ({seconds * 1e9 / n:8.1f} ns/key)")
    print("ratios to kafka-python's DefaultPartitioner (median of per-round ratios, min-max):")
    ratios = {label: [b / t for t, b in zip(times[label], times[base_label])] for label, _ in contenders}
    for label, rs in ratios.items():
        print(f"  {label:<42} {statistics.median(rs):8.1f}x  ({min(rs):.1f}-{max(rs):.1f})")

    ratio = statistics.median(ratios["batch murmur2 partitions_for"])
    scalar_m3 = rate["scalar murmur3 Layout.partition_for loop"]
    lines = [
        ("batch_murmur2_vs_kafka_python", ratio, 20, f"{ratio:.1f}"),
        ("scalar_murmur3_keys_per_s", scalar_m3, 1_000_000, f"{scalar_m3:.0f}"),
    ]
    for label, value, target, shown in lines:
        print(f"BENCH {label} value={shown} target=>={target} {'PASS' if value >= target else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
