"""The layout log's leader killed in the middle of a write (issue 22, part 5):
a producer's registration and an admin's expand whose records reached a
follower but whose acknowledgement was lost with the leader, and followers
that must find the new leader. Nothing is lost and nothing that matters is
duplicated: a registration counts once, an epoch is claimed once, and the
ordering oracle sees every acknowledged record in order, and exactly once
unless the group took the member's partitions away (``on_lost``), when
Kafka's at-least-once delivers the records after its last commit again.

Apache Kafka only (``cluster_or_skip``): each test SIGKILLs the layout log's
leader and starts it again in ``finally``, waiting until every partition is
back in sync, so the session's cluster is healthy for the next test.

"Killed in the middle" is made exact, not left to timing: the record is handed
to the client while one follower is paused (SIGSTOP), so the leader, holding
out for that in-sync replica, cannot acknowledge it; once the other follower
has the record on disk, the leader is SIGKILLed and the paused follower
resumed. The follower that has the record is the first replica after the
leader in the assignment, the one KRaft elects: the record survives the
failover although its writer was never told so.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from confluent_kafka.admin import AdminClient

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer
from kafka_ordered.errors import KafkaOrderedError, RegistrationError
from kafka_ordered.layout_log import LayoutLog
from kafka_ordered.testing import KafkaCluster, OrderingOracle, encode_value

# The producer, the consumer and the admin each get their own layout-log
# follower and writer, as separate processes would: clients of one process
# whose connection settings are equal share them (kafka_ordered._log), so each
# role sets a harmless connection setting of its own.
PRODUCER_CONN = {"reconnect.backoff.max.ms": 1001}
CONSUMER_CONN = {"reconnect.backoff.max.ms": 1002}
ADMIN_CONN = {"reconnect.backoff.max.ms": 1003}
#: Longer than the leader failover (the broker session timeout, 9 s), so that
#: the group keeps its member (no rebalance, hence no replays) while the
#: coordinator moves.
CONSUMER_GROUP = {"session.timeout.ms": 45000, "heartbeat.interval.ms": 3000,
                  "partition.assignment.strategy": "cooperative-sticky"}
KEYS = 40


def _wait(what: str, cond: Callable[[], bool], timeout: float, interval: float = 0.05,
          state: Optional[Callable[[], str]] = None) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}"
                                 + (f"; {state()}" if state is not None else ""))
        time.sleep(interval)


def _following(producer: OrderedProducer, consumer: OrderedConsumer, topic: str, epoch: int) -> bool:
    """Whether the producer sends under ``epoch`` and the consumer's view has it."""
    cur = consumer.history.current(topic)
    return producer.ordered_metrics().layout_epochs.get(topic) == epoch and cur is not None and cur.epoch == epoch


def _views(producer: OrderedProducer, consumer: OrderedConsumer, topic: str, load: "Load") -> Callable[[], str]:
    def describe() -> str:
        pm = producer.ordered_metrics()
        pv, cv = producer.history.current(topic), consumer.history.current(topic)
        return (f"producer sends under {pm.layout_epochs}, its view is at epoch {pv.epoch if pv else None} "
                f"({pm.layout_view}), {pm.records_buffered} buffered, last registration errors "
                f"{[str(e) for e in load.registration_errors[-2:]]}; the consumer's view is at epoch "
                f"{cv.epoch if cv else None} ({consumer.ordered_metrics().layout_view})")
    return describe


