"""The main job: ordered and plain clients through the same layout changes.

A scenario runs producer and consumer *processes* against one broker:
producers write per-key sequence numbers while an admin changes the layout
(e.g. 4 -> 5 -> 6 -> 8 -> 6 -> 8); one producer is restarted and one
consumer is killed (SIGKILL) mid-run; consumers are throttled so that the
group lags behind, as real groups do. The :class:`~kafka_ordered.testing.OrderingOracle` then
checks every delivery. The *plain* run uses confluent-kafka's own clients
with Kafka's default partitioner over the current partition count (or
kafka-python's or aiokafka's, when the scenario picks those clients).

``kafka-ordered demo`` (and ``make demo``) runs both through :func:`run_demo`
and prints a table; :func:`run_scenario` is what the tests call. Nothing here
prints (progress goes to a stream the caller passes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Literal, Optional, Sequence, TextIO, Tuple

from ._broker import BOOTSTRAP_ENV, EmbeddedBroker, group_config
from ._oracle import OracleReport, OrderingOracle, encode_value

if TYPE_CHECKING:
    from ..errors import KafkaOrderedError
    from ..layout import Layout
    from ._cluster import KafkaCluster

__all__ = ["Scenario", "ScenarioResult", "run_scenario", "scenario_from_args", "run_demo"]


#: The longest the drain lasts, in multiples of ``Scenario.drain_timeout_s``.
_DRAIN_CAP = 5


@dataclass(frozen=True)
class Scenario:
    """What one run does. Times are fractions of ``duration_s``."""

    ordered: bool = True
    producers: int = 3
    keys: int = 1000
    rate: int = 1000  # records/s per producer
    duration_s: float = 20.0
    consumers: int = 3
    consumer_rate: int = 1500  # records/s per consumer (processing cost)
    initial: int = 4
    physical: int = 8  # embedded broker only (no CreatePartitions); elsewhere expand creates partitions
    layouts: Tuple[int, ...] = (5, 6, 8, 6, 8)
    producer_restart_at: Optional[float] = 0.45
    consumer_crash_at: Optional[float] = 0.55
    member_join_at: Optional[float] = None
    stable_ids: bool = True
    producer_kill: bool = False  # restart by SIGKILL (in-flight records carry no promise)
    consumer_restart: bool = False  # a killed consumer comes back (rejoins the group)
    corrupt_layout_at: Optional[float] = None  # append an unparsable record to the layout log
    kafka_python_producers: int = 0  # how many of the producers use kafka-python (the rest confluent-kafka)
    kafka_python_consumers: bool = False  # the group's members use kafka-python (one client per group)
    # How many of the producers use aiokafka (after the kafka-python ones; Apache Kafka only: aiokafka's
    # idempotent producer fails on the embedded broker).
    aiokafka_producers: int = 0
    aiokafka_consumers: bool = False  # the group's members use aiokafka (not with kafka_python_consumers)
    manual_commit: bool = False  # consumers commit synchronously after each processed batch
    poison: bool = False  # producers also send refused (oversized) and unparsable records
    seed: int = 0
    # How long the drain after the producers stop waits for the next
    # acknowledged record to be delivered; at most _DRAIN_CAP times that in all.
    drain_timeout_s: float = 60.0
    # Broker faults (Apache Kafka test cluster only: run_scenario(cluster=...)):
    # SIGKILL or SIGSTOP of one node at this fraction of the run, back after broker_down_s.
    broker_fault_at: Optional[float] = None
    broker_fault: Literal["kill", "pause"] = "kill"
    broker_fault_target: Literal["layout-leader", "data-leader"] = "layout-leader"
    broker_down_s: float = 4.0


@dataclass(frozen=True)
class ScenarioResult:
    """One run of a :class:`Scenario`: the oracle's report, how many layout
    changes were applied, the total time partitions stalled at gates, the
    run's duration, the epochs seen, and the poison records refused by the
    producers' clients and skipped by the consumers."""
    scenario: Scenario
    report: OracleReport
    layout_changes: int
    stall_s: float
    elapsed_s: float
    epochs: List[int] = field(default_factory=list)
    refused: int = 0  # poison records the producers' clients refused
    poison_skipped: int = 0  # unparsable records the consumers skipped
    # For each missing record (up to 20): what the partition holds at the
    # offset its producer was told, read again after the run.
    missing_detail: Tuple[str, ...] = ()
    # Workers that ended otherwise than asked (an exception, a crash): one line each.
    worker_failures: Tuple[str, ...] = ()

    def row(self) -> Dict[str, Any]:
        """One run as a column of ``kafka-ordered demo``'s table (snake_case
        keys: the ``--json`` shape; the table gives them labels)."""
        r = self.report
        return {
            "clients": "ordered" if self.scenario.ordered else "plain",
            "produced_acked": r.acknowledged,
            "consumed": r.delivered,
            "unique": r.unique,
            "duplicates": r.duplicates,
            "keys": r.keys,
            "layout_changes": self.layout_changes,
            "violations": len(r.violations),
            "missing": r.missing,
            "gate_stall_s": round(self.stall_s, 2),
        }


# -- workers (run as `python -m kafka_ordered.testing.demo worker-...`)


POISON_VALUE = b"poison"
# Producers run with a small maximum message size so that an oversized
# record is refused locally, as a user's bad record would be.
_MAX_BYTES = 100_000


