"""The aiokafka (asyncio) wrappers vs raw aiokafka, paired, same records.

    python benchmarks/aiokafka_clients.py [--records 400000] [--rounds 7] [--changes 4]
        [--max-records 500] [--replay-per-change 10000] [--sends 20000]
        [--cases after-changes,gate-closed,replay,send]

(Not ``aiokafka.py``: run as a script, ``benchmarks/`` is ``sys.path[0]``
and that name would shadow the aiokafka package.) One event loop for the
whole run; every client is constructed and started inside it, untimed.

1. ``getmany`` after layout changes whose transitions are passed (the calm
   path): a managed topic went through ``--changes`` layout changes while an
   OrderedProducer wrote to it and a group read and committed past all of
   it; then ``--records`` more records arrive. Each run: a new consumer
   ``assign``s every partition, ``seek``s to the group's committed offsets
   and reads the new records with ``getmany(timeout_ms=1000,
   max_records=--max-records)``; timed from ``assign`` to the last record.
   OrderedAIOKafkaConsumer of the group
   vs AIOKafkaConsumer of a new group; both ``enable_auto_commit=False``,
   ``fetch_max_wait_ms=100``.
2. ``getmany`` while a gate is closed on another partition the consumer
   owns: the topic of ``benchmarks/consumer.py`` (expanded 4 -> 5, so
   partition 4 has a gate waiting on partition 0, which no group here
   processes). The ordered consumer owns partitions 1-4 (4 stays held), the
   raw one 1-3; both read the same records of 1-3 from offset 0 (the
   ordered one starts partition 4 where it decides: no seek releases its hold).
3. A new group replaying history: a topic whose history spans ``--changes``
   layout changes, written by an OrderedProducer with ``linger.ms=20``,
   read from offset 0 of every partition by a consumer of a new group; the
   ordered consumer's gates open as it processes their sources.
4. Apache Kafka only: ``send(topic, value, key)``, OrderedAIOKafkaProducer
   vs AIOKafkaProducer (its default partitioner, Kafka's murmur2), both with
   acks='all', idempotence and linger_ms=5; after one untimed send and
   flush (metadata, and the wrapper's registration), ``--sends`` records,
   each ``send`` awaited (it returns once the record is in the batch),
   timed through the final ``flush``. Skipped on the embedded broker:
   aiokafka's idempotent producer asks InitProducerId v0, which the
   embedded broker answers with UNKNOWN_SERVER_ERROR, and the wrapper
   forces idempotence.

Rounds alternate which arm runs first; each pair gives a ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from typing import Any, Callable, List, Optional, Tuple

from _common import bench, broker, machine, paired
from _data import VALUE, changed_topic, fill, keys
from consumer import committed, gate_closed_topic

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from kafka_ordered import LayoutAdmin
from kafka_ordered.aiokafka import OrderedAIOKafkaConsumer, OrderedAIOKafkaProducer
from kafka_ordered.testing import BOOTSTRAP_ENV

CONSUMER = {"enable_auto_commit": False, "fetch_max_wait_ms": 100, "auto_offset_reset": "earliest"}
PRODUCER = {"acks": "all", "enable_idempotence": True, "linger_ms": 5}

Start = List[Tuple[str, int, Optional[int]]]  # (topic, partition, offset to seek to, or None)


def read(loop: asyncio.AbstractEventLoop, make: Callable[[], Any], start: Start, n: int,
         max_records: int) -> Callable[[], float]:
    async def run() -> float:
        c = make()
        await c.start()
        try:
            parts = [TopicPartition(t, p) for t, p, _ in start]
            began = time.perf_counter()  # from assign: prefetching counts for both
            c.assign(parts)
            for t, p, off in start:
                if off is not None:
                    c.seek(TopicPartition(t, p), off)
            got = 0
            last = time.monotonic()
            while got < n:
                batch = await c.getmany(timeout_ms=1000, max_records=max_records)
                if batch:
                    got += sum(len(recs) for recs in batch.values())
                    last = time.monotonic()
                elif time.monotonic() - last > 30:
                    raise RuntimeError(f"only {got} of {n} records arrived")
            return n / (time.perf_counter() - began)
        finally:
            await c.stop()

    return lambda: loop.run_until_complete(run())


def send(loop: asyncio.AbstractEventLoop, make: Callable[[], Any], topic: str, n: int,
         ks: List[bytes]) -> Callable[[], float]:
    async def run() -> float:
        p = make()
        await p.start()
        try:
            await (await p.send(topic, VALUE, ks[0]))  # metadata, and the wrapper's registration: not timed
            await p.flush()
            nk = len(ks)
            began = time.perf_counter()
            for i in range(n):
                await p.send(topic, VALUE, ks[i % nk])
            await p.flush()
            return n / (time.perf_counter() - began)
        finally:
            await p.stop()

    return lambda: loop.run_until_complete(run())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--changes", type=int, default=4)
    ap.add_argument("--max-records", type=int, default=500, help="getmany's max_records")
    ap.add_argument("--replay-per-change", type=int, default=10_000,
                    help="records written before and after each layout change of the replayed topic")
    ap.add_argument("--sends", type=int, default=20_000)
    ap.add_argument("--cases", default="after-changes,gate-closed,replay,send",
                    help="comma-separated cases to run (after-changes, gate-closed, replay, send)")
    a = ap.parse_args()
    cases = set(a.cases.split(","))
    calm: Optional[List[float]] = None
    closed = replay = sent = calm
    print(machine())
    embedded = not os.environ.get(BOOTSTRAP_ENV)
    loop = asyncio.new_event_loop()
    with broker() as bootstrap:
        layout_topic = f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"
        conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
        ordered_opts = {"ordered.layout.topic": layout_topic}
        admin = LayoutAdmin(conf)
        topic, group, final = changed_topic(bootstrap, conf, admin, a.changes)
        start = [(tp.topic, tp.partition, tp.offset) for tp in committed(bootstrap, group, topic, 16)]
        ks = keys()
        n, mr = a.records, a.max_records
        fill(bootstrap, topic, final, n, ks)

        def raw() -> AIOKafkaConsumer:
            return AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=f"bench-raw-{uuid.uuid4().hex[:6]}",
                                    **CONSUMER)

        def ordered_in(g: str) -> Callable[[], OrderedAIOKafkaConsumer]:
            return lambda: OrderedAIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=g, **ordered_opts,
                                                   **CONSUMER)

        def ordered_new(prefix: str) -> Callable[[], OrderedAIOKafkaConsumer]:
            return lambda: ordered_in(f"{prefix}-{uuid.uuid4().hex[:6]}")()

        read(loop, raw, start, n, mr)()  # warm-up, not counted
        if "after-changes" in cases:
            print(f"after {a.changes} layout changes whose transitions are passed, getmany(max_records={mr}), "
                  f"{n} records per run:")
            calm = paired("getmany", ("raw", read(loop, raw, start, n, mr)),
                          ("ordered", read(loop, ordered_in(group), start, n, mr)), a.rounds)

        if "gate-closed" in cases:
            gated = gate_closed_topic(bootstrap, conf, admin, n)
            open_parts = [(gated, p, 0) for p in (1, 2, 3)]
            print(f"a gate closed on partition 4, which the ordered consumer owns; {n} records of partitions 1-3:")
            closed = paired("gate closed on 4", ("raw", read(loop, raw, open_parts, n, mr)),
                            ("ordered", read(loop, ordered_new("bench-gated"), open_parts + [(gated, 4, None)], n,
                                             mr)),
                            a.rounds)

        if "replay" in cases:
            replayed, _, _ = changed_topic(bootstrap, conf, admin, a.changes, a.replay_per_change, linger_ms=20)
            from_start = [(replayed, p, 0) for p in range(16)]
            total = a.replay_per_change * (a.changes + 1)  # records written (offsets may skip on the embedded broker)
            print(f"a new group replaying {total} records of {replayed} (written with linger.ms=20), "
                  f"getmany(max_records={mr}):")
            replay = paired("history replay", ("raw", read(loop, raw, from_start, total, mr)),
                            ("ordered", read(loop, ordered_new("bench-replay"), from_start, total, mr)), a.rounds)

        if "send" not in cases:
            pass
        elif embedded:
            print("send: skipped on the embedded broker (aiokafka's idempotent producer asks InitProducerId v0, "
                  "which it answers with UNKNOWN_SERVER_ERROR; the wrapper forces idempotence); "
                  "run with --broker kafka", flush=True)
        else:
            def raw_producer() -> AIOKafkaProducer:
                return AIOKafkaProducer(bootstrap_servers=bootstrap, **PRODUCER)

            def ordered_producer() -> OrderedAIOKafkaProducer:
                return OrderedAIOKafkaProducer(bootstrap_servers=bootstrap, **ordered_opts, **PRODUCER)

            print(f"await send(topic, value, key), then flush, {a.sends} records per run:")
            sent = paired("send", ("raw", send(loop, raw_producer, topic, a.sends, ks)),
                          ("ordered", send(loop, ordered_producer, topic, a.sends, ks)), a.rounds)
        admin.close()
    loop.close()
    for name, ratios in (("aiokafka_getmany_after_changes_vs_raw", calm),
                         ("aiokafka_getmany_gate_closed_elsewhere_vs_raw", closed),
                         ("aiokafka_history_replay_vs_raw", replay), ("aiokafka_send_vs_raw", sent)):
        if ratios is not None:
            print(bench(name, statistics.median(ratios), ">=", 0.95))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