def _log_replicas(bootstrap: str, layout_topic: str, in_sync: bool = False) -> Tuple[int, List[int]]:
    """(leader, replicas in assignment order) of the layout log's partition,
    by broker id, once Metadata names a live leader (with ``in_sync``: and
    every replica in sync)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found: Dict[str, Any] = {}

    def known() -> bool:
        try:
            p = admin.list_topics(layout_topic, timeout=5).topics[layout_topic].partitions[0]
        except Exception:
            return False
        found["p"] = p
        return p.leader >= 0 and (not in_sync or set(p.isrs) == set(p.replicas))

    _wait(f"a leader of {layout_topic}" + (" with every replica in sync" if in_sync else ""), known, 60, 0.2,
          lambda: f"last metadata: {found.get('p')}")
    return found["p"].leader, list(found["p"].replicas)


def _node(cluster: KafkaCluster, broker_id: int) -> int:
    return next(i for i in range(cluster.nodes) if cluster.node_id(i) == broker_id)


def _segment_bytes(cluster: KafkaCluster, i: int, layout_topic: str) -> int:
    """Bytes of the layout log's segments on node ``i``'s disk."""
    d = Path(cluster._node(i).dir) / "data" / f"{layout_topic}-0"
    return sum(f.stat().st_size for f in d.glob("*.log")) if d.is_dir() else 0


class KillInFlight:
    """Wraps a :class:`LayoutLog` writer: the first record it appends to the
    layout log for which ``match(value)`` holds is written while the leader
    cannot acknowledge it, reaches the follower KRaft will elect, and then the
    leader is SIGKILLed (see the module docstring). ``victim`` is the killed
    node's index, ``None`` until then."""

    def __init__(self, cluster: KafkaCluster, writer: LayoutLog, layout_topic: str,
                 match: Callable[[Dict[str, Any]], bool]) -> None:
        self.cluster, self.layout_topic, self.match = cluster, layout_topic, match
        self.victim: Optional[int] = None
        self.fired = threading.Event()
        #: The setup missed: the leader acknowledged the record before it was killed.
        self.acked_before_kill = False
        self.errors: List[BaseException] = []
        get = writer._get_producer
        killer = self

        class Proxy:
            def __init__(self, inner: Any) -> None:
                self._inner = inner

            def __getattr__(self, name: str) -> Any:
                return getattr(self._inner, name)

            def produce(self, topic: str, *args: Any, **kwargs: Any) -> None:
                value = kwargs.get("value")
                if killer.victim is None and topic == killer.layout_topic and value and killer.match(json.loads(value)):
                    told = kwargs.get("on_delivery")

                    def delivered(err: Any, msg: Any) -> None:
                        if err is None and not killer.fired.is_set():
                            killer.acked_before_kill = True
                        if told is not None:
                            told(err, msg)

                    killer._kill_around(lambda: self._inner.produce(topic, *args, **{**kwargs,
                                                                                    "on_delivery": delivered}),
                                        self._inner.poll)
                else:
                    self._inner.produce(topic, *args, **kwargs)

        writer._get_producer = lambda: Proxy(get())  # type: ignore[method-assign]

    def _kill_around(self, produce: Callable[[], None], serve: Callable[[float], Any]) -> None:
        """``produce()`` the record, kill its leader once the keeper has it;
        ``serve(0)`` (the writer's ``poll``) tells whether it was
        acknowledged before (the setup missed: a test error, not a finding)."""
        cluster = self.cluster
        # Every replica in sync first: with the paused follower out of the ISR
        # the leader would acknowledge the record before it is killed.
        leader, replicas = _log_replicas(cluster.bootstrap_servers, self.layout_topic, in_sync=True)
        after = [b for b in replicas if b != leader]
        keeper, paused = _node(cluster, after[0]), _node(cluster, after[1])
        self.victim = _node(cluster, leader)
        before = _segment_bytes(cluster, keeper, self.layout_topic)
        cluster.pause(paused)
        try:
            produce()
            _wait("the record on the follower's disk",
                  lambda: _segment_bytes(cluster, keeper, self.layout_topic) > before, 15, 0.01)
            serve(0)
            cluster.kill(self.victim)
            assert not self.acked_before_kill, (
                f"the setup missed: broker {leader} (leader of {replicas} by the last Metadata) acknowledged the "
                "record before it was killed")
        except BaseException as e:
            self.errors.append(e)
            raise
        finally:
            cluster.resume(paused)
            self.fired.set()


def _is_registration(topic: str, producer_id: str, epoch: int) -> Callable[[Dict[str, Any]], bool]:
    return lambda r: (r.get("type") == "registration" and r.get("topic") == topic
                      and r.get("producer") == producer_id and r.get("epoch") == epoch)


def _is_expand(topic: str) -> Callable[[Dict[str, Any]], bool]:
    return lambda r: r.get("type") == "layout" and r.get("op") == "expand" and r["layout"]["topic"] == topic


