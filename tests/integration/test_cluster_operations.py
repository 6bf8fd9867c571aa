"""Cluster operations on several brokers (issue 22, part 4), on Apache Kafka
clusters with racks: KIP-36's worked examples reproduced on the brokers'
metadata, degraded creation then heal, and preferred-leader election with an
offline preferred replica. Apache Kafka only (``KAFKA_ORDERED_BROKER=kafka``);
each rack-aware case starts its own cluster (6 nodes in 3 racks: ~20 s, and
3 nodes in 2 uneven racks)."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any, Dict, Iterator, List

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_ordered import LayoutAdmin
from kafka_ordered.admin import _cluster
from kafka_ordered.cli._render import description_text
from kafka_ordered.errors import PlacementError
from kafka_ordered.testing import KafkaCluster

from ..conftest import broker_kind
from .support import one_split

pytestmark = pytest.mark.skipif(broker_kind() != "kafka", reason="needs Apache Kafka clusters "
                                "(KAFKA_ORDERED_BROKER=kafka); the embedded broker has one node and no racks")

# KIP-36: broker -> rack, and the assignment of 12 partitions with replication
# factor 3 (rack-alternated list 0, 3, 1, 5, 4, 2; shifted followers from
# partition 6 on). Broker b of the KIP is node b here (broker id b + 1).
KIP36_RACKS = ["rack1", "rack3", "rack3", "rack2", "rack2", "rack1"]
KIP36_TABLE = {
    0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3],
    6: [0, 4, 2], 7: [3, 2, 0], 8: [1, 0, 3], 9: [5, 3, 1], 10: [4, 1, 5], 11: [2, 5, 4],
}
UNEVEN_RACKS = ["rack1", "rack2", "rack2"]


def _ids(replicas: List[int]) -> List[int]:
    return [b + 1 for b in replicas]


def _managed_from(cluster: KafkaCluster, topic: str, assignment: Dict[int, List[int]]) -> LayoutAdmin:
    """A topic created with ``assignment`` (KIP broker numbers), then adopted."""
    plain = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    _cluster.create_topic(plain, topic, {p: _ids(r) for p, r in assignment.items()})
    admin = LayoutAdmin({"bootstrap.servers": cluster.bootstrap_servers, "ordered.layout.topic": f"_ko-{topic}"})
    admin.adopt(topic, hash="murmur2")
    return admin


@pytest.fixture(scope="module")
def kip36_cluster() -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=6, racks=KIP36_RACKS, heap_mb=512) as cluster:
        yield cluster


def test_kip36_rack_aware_expansion_continues_the_worked_example_on_the_brokers(kip36_cluster: KafkaCluster) -> None:
    """Partitions 0-5 as in the KIP's table; expand(t, 12) places 6-11 with
    the shifted followers of the KIP's second round, and the brokers'
    metadata shows exactly that."""
    admin = _managed_from(kip36_cluster, "kip36", {p: KIP36_TABLE[p] for p in range(6)})
    with admin:
        plan = admin.plan("kip36", 12)
        assert plan.placement is not None and plan.placement.rack_aware
        res = admin.expand_with_report("kip36", 12)
        assert res.layout.physical_partitions == 12
        conf = {"bootstrap.servers": kip36_cluster.bootstrap_servers}
        _wait(lambda: len(_cluster.topic_assignment(conf, "kip36")) == 12, 30, "the new partitions never showed")
        got = _cluster.topic_assignment(conf, "kip36")
    assert {p: got[p] for p in range(6, 12)} == {p: _ids(KIP36_TABLE[p]) for p in range(6, 12)}
    racks = {kip36_cluster.node_id(i): KIP36_RACKS[i] for i in range(6)}
    assert all(len({racks[b] for b in got[p]}) == 3 for p in got)  # every partition in all three racks


def test_kip36_uneven_racks_example_on_the_brokers() -> None:
    """Brokers 0 (rack1), 1 and 2 (rack2), replication factor 2: partition 0
    is (0, 1); expansion places 1 -> (1, 0) and 2 -> (2, 0), skipping the
    broker whose rack is taken."""
    with KafkaCluster(nodes=3, racks=UNEVEN_RACKS) as cluster:
        admin = _managed_from(cluster, "uneven", {0: [0, 1]})
        conf = {"bootstrap.servers": cluster.bootstrap_servers}
        with admin:
            admin.expand("uneven", 3)
            # Each broker learns the new partitions on its own: ask until the answer has them.
            _wait(lambda: len(_cluster.topic_assignment(conf, "uneven")) == 3, 30, "the new partitions never showed")
            got = _cluster.topic_assignment(conf, "uneven")
    assert got == {0: _ids([0, 1]), 1: _ids([1, 0]), 2: _ids([2, 0])}


def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def _stop_last(cluster: KafkaCluster, client_config: Dict[str, Any]) -> tuple:
    """Stop the last node and wait until Metadata no longer lists it;
    returns (index, broker id)."""
    away = cluster.nodes - 1
    away_id = cluster.node_id(away)
    cluster.stop(away)
    _wait(lambda: away_id not in AdminClient(client_config).list_topics(timeout=10).brokers, 60,
          "the stopped broker stayed in the metadata")
    _wait(lambda: _cluster_answers(client_config), 60, "the cluster did not answer DescribeCluster")
    return away, away_id


def _cluster_answers(client_config: Dict[str, Any]) -> bool:
    """Whether DescribeCluster answers (it waits for a controller, which a
    stopped node may have been)."""
    try:
        _cluster.read_cluster(client_config)
        return True
    except Exception:
        return False


def test_degraded_creation_then_heal_when_the_broker_returns(
        cluster_or_skip: KafkaCluster, admin: LayoutAdmin, topic: str, client_config: Dict[str, Any]) -> None:
    cluster = cluster_or_skip
    away, away_id = _stop_last(cluster, client_config)
    try:
        # Replication factor 3 on 2 live brokers: refused unless degraded creation is allowed ...
        with pytest.raises(PlacementError, match="min_required_replication_factor"):
            admin.create_topic(topic, 2, replication_factor=3)
        # ... and then it needs as many live brokers as min.insync.replicas (2) asks.
        lay = admin.create_topic(topic, 2, replication_factor=3, min_required_replication_factor=2)
        assert lay.physical_partitions == 2
        placed = admin.last_placement
        assert placed is not None and dict(placed.missing) == {0: 1, 1: 1}
        got = _cluster.topic_assignment(client_config, topic)
        assert all(len(r) == 2 and away_id not in r for r in got.values())
        desc = admin.describe(topic)
        assert desc.replication_factor == 3 and desc.degraded == {0, 1}
        assert [(r.partition, r.replicas, r.missing) for r in desc.replication] == [
            (p, tuple(got[p]), 1) for p in (0, 1)]
        assert "DEGRADED on 2 of 2 partitions" in description_text(desc.to_dict(), None)
    finally:
        cluster.start_node(away)
    res = admin.heal(topic, elect_leaders=True)
    cluster.wait_healthy()
    assert res.ok and sorted(res.reassignments) == [0, 1]
    assert dict(res.in_sync) == {0: True, 1: True}
    got = _cluster.topic_assignment(client_config, topic)
    assert all(len(r) == 3 and away_id in r for r in got.values())
    assert dict(admin.plan_heal(topic).target) == {}
    desc = admin.describe(topic)
    assert desc.degraded == frozenset() and all(r.missing == 0 and len(r.isr) == 3 for r in desc.replication)
    assert "every replica in sync" in description_text(desc.to_dict(), None)


def test_degraded_creation_is_refused_when_min_isr_cannot_be_met(
        cluster_or_skip: KafkaCluster, admin: LayoutAdmin, topic: str, client_config: Dict[str, Any]) -> None:
    """With one of three brokers down, a creation that requires three live
    replicas is refused before anything is created. (Two brokers down cannot
    be tried here: every node is a KRaft voter, and one of three has no
    quorum.)"""
    cluster = cluster_or_skip
    away, away_id = _stop_last(cluster, client_config)
    try:
        with pytest.raises(PlacementError) as e:
            admin.create_topic(topic, 2, replication_factor=3, min_required_replication_factor=3)
        assert "live" in str(e.value), str(e.value)
        assert topic not in AdminClient(client_config).list_topics(timeout=10).topics
        assert admin.history.current(topic) is None  # nothing in the layout log either
    finally:
        cluster.start_node(away)
        cluster.wait_healthy()


def test_elect_leaders_reports_an_offline_preferred_replica_per_partition(
        cluster_or_skip: KafkaCluster, admin: LayoutAdmin, topic: str, client_config: Dict[str, Any]) -> None:
    cluster = cluster_or_skip
    admin.create_topic(topic, 3)
    got = _cluster.topic_assignment(client_config, topic)
    victim_id = got[0][0]
    victim = next(i for i in range(cluster.nodes) if cluster.node_id(i) == victim_id)
    cluster.stop(victim)
    try:
        _wait(lambda: AdminClient(client_config).list_topics(topic, timeout=10).topics[topic].partitions[0].leader
              != victim_id, 60, "leadership did not move off the stopped broker")
        results = admin.elect_leaders(topic)
    finally:
        cluster.start_node(victim)
        cluster.wait_healthy()
    offline = [p for p, reps in got.items() if reps[0] == victim_id]
    assert offline and all(not results[p].ok and results[p].status == "failed" for p in offline)
    assert all(results[p].ok for p in got if p not in offline)
    # Back: the election goes through and the brokers' metadata shows the preferred leaders.
    _wait(lambda: all(r.ok for r in admin.elect_leaders(topic).values()), 60, "election kept failing")
    md = AdminClient(client_config).list_topics(topic, timeout=10).topics[topic]
    assert {p: md.partitions[p].leader for p in got} == {p: reps[0] for p, reps in got.items()}


#: Reads a group's commits through LayoutAdmin.committed in a loop (as the
#: autoscaler does every tick) for argv[5] seconds; prints how many reads
#: succeeded, how many failed, and how long ago the last one succeeded.
_COMMITTED_LOOP = """
import sys, time
from kafka_ordered import LayoutAdmin
bootstrap, layout_topic, group, topic, secs = sys.argv[1:6]
reads = failures = 0
last = time.monotonic()
end = last + float(secs)
with LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}) as admin:
    while time.monotonic() < end:
        try:
            assert admin.committed(group, [(topic, p) for p in range(4)]) == {(topic, p): 5 for p in range(4)}
            reads += 1
            last = time.monotonic()
        except AssertionError:
            raise
        except Exception:
            failures += 1
        time.sleep(0.005)