def _survive(e: KafkaOrderedError) -> None:
    """A retriable error is written down and the worker goes on, as an
    application would (e.g. a registration: the record stays buffered and
    the next send retries); any other ends it."""
    if not e.retriable:
        raise e
    sys.stderr.write(f"{e}\n")


def _started(make: Callable[[], Any], stop: Dict[str, bool], retry_after: float = 0.5) -> Any:
    """``make()`` (a client), made again after a retriable error, as a
    supervisor restarts a process whose client could not start (the
    cluster not answering: a broker down, its partitions not failed over
    yet); ``None`` when the worker is stopped first. Other errors end it."""
    from ..errors import KafkaOrderedError

    while True:
        try:
            return make()
        except KafkaOrderedError as e:
            _survive(e)
        if stop["now"]:
            return None
        time.sleep(retry_after)


def _producer_worker(a: argparse.Namespace) -> int:
    """Writes per-key sequence numbers; each acknowledged record becomes a
    line ``key, value, partition, offset, ack time (ns), send time (ns)``.
    Records the client refuses (``--poison``) are counted, never written.
    Stops on SIGTERM, after a flush."""
    if a.client == "aiokafka":
        return asyncio.run(_aiokafka_producer_worker(a))
    from confluent_kafka import KafkaException, Producer

    from .. import _hashing
    from ..errors import KafkaOrderedError
    from ..layout_log import LayoutFollower

    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    rng = random.Random(a.seed)
    out = open(a.out, "a", buffering=1 << 16)
    base = a.incarnation * 1_000_000
    seqs: Dict[int, int] = {}
    refused = {"n": 0}

    def acked(sent: int) -> Callable[[Any, Any], None]:
        def done(err: Any, msg: Any) -> None:
            if err is None:
                if msg.value() != POISON_VALUE:
                    _write_acknowledged(out, msg.key(), msg.value(), msg.partition(), msg.offset(), sent)
            else:
                refused["n"] += 1
        return done

    kafka_python = a.client == "kafka-python"
    extra = {"ordered.producer.id": a.id} if a.stable else {}
    # Plain producers place keys as Kafka's default partitioner does: murmur2
    # over the current partition count, read from the layout log.
    follower = None if a.ordered else LayoutFollower({"bootstrap.servers": a.bootstrap}, a.layout_topic).start()
    if kafka_python:
        from kafka import KafkaProducer

        from ..kafka_python import OrderedKafkaProducer

        producer: Any = _started(lambda: (
            OrderedKafkaProducer(bootstrap_servers=a.bootstrap, linger_ms=5, max_request_size=_MAX_BYTES,
                                 **{"ordered.layout.topic": a.layout_topic, **extra})
            if a.ordered else
            KafkaProducer(bootstrap_servers=a.bootstrap, acks="all", linger_ms=5, max_request_size=_MAX_BYTES)
        ), stop)
    else:
        from ..confluent import OrderedProducer

        conf = {"bootstrap.servers": a.bootstrap, "linger.ms": 5, "message.max.bytes": _MAX_BYTES}
        producer = _started(lambda: (OrderedProducer({**conf, "ordered.layout.topic": a.layout_topic, **extra})
                                     if a.ordered else Producer({**conf, "acks": "all", "enable.idempotence": True})),
                            stop)
    if producer is None:
        return 0

    def plain_partition(key: bytes) -> Optional[int]:
        if follower is None:
            return None
        return _hashing.murmur2(key) % follower.history.current(a.topic).partitions  # type: ignore[union-attr]

    def send(key: bytes, value: bytes) -> None:
        partition = plain_partition(key)
        sent = time.time_ns()
        if kafka_python:
            try:
                fut = producer.send(a.topic, value=value, key=key, partition=partition)
            except KafkaOrderedError as e:
                _survive(e)
                return
            except Exception:  # refused locally (e.g. MessageSizeTooLargeError)
                refused["n"] += 1
                return
            if value == POISON_VALUE:
                return
            fut.add_callback(lambda md: _write_acknowledged(out, key, value, md.partition, md.offset, sent))
            fut.add_errback(lambda _e: refused.update(n=refused["n"] + 1))
            return
        try:
            if partition is None:
                producer.produce(a.topic, value, key, on_delivery=acked(sent))
            else:
                producer.produce(a.topic, value, key, partition, on_delivery=acked(sent))
        except KafkaOrderedError as e:
            _survive(e)
        except (KafkaException, BufferError, ValueError, TypeError):
            refused["n"] += 1
        try:
            producer.poll(0)
        except KafkaOrderedError as e:  # poll also drives the switch
            _survive(e)

    out.write("#ready\n")
    out.flush()
    interval = 1.0 / a.rate
    next_at = time.monotonic()
    last_flush = next_at
    while not stop["now"]:
        k = rng.randrange(a.keys)
        key = f"key-{k:05d}".encode()
        if a.poison and rng.random() < 0.002:
            # A record the client refuses, then one no consumer can parse:
            # both must fail or be skipped alone, never wedge what follows.
            send(key, b"x" * (_MAX_BYTES * 2))
            send(key, POISON_VALUE)
        seq = seqs.get(k, base)
        seqs[k] = seq + 1
        send(key, encode_value(a.id, seq))
        next_at += interval
        now = time.monotonic()
        if next_at > now:
            time.sleep(next_at - now)
        if now - last_flush > 0.2:
            out.flush()
            last_flush = now
    producer.flush(30)
    if a.ordered:
        for r in producer.registrations:
            out.write(f"#registration\t{r!r}\n")
    producer.close()
    if follower is not None:
        follower.close()
    out.write(f"#refused\t{refused['n']}\n")
    out.close()
    return 0