class Load:
    """One OrderedProducer writing per-key sequence numbers in a thread,
    about ``rate`` records/s; acknowledgements go to the oracle. A
    :class:`RegistrationError` (a switch whose append failed: its records stay
    buffered) is counted and the load goes on, as an application would."""

    def __init__(self, producer: OrderedProducer, topic: str, name: str, oracle: OrderingOracle,
                 lock: threading.Lock, rate: float = 200.0) -> None:
        self.producer, self.topic, self.name, self.oracle, self.lock = producer, topic, name, oracle, lock
        self.rate = rate
        self.stop = threading.Event()
        self.acked = 0
        self.registration_errors: List[RegistrationError] = []
        self.errors: List[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _acked(self, err: Any, msg: Any) -> None:
        if err is None:
            with self.lock:
                self.oracle.acknowledged_value(msg.key(), msg.value(), msg.partition(), msg.offset(),
                                               time.monotonic_ns())
                self.acked += 1
        else:
            self.errors.append(KafkaOrderedError(f"record not delivered: {err}"))

    def _run(self) -> None:
        seq = 0
        try:
            while not self.stop.is_set():
                key = f"key-{seq % KEYS}".encode()
                try:
                    self.producer.produce(self.topic, encode_value(self.name, seq), key, on_delivery=self._acked)
                except RegistrationError as e:
                    self.registration_errors.append(e)  # the record stays buffered
                seq += 1
                self.producer.poll(0)
                time.sleep(1.0 / self.rate)
        except BaseException as e:
            self.errors.append(e)

    def __enter__(self) -> "Load":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(60)

    def finish(self, timeout: float = 60.0) -> None:
        """Stop sending and deliver everything sent (flush also completes a
        switch still pending)."""
        self.stop.set()
        self.thread.join(timeout)
        deadline = time.monotonic() + timeout
        while True:
            try:
                left = self.producer.flush(max(0.1, deadline - time.monotonic()))
            except RegistrationError as e:
                self.registration_errors.append(e)
                left = -1
            if left == 0:
                return
            assert time.monotonic() < deadline, f"{self.name}: {left} record(s) undelivered after {timeout} s"


class Reader:
    """One OrderedConsumer of a group, delivering into the oracle from a thread."""

    def __init__(self, consumer: OrderedConsumer, topic: str, oracle: OrderingOracle, lock: threading.Lock) -> None:
        self.consumer, self.oracle, self.lock = consumer, oracle, lock
        #: Partitions the group took from the member (librdkafka's on_lost).
        self.lost: List[List[Any]] = []
        consumer.subscribe([topic], on_lost=lambda _, parts: self.lost.append(list(parts)))
        self.stop = threading.Event()
        self.errors: List[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                n += 1
                for m in self.consumer.consume(500, 0.1):
                    if m.error() is None:
                        with self.lock:
                            self.oracle.delivered_value(m.key(), m.value(), "c", m.partition(), m.offset(), f"b{n}")
        except BaseException as e:
            self.errors.append(e)

    def __enter__(self) -> "Reader":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(30)

    def drain(self, oracle: OrderingOracle, timeout: float = 45.0) -> None:
        """Wait until every acknowledged record was delivered."""
        def done() -> bool:
            with self.lock:
                return not oracle.missing()
        try:
            _wait("every acknowledged record to be delivered", done, timeout, 0.2)
        finally:
            with self.lock:
                missing = len(oracle.missing())
            assert not self.errors, self.errors[:1]
            assert missing == 0, f"{missing} acknowledged record(s) never delivered: {oracle.report()}"


def _delivered_once(rep: Any, reader: Reader) -> None:
    """Every acknowledged record delivered, in order, and none twice unless
    the group took the member's partitions away (``on_lost``: a rebalance in
    flight when its coordinator died): the records after its last commit
    are then delivered again, as Kafka's at-least-once allows."""
    assert rep.violations == () and rep.missing == 0, rep
    assert rep.duplicates == 0 or reader.lost, rep
    assert rep.acknowledged >= 400 and rep.unexpected == 0, rep


def _restart(cluster: KafkaCluster, victim: Optional[int]) -> None:
    if victim is not None:
        cluster.start_node(victim)
    cluster.wait_healthy()


def test_a_registration_whose_leader_dies_before_acknowledging_counts_once(
        cluster_or_skip: KafkaCluster, admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer],
        make_consumer: Callable[..., OrderedConsumer], topic: str, layout_topic: str, bootstrap: str,
        unique: Callable[[str], str]) -> None:
    """A producer's registration for the new layout reaches a follower, then
    the layout log's leader is SIGKILLed before acknowledging it. The
    producer's append times out (``ordered.metadata.timeout.ms`` below the
    failover time), the switch is retried by its next send and lands on the
    new leader (or the writer's own retry does, when the failover is quicker):
    the log then holds the registration twice. It counts once
    (one registration of that epoch, one gate per target partition), the
    producer switches, and the group gets every acknowledged record exactly
    once and in order."""
    cluster = cluster_or_skip
    admin.create_topic(topic, 2)
    oracle, lock = OrderingOracle(), threading.Lock()
    producer = make_producer(**{"ordered.producer.id": "reg-p", "ordered.metadata.timeout.ms": 4000,
                                **PRODUCER_CONN})
    consumer = make_consumer(unique("g"), **CONSUMER_CONN, **CONSUMER_GROUP)
    killer: Optional[KillInFlight] = None
    try:
        with Reader(consumer, topic, oracle, lock) as reader, Load(producer, topic, "reg-p", oracle, lock) as load:
            _wait("records acknowledged before the expansion", lambda: load.acked >= 200, 30)
            assert producer._shared is not None
            killer = KillInFlight(cluster, producer._shared.writer, layout_topic,
                                  _is_registration(topic, "reg-p", 2))
            admin.expand(topic, 4)
            _wait("the registration to meet the kill", killer.fired.is_set, 30)
            assert not killer.errors, killer.errors
            _wait("the producer to switch to epoch 2",
                  lambda: producer.ordered_metrics().layout_epochs.get(topic) == 2, 45, 0.1)
            switched = load.acked
            _wait("records acknowledged after the switch", lambda: load.acked >= switched + 200, 30)
            load.finish()
            assert not load.errors, load.errors[:1]
            reader.drain(oracle)
    finally:
        _restart(cluster, killer.victim if killer is not None else None)
    # The first attempt's record is in the log, and so is its retry (the producer's next switch after the
    # append timed out, or, when a new leader was elected within the timeout, the writer's own retry).
    raw = _raw_registrations(bootstrap, layout_topic, topic, "reg-p", 2)
    assert len(raw) >= 2, (f"expected the registration in the log more than once (first attempt + retry): {raw}; "
                           f"{len(load.registration_errors)} failed switch(es)")
    history = admin.sync()
    regs = [r for r in history.registrations(topic) if r.producer_id == "reg-p" and r.epoch == 2]
    assert len(regs) == 1, f"the registration counts {len(regs)} times: {regs}"
    desc = admin.describe(topic)
    gates = [(g.partition, g.producer_id, g.epoch) for r in desc.registrations for g in r.gates]
    assert sorted(gates) == sorted(set(gates)), f"a gate counts twice: {gates}"
    assert {p for p, _, e in gates if e == 2} == {2, 3}
    assert desc.layout.epoch == 2 and desc.physical_partitions == 4
    _delivered_once(oracle.report(), reader)


def _raw_registrations(bootstrap: str, layout_topic: str, topic: str, producer_id: str,
                       epoch: int) -> List[int]:
    """Offsets of the layout-log records registering ``producer_id`` for
    ``topic`` epoch ``epoch``, read raw from the log."""
    from .support import read_all
    records = read_all(bootstrap, layout_topic, 1, timeout=30)[0]
    match = _is_registration(topic, producer_id, epoch)
    return [m.offset() for m in records if m.value() and match(json.loads(m.value()))]


def _raw_changes(bootstrap: str, layout_topic: str, topic: str) -> List[Tuple[int, int]]:
    """(offset, epoch) of every layout record of ``topic``, read raw from the log."""
    from .support import read_all
    records = read_all(bootstrap, layout_topic, 1, timeout=30)[0]
    out = []
    for m in records:
        r = json.loads(m.value()) if m.value() else {}
        if r.get("type") == "layout" and r["layout"]["topic"] == topic:
            out.append((m.offset(), r["layout"]["epoch"]))
    return out


def test_an_expand_retried_after_its_acknowledgement_was_lost_applies_once(
        cluster_or_skip: KafkaCluster, admin: LayoutAdmin, ordered_config: Dict[str, Any],
        make_producer: Callable[..., OrderedProducer], make_consumer: Callable[..., OrderedConsumer],
        closing: Callable[[Any], Any], topic: str, layout_topic: str, bootstrap: str,
        unique: Callable[[str], str]) -> None:
    """An admin's expand record reaches a follower, then the layout log's
    leader is SIGKILLed before acknowledging it: the expand fails on a timeout
    although the new leader holds its record. The operator retries the same
    call (``expected_epoch`` of the layout it was decided on) once the node is
    back: it succeeds without a second layout change, the epoch went up
    exactly once, the topic has exactly the planned partitions, and producers
    and consumers carry on in order through the change."""
    cluster = cluster_or_skip
    admin.create_topic(topic, 2)
    oracle, lock = OrderingOracle(), threading.Lock()
    producer = make_producer(**{"ordered.producer.id": "exp-p", **PRODUCER_CONN})
    consumer = make_consumer(unique("g"), **CONSUMER_CONN, **CONSUMER_GROUP)
    # The operator's admin; its timeout (4 s) is shorter than the failover, so its append times out.
    op: LayoutAdmin = closing(LayoutAdmin({**ordered_config, **ADMIN_CONN, "ordered.metadata.timeout.ms": 4000}))
    killer = KillInFlight(cluster, op._shared.writer, layout_topic, _is_expand(topic))
    try:
        with Reader(consumer, topic, oracle, lock) as reader, Load(producer, topic, "exp-p", oracle, lock) as load:
            _wait("records acknowledged before the expansion", lambda: load.acked >= 200, 30)
            with pytest.raises(KafkaOrderedError) as failed:
                op.expand(topic, 4, expected_epoch=1)
            assert killer.victim is not None and not killer.errors, killer.errors
            cluster.start_node(killer.victim)
            cluster.wait_healthy()
            retried = op.expand(topic, 4, expected_epoch=1)  # the operator retries the same expand
            assert (retried.epoch, retried.partitions, retried.physical_partitions) == (2, 4, 4), retried
            _wait("the producer and the consumer to follow epoch 2", lambda: _following(producer, consumer, topic, 2),
                  30, 0.1, _views(producer, consumer, topic, load))
            switched = load.acked
            _wait("records acknowledged after the switch", lambda: load.acked >= switched + 200, 30)
            load.finish()
            assert not load.errors, load.errors[:1]
            reader.drain(oracle)
    finally:
        _restart(cluster, killer.victim)
    assert "layout log" in str(failed.value), failed.value
    # One layout record per epoch in the log, and one change per epoch in the history.
    raw = _raw_changes(bootstrap, layout_topic, topic)
    assert [e for _, e in raw] == [1, 2], f"layout records of {topic} (offset, epoch): {raw}"
    changes = admin.sync().changes(topic)
    assert [(c.layout.epoch, c.layout.partitions, c.op) for c in changes] == [(1, 2, "create"), (2, 4, "expand")]
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic]
    assert len(md.partitions) == 4
    assert admin.describe(topic).physical_partitions == 4
    _delivered_once(oracle.report(), reader)


