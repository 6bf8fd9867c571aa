"""Costs that must not grow with history (issue 12).

    python benchmarks/scale.py [--gates 10000] [--polls 20000] [--records 400000] [--rounds 7]

``scale_gates_poll``: the per-poll gate work of one consumer (its core's
``begin_poll`` + ``settle``, through fake client ports, no broker) on a
topic whose layout log holds ``--gates`` gates on the partitions it owns.
Two histories: every gate still closed (waiting on partitions another
member owns), and every gate long opened. Polls mostly change nothing; every
100th the other member's commits advance (opening some gates), every 500th
a new registration arrives. Reported: per-poll time p50/p99, and of the
polls with a change. Target: < 0.2 ms (p50 of all polls, and p99 of the
polls with a change), all gates closed.

``consumer_after_changes``: OrderedConsumer's throughput ratio to the raw
Consumer on a topic after 10 layout changes whose transitions are passed,
over the same ratio on a topic that never changed, in the same run (four
runs per round, order rotated; ``consume(500)``, configured alike as in
benchmarks/consumer.py). Target: within 3%.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from _common import bench, broker, machine, percentile
from _data import changed_topic, fill, keys
from consumer import COMMON, committed, drain_consume

from confluent_kafka import Consumer, TopicPartition

from kafka_ordered import LayoutAdmin, OrderedConsumer
from kafka_ordered._gating import GatingCore, GatingOptions
from kafka_ordered.history import LayoutHistory
from kafka_ordered.layout import Layout
from kafka_ordered.metrics import LayoutViewMetrics
from kafka_ordered.records import encode_layout, encode_registration

TP = Tuple[str, int]
TOPIC = "t"
OPTS = {"ordered.metadata.timeout.ms": 1000, "ordered.gating": True, "ordered.commit.interval.ms": 200,
        "ordered.registration.settle.ms": None}


class _Port:
    """The client operations the core drives, in memory."""

    def __init__(self) -> None:
        self.commits: Dict[TP, int] = {}
        self.position: Dict[TP, int] = {}

    def pause(self, tps: List[TP]) -> None:
        pass

    def resume(self, tps: List[TP]) -> None:
        pass

    def seek(self, tp: TP, offset: int) -> None:
        self.position[tp] = offset

    def committed(self, tps: List[TP]) -> Dict[TP, int]:
        return {tp: self.commits[tp] for tp in tps if tp in self.commits}

    def commit(self, offsets: Dict[TP, int], asynchronous: bool) -> None:
        self.commits.update(offsets)

    def positions(self, tps: List[TP]) -> Dict[TP, int]:
        return {tp: self.position[tp] for tp in tps if tp in self.position}

    def partitions(self, tps: List[TP]) -> List[TP]:
        return list(tps)


class _View:
    fatal: Optional[BaseException] = None

    def __init__(self, history: LayoutHistory) -> None:
        self.history = history
        self.listeners: List[Callable[[], None]] = []

    def sync(self, timeout: Optional[float] = None) -> LayoutHistory:
        return self.history

    def fresh_within(self, seconds: float) -> bool:
        return True

    def fresh_until(self, seconds: float) -> float:
        return float("inf")

    def add_listener(self, listener: Callable[[], None]) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        self.listeners.remove(listener)

    def view_metrics(self) -> LayoutViewMetrics:
        return LayoutViewMetrics("_log", self.history.next_offset, self.history.next_offset, 0, 0.0)

    def append(self, value: bytes) -> None:
        self.history.apply(self.history.next_offset, TOPIC.encode(), value)
        for listener in self.listeners:
            listener()


class _Offsets:
    def end_offsets(self, tps: Any, timeout: Optional[float] = None) -> Dict[TP, int]:
        return {tp: 0 for tp in tps}

    def start_offsets(self, tps: Any, timeout: Optional[float] = None) -> Dict[TP, int]:
        return {tp: 0 for tp in tps}


def _registration(i: int, per: int) -> bytes:
    """Registration ``i``: gates on partitions 8..15 (``per`` of them), each
    waiting on its parent (p - 8) at offset 1000 * i + p."""
    gates = {8 + j: (100 * i, {j: 1000 * i + j}) for j in range(per)}
    return encode_registration(TOPIC, f"producer-{i}", True, 2, 1, gates)[1]


def gates_poll(n_gates: int, polls: int, closed: bool) -> Tuple[List[float], List[float]]:
    """Per-poll times (seconds) of polls without and with a change."""
    history = LayoutHistory()
    lay = Layout(TOPIC, 1, 8, 8, 16)
    history.apply(0, TOPIC.encode(), encode_layout(lay, "create", "a")[1])
    history.apply(1, TOPIC.encode(), encode_layout(lay.expanded(16), "expand", "a")[1])
    view = _View(history)
    per = 8
    regs = n_gates // per
    for i in range(regs):
        view.append(_registration(i, per))
    port = _Port()
    if not closed:  # the other member committed past every wait long ago
        port.commits = {(TOPIC, q): 1000 * regs + 10 for q in range(8)}
    core = GatingCore(port, view, _Offsets(), GatingOptions(OPTS, False, 5.0, "earliest"))
    core.subscribed = {TOPIC}
    core.assigned_at({(TOPIC, p): 100 * regs for p in range(8, 16)})
    core.begin_poll()
    core.settle()
    tracked = len(core.keeper._gates)
    quiet: List[float] = []
    changed: List[float] = []
    clock = time.perf_counter
    commit_at = 0
    for n in range(1, polls + 1):
        change = False
        if n % 100 == 0:  # the other member's commits move on: a few gates open (if any are closed)
            commit_at += 1
            for q in range(8):
                port.commits[(TOPIC, q)] = max(port.commits.get((TOPIC, q), -1), 1000 * commit_at + q)
            core._committed_at = float("-inf")  # its next read is due now
            change = True
        if n % 500 == 0:  # a new registration arrives
            view.append(_registration(regs + n, per))
            change = True
        began = clock()
        core.begin_poll()
        core.settle()
        (changed if change else quiet).append(clock() - began)
    print(f"  {'closed' if closed else 'opened'} history: {regs * per} gates in the log, {tracked} tracked closed "
          f"after the first poll; {len(quiet)} polls without a change: p50 {percentile(quiet, 0.5) * 1e3:.4f} ms, "
          f"p99 {percentile(quiet, 0.99) * 1e3:.4f} ms; {len(changed)} with one: p50 "
          f"{percentile(changed, 0.5) * 1e3:.4f} ms, p99 {percentile(changed, 0.99) * 1e3:.4f} ms", flush=True)
    return quiet, changed


def after_changes(a: argparse.Namespace) -> List[float]:
    with broker() as bootstrap:
        conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"}
        admin = LayoutAdmin(conf)
        changed, group, final = changed_topic(bootstrap, conf, admin, 10, per_change=1000)
        changed_start = committed(bootstrap, group, changed, 16)
        fresh = f"bench-fresh-{uuid.uuid4().hex[:6]}"
        fresh_layout = admin.create_topic(fresh, final.partitions, physical_partitions=16)
        fresh_start = [TopicPartition(fresh, p, 0) for p in range(16)]
        ks = keys()
        n = a.records
        fill(bootstrap, changed, final, n, ks)
        fill(bootstrap, fresh, fresh_layout, n, ks)
        print(f"fresh topic {fresh}: {fresh_layout.partitions} of 16 partitions, never changed; {n} records on each")

        def run(ordered: bool, start: List[TopicPartition], grp: str) -> float:
            if ordered:
                c: Any = OrderedConsumer({**conf, "group.id": grp, **COMMON})
            else:
                c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex[:6]}", **COMMON})
            try:
                began = time.perf_counter()
                c.assign([TopicPartition(tp.topic, tp.partition, tp.offset) for tp in start])
                return drain_consume(c, n, began)
            finally:
                c.close()

        fresh_group = f"bench-fresh-{uuid.uuid4().hex[:6]}"
        arms = [("raw fresh", False, fresh_start, ""), ("ordered fresh", True, fresh_start, fresh_group),
                ("raw changed", False, changed_start, ""), ("ordered changed", True, changed_start, group)]
        run(False, fresh_start, "")  # warm-up, not counted
        rel: List[float] = []
        for r in range(a.rounds):
            order = arms[r % 4:] + arms[:r % 4]
            rates = {name: run(ordered, start, grp) for name, ordered, start, grp in order}
            fresh_ratio = rates["ordered fresh"] / rates["raw fresh"]
            changed_ratio = rates["ordered changed"] / rates["raw changed"]
            rel.append(changed_ratio / fresh_ratio)
            print(f"  round {r + 1}: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in rates.items())
                  + f"; ratio to raw: fresh {fresh_ratio:.3f}, after changes {changed_ratio:.3f}, "
                    f"relative {rel[-1]:.3f}", flush=True)
        admin.close()
    print(f"  after changes relative to fresh: median {statistics.median(rel):.3f} "
          f"(min {min(rel):.3f}, max {max(rel):.3f}) over {a.rounds} rounds")
    return rel


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gates", type=int, default=10_000)
    ap.add_argument("--polls", type=int, default=20_000)
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    print(machine())
    print(f"per-poll gate work with {a.gates} gates in the layout log (fake client ports, no broker):")
    closed_quiet, closed_changed = gates_poll(a.gates, a.polls, closed=True)
    gates_poll(a.gates, a.polls, closed=False)
    print("consumer throughput after 10 passed layout changes vs a fresh topic:")
    rel = after_changes(a)
    every = closed_quiet + closed_changed
    print(bench("scale_gates_poll", percentile(every, 0.5) * 1e3, "<", 0.2, "{:.4f}"))
    print(bench("scale_gates_poll_with_change_p99", percentile(closed_changed, 0.99) * 1e3, "<", 0.2, "{:.4f}"))
    print(bench("consumer_after_changes", statistics.median(rel), ">=", 0.97, "{:.3f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