def _write_acknowledged(out: Any, key: bytes, value: bytes, partition: int, offset: Optional[int],
                        sent: int) -> None:
    """One acknowledged record's line, as :func:`_acknowledgement` reads it:
    ``key, value, partition, offset, ack time (ns), send time (ns)``."""
    out.write(f"{key.decode()}\t{value.decode()}\t{partition}\t{offset}\t{time.time_ns()}\t{sent}\n")


def _write_delivered(out: Any, records: List[Tuple[bytes, bytes, int, int]]) -> int:
    """One line per delivered record (``key, value, partition, offset, delivery
    time (ns)``), poison records skipped as the application would; returns
    how many were poison."""
    at = time.time_ns()
    poison = 0
    for key, value, partition, offset in records:
        if value == POISON_VALUE:
            poison += 1
            continue
        out.write(f"{key.decode()}\t{value.decode()}\t{partition}\t{offset}\t{at}\n")
    out.flush()
    return poison


def _consumer_worker(a: argparse.Namespace) -> int:
    """One group member; each delivered record becomes a line ``key, value,
    partition, offset, delivery time (ns)``. Unparsable (poison) records are
    skipped by the application, as a real one would; a retriable error from
    polling is polled again. Stops on SIGTERM, closing the consumer (which
    commits, with auto-commit, and leaves the group)."""
    if a.client == "aiokafka":
        return asyncio.run(_aiokafka_consumer_worker(a))
    from ..errors import KafkaOrderedError

    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    out = open(a.out, "a", buffering=1 << 16)
    kafka_python = a.client == "kafka-python"
    manual = bool(a.manual_commit)
    if kafka_python:
        from kafka import KafkaConsumer

        conf: Dict[str, Any] = {"bootstrap_servers": a.bootstrap, "group_id": a.group,
                                "auto_offset_reset": "earliest", "enable_auto_commit": not manual,
                                **group_config(bool(a.embedded), kafka_python=True)}
        if a.ordered:
            from ..kafka_python import OrderedKafkaConsumer

            consumer: Any = _started(
                lambda: OrderedKafkaConsumer(a.topic, **conf, **{"ordered.layout.topic": a.layout_topic}), stop)
        else:
            consumer = KafkaConsumer(a.topic, **conf)
    else:
        from confluent_kafka import Consumer

        conf = {"bootstrap.servers": a.bootstrap, "group.id": a.group, "auto.offset.reset": "earliest",
                "enable.auto.commit": not manual, **group_config(bool(a.embedded))}
        if a.ordered:
            from ..confluent import OrderedConsumer

            consumer = _started(lambda: OrderedConsumer({**conf, "ordered.layout.topic": a.layout_topic}), stop)
        else:
            consumer = Consumer(conf)
        if consumer is not None:
            consumer.subscribe([a.topic])
    if consumer is None:
        return 0

    calls = [0]

    def batch() -> List[Tuple[bytes, bytes, int, int]]:
        try:
            return fetched()
        except KafkaOrderedError as e:  # e.g. the layout log's leader failing over: poll again, as an application would
            if not e.retriable:
                raise
            out.write(f"#retry\t{type(e).__name__}\n")
            time.sleep(0.2)
            return []

    def fetched() -> List[Tuple[bytes, bytes, int, int]]:
        if kafka_python:
            got = consumer.poll(timeout_ms=200, max_records=200)
            return [(r.key, r.value, r.partition, r.offset) for records in got.values() for r in records]
        # Every other batch comes from poll(), which fetches batches of its own
        # (the records it kept back come first in the next consume()).
        calls[0] += 1
        if calls[0] % 2:
            got = consumer.consume(200, 0.2)
        else:
            got = []
            m = consumer.poll(0.2)
            while m is not None and len(got) < 200:
                got.append(m)
                m = consumer.poll(0) if len(got) < 200 else None
        return [(m.key(), m.value(), m.partition(), m.offset()) for m in got if m.error() is None]

    def commit() -> None:
        try:
            if kafka_python:
                consumer.commit()
            else:
                consumer.commit(asynchronous=False)
        except Exception as e:  # nothing to commit yet, or a rebalance: at-least-once replays
            out.write(f"#commit-failed\t{type(e).__name__}\n")

    out.write("#ready\n")
    out.flush()
    per_record = 1.0 / a.rate if a.rate > 0 else 0.0
    poison = 0
    debug = os.environ.get("KAFKA_ORDERED_DEMO_DEBUG")
    last_debug = 0.0
    while not stop["now"]:
        if debug and a.ordered and time.monotonic() - last_debug > 1.0:
            last_debug = time.monotonic()
            out.write(f"#gates\t{consumer.gate_status()!r}\t{consumer.assignment()!r}\n")
        records = batch()
        began = time.monotonic()
        poison += _write_delivered(out, records)
        if manual and records:
            commit()
        spare = len(records) * per_record - (time.monotonic() - began)
        if spare > 0:
            time.sleep(spare)
    stall = sum(consumer.stall_seconds.values()) if a.ordered else 0.0
    consumer.close()
    out.write(f"#stall\t{stall}\n#poison\t{poison}\n")
    out.close()
    return 0