def test_followers_find_the_new_leader_and_learn_an_expand_made_meanwhile(
        cluster_or_skip: KafkaCluster, admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer],
        make_consumer: Callable[..., OrderedConsumer], topic: str, layout_topic: str, bootstrap: str,
        unique: Callable[[str], str]) -> None:
    """With the layout log's leader SIGKILLed, KRaft elects another replica
    (replication factor 3, ``min.insync.replicas`` 2); an expand made then is
    written there. The producer's and the consumer's followers, whose long
    poll was on the dead leader, find the new one and learn the new epoch
    within 30 s; the producer registers for it, and the group gets every
    acknowledged record exactly once and in order."""
    cluster = cluster_or_skip
    # Spare partitions: with a node down, new partitions cannot get their 3 replicas.
    admin.create_topic(topic, 2, physical_partitions=4)
    oracle, lock = OrderingOracle(), threading.Lock()
    producer = make_producer(**{"ordered.producer.id": "fol-p", **PRODUCER_CONN})
    consumer = make_consumer(unique("g"), **CONSUMER_CONN, **CONSUMER_GROUP)
    victim: Optional[int] = None
    try:
        with Reader(consumer, topic, oracle, lock) as reader, Load(producer, topic, "fol-p", oracle, lock) as load:
            _wait("records acknowledged before the kill", lambda: load.acked >= 200, 30)
            leader, _ = _log_replicas(bootstrap, layout_topic)
            victim = _node(cluster, leader)
            cluster.kill(victim)
            _wait("a new leader of the layout log",
                  lambda: _log_replicas(bootstrap, layout_topic)[0] != leader, 30, 0.2)
            assert admin.expand(topic, 4).epoch == 2
            _wait("the producer and the consumer to follow epoch 2", lambda: _following(producer, consumer, topic, 2),
                  30, 0.1, _views(producer, consumer, topic, load))
            switched = load.acked
            _wait("records acknowledged after the switch", lambda: load.acked >= switched + 200, 30)
            load.finish()
            assert not load.errors, load.errors[:1]
            reader.drain(oracle)
    finally:
        _restart(cluster, victim)
    regs = [r for r in admin.sync().registrations(topic) if r.producer_id == "fol-p"]
    assert [r.epoch for r in regs] == [1, 2], regs
    _delivered_once(oracle.report(), reader)