print(reads, failures, round(time.monotonic() - last, 3), flush=True)
"""


def test_reading_a_groups_commits_survives_its_coordinator_broker_dying(
        cluster_or_skip: KafkaCluster, admin: LayoutAdmin, unique: Any, client_config: Dict[str, Any],
        layout_topic: str) -> None:
    """``LayoutAdmin.committed`` (the autoscaler's reading of lag, ``describe``
    with a group) while the group coordinator's broker is SIGKILLed and
    started again: reads fail while it is away, then go on. Through
    librdkafka's admin ListConsumerGroupOffsets the process crashed (SIGABRT
    on ``eonce->refcnt > 0``, or SIGSEGV on a NOT_COORDINATOR answer:
    librdkafka issue 5040) in about half of such kills."""
    cluster = cluster_or_skip
    topic, group = unique("t"), unique("g")
    admin.create_topic(topic, 4)
    committer = Consumer({**client_config, "group.id": group})
    try:
        _wait(lambda: _commits(committer, topic), 60, "the group's commits were refused")
    finally:
        committer.close()
    victim = _coordinator_node(cluster, client_config, group)
    reader = subprocess.Popen([sys.executable, "-c", _COMMITTED_LOOP, client_config["bootstrap.servers"],
                               layout_topic, group, topic, "24"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(4)
        cluster.kill(victim)
        time.sleep(6)
    finally:
        cluster.start_node(victim)
        out, err = reader.communicate(timeout=120)
        cluster.wait_healthy()
    tail = [line for line in err.splitlines() if not line.startswith("%")][-5:]
    assert reader.returncode == 0, f"the reading process died ({reader.returncode}): {tail}"
    reads, _failures, since_last = out.split()
    assert int(reads) > 0 and float(since_last) < 3.0, out  # reads went on once the broker was back


#: One ordered consumer (argv[1]: confluent, kafka-python or aiokafka) of
#: partition 1 of a split topic, whose gate waits on partition 0, which no
#: member commits: the gate's read of the group's commit of partition 0 is due
#: every 10 ms. Prints "polling" once assigned, polls for argv[7] seconds from
#: then on, and prints the polls, the partitions still held at a gate, and
#: whether every offset of partition 1 it was given lies before the gate.
_HELD_LOOP = """
import asyncio, sys, time
client, bootstrap, layout_topic, topic, group, start, secs = sys.argv[1:8]
opts = {"ordered.layout.topic": layout_topic, "ordered.commit.interval.ms": 20}
polls, got = 0, []