async def _aiokafka_producer_worker(a: argparse.Namespace) -> int:
    """:func:`_producer_worker` over aiokafka: ``OrderedAIOKafkaProducer``, or
    for the plain run an idempotent ``AIOKafkaProducer`` placing keys as
    Kafka's default partitioner does over the current partition count. The
    same lines, the same poison records; SIGTERM stops the loop, then the
    producer is flushed and stopped. Apache Kafka only (aiokafka's idempotent
    producer fails on the embedded broker)."""
    from aiokafka import AIOKafkaProducer

    from .. import _hashing
    from ..errors import KafkaOrderedError
    from ..layout_log import LayoutFollower

    stop = {"now": False}
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, lambda: stop.update(now=True))
    rng = random.Random(a.seed)
    out = open(a.out, "a", buffering=1 << 16)
    base = a.incarnation * 1_000_000
    seqs: Dict[int, int] = {}
    refused = {"n": 0}
    conf: Dict[str, Any] = {"bootstrap_servers": a.bootstrap, "linger_ms": 5, "max_request_size": _MAX_BYTES}
    follower = None if a.ordered else LayoutFollower({"bootstrap.servers": a.bootstrap}, a.layout_topic).start()
    if a.ordered:
        from ..aiokafka import OrderedAIOKafkaProducer

        extra = {"ordered.producer.id": a.id} if a.stable else {}
        producer: Any = OrderedAIOKafkaProducer(**conf, **{"ordered.layout.topic": a.layout_topic, **extra})
    else:
        producer = AIOKafkaProducer(**conf, acks="all", enable_idempotence=True)
    await producer.start()

    def acked(key: bytes, value: bytes, sent: int) -> Any:
        def done(fut: "asyncio.Future[Any]") -> None:
            if fut.cancelled() or fut.exception() is not None:
                refused["n"] += 1
            elif value != POISON_VALUE:
                md = fut.result()
                _write_acknowledged(out, key, value, md.partition, md.offset, sent)
        return done

    async def send(key: bytes, value: bytes) -> None:
        partition = None
        if follower is not None:
            partition = _hashing.murmur2(key) % follower.history.current(a.topic).partitions  # type: ignore[union-attr]
        sent = time.time_ns()
        try:
            fut = await producer.send(a.topic, value=value, key=key, partition=partition)
        except KafkaOrderedError as e:
            _survive(e)
            return
        except Exception:  # refused locally (e.g. MessageSizeTooLargeError)
            refused["n"] += 1
            return
        fut.add_done_callback(acked(key, value, sent))

    out.write("#ready\n")
    out.flush()
    interval = 1.0 / a.rate
    next_at = time.monotonic()
    last_flush = next_at
    while not stop["now"]:
        k = rng.randrange(a.keys)
        key = f"key-{k:05d}".encode()
        if a.poison and rng.random() < 0.002:
            await send(key, b"x" * (_MAX_BYTES * 2))
            await send(key, POISON_VALUE)
        seq = seqs.get(k, base)
        seqs[k] = seq + 1
        await send(key, encode_value(a.id, seq))
        next_at += interval
        now = time.monotonic()
        # Always yield to the loop: acknowledgements and the sender run on it.
        await asyncio.sleep(max(0.0, next_at - now))
        if now - last_flush > 0.2:
            out.flush()
            last_flush = now
    await asyncio.wait_for(producer.flush(), 30)
    if a.ordered:
        for r in producer.registrations:
            out.write(f"#registration\t{r!r}\n")
    await producer.stop()
    if follower is not None:
        follower.close()
    out.write(f"#refused\t{refused['n']}\n")
    out.close()
    return 0


async def _aiokafka_consumer_worker(a: argparse.Namespace) -> int:
    """:func:`_consumer_worker` over aiokafka: one member of a group of
    ``OrderedAIOKafkaConsumer`` (or plain ``AIOKafkaConsumer``) with the same
    lines, poison skipping, retries, manual commits and throttling. SIGTERM
    stops the loop; the consumer is then stopped (it commits, with
    auto-commit, and leaves the group). Both consumers refresh metadata
    every 5 s: with aiokafka's default (5 min) the plain one would not see
    the partitions an expansion creates on Apache Kafka before the drain
    ends (the ordered one learns them from the layout log, but the frequent
    refresh is what showed aiokafka forgetting a held partition's pause)."""
    from aiokafka import AIOKafkaConsumer

    from ..errors import KafkaOrderedError

    stop = {"now": False}
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, lambda: stop.update(now=True))
    out = open(a.out, "a", buffering=1 << 16)
    manual = bool(a.manual_commit)
    conf: Dict[str, Any] = {"bootstrap_servers": a.bootstrap, "group_id": a.group, "auto_offset_reset": "earliest",
                            "enable_auto_commit": not manual, **group_config(bool(a.embedded), kafka_python=True)}
    if a.ordered:
        from ..aiokafka import OrderedAIOKafkaConsumer

        consumer: Any = OrderedAIOKafkaConsumer(a.topic, **conf, metadata_max_age_ms=5000,
                                                **{"ordered.layout.topic": a.layout_topic})
    else:
        consumer = AIOKafkaConsumer(a.topic, **conf, metadata_max_age_ms=5000)
    await consumer.start()

    async def batch() -> List[Tuple[bytes, bytes, int, int]]:
        try:
            got = await consumer.getmany(timeout_ms=200, max_records=200)
        except KafkaOrderedError as e:  # e.g. the layout log's leader failing over: poll again
            if not e.retriable:
                raise
            out.write(f"#retry\t{type(e).__name__}\n")
            await asyncio.sleep(0.2)
            return []
        return [(r.key, r.value, r.partition, r.offset) for records in got.values() for r in records]

    async def commit() -> None:
        try:
            await consumer.commit()
        except Exception as e:  # nothing to commit yet, or a rebalance: at-least-once replays
            out.write(f"#commit-failed\t{type(e).__name__}\n")

    out.write("#ready\n")
    out.flush()
    per_record = 1.0 / a.rate if a.rate > 0 else 0.0
    poison = 0
    debug = os.environ.get("KAFKA_ORDERED_DEMO_DEBUG")
    last_debug = 0.0
    while not stop["now"]:
        if debug and a.ordered and time.monotonic() - last_debug > 1.0:
            last_debug = time.monotonic()
            out.write(f"#gates\t{consumer.gate_status()!r}\t{consumer.assignment()!r}\n")
        records = await batch()
        began = time.monotonic()
        poison += _write_delivered(out, records)
        if manual and records:
            await commit()
        spare = len(records) * per_record - (time.monotonic() - began)
        if spare > 0:
            await asyncio.sleep(spare)
    stall = sum(consumer.stall_seconds.values()) if a.ordered else 0.0
    await consumer.stop()
    out.write(f"#stall\t{stall}\n#poison\t{poison}\n")
    out.close()
    return 0


