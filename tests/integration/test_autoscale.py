"""The autoscaler on a real broker (issue 25): bad input fails at start
before anything changes; actions name the epoch they were decided on; a
ramp of keyed load grows, shrinks and retires the topic while an
OrderedConsumer group reads in order and loses nothing (the oracle)."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any, Callable, Dict, List

import pytest

from kafka_ordered import Autoscaler, AutoscalePolicy, LayoutAdmin, OrderedConsumer, OrderedProducer
from kafka_ordered.admin import autoscaler_status
from kafka_ordered.errors import (
    ConcurrentLayoutChangeError,
    ConfigError,
    TopicNotManagedError,
    UnknownTopicError,
    UnsupportedBrokerApiError,
)
from kafka_ordered.testing import OrderingOracle, encode_value

from .. import cli_json_schema as schema_doc
from ..conftest import create_plain_topic, on_embedded_broker

SCHEMAS, DEFS = schema_doc.load()


def _policy(group: str, **kw: Any) -> AutoscalePolicy:
    args: Dict[str, Any] = dict(min_partitions=2, max_partitions=8, target_records_per_s=100.0, scale_up_after=1.0,
                                scale_down_after=3.0, cooldown=2.0, groups=(group,))
    args.update(kw)
    return AutoscalePolicy(**args)


def test_bad_input_is_a_clear_error_at_start_and_changes_nothing(
    admin: LayoutAdmin, ordered_config: Dict[str, Any], unique: Callable[[str], str], embedded: bool,
    make_consumer: Callable[..., OrderedConsumer], make_producer: Callable[..., OrderedProducer],
) -> None:
    topic = unique("as-bad")
    admin.create_topic(topic, 2, physical_partitions=4)
    group = unique("g")
    c = make_consumer(group)
    c.subscribe([topic])
    p = make_producer()
    p.produce(topic, key=b"k", value=b"v")
    p.flush()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and c.poll(0.2) is None:
        pass
    c.commit(asynchronous=False)
    epoch = admin.layout(topic).epoch

    def start(t: str, policy: AutoscalePolicy) -> None:
        a = Autoscaler(ordered_config, t, policy, interval=0.2)
        try:
            a.start()
        finally:
            a.close()

    with pytest.raises(UnknownTopicError):
        start(unique("nope"), _policy(group))
    plain = unique("plain")
    create_plain_topic(ordered_config["bootstrap.servers"], plain, 2, 1)
    with pytest.raises(TopicNotManagedError):
        start(plain, _policy(group))
    with pytest.raises(ConfigError, match="group no-such-group-.* does not exist"):
        start(topic, _policy(unique("no-such-group")))
    with pytest.raises(ConfigError, match="min_partitions 1 is below the initial partition count 2"):
        start(topic, _policy(group, min_partitions=1))
    if embedded:  # the embedded broker reports no log sizes
        with pytest.raises(UnsupportedBrokerApiError) as e:
            start(topic, _policy(group, target_records_per_s=None, target_bytes_per_s=1e6))
        assert e.value.api == "DescribeLogDirs" and "target records per second" in str(e.value)
    with pytest.raises(ConfigError, match="min_partitions .8. is above max_partitions .2."):
        _policy(group, min_partitions=8, max_partitions=2)
    with pytest.raises(ConfigError, match="target_records_per_s must be > 0"):
        _policy(group, target_records_per_s=0)
    assert admin.layout(topic).epoch == epoch  # nothing changed


def test_an_action_applies_only_at_the_epoch_it_was_decided_on(
    admin: LayoutAdmin, ordered_config: Dict[str, Any], unique: Callable[[str], str],
) -> None:
    topic = unique("as-epoch")
    cur = admin.create_topic(topic, 2, physical_partitions=8)
    with LayoutAdmin(ordered_config) as other:
        other.expand(topic, 3, expected_epoch=cur.epoch)  # the other leader acted first
        for act in (lambda: admin.expand(topic, 4, expected_epoch=cur.epoch),
                    lambda: admin.shrink(topic, 2, expected_epoch=cur.epoch),
                    lambda: admin.retire(topic, expected_epoch=cur.epoch)):
            with pytest.raises(ConcurrentLayoutChangeError, match=f"decided on layout epoch {cur.epoch}"):
                act()
    with pytest.raises(TypeError, match="expected_epoch must be an int"):
        admin.shrink(topic, 2, expected_epoch="2")  # type: ignore[arg-type]
    now = admin.layout(topic)
    assert (now.epoch, now.partitions) == (cur.epoch + 1, 3)
    assert admin.shrink(topic, 2, expected_epoch=now.epoch).partitions == 2


class Load:
    """Keyed load from several OrderedProducers at a settable total rate."""

    def __init__(self, make_producer: Callable[..., OrderedProducer], topic: str, oracle: OrderingOracle,
                 lock: threading.Lock, producers: int = 3, keys: int = 60) -> None:
        self.rate = 0.0
        self.topic, self.oracle, self.lock = topic, oracle, lock
        self.stop = threading.Event()
        self.sent = 0
        self.threads = [threading.Thread(target=self._run, args=(make_producer(**{"ordered.producer.id": f"p{i}"}),
                                                                 f"p{i}", keys, i), daemon=True)
                        for i in range(producers)]
        self.errors: List[BaseException] = []

    def _run(self, p: OrderedProducer, name: str, keys: int, i: int) -> None:
        seqs = itertools.count()

        def acked(err: Any, msg: Any) -> None:
            if err is None:
                with self.lock:
                    self.oracle.acknowledged_value(msg.key(), msg.value(), msg.partition(), msg.offset(),
                                                   time.monotonic_ns())

        try:
            nxt = time.monotonic()
            while not self.stop.is_set():
                share = self.rate / len(self.threads)
                if share <= 0:
                    time.sleep(0.05)
                    nxt = time.monotonic()
                    continue
                seq = next(seqs)
                key = f"key-{(seq * 7 + i) % keys}".encode()
                p.produce(self.topic, key=key, value=encode_value(name, seq), on_delivery=acked)
                self.sent += 1
                p.poll(0)
                nxt += 1.0 / share
                delay = nxt - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -1:
                    nxt = time.monotonic()
            p.flush(30)
        except BaseException as e:  # reported by the test
            self.errors.append(e)

    def __enter__(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


class Readers:
    """A consumer group reading into the oracle, each member processing at
    most ``rate`` records/s (so the group lags behind a burst, as real groups
    do): OrderedConsumers, or plain confluent-kafka consumers for the proof
    that the oracle can fail."""

    def __init__(self, make: Callable[[], Any], topic: str, oracle: OrderingOracle, lock: threading.Lock,
                 members: int = 2, rate: float = 0.0) -> None:
        self.oracle, self.lock, self.rate = oracle, lock, rate
        self.stop = threading.Event()
        self.consumers = [make() for _ in range(members)]
        for c in self.consumers:
            c.subscribe([topic])
        self.threads = [threading.Thread(target=self._run, args=(c, f"m{i}"), daemon=True)
                        for i, c in enumerate(self.consumers)]
        self.errors: List[BaseException] = []

    def _run(self, c: Any, name: str) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                batch = c.consume(50 if self.rate else 500, 0.1)
                n += 1
                for m in batch:
                    if m.error() is None:
                        with self.lock:
                            self.oracle.delivered_value(m.key(), m.value(), name, m.partition(), m.offset(),
                                                        f"{name}-{n}")
                if self.rate and batch:
                    time.sleep(len(batch) / self.rate)
        except BaseException as e:
            self.errors.append(e)

    def __enter__(self) -> "Readers":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def _oracle() -> OrderingOracle:
    """The oracle of this session's broker: the embedded broker's tail holes
    (acknowledged records a tail reader is handed offsets around) count
    apart from records lost; on Apache Kafka every one is lost."""
    return OrderingOracle(broker_tail_holes=on_embedded_broker())


def _ordered_readers(make_consumer: Callable[..., OrderedConsumer], topic: str, group: str, oracle: OrderingOracle,
                     lock: threading.Lock, members: int = 2, rate: float = 0.0) -> Readers:
    return Readers(lambda: make_consumer(group), topic, oracle, lock, members, rate)


def _caught_up(oracle: OrderingOracle, lock: threading.Lock, timeout: float = 60.0) -> str:
    """Wait until the group delivered every acknowledged record (a record of
    a partition an expansion made near the end reaches the group only at its
    next metadata refresh and rebalance: being idle for a while is not being
    done), or until ``timeout``; then what the oracle says of each record
    still missing ("" when none is), for the assertion that follows."""
    deadline = time.monotonic() + timeout
    while True:
        with lock:
            missing = sorted(oracle.missing())
            if not missing or time.monotonic() > deadline:
                return "".join(f"\n  {k!r} {p}:{q}: {oracle.explain(k, p, q)}" for k, p, q in missing[:10])
        time.sleep(0.2)


def _wait(what: str, cond: Callable[[], bool], timeout: float, scaler: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    last = [f"{d.kind}: {d.reason}" for d in scaler.decisions[-3:]] if scaler is not None else []
    raise AssertionError(f"timed out waiting for {what}; last decisions: {last}")


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "plain-consumers"])
def test_a_ramp_grows_shrinks_and_retires_in_order(
    admin: LayoutAdmin, ordered_config: Dict[str, Any], unique: Callable[[str], str],
    make_consumer: Callable[..., OrderedConsumer], make_producer: Callable[..., OrderedProducer],
    group_settings: Dict[str, Any], closing: Callable[[Any], Any], bootstrap: str, ordered: bool,
) -> None:
    """Keyed load from three producers ramps 30 -> 900 -> 30 records/s; the
    group processes at most 700 records/s, so it lags behind the burst. With
    OrderedConsumers the oracle sees no violation and nothing lost through a
    grow, a shrink and a retire; plain consumers in the same scenario
    deliver records of moved keys out of order (the oracle can fail)."""
    from confluent_kafka import Consumer

    topic, group = unique("as-ramp"), unique("g")
    admin.create_topic(topic, 2, physical_partitions=8)  # the embedded broker cannot add partitions: spares
    oracle, lock = _oracle(), threading.Lock()
    if ordered:
        readers = _ordered_readers(make_consumer, topic, group, oracle, lock, rate=350.0)
    else:
        plain = {"bootstrap.servers": bootstrap, **group_settings, "group.id": group, "auto.offset.reset": "earliest"}
        readers = Readers(lambda: closing(Consumer(plain)), topic, oracle, lock, rate=350.0)
    with readers, Load(make_producer, topic, oracle, lock) as load:
        load.rate = 30.0
        _wait("the group's first commit", lambda: any(
            o >= 0 for o in admin.committed(group, [(topic, 0), (topic, 1)]).values()), 30)
        scaler = Autoscaler({**ordered_config, **group_settings}, topic, _policy(group), interval=0.5, window=1.5)
        scaler.start()
        try:
            _wait("leadership", lambda: scaler.is_leader, 20)
            load.rate = 900.0
            _wait("a grow", lambda: any(d.kind == "grow" for d in scaler.decisions), 20, scaler)
            time.sleep(3)
            load.rate = 30.0
            if ordered:
                _wait("a shrink", lambda: any(d.kind == "shrink" for d in scaler.decisions), 30, scaler)
                _wait("a retire", lambda: any(d.kind == "retire" for d in scaler.decisions), 30, scaler)
            kinds = [d.kind for d in scaler.decisions]
            status = autoscaler_status(admin, topic)
        finally:
            scaler.close()
        load.stop.set()
        for t in load.threads:
            t.join(60)
        still = _caught_up(oracle, lock, 60.0 if ordered else 10.0)
    assert not load.errors and not readers.errors, (load.errors, readers.errors)
    rep = oracle.report()
    assert rep.acknowledged > 2000, rep
    grows = [d for d in scaler.decisions if d.kind == "grow"]
    assert grows[0].partitions == 2 and grows[0].partitions_to > 2
    if not ordered:
        assert len(rep.violations) > 0, rep
        return
    assert kinds.index("grow") < kinds.index("shrink") < kinds.index("retire")
    final = admin.layout(topic)
    assert final.partitions == 2 and not final.draining, final
    ops = [c.op for c in admin.history.changes(topic)]
    assert ops.count("expand") >= 1 and ops.count("shrink") >= 1 and ops.count("retire") >= 1, ops
    assert status is not None and status.autoscaler_id == scaler.autoscaler_id
    assert rep.violations == (), rep.violations[:3]
    assert rep.missing == 0, f"{rep}{still}"
    m = scaler.ordered_metrics()
    assert m.decisions["grow"] >= 1 and m.decisions["shrink"] >= 1 and m.decisions["retire"] >= 1
    assert m.leader is False and m.unit == "records"  # closed: no longer the leader


def test_growth_beyond_the_cluster_s_capacity_is_a_warning_and_a_hold(
    admin: LayoutAdmin, ordered_config: Dict[str, Any], unique: Callable[[str], str], embedded: bool,
    make_consumer: Callable[..., OrderedConsumer], make_producer: Callable[..., OrderedProducer],
    group_settings: Dict[str, Any], caplog: pytest.LogCaptureFixture,
) -> None:
    """The embedded broker cannot add partitions: a grow past the spares is
    refused by the plan; the autoscaler warns, grows into the spares it has
    and then holds, still running."""
    import logging

    if not embedded:
        pytest.skip("needs a broker without CreatePartitions (the embedded one)")
    topic, group = unique("as-cap"), unique("g")
    admin.create_topic(topic, 2, physical_partitions=4)
    oracle, lock = _oracle(), threading.Lock()
    with caplog.at_level(logging.WARNING, logger="kafka_ordered.autoscale"), \
            _ordered_readers(make_consumer, topic, group, oracle, lock, members=1), \
            Load(make_producer, topic, oracle, lock, producers=1) as load:
        load.rate = 30.0
        _wait("the group's first commit", lambda: any(
            o >= 0 for o in admin.committed(group, [(topic, 0), (topic, 1)]).values()), 30)
        with Autoscaler({**ordered_config, **group_settings}, topic, _policy(group), interval=0.5,
                        window=1.5) as scaler:
            scaler.start()
            load.rate = 900.0
            _wait("a grow into the spares", lambda: admin.layout(topic).partitions == 4, 30, scaler)
            _wait("a hold at capacity", lambda: "capacity for this topic (4)" in scaler.decisions[-1].reason, 20,
                  scaler)
            assert scaler._thread is not None and scaler._thread.is_alive()
            refused = [d for d in scaler.decisions if "the cluster cannot take it" in d.reason]
    assert refused and refused[0].kind == "hold" and refused[0].partitions_to == 2
    assert "CreatePartitions" in refused[0].reason
    assert any("cannot grow to 8 partitions, growth stops at 4" in r.getMessage() for r in caplog.records)
    assert admin.layout(topic).partitions == 4


# -- the command line: several processes, one acts; SIGKILL of the acting one; dry run


class CliScaler:
    """A ``kafka-ordered autoscale --json`` process; its lines are read in a thread."""

    def __init__(self, args: List[str]) -> None:
        import os
        import subprocess
        import sys

        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        self.proc = subprocess.Popen([sys.executable, "-m", "kafka_ordered.cli", "autoscale", *args, "--json"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: List[Dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        import json

        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    def events(self, event: str) -> List[Dict[str, Any]]:
        return [x for x in list(self.lines) if x["event"] == event]

    def applied(self) -> List[Dict[str, Any]]:
        return [x["decision"] for x in self.events("decision") if x["decision"]["kind"] != "hold"]

    @property
    def leader(self) -> bool:
        roles = [x["event"] for x in list(self.lines) if x["event"] in ("leader", "standby")]
        return bool(roles) and roles[-1] == "leader"

    def stop(self, sig: int) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(30)
        self.reader.join(10)
        return code


ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _cli_args(bootstrap: str, layout_topic: str, topic: str, group: str, group_settings: Dict[str, Any],
              *extra: str) -> List[str]:
    out = [topic, "--bootstrap-server", bootstrap, "--layout-topic", layout_topic, "--min", "2", "--max", "8",
           "--target-records-per-partition", "100", "--group", group, "--scale-up-after", "1",
           "--scale-down-after", "3", "--cooldown", "2", "--interval", "0.5", "--window", "1.5", *extra]
    for k, v in group_settings.items():
        out += ["-X", f"{k}={v}"]
    return out


def test_failover_after_sigkill_applies_no_change_twice(
    admin: LayoutAdmin, bootstrap: str, layout_topic: str, unique: Callable[[str], str],
    make_consumer: Callable[..., OrderedConsumer], make_producer: Callable[..., OrderedProducer],
    group_settings: Dict[str, Any],
) -> None:
    import signal

    topic, group = unique("as-failover"), unique("g")
    admin.create_topic(topic, 2, physical_partitions=8)
    oracle, lock = _oracle(), threading.Lock()
    scalers: List[CliScaler] = []
    try:
        with _ordered_readers(make_consumer, topic, group, oracle, lock), \
                Load(make_producer, topic, oracle, lock) as load:
            load.rate = 30.0
            _wait("the group's first commit", lambda: any(
                o >= 0 for o in admin.committed(group, [(topic, 0), (topic, 1)]).values()), 30)
            args = _cli_args(bootstrap, layout_topic, topic, group, group_settings, "--max-step", "2")
            scalers = [CliScaler(args), CliScaler(args)]
            _wait("one leader", lambda: sum(s.leader for s in scalers) == 1, 30)
            load.rate = 600.0  # 2 -> 4 -> 6 -> 8, two partitions at a time
            # The election's partition may still move when the second member's
            # join comes late (range assignor, eager rebalance): the one
            # killed is whichever leads once the first grow is applied.
            try:  # (a loaded 2-core CI machine once took more than 20 s)
                _wait("the first grow", lambda: any(s.leader for s in scalers)
                      and any(s.applied() for s in scalers), 40)
            except AssertionError as e:
                raise AssertionError(f"{e}; the scalers' last lines: {[s.lines[-5:] for s in scalers]}") from None
            first = next(s for s in scalers if s.leader)
            standby = next(s for s in scalers if s is not first)
            first.proc.kill()  # SIGKILL in the middle of the ramp
            killed_at = time.monotonic()
            first.proc.wait(10)
            _wait("the standby to take over", lambda: standby.leader, 20)
            took_over = time.monotonic() - killed_at
            _wait("the standby to grow", lambda: any(d["kind"] == "grow" for d in standby.applied()), 20)
            _wait("growth to the max", lambda: admin.layout(topic).partitions == 8, 20)
            assert standby.stop(signal.SIGTERM) == 0  # a clean exit
            assert standby.events("stopped")
            load.stop.set()
            for t in load.threads:
                t.join(60)
            still = _caught_up(oracle, lock)
    finally:
        for s in scalers:
            if s.proc.poll() is None:
                s.proc.kill()
    assert took_over < 3 * float(group_settings.get("session.timeout.ms", 45000)) / 1000 + 5, took_over
    changes = [c for c in admin.history.changes(topic) if c.op != "create"]
    assert [c.layout.epoch for c in changes] == list(range(2, 2 + len(changes)))  # one change per epoch
    applied = first.applied() + standby.applied()
    assert sorted(d["epoch"] + 1 for d in applied) == [c.layout.epoch for c in changes]  # none applied twice
    assert [c.layout.partitions for c in changes if c.op == "expand"] == [4, 6, 8]
    for line in first.lines + standby.lines:
        assert schema_doc.validate(line, SCHEMAS["autoscale"], DEFS) == [], line
    # describe shows the autoscaler that acted last and its last decision
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "kafka_ordered.cli", "describe", topic, "--bootstrap-server",
                           bootstrap, "--layout-topic", layout_topic, "--json"], capture_output=True, text=True,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert done.returncode == 0, done.stderr
    desc = json.loads(done.stdout)
    assert schema_doc.validate(desc, SCHEMAS["describe"], DEFS) == []
    assert desc["autoscaler"]["autoscaler_id"] == standby.events("started")[0]["autoscaler_id"]
    assert desc["autoscaler"]["decision"]["kind"] in ("grow", "hold")
    rep = oracle.report()
    assert rep.violations == () and rep.missing == 0, f"{rep}{still}"


def test_dry_run_decides_and_changes_nothing(
    admin: LayoutAdmin, bootstrap: str, layout_topic: str, unique: Callable[[str], str],
    make_consumer: Callable[..., OrderedConsumer], make_producer: Callable[..., OrderedProducer],
    group_settings: Dict[str, Any],
) -> None:
    import signal

    topic, group = unique("as-dry"), unique("g")
    epoch = admin.create_topic(topic, 2, physical_partitions=8).epoch
    oracle, lock = _oracle(), threading.Lock()
    with _ordered_readers(make_consumer, topic, group, oracle, lock, members=1), \
            Load(make_producer, topic, oracle, lock, producers=1) as load:
        load.rate = 30.0
        _wait("the group's first commit", lambda: any(
            o >= 0 for o in admin.committed(group, [(topic, 0), (topic, 1)]).values()), 30)
        s = CliScaler(_cli_args(bootstrap, layout_topic, topic, group, group_settings, "--dry-run"))
        try:
            load.rate = 600.0
            _wait("a grow decision", lambda: any(d["kind"] == "grow" for d in s.applied()), 20)
            assert s.stop(signal.SIGINT) == 0
        finally:
            if s.proc.poll() is None:
                s.proc.kill()
    assert all(x["dry_run"] and not x["leader"] for x in s.lines)
    for line in s.lines:
        assert schema_doc.validate(line, SCHEMAS["autoscale"], DEFS) == [], line
    assert [x["event"] for x in s.lines][0] == "started" and s.lines[-1]["event"] == "stopped"
    assert admin.layout(topic).epoch == epoch
    assert autoscaler_status(admin, topic) is None  # a dry run writes no status