def polling():
    print("polling", flush=True)
    return time.monotonic() + float(secs)


if client == "confluent":
    from confluent_kafka import TopicPartition
    from kafka_ordered import OrderedConsumer
    c = OrderedConsumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         **opts})
    c.assign([TopicPartition(topic, 1)])
    end = polling()
    while time.monotonic() < end:
        got += [m.offset() for m in c.consume(100, 0.05) if m.error() is None and m.partition() == 1]
        polls += 1
    held = [g.partition for g in c.gate_status()]
    c.close()
elif client == "kafka-python":
    from kafka import TopicPartition
    from kafka_ordered.kafka_python import OrderedKafkaConsumer
    c = OrderedKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             fetch_max_wait_ms=50, **opts)
    c.assign([TopicPartition(topic, 1)])
    end = polling()
    while time.monotonic() < end:
        got += [r.offset for tp, rs in c.poll(timeout_ms=50).items() if tp.partition == 1 for r in rs]
        polls += 1
    held = [g.partition for g in c.gate_status()]
    c.close(autocommit=False)
else:
    from aiokafka.structs import TopicPartition
    from kafka_ordered.aiokafka import OrderedAIOKafkaConsumer

    async def run():
        global polls, held
        c = OrderedAIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                    fetch_max_wait_ms=50, **opts)
        await c.start()
        try:
            c.assign([TopicPartition(topic, 1)])
            end = polling()
            while time.monotonic() < end:
                rs = await c.getmany(timeout_ms=50)
                got.extend(r.offset for tp, recs in rs.items() if tp.partition == 1 for r in recs)
                polls += 1
            held = [g.partition for g in c.gate_status()]
        finally:
            await c.stop()

    asyncio.run(run())