# -- orchestration


class _Tail:
    """Reads complete lines appended to a file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pos = 0
        self.partial = ""

    def lines(self) -> List[str]:
        try:
            with open(self.path, "r") as f:
                f.seek(self.pos)
                data = f.read()
                self.pos = f.tell()
        except FileNotFoundError:
            return []
        data = self.partial + data
        parts = data.split("\n")
        self.partial = parts.pop()
        return parts


def _wait_ready(paths: List[Path], procs: Dict[int, "subprocess.Popen[bytes]"], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    for path, proc in zip(paths, procs.values()):
        while not (path.exists() and "#ready" in path.read_text()):
            if proc.poll() is not None:
                raise RuntimeError(f"demo worker exited with {proc.returncode} before it was ready")
            if time.monotonic() > deadline:
                raise RuntimeError("demo workers did not start within 60 s")
            time.sleep(0.05)


def _spawn(args: List[str], log: Path) -> "subprocess.Popen[bytes]":
    with open(log, "ab") as err:
        return subprocess.Popen([sys.executable, "-m", "kafka_ordered.testing.demo", *args],
                                stdout=subprocess.DEVNULL, stderr=err)


def run_scenario(
    bootstrap: str,
    scenario: Scenario,
    *,
    workdir: Optional[str] = None,
    progress: Optional[TextIO] = None,
    embedded: Optional[bool] = None,
    cluster: Optional["KafkaCluster"] = None,
) -> ScenarioResult:
    """Run one scenario against ``bootstrap`` and check it with the oracle.

    ``embedded`` says whether ``bootstrap`` is the embedded broker (fast group
    settings, spare partitions, tail holes) or a real one (settings Apache
    Kafka accepts, expansions through CreatePartitions, every missing record
    lost); ``None``: real when ``$KAFKA_ORDERED_BOOTSTRAP`` is set.
    ``cluster`` is the :class:`~kafka_ordered.testing.KafkaCluster` behind
    ``bootstrap``, needed for the scenario's broker faults; every node it
    faulted is running again when this returns."""
    if embedded is None:
        embedded = not os.environ.get(BOOTSTRAP_ENV)
    from ..admin import LayoutAdmin

    began = time.monotonic()
    tag = f"{'ordered' if scenario.ordered else 'plain'}-{scenario.seed}-{uuid.uuid4().hex[:6]}"
    topic, layout_topic, group = f"demo-{tag}", f"_kafka_ordered-{tag}", f"demo-group-{tag}"
    tmp = Path(workdir or tempfile.mkdtemp(prefix="kafka-ordered-demo-"))
    rng = random.Random(scenario.seed)
    admin = LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic})
    procs: List[subprocess.Popen] = []  # type: ignore[type-arg]
    errs: Dict[Any, Path] = {}  # worker process -> its stderr file
    faulted: List[int] = []  # cluster nodes a broker fault took away, until they are back
    faulted_lock = threading.Lock()
    back_timer: Optional[threading.Timer] = None

    def bring_back() -> None:
        assert cluster is not None
        with faulted_lock:
            for node in faulted:
                if scenario.broker_fault == "kill":
                    cluster.start_node(node, wait=False)
                else:
                    cluster.resume(node)
            faulted.clear()
        if progress is not None:
            progress.write(f"  [{tag[:7]}] broker nodes back\n")

    try:
        # Spare partitions only where the broker cannot create them: elsewhere
        # every expansion takes the real path (CreatePartitions).
        admin.create_topic(topic, scenario.initial, scenario.physical if embedded else None)
        common = ["--bootstrap", bootstrap, "--topic", topic, "--layout-topic", layout_topic,
                  "--ordered", "1" if scenario.ordered else "0", "--embedded", "1" if embedded else "0"]

        if scenario.kafka_python_consumers and scenario.aiokafka_consumers:
            raise ValueError("one client per group: kafka_python_consumers and aiokafka_consumers are both set")
        consumer_client = ("kafka-python" if scenario.kafka_python_consumers
                           else "aiokafka" if scenario.aiokafka_consumers else "confluent")
        if scenario.kafka_python_producers + scenario.aiokafka_producers > scenario.producers:
            raise ValueError("kafka_python_producers + aiokafka_producers exceed producers")

        def producer_client(i: int) -> str:
            if i < scenario.kafka_python_producers:
                return "kafka-python"
            if i < scenario.kafka_python_producers + scenario.aiokafka_producers:
                return "aiokafka"
            return "confluent"

        def consumer(i: int) -> subprocess.Popen:  # type: ignore[type-arg]
            p = _spawn(["worker-consumer", *common, "--group", group, "--rate", str(scenario.consumer_rate),
                        "--client", consumer_client, "--manual-commit", "1" if scenario.manual_commit else "0",
                        "--out", str(tmp / f"consumer-{i}.tsv")], tmp / f"consumer-{i}.err")
            procs.append(p)
            errs[p] = tmp / f"consumer-{i}.err"
            return p

        def producer(i: int, incarnation: int) -> subprocess.Popen:  # type: ignore[type-arg]
            p = _spawn(["worker-producer", *common, "--id", f"P{i}", "--incarnation", str(incarnation),
                        "--keys", str(scenario.keys), "--rate", str(scenario.rate),
                        "--seed", str(rng.randrange(1 << 30)), "--stable", "1" if scenario.stable_ids else "0",
                        "--client", producer_client(i),
                        "--poison", "1" if scenario.poison else "0",
                        "--out", str(tmp / f"producer-{i}-{incarnation}.tsv")], tmp / f"producer-{i}.err")
            procs.append(p)
            errs[p] = tmp / f"producer-{i}.err"
            return p

        consumers = {i: consumer(i) for i in range(scenario.consumers)}
        _wait_ready([tmp / f"consumer-{i}.tsv" for i in consumers], consumers)
        time.sleep(1.5)  # first group assignment
        producers = {i: producer(i, 0) for i in range(scenario.producers)}
        _wait_ready([tmp / f"producer-{i}-0.tsv" for i in producers], producers)
        start = time.monotonic()
        events: List[Tuple[float, str, Any]] = []
        steps = len(scenario.layouts)
        for j, n in enumerate(scenario.layouts):
            jitter = rng.uniform(-0.3, 0.3) / (steps + 1)
            events.append(((j + 1) / (steps + 1) + jitter, "layout", n))
        if scenario.producer_restart_at is not None:
            events.append((scenario.producer_restart_at, "restart", 0))
        if scenario.consumer_crash_at is not None:
            events.append((scenario.consumer_crash_at, "crash", 0))
        if scenario.member_join_at is not None:
            events.append((scenario.member_join_at, "join", scenario.consumers))
        if scenario.corrupt_layout_at is not None:
            events.append((scenario.corrupt_layout_at, "corrupt", 0))
        if scenario.broker_fault_at is not None:
            if cluster is None:
                raise ValueError("a scenario with broker faults needs run_scenario(cluster=KafkaCluster)")
            events.append((scenario.broker_fault_at, "broker-fault", rng.random()))
        events.sort(key=lambda e: e[0])
        tails = [_Tail(tmp / f"consumer-{i}.tsv") for i in range(scenario.consumers + 1)]
        all_lines: List[List[str]] = [[] for _ in tails]

        def read_tails() -> int:
            n = 0
            for i, t in enumerate(tails):
                new = t.lines()
                all_lines[i].extend(new)
                n += sum(1 for line in new if not line.startswith("#"))
            return n

        consumed = 0
        epochs: List[int] = [1]
        changes = 0
        last_print = 0.0
        for frac, kind, arg in events:
            while time.monotonic() - start < frac * scenario.duration_s:
                time.sleep(0.05)
                consumed += read_tails()
                if progress is not None and time.monotonic() - last_print >= 1.0:
                    last_print = time.monotonic()
                    progress.write(f"  [{tag[:7]}] t={time.monotonic() - start:5.1f}s consumed={consumed} "
                                   f"layout={admin.layout(topic).partitions}\n")
                    progress.flush()
            if kind == "layout":
                lay = _change_layout(admin, topic, arg)
                if lay is None:
                    continue
                changes += 1
                epochs.append(lay.epoch)
                if progress is not None:
                    progress.write(f"  [{tag[:7]}] layout -> {arg} partitions (epoch {lay.epoch})\n")
            elif kind == "restart":
                p = producers[arg]
                if scenario.producer_kill:
                    p.kill()
                else:
                    p.send_signal(signal.SIGTERM)
                p.wait(30)
                producers[arg] = producer(arg, 1)
                if progress is not None:
                    progress.write(f"  [{tag[:7]}] producer P{arg} restarted\n")
            elif kind == "crash":
                consumers[arg].kill()
                consumers[arg].wait(10)
                if progress is not None:
                    progress.write(f"  [{tag[:7]}] consumer {arg} killed (SIGKILL)\n")
                if scenario.consumer_restart:
                    consumers[arg] = consumer(arg)
            elif kind == "corrupt":
                from confluent_kafka import Producer

                raw = Producer({"bootstrap.servers": bootstrap})
                raw.produce(layout_topic, b"\xffnot a layout record", b"chaos", partition=0)
                raw.flush(10)
                if progress is not None:
                    progress.write(f"  [{tag[:7]}] corrupt record appended to the layout log\n")
            elif kind == "broker-fault":
                assert cluster is not None
                node = _leader_node(cluster, layout_topic if scenario.broker_fault_target == "layout-leader"
                                    else topic, arg)
                with faulted_lock:
                    (cluster.kill if scenario.broker_fault == "kill" else cluster.pause)(node)
                    faulted.append(node)
                # On a timer, not as a later event: an admin call of this loop may block on the
                # faulted broker until it is back.
                down_s = min(0.95 * scenario.duration_s - (time.monotonic() - start), scenario.broker_down_s)
                if progress is not None:
                    progress.write(f"  [{tag[:7]}] broker node {node} ({scenario.broker_fault_target}) "
                                   f"{'SIGKILLed' if scenario.broker_fault == 'kill' else 'SIGSTOPped'} "
                                   f"for {down_s:.1f} s\n")
                back_timer = threading.Timer(max(0.0, down_s), bring_back)
                back_timer.daemon = True
                back_timer.start()
            elif kind == "join":
                consumers[arg] = consumer(arg)
                if progress is not None:
                    progress.write(f"  [{tag[:7]}] consumer {arg} joined\n")
        while time.monotonic() - start < scenario.duration_s:
            time.sleep(0.05)
        for p in producers.values():
            p.send_signal(signal.SIGTERM)
        for p in producers.values():
            p.wait(60)
        oracle = OrderingOracle(broker_tail_holes=embedded)
        acked: set = set()  # (key, value) of every acknowledged record
        refused = poison_skipped = 0
        for path in sorted(tmp.glob("producer-*.tsv")):
            for line in path.read_text().splitlines():
                if line.startswith("#refused"):
                    refused += int(line.split("\t")[1])
                if line.startswith("#"):
                    continue
                key, value, where, at_offset, at, sent = _acknowledgement(line)
                acked.add((key, value))
                oracle.acknowledged_value(key.encode(), value.encode(), where, at_offset, at, sent)
        # Drain until every acknowledged record was delivered (records a
        # killed producer sent but never saw acknowledged do not count), or
        # no more of them arrive: a group behind at its processing rate is
        # slow, not losing records.
        began_drain = time.monotonic()
        deadline = began_drain + scenario.drain_timeout_s
        cap = began_drain + _DRAIN_CAP * scenario.drain_timeout_s
        seen = [0] * len(all_lines)  # lines of each consumer already looked at
        while True:
            read_tails()
            left = len(acked)
            for i, lines in enumerate(all_lines):
                for line in lines[seen[i]:]:
                    if not line.startswith("#"):
                        acked.discard(tuple(line.split("\t")[:2]))
                seen[i] = len(lines)
            now = time.monotonic()
            if not acked or now >= min(deadline, cap):
                break
            if len(acked) < left:
                deadline = now + scenario.drain_timeout_s
            time.sleep(0.5)
        for p in consumers.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in consumers.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        stall = 0.0
        deliveries: List[Tuple[int, int, int, str, str, str, str]] = []
        read_tails()
        for i in range(len(tails)):
            for n, line in enumerate(all_lines[i]):
                if line.startswith("#stall"):
                    stall += float(line.split("\t")[1])
                if line.startswith("#poison"):
                    poison_skipped += int(line.split("\t")[1])
                if line.startswith("#"):
                    continue
                key, value, partition, offset, delivered = line.split("\t")
                deliveries.append((int(delivered), i, n, key, value, partition, offset))
        # One group's delivery order is real time across its members.
        deliveries.sort()
        for delivered_at, i, _, key, value, partition, offset in deliveries:
            oracle.delivered_value(key.encode(), value.encode(), where=f"c{i} p{partition}@{offset}",
                                   partition=int(partition), offset=int(offset), batch=f"c{i}@{delivered_at}")
        report = oracle.report()
        detail = _where_missing(bootstrap, topic, oracle) if report.missing else ()
        # Workers stop on SIGTERM (exit 0, or killed by it before their handler is set);
        # only the scenario's own faults SIGKILL them.
        failures = tuple(
            f"{errs[p].stem} exited with {p.returncode}: {_last_line(errs[p])}"
            for p in procs if p.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL)
        )
        return ScenarioResult(scenario, report, changes, stall, time.monotonic() - began, epochs,
                              refused, poison_skipped, detail, failures)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        admin.close()
        if cluster is not None:
            if back_timer is not None:
                back_timer.cancel()
            with faulted_lock:
                for node in faulted:
                    cluster.resume(node)
                    cluster.start_node(node, wait=False)
                faulted.clear()
            cluster.wait_healthy()


def _change_layout(admin: Any, topic: str, partitions: int, patience_s: float = 60.0) -> Optional[Layout]:
    """Expand or shrink ``topic`` to ``partitions`` as an operator would while
    brokers fail: a change refused for brokers that are down (placement needs
    them live) or unanswered is tried again until ``patience_s``, from the
    layout read anew (a change that went through is not made twice). An append
    left unacknowledged (the layout-log leader killed under it) may have been
    written: the layout read anew tells, as the error advises. None when the
    layout already had that many partitions."""
    from ..errors import BrokerUnavailableError, LayoutLogUnwritableError, PlacementError

    deadline = time.monotonic() + patience_s
    unanswered = False
    while True:
        try:
            cur = admin.layout(topic)  # (reading the layout log waits for its leader too)
            if partitions > cur.partitions:
                return admin.expand(topic, partitions, expected_epoch=cur.epoch)
            if partitions < cur.partitions:
                return admin.shrink(topic, partitions, expected_epoch=cur.epoch)
            return cur if unanswered else None
        except (PlacementError, BrokerUnavailableError, LayoutLogUnwritableError) as e:
            unanswered = unanswered or isinstance(e, LayoutLogUnwritableError)
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _acknowledgement(line: str) -> Tuple[str, str, int, Optional[int], int, int]:
    """A producer worker's line: key, value, partition, offset (None when the
    client acknowledged the record without one: librdkafka's idempotent
    producer does so for a batch whose answer was lost once a later answer
    proves it written), ack time and send time (ns)."""
    key, value, partition, offset, at, sent = line.split("\t")
    return key, value, int(partition), None if offset == "None" else int(offset), int(at), int(sent)


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()] if path.exists() else []
    return lines[-1][:500] if lines else "(no output)"


def _leader_node(cluster: "KafkaCluster", topic: str, pick: float) -> int:
    """Index of the node leading a partition of ``topic`` (``pick`` in [0, 1)
    chooses which)."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(topic, timeout=10)
    parts = sorted(md.topics[topic].partitions.values(), key=lambda p: p.id)
    leader = parts[int(pick * len(parts))].leader
    return next(i for i in range(cluster.nodes) if cluster.node_id(i) == leader)


