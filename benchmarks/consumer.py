"""OrderedConsumer vs the raw confluent-kafka Consumer, paired, same records.

    python benchmarks/consumer.py [--records 600000] [--rounds 7] [--changes 4]

1. After layout changes whose transitions are passed: a managed topic went
   through ``--changes`` layout changes while an OrderedProducer wrote to
   it, and a group read and committed past all of it; then ``--records``
   more records arrive. Each run: a new consumer ``assign``s every partition
   at the group's committed offsets and reads the new records; timed from
   ``assign`` to the last record, with ``consume(500)`` and, separately,
   with ``poll()``. The raw consumer is configured as the wrapper's inner
   one (``enable.auto.commit=false``; ``enable.auto.offset.store=false``,
   which the wrapper always sets on its inner consumer; ``fetch.queue.backoff.ms``
   equal in both, see _common.FETCH_QUEUE_BACKOFF_MS).
2. While a gate is closed on another partition the consumer owns: a topic
   expanded 4 -> 5, so partition 4 has a gate waiting on partition 0,
   which this group never processes. The ordered consumer owns partitions
   1-4 (4 stays held), the raw one 1-3; both read the same records of 1-3
   with ``consume(500)``.
3. A new group replaying history: a topic whose history spans ``--changes``
   layout changes, written by an OrderedProducer with ``linger.ms=20`` (so
   many records carry a stamp: a producer stamps every record in flight
   until its first stamped one is acknowledged), read from offset 0 of
   every partition by a consumer of a new group with ``consume(500)``; the
   ordered consumer's gates open as it processes their sources.

Rounds alternate which arm runs first; each pair gives a ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any, Callable, Dict, List, Optional

from _common import FETCH_QUEUE_BACKOFF_MS, bench, broker, machine, paired
from _data import VALUE, changed_topic, fill, keys

from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer

# The same librdkafka work in both arms: OrderedConsumer always runs its
# inner consumer with enable.auto.offset.store=false (it stores offsets itself).
COMMON = {"enable.auto.commit": False, "enable.auto.offset.store": False,
          "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS}
# The ordered arms leave the offset store to the wrapper: told
# enable.auto.offset.store=false, it would wait for offsets the application
# stores (which these loops never do) before opening a gate.
ORDERED = {**COMMON, "enable.auto.offset.store": True}


def drain_consume(c: Any, n: int, began: float) -> float:
    # Never more than the records left: consume(500, 1.0) waits out its
    # timeout when fewer than 500 remain, which would time an arm whose
    # batches end off a multiple of 500 (cut at gates) a second slower.
    got = 0
    while got < n:
        got += sum(1 for m in c.consume(min(500, n - got), 1.0) if m.error() is None)
    return n / (time.perf_counter() - began)


def drain_poll(c: Any, n: int, began: float) -> float:
    got = 0
    while got < n:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got += 1
    return n / (time.perf_counter() - began)


def arm(make: Callable[[], Any], start: List[TopicPartition], n: int,
        drain: Callable[[Any, int, float], float]) -> Callable[[], float]:
    def run() -> float:
        c = make()
        try:
            began = time.perf_counter()  # from assign: prefetching counts for both
            c.assign([TopicPartition(tp.topic, tp.partition, tp.offset) for tp in start])
            return drain(c, n, began)
        finally:
            c.close()
    return run


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> List[TopicPartition]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        c.close()
    return [TopicPartition(topic, tp.partition, max(tp.offset, 0)) for tp in got]


def gate_closed_topic(bootstrap: str, conf: Dict[str, Any], admin: LayoutAdmin, n: int) -> str:
    """Partitions 1-3 hold ``n`` records; partition 4 is gated on partition 0."""
    topic = f"bench-gated-{uuid.uuid4().hex[:6]}"
    layout = admin.create_topic(topic, 4, physical_partitions=8)
    ks = keys()
    fill(bootstrap, topic, layout, 2000, ks, partitions=[0])
    fill(bootstrap, topic, layout, n, ks, partitions=[1, 2, 3])
    admin.expand(topic, 5)
    p = OrderedProducer({**conf, "linger.ms": 5})
    expanded = admin.layout(topic)  # once: each layout() call reads the layout log's end
    movers = [k for k in ks if expanded.partition_for(k) == 4]
    deadline = time.monotonic() + 10
    while p.history.current(topic).epoch < 2:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for k in movers[:2000]:
        p.produce(topic, VALUE, k)
    p.flush(30)
    gates = [g for r in p.registrations for g in r.gates.items()]
    p.close()
    print(f"topic {topic}: {n} records on partitions 1-3; gate on 4 {gates} (never opens for these groups)",
          flush=True)
    return topic


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=600_000)
    ap.add_argument("--poll-records", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--changes", type=int, default=4)
    ap.add_argument("--replay-per-change", type=int, default=20_000,
                    help="records written before and after each layout change of the replayed topic")
    ap.add_argument("--cases", default="after-changes,gate-closed,replay",
                    help="comma-separated cases to run (after-changes, gate-closed, replay)")
    a = ap.parse_args()
    cases = set(a.cases.split(","))
    consume: Optional[List[float]] = None
    poll = closed = replay = consume
    print(machine())
    with broker() as bootstrap:
        conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"}
        admin = LayoutAdmin(conf)
        n = a.records

        def raw() -> Consumer:
            return Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex[:6]}", **COMMON})

        if "after-changes" in cases:
            topic, group, final = changed_topic(bootstrap, conf, admin, a.changes)
            start = committed(bootstrap, group, topic, 16)
            fill(bootstrap, topic, final, a.records, keys())

            def ordered() -> OrderedConsumer:
                return OrderedConsumer({**conf, "group.id": group, **ORDERED})

            arm(raw, start, n, drain_consume)()  # warm-up, not counted
            print(f"after {a.changes} layout changes whose transitions are passed, consume(500), {n} records per run:")
            consume = paired("consume(500)", ("raw", arm(raw, start, n, drain_consume)),
                             ("ordered", arm(ordered, start, n, drain_consume)), a.rounds)
            m = min(a.poll_records, n)
            print(f"the same with poll(), {m} records per run:")
            poll = paired("poll()", ("raw", arm(raw, start, m, drain_poll)),
                          ("ordered", arm(ordered, start, m, drain_poll)), a.rounds)
        if "gate-closed" in cases:
            closed = _gate_closed(bootstrap, conf, admin, n, raw, a.rounds)
        if "replay" in cases:
            replay = _replay(bootstrap, conf, admin, a, raw)
        admin.close()
    for name, ratios, target in (("consumer_consume_after_changes_vs_raw", consume, 0.95),
                                 ("consumer_poll_after_changes_vs_raw", poll, 0.95),
                                 ("consumer_gate_closed_elsewhere_vs_raw", closed, 0.95),
                                 ("consumer_history_replay_vs_raw", replay, 0.95)):
        if ratios is not None:
            print(bench(name, statistics.median(ratios), ">=", target))
    return 0


def _gate_closed(bootstrap: str, conf: Dict[str, Any], admin: LayoutAdmin, n: int, raw: Callable[[], Consumer],
                 rounds: int) -> List[float]:
    gated = gate_closed_topic(bootstrap, conf, admin, n)
    open_parts = [TopicPartition(gated, p, 0) for p in (1, 2, 3)]

    def ordered_gated() -> OrderedConsumer:
        return OrderedConsumer({**conf, "group.id": f"bench-gated-{uuid.uuid4().hex[:6]}", **ORDERED})

    print(f"a gate closed on partition 4, which the ordered consumer owns; {n} records of partitions 1-3:")
    return paired("gate closed on 4", ("raw", arm(raw, open_parts, n, drain_consume)),
                  ("ordered", arm(ordered_gated, open_parts + [TopicPartition(gated, 4, 0)], n, drain_consume)),
                  rounds)


def _replay(bootstrap: str, conf: Dict[str, Any], admin: LayoutAdmin, a: argparse.Namespace,
            raw: Callable[[], Consumer]) -> List[float]:
    replayed, _, _ = changed_topic(bootstrap, conf, admin, a.changes, a.replay_per_change, linger_ms=20)
    from_start = [TopicPartition(replayed, p, 0) for p in range(16)]
    total = a.replay_per_change * (a.changes + 1)  # records written (offsets may skip on the embedded broker)

    def ordered_new_group() -> OrderedConsumer:
        return OrderedConsumer({**conf, "group.id": f"bench-replay-{uuid.uuid4().hex[:6]}", **ORDERED})

    print(f"a new group replaying {total} records of {replayed} (written with linger.ms=20), consume(500):")
    return paired("history replay", ("raw", arm(raw, from_start, total, drain_consume)),
                  ("ordered", arm(ordered_new_group, from_start, total, drain_consume)), a.rounds)


if __name__ == "__main__":
    raise SystemExit(main())