print(polls, ",".join(map(str, held)), int(all(o < int(start) for o in got)), flush=True)
"""


def test_gates_reading_a_groups_commits_survive_its_coordinator_broker_dying(
        cluster_or_skip: KafkaCluster, admin: LayoutAdmin, unique: Any, client_config: Dict[str, Any],
        layout_topic: str, make_producer: Any) -> None:
    """A member whose gate waits on a partition no member of its group
    commits reads the group's commit of it again and again, in the
    background of its polls, on each of the three clients, while the group
    coordinator's broker is SIGKILLed and started again: the process lives
    on, polls go on, the gate stays closed and nothing behind it is given.
    Read through librdkafka's admin ListConsumerGroupOffsets, the consumer
    process crashed (SIGABRT on ``eonce->refcnt > 0``: librdkafka issue
    5040) in a chaos run of CI."""
    cluster = cluster_or_skip
    topic, group = unique("t"), unique("g")
    start, _ = one_split(admin, make_producer(), topic)
    victim = _coordinator_node(cluster, client_config, group)
    loops = {client: subprocess.Popen([sys.executable, "-c", _HELD_LOOP, client, client_config["bootstrap.servers"],
                                       layout_topic, topic, group, str(start), "22"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for client in ("confluent", "kafka-python", "aiokafka")}
    try:
        # Each started and assigned before the broker goes (a start, which
        # reads the group's commits, may take seconds beside the cluster:
        # the kill came before the aiokafka one's assign in a run of CI).
        started = {client: p.stdout.readline().strip() for client, p in loops.items()}  # type: ignore[union-attr]
        time.sleep(3)
        cluster.kill(victim)
        time.sleep(6)
    finally:
        cluster.start_node(victim)
        outs = {client: p.communicate(timeout=120) for client, p in loops.items()}
        cluster.wait_healthy()
    for client, (out, err) in outs.items():
        tail = [line for line in err.splitlines() if not line.startswith("%")][-5:]
        assert loops[client].returncode == 0, f"the {client} consumer died ({loops[client].returncode}): {tail}"
        assert started[client] == "polling", (client, started[client])
        polls, held, behind_only = out.split()
        assert int(polls) > 50 and held == "1" and behind_only == "1", (client, out)


def _coordinator_node(cluster: KafkaCluster, client_config: Dict[str, Any], group: str) -> int:
    """The index in ``cluster`` of the node that coordinates ``group``."""
    raw = AdminClient(client_config)
    coordinator: Dict[str, int] = {}

    def found() -> bool:
        try:
            coordinator["id"] = raw.describe_consumer_groups([group])[group].result().coordinator.id
        except Exception:
            return False
        return True

    _wait(found, 60, "no coordinator of the group")
    return next(i for i in range(cluster.nodes) if cluster.node_id(i) == coordinator["id"])


def _commits(consumer: Any, topic: str) -> bool:
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, 5) for p in range(4)], asynchronous=False)
    except Exception:
        return False
    return True