def _where_missing(bootstrap: str, topic: str, oracle: OrderingOracle, limit: int = 20) -> Tuple[str, ...]:
    """Read each missing record's acknowledged offset again with a plain
    consumer: the record there means the group skipped it; another record
    or none means the offset the broker acknowledged does not hold it.
    Each line ends with :meth:`OrderingOracle.explain` (the deliveries and
    appends around it)."""
    from confluent_kafka import Consumer, TopicPartition

    out: List[str] = []
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"where-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    try:
        for key, producer, seq in sorted(oracle.missing())[:limit]:
            value = encode_value(producer, seq).decode()
            at = oracle.placed(key, producer, seq)
            if at is None:
                out.append(f"{key.decode()} {value} acknowledged without an offset")
                continue
            partition, offset = at
            c.assign([TopicPartition(topic, partition, offset)])
            msgs = [m for m in c.consume(1, 5.0) if m.error() is None]
            if not msgs:
                there = "nothing readable"
            elif msgs[0].offset() != offset:
                there = f"nothing (next record at {msgs[0].offset()})"
            elif (msgs[0].key(), msgs[0].value()) == (key, value.encode()):
                there = "this record: the group skipped it"
            else:
                there = f"another record {msgs[0].key()!r}={msgs[0].value()!r}"
            out.append(f"{key.decode()} {value} acknowledged at p{partition}@{offset}: holds {there} "
                       f"({oracle.explain(key, producer, seq)})")
    finally:
        c.close()
    return tuple(out)


