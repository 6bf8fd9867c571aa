"""Fixtures of the Spark tests: ONE local[2] SparkSession per test run (it
takes ~10 s to start) with the ``kafka_ordered`` source registered and, when
its jars are in the local Maven repository, Spark's own Kafka connector on
the classpath (``builtin_kafka``); helpers to run a streaming query
collecting every batch through ``foreachBatch``, the ordering oracle, and
the sink's counter-examples."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError:  # pip install -e '.[spark]' to run these
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def pool_stats_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where the session's Python workers write their consumer-pool counters
    (``spark_connector.reading.POOL_STATS_ENV``; ``<pool>-<pid>.json``)."""
    return str(tmp_path_factory.mktemp("pool-stats"))


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory, pool_stats_dir: str, bootstrap: str) -> Iterator[Any]:
    # (``bootstrap`` first: a Spark session started before the Apache Kafka test
    # cluster could not find the registered kafka_ordered source afterwards, in
    # a run of one Spark test alone; why is not understood yet.)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must run this interpreter (the one with kafka_ordered installed).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Inherited by the JVM, hence by its Python workers.
    os.environ["KAFKA_ORDERED_SPARK_POOL_STATS"] = pool_stats_dir
    from pyspark.sql import SparkSession

    import spark_connector

    from kafka_ordered.testing import builtin_kafka_jars

    builder = SparkSession.builder
    jars = builtin_kafka_jars()
    if jars:  # Spark's own Kafka connector, for the parity tests (local files: nothing is resolved)
        builder = builder.config("spark.jars", ",".join(jars))
    session = (
        builder.master("local[2]")
        .appName("kafka-ordered-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_connector.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def builtin_kafka(spark: Any) -> bool:
    """Spark's own Kafka connector is on the shared session's classpath;
    skips the test, saying how to get it, when it is not."""
    from kafka_ordered.testing import builtin_kafka_jars

    if not builtin_kafka_jars():
        pytest.skip("Spark's Kafka connector (spark-sql-kafka-0-10) is not in ~/.m2: run `make spark-kafka-jars`")
    return True


class BatchSink:
    """A ``foreachBatch`` sink: batch id -> rows, idempotent by batch id (a
    replayed batch replaces its earlier attempt). ``fail_at`` makes the batch
    with that id fail once (before anything is stored), to crash a query
    between planning a batch and committing it."""

    def __init__(self, columns: Optional[List[str]] = None, fail_at: Optional[int] = None) -> None:
        self.batches: Dict[int, List[Any]] = {}
        self.columns = columns
        self.fail_at = fail_at
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        cols = self.columns
        rows = (df.select(*cols) if cols else df).collect()
        if self.fail_at is not None and batch_id == self.fail_at:
            self.fail_at = None
            raise RuntimeError(f"injected failure in batch {batch_id}")
        with self.lock:
            self.batches[batch_id] = rows

    def rows(self) -> List[Any]:
        with self.lock:
            return [r for b in sorted(self.batches) for r in self.batches[b]]

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.batches.values())


@pytest.fixture
def wait_until() -> Callable[..., None]:
    def wait(cond: Callable[[], bool], timeout: float, what: str, query: Any = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if query is not None and query.exception() is not None:
                raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
            if cond():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")

    return wait


# ------------------------------------------------------------ ordering oracle


class SeqProducers:
    """``n`` OrderedProducers writing per-key sequence numbers
    (value ``b"<producer>:<seq>"``) and remembering every acknowledged record."""

    def __init__(self, config: Dict[str, Any], topic: str, n: int, keys: List[bytes]) -> None:
        from kafka_ordered import OrderedProducer

        self.topic = topic
        self.keys = keys
        self.config = {"linger.ms": 5, **config}
        self.producers = [OrderedProducer(self.config) for _ in range(n)]
        self.next_seq: Dict[Any, int] = {}
        self.acked: set = set()
        self.failed: List[str] = []

    def _done(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))
            return
        pid, seq = msg.value().decode().split(":")
        self.acked.add((int(pid), msg.key(), int(seq)))

    def phase(self, per_key: int) -> None:
        """``per_key`` more records per (producer, key), interleaved; flushed."""
        for _ in range(per_key):
            for i, p in enumerate(self.producers):
                for k in self.keys:
                    s = self.next_seq.get((i, k), 0)
                    self.next_seq[(i, k)] = s + 1
                    p.produce(self.topic, key=k, value=f"{i}:{s}".encode(), on_delivery=self._done)
        for p in self.producers:
            assert p.flush(30) == 0
        assert not self.failed, self.failed[:3]

    def await_epoch(self, epoch: int, timeout: float = 10.0) -> None:
        """Wait until every producer follows layout ``epoch`` (so the next
        phase registers for it)."""
        deadline = time.monotonic() + timeout
        for p in self.producers:
            while (cur := p.history.current(self.topic)) is None or cur.epoch < epoch:
                assert time.monotonic() < deadline, f"producer never saw epoch {epoch}"
                time.sleep(0.02)

    def restart(self) -> None:
        """Close every producer and start a new one in its place (same
        producer number: its sequence numbers go on, and so must its order)."""
        from kafka_ordered import OrderedProducer

        for i, p in enumerate(self.producers):
            assert p.close(10) == 0
            self.producers[i] = OrderedProducer(self.config)

    def close(self) -> None:
        for p in self.producers:
            p.close(10)


def order_violations(batches: Dict[int, List[Any]]) -> List[str]:
    """Per (producer, key): every sequence number of a batch must exceed every
    one of earlier batches, and within one partition of a batch they must
    increase with the offset. Rows need ``key``, ``value``, ``partition``, ``offset``."""
    out: List[str] = []
    seen_max: Dict[Any, int] = {}
    for b in sorted(batches):
        by_part: Dict[Any, List[Any]] = {}
        lo: Dict[Any, int] = {}
        hi: Dict[Any, int] = {}
        for r in batches[b]:
            pid, seq = r["value"].decode().split(":")
            k = (int(pid), bytes(r["key"]))
            s = int(seq)
            by_part.setdefault((k, r["partition"]), []).append((r["offset"], s))
            lo[k] = min(lo.get(k, s), s)
            hi[k] = max(hi.get(k, s), s)
        for (k, part), lst in by_part.items():
            lst.sort()
            seqs = [s for _, s in lst]
            if any(a >= c for a, c in zip(seqs, seqs[1:])):
                out.append(f"batch {b}: {k} out of order inside partition {part}: {seqs[:10]}")
        for k, s in lo.items():
            if k in seen_max and s <= seen_max[k]:
                out.append(f"batch {b}: {k} seq {s} after seq {seen_max[k]} of an earlier batch")
        for k, s in hi.items():
            seen_max[k] = max(seen_max.get(k, -1), s)
    return out


def delivered(batches: Dict[int, List[Any]]) -> List[Any]:
    """(producer, key, seq) of every row, duplicates kept."""
    out = []
    for rows in batches.values():
        for r in rows:
            pid, seq = r["value"].decode().split(":")
            out.append((int(pid), bytes(r["key"]), int(seq)))
    return out


# ------------------------------------------------------------ sink helpers


def read_ordered(bootstrap: str, layout_topic: str, topic: str, partitions: int, group: Dict[str, Any],
                 want: set, hold: Tuple[int, ...] = (0, 1), hold_s: float = 3.0, timeout: float = 60.0) -> Any:
    """Read ``topic`` (``partitions`` physical partitions) from the start with
    one ``OrderedConsumer`` until every (producer, key, seq) of ``want`` was
    delivered (or ``timeout``); returns the :class:`OrderingOracle`.

    The consumer lags on the partitions ``hold`` for the first ``hold_s``
    seconds (the application paused them: a legal interleaving, as when one
    partition's fetches are slow): a partition whose keys moved in from a
    held one must wait for it, which only the gates make it do."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from kafka_ordered import OrderedConsumer
    from kafka_ordered.testing import OrderingOracle

    oracle = OrderingOracle()
    for pid, key, seq in want:
        oracle.acknowledged(key, str(pid), seq)
    seen: set = set()
    c = OrderedConsumer({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic, **group})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        held = [TopicPartition(topic, p) for p in hold]
        c.pause(held)
        began = time.monotonic()
        deadline = began + timeout
        while not want <= seen and time.monotonic() < deadline:
            if held and time.monotonic() - began > hold_s:
                c.resume(held)
                held = []
            for m in c.consume(50, 0.2):
                if m.error() is not None:
                    continue
                pid, seq = m.value().decode().split(":")
                seen.add((int(pid), m.key(), int(seq)))
                oracle.delivered(m.key(), pid, int(seq), partition=m.partition(), offset=m.offset())
    finally:
        c.close()
    return oracle


class LayoutNaiveWriter:
    """A ``foreachBatch`` writer that does what a user without the sink might:
    partition every row by the topic's *current* layout (read at each batch)
    and write it with a plain confluent ``Producer``: no registration, no
    stamps (the counter-example the sink's tests compare against)."""

    def __init__(self, bootstrap: str, layout_topic: str, topic: str, producer_config: Dict[str, Any]) -> None:
        self.conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
        self.topic = topic
        self.producer_config = {"bootstrap.servers": bootstrap, **producer_config}

    def __call__(self, df: Any, batch_id: int) -> None:
        from confluent_kafka import Producer

        from kafka_ordered.admin import LayoutAdmin

        with LayoutAdmin(self.conf) as admin:
            layout = admin.layout(self.topic)
        p = Producer(self.producer_config)
        for r in df.select("key", "value").collect():
            p.produce(self.topic, r["value"], r["key"], layout.partition_for(r["key"]))
        assert p.flush(30) == 0
