"""A whole pipeline across layout changes (short form): a streaming query
reads managed topic A with ``format("kafka_ordered")``, maps every record
(keeping its key) and writes managed topic B with the ``kafka_ordered``
sink. While it runs, A expands and shrinks, B expands, shrinks and expands
again, A's producers restart, and the query is stopped and restarted from
its checkpoint. An ``OrderedConsumer`` reading B must see every key's
sequence in order and every record A's producers acknowledged (duplicates
allowed: at least once). The same pipeline through Spark's own Kafka source
and sink shows violations (the test can fail).

``KAFKA_ORDERED_PIPELINE_ROUNDS=N`` (``make chaos`` sets 5) makes the ordered
run long: each further round restarts the query from its checkpoint, expands
and shrinks both topics again and restarts A's producers while it runs."""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Callable, Dict, Tuple


from kafka_ordered.admin import LayoutAdmin

from .conftest import SeqProducers, read_ordered

KEYS = [f"key-{i}".encode() for i in range(24)]
PHYSICAL = 8  # the embedded broker cannot add partitions: both topics have spares
#: Rounds of the ordered run (1: the short form in ``make test``).
ROUNDS = int(os.environ.get("KAFKA_ORDERED_PIPELINE_ROUNDS", "1"))


def _query(spark: Any, fmt: str, bootstrap: str, layout_topic: str, a: str, b: str, checkpoint: str) -> Any:
    src = {"kafka.bootstrap.servers": bootstrap, "subscribe": a, "startingOffsets": "earliest",
           "maxOffsetsPerTrigger": "300"}
    dst = {"kafka.bootstrap.servers": bootstrap, "topic": b}
    if fmt == "kafka_ordered":
        src["ordered.layout.topic"] = layout_topic
        dst["ordered.layout.topic"] = layout_topic
    df = spark.readStream.format(fmt).options(**src).load()
    mapped = df.selectExpr("key", "CAST(upper(CAST(value AS STRING)) AS BINARY) AS value")
    return (mapped.writeStream.format(fmt).options(**dst).option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds").start())


def _pipeline(spark: Any, fmt: str, bootstrap: str, embedded: bool, unique: Callable[[str], str],
              layout_topic: str, tmp_path: Any, rounds: int = 1) -> Tuple[SeqProducers, str]:
    conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
    a, b = unique("pipe-a"), unique("pipe-b")
    admin = LayoutAdmin(conf)
    admin.create_topic(a, 2, physical_partitions=PHYSICAL)
    admin.create_topic(b, 2, physical_partitions=PHYSICAL)
    # Spark's own source trusts ListOffsets, which the embedded broker gets
    # wrong after multi-record batches (docs/testing.md): one record per batch there.
    producer_conf = {**conf, "batch.num.messages": 1} if embedded else conf
    prod = SeqProducers(producer_conf, a, 2, KEYS)
    checkpoint = str(tmp_path / "ck")
    try:
        prod.phase(30)  # a backlog on A's partitions 0 and 1
        admin.expand(a, 3)
        prod.await_epoch(2)
        prod.phase(6)
        q = _query(spark, fmt, bootstrap, layout_topic, a, b, checkpoint)
        try:
            admin.expand(b, 3)
            prod.phase(6)
            prod.restart()
            admin.shrink(a, 2)
            prod.await_epoch(3)
            prod.phase(6)
            admin.shrink(b, 2)
            q.processAllAvailable()
        finally:
            q.stop()
        assert q.exception() is None
        admin.expand(b, 4)  # while the query is down
        prod.phase(6)
        q = _query(spark, fmt, bootstrap, layout_topic, a, b, checkpoint)
        try:
            prod.phase(4)
            q.processAllAvailable()
        finally:
            q.stop()
        assert q.exception() is None
        epoch_a = 3
        for _ in range(1, rounds):  # B has 4 partitions, A 2 (3 draining)
            q = _query(spark, fmt, bootstrap, layout_topic, a, b, checkpoint)
            try:
                admin.expand(a, 3)
                epoch_a += 1
                prod.await_epoch(epoch_a)
                prod.phase(6)
                admin.expand(b, 5)
                prod.phase(6)
                prod.restart()
                admin.shrink(a, 2)
                epoch_a += 1
                prod.await_epoch(epoch_a)
                prod.phase(6)
                admin.shrink(b, 4)
                prod.phase(4)
                q.processAllAvailable()
            finally:
                q.stop()
            assert q.exception() is None
    finally:
        prod.close()
        admin.close()
    return prod, b


def _producer_stats(where: str) -> Dict[str, Dict[str, int]]:
    out = {}
    for path in glob.glob(os.path.join(where, "producers-*.json")):
        with open(path) as f:
            out[os.path.basename(path)] = json.load(f)
    return out


def test_pipeline_keeps_every_key_in_order_across_layout_changes_and_a_restart(
        spark: Any, bootstrap: str, embedded: bool, unique: Callable[[str], str], layout_topic: str,
        tmp_path: Any, group_settings: Dict[str, Any], pool_stats_dir: str) -> None:
    before = _producer_stats(pool_stats_dir)
    prod, b = _pipeline(spark, "kafka_ordered", bootstrap, embedded, unique, layout_topic, tmp_path, ROUNDS)
    oracle = read_ordered(bootstrap, layout_topic, b, PHYSICAL, {"group.id": unique("g"), **group_settings},
                          prod.acked)
    assert oracle.violations == [], oracle.violations[:3]
    assert oracle.missing() == set()
    # Producers were reused across tasks and micro-batches: one per worker process.
    after = _producer_stats(pool_stats_dir)
    changed = {k: v for k, v in after.items() if v != before.get(k)}
    created = sum(v["created"] - before.get(k, {}).get("created", 0) for k, v in changed.items())
    reused = sum(v["reused"] - before.get(k, {}).get("reused", 0) for k, v in changed.items())
    assert created <= len(changed) and reused > created, (created, reused, changed)


def test_same_pipeline_through_sparks_own_kafka_connector_shows_violations(
        spark: Any, builtin_kafka: bool, bootstrap: str, embedded: bool, unique: Callable[[str], str],
        layout_topic: str, tmp_path: Any, group_settings: Dict[str, Any]) -> None:
    prod, b = _pipeline(spark, "kafka", bootstrap, embedded, unique, layout_topic, tmp_path)
    oracle = read_ordered(bootstrap, layout_topic, b, PHYSICAL, {"group.id": unique("g"), **group_settings},
                          prod.acked)
    assert oracle.missing() == set()
    assert oracle.violations, "Spark's own connector knows no layout: moved keys should have been reordered"