def scenario_from_args(args: argparse.Namespace) -> Tuple[Scenario, List[bool]]:
    """The base :class:`Scenario` and the runs (``True``: ordered clients)
    that ``kafka-ordered demo`` asks for.

    ``args`` carries the options the CLI defines for ``demo``: ``layouts``
    (comma-separated counts: the initial one, then the changes), ``seed``,
    ``only`` (``"ordered"``, ``"plain"`` or ``None`` for both), and
    ``duration``, ``producers``, ``keys``, ``rate``, ``consumers``,
    ``consumer_rate``, where ``None`` (or a missing attribute) means the
    :class:`Scenario` default.
    """
    d = Scenario()

    def opt(name: str, default: Any) -> Any:
        value = getattr(args, name, None)
        return default if value is None else value

    counts = [int(x) for x in args.layouts.split(",")]
    base = Scenario(producers=opt("producers", d.producers), keys=opt("keys", d.keys), rate=opt("rate", d.rate),
                    duration_s=opt("duration", d.duration_s), consumers=opt("consumers", d.consumers),
                    consumer_rate=opt("consumer_rate", d.consumer_rate), initial=counts[0],
                    physical=max(counts), layouts=tuple(counts[1:]), seed=args.seed)
    runs = [True, False] if args.only is None else [args.only == "ordered"]
    return base, runs


def run_demo(
    base: Scenario, runs: Sequence[bool], *, bootstrap: Optional[str] = None, progress: Optional[TextIO] = None
) -> List[ScenarioResult]:
    """Run ``base`` once per entry of ``runs`` (ordered clients for ``True``,
    plain ones for ``False``) against ``bootstrap``, or an embedded broker
    started (and stopped) here when it is ``None``. Progress lines go to
    ``progress``. Returns the results in run order; never prints.
    """
    broker: Optional[EmbeddedBroker] = None
    if not bootstrap:
        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap_servers
        if progress is not None:
            progress.write(f"embedded Tansu broker on {bootstrap}\n")
    try:
        results = []
        layouts = " -> ".join(str(n) for n in (base.initial, *base.layouts))
        for ordered in runs:
            sc = replace(base, ordered=ordered)
            if progress is not None:
                progress.write(f"{'ordered' if ordered else 'plain'} clients: {sc.producers} producers x {sc.keys} "
                               f"keys, {sc.consumers} consumers, layout {layouts}, {sc.duration_s:.0f} s\n")
            results.append(run_scenario(bootstrap, sc, progress=progress, embedded=broker is not None))
        return results
    finally:
        if broker is not None:
            broker.stop()


def _worker_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["worker-producer", "worker-consumer"])
    for name in ("--bootstrap", "--topic", "--layout-topic", "--out", "--id", "--group"):
        p.add_argument(name)
    p.add_argument("--client", choices=["confluent", "kafka-python", "aiokafka"], default="confluent")
    for name in ("--ordered", "--incarnation", "--keys", "--rate", "--seed", "--stable", "--embedded",
                 "--manual-commit", "--poison"):
        p.add_argument(name, type=int, default=0)
    a = p.parse_args(argv)
    return _producer_worker(a) if a.role == "worker-producer" else _consumer_worker(a)


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
