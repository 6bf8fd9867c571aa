"""Replica placement wired into the admin API and CLI (issue 6): plans,
guard rails, degraded creation, healing, preferred leader election.

On the embedded Tansu (one broker, no racks; no CreatePartitions,
ElectLeaders or AlterPartitionReassignments) the tests check what its APIs
allow and that the missing APIs are named in the errors. Paths that need
several brokers or those APIs skip with the reason; with
KAFKA_ORDERED_BOOTSTRAP pointing at a multi-broker Apache Kafka they run
unchanged.
"""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest
from confluent_kafka.admin import AdminClient

from kafka_ordered.admin import ExpansionPlan, LayoutAdmin, _cluster
from kafka_ordered.cli import expansion_plan_text
from kafka_ordered.cli import main as cli_main
from kafka_ordered.errors import (
    ConfigError,
    GuardRailsError,
    PlacementError,
    UnknownTopicError,
    UnsupportedBrokerApiError,
)

SINGLE_BROKER = "needs at least 2 live brokers; the cluster has {n} (the embedded Tansu has one)"


@pytest.fixture(autouse=True)
def _free_clients() -> Iterator[None]:
    # pytest.raises keeps frames (and their clients) alive in cycles; free them before the broker stops.
    yield
    gc.collect()


@pytest.fixture
def cluster(client_config: Dict[str, Any]) -> _cluster.ClusterState:
    return _cluster.read_cluster(AdminClient(client_config))


def _live(state: _cluster.ClusterState) -> int:
    return len(state.racks)


def _exists(client_config: Dict[str, Any], topic: str) -> bool:
    return topic in AdminClient(client_config).list_topics(timeout=10).topics


def _cli_base(bootstrap: str, layout_topic: str) -> list:
    return ["--bootstrap", bootstrap, "--layout-topic", layout_topic]


def _with_phantom_broker(monkeypatch: pytest.MonkeyPatch, state: _cluster.ClusterState) -> int:
    """Make the admin see one more live broker than there is, so that a heal
    plan has replicas to add on a single-broker cluster; returns its id."""
    phantom = max(state.racks) + 1
    real = _cluster.read_cluster

    def read(admin: Any, *, timeout: float = 10.0) -> _cluster.ClusterState:
        s = real(admin, timeout=timeout)
        racks = {**s.racks, phantom: None if None in s.racks.values() else "phantom-rack"}
        counts = {**s.replica_counts, phantom: 0}
        return _cluster.ClusterState(s.cluster_id, s.controller, racks, counts, s.offline)

    monkeypatch.setattr(_cluster, "read_cluster", read)
    return phantom


# -- plan


def test_plan_reuses_draining_and_spare_partitions(admin: LayoutAdmin, topic: str, cluster: _cluster.ClusterState) -> None:
    admin.create_topic(topic, 2, physical_partitions=6)
    admin.expand(topic, 4)
    admin.shrink(topic, 3)  # 3 drains; 4, 5 are spares
    plan = admin.plan(topic, 5)
    assert isinstance(plan, ExpansionPlan)
    assert (plan.current.partitions, plan.target.partitions, plan.target.epoch) == (3, 5, 4)
    assert plan.reused_draining == {3} and plan.reused_spares == {4}
    assert plan.placement is None and plan.new_partitions == [] and not plan.explicit_assignment
    assert plan.undeleted == [3, 4]
    assert plan.remaining_capacity == {b: None for b in cluster.racks}  # no limits given: unlimited
    text = expansion_plan_text(plan)
    assert "reuses draining partitions: 3" in text and "reuses spare partitions: 4" in text
    assert "creates no physical partitions" in text
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["reused_spares"] == [4] and data["new_partitions"] == [] and data["placement"] is None
    assert data["layout"]["partitions"] == 5
    assert admin.layout(topic).epoch == 3  # plan changed nothing


def test_plan_places_new_partitions_with_capacity(
    admin: LayoutAdmin, topic: str, client_config: Dict[str, Any], cluster: _cluster.ClusterState
) -> None:
    admin.create_topic(topic, 2, physical_partitions=3)
    rf = len(_cluster.topic_assignment(client_config, topic)[0])
    hosted = _cluster.read_cluster(client_config).live_replica_counts
    limits = {b: n + 50 for b, n in hosted.items()}
    plan = admin.plan(topic, 6, max_partitions=limits)
    assert plan.reused_spares == {2} and plan.reused_draining == frozenset()
    assert plan.new_partitions == [3, 4, 5] and plan.target.physical_partitions == 6
    placement = plan.placement
    assert placement is not None and placement.existing_partitions == 3
    for p, reps in placement.assignment.items():
        assert len(reps) == rf and set(reps) <= set(cluster.racks)
        assert placement.replica_racks[p] == tuple(cluster.racks[b] for b in reps)
    placed = placement.replicas_per_broker()
    assert plan.remaining_capacity == {b: limits[b] - hosted[b] - placed.get(b, 0) for b in cluster.racks}
    assert plan.explicit_assignment == (_live(cluster) > 1)
    text = expansion_plan_text(plan)
    assert "creates partitions 3, 4, 5" in text and "replicas (leader first)" in text
    assert ("explicit replica assignment" in text) == (_live(cluster) > 1)
    # nothing changed
    assert admin.layout(topic).epoch == 1
    assert len(_cluster.topic_assignment(client_config, topic)) == 3


def test_plan_refuses_what_expand_would_refuse(admin: LayoutAdmin, topic: str) -> None:
    admin.create_topic(topic, 2, physical_partitions=2)
    with pytest.raises(GuardRailsError, match="guard rails"):
        admin.plan(topic, 4, max_partitions=0)
    with pytest.raises(PlacementError, match="unknown broker"):
        admin.plan(topic, 4, max_partitions={10_000: 5})
    with pytest.raises(UnknownTopicError):
        admin.plan(topic + "-missing", 4)


# -- guard rails


def test_create_topic_beyond_max_partitions_creates_nothing(
    admin: LayoutAdmin, topic: str, client_config: Dict[str, Any]
) -> None:
    hosted = _cluster.read_cluster(client_config).live_replica_counts
    limits = {b: n for b, n in hosted.items()}  # no broker can take one more replica
    with pytest.raises(GuardRailsError, match="Not possible to satisfy request due to guard rails") as e:
        admin.create_topic(topic, 2, physical_partitions=4, max_partitions=limits)
    assert e.value.remaining == {b: 0 for b in hosted}
    assert "nothing was placed" in str(e.value)
    assert not _exists(client_config, topic)
    assert topic not in admin.topics() and admin.last_placement is None
    with pytest.raises(UnknownTopicError):
        admin.layout(topic)


def test_create_topic_within_max_partitions(admin: LayoutAdmin, topic: str, client_config: Dict[str, Any]) -> None:
    hosted = _cluster.read_cluster(client_config).live_replica_counts
    lay = admin.create_topic(topic, 2, physical_partitions=3, max_partitions=max(hosted.values()) + 3)
    assert (lay.partitions, lay.physical_partitions) == (2, 3)
    placed = admin.last_placement
    assert placed is not None and placed.topic == topic and placed.partitions == [0, 1, 2] and not placed.missing
    got = _cluster.topic_assignment(client_config, topic)
    assert {p: list(r) for p, r in placed.assignment.items()} == got


def test_expand_beyond_max_partitions_changes_nothing(
    admin: LayoutAdmin, topic: str, client_config: Dict[str, Any], bootstrap: str, layout_topic: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    admin.create_topic(topic, 2, physical_partitions=2)
    with pytest.raises(GuardRailsError, match="guard rails") as e:
        admin.expand(topic, 4, max_partitions=0)
    assert set(e.value.remaining.values()) == {0}
    assert admin.layout(topic).epoch == 1
    assert len(_cluster.topic_assignment(client_config, topic)) == 2
    assert cli_main(["expand", topic, "4", "--max-partitions", "0", *_cli_base(bootstrap, layout_topic)]) == 1
    assert "guard rails" in capsys.readouterr().err
    assert admin.layout(topic).epoch == 1


# -- degraded creation


def test_replication_factor_above_live_brokers_is_refused(
    admin: LayoutAdmin, topic: str, client_config: Dict[str, Any], cluster: _cluster.ClusterState
) -> None:
    live = _live(cluster)
    with pytest.raises(PlacementError) as e:
        admin.create_topic(topic, 2, replication_factor=live + 1)
    msg = str(e.value)
    assert f"replication factor {live + 1} needs {live + 1} live brokers but only {live}" in msg
    assert "min_required_replication_factor" in msg
    with pytest.raises(PlacementError, match=f"only {live} broker\\(s\\) live"):
        admin.create_topic(topic, 2, replication_factor=live + 1, min_required_replication_factor=live + 1)
    assert not _exists(client_config, topic)


def test_degraded_creation_records_missing_replicas(
    admin: LayoutAdmin, topic: str, client_config: Dict[str, Any], cluster: _cluster.ClusterState
) -> None:
    live = _live(cluster)
    lay = admin.create_topic(topic, 2, physical_partitions=3, replication_factor=live + 1,
                             min_required_replication_factor=live)
    assert lay.physical_partitions == 3
    placed = admin.last_placement
    assert placed is not None and placed.replication_factor == live + 1
    assert dict(placed.missing) == {0: 1, 1: 1, 2: 1}
    got = _cluster.topic_assignment(client_config, topic)
    assert sorted(got) == [0, 1, 2] and all(sorted(r) == sorted(cluster.racks) for r in got.values())
    # Healing needs a broker that does not host the partition yet: none is live.
    heal = admin.plan_heal(topic)
    assert heal.replication_factor == live + 1 and dict(heal.target) == {} and dict(heal.still_missing) == {0: 1, 1: 1, 2: 1}
    result = admin.heal(topic)
    assert result.reassignments == {} and not result.plan.complete and result.ok


def test_cli_degraded_create_reports_missing_replicas(
    bootstrap: str, layout_topic: str, topic: str, cluster: _cluster.ClusterState, capsys: pytest.CaptureFixture[str]
) -> None:
    live = _live(cluster)
    base = _cli_base(bootstrap, layout_topic)
    assert cli_main(["create", topic, "-p", "2", "-r", str(live + 1), *base]) == 1
    assert "min_required_replication_factor" in capsys.readouterr().err
    assert cli_main(["create", topic, "-p", "2", "-r", str(live + 1), "--min-required-replication-factor",
                     str(live), "--json", *base]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["partitions"] == 2
    assert [p["missing_replicas"] for p in data["placement"]["partitions"]] == [1, 1]


# -- heal


def test_heal_names_the_missing_reassignment_api(
    admin: LayoutAdmin, topic: str, embedded: bool, monkeypatch: pytest.MonkeyPatch,
    bootstrap: str, layout_topic: str, capsys: pytest.CaptureFixture[str],
) -> None:
    if not embedded:
        pytest.skip("needs a broker without AlterPartitionReassignments (the embedded Tansu); "
                    "Apache Kafka >= 2.4 has it (see test_heal_adds_missing_replicas)")
    admin.create_topic(topic, 2)
    state = _cluster.read_cluster(admin._admin)
    phantom = _with_phantom_broker(monkeypatch, state)
    plan = admin.plan_heal(topic, replication_factor=2)
    assert {p: r[-1] for p, r in plan.target.items()} == {0: phantom, 1: phantom}
    with pytest.raises(UnsupportedBrokerApiError) as e:
        admin.heal(topic, replication_factor=2)
    assert e.value.api == "AlterPartitionReassignments"
    msg = str(e.value)
    assert "does not support the AlterPartitionReassignments API" in msg and "kafka-reassign-partitions.sh" in msg
    assert json.dumps({"topic": topic, "partition": 0, "replicas": list(plan.target[0])}) in msg
    assert cli_main(["heal", topic, "-r", "2", *_cli_base(bootstrap, layout_topic)]) == 1
    assert "AlterPartitionReassignments" in capsys.readouterr().err
    # --dry-run prints the plan and the JSON without calling the broker
    assert cli_main(["heal", topic, "-r", "2", "--dry-run", "--json", *_cli_base(bootstrap, layout_topic)]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["reassignment_json"]["partitions"][1] == {"topic": topic, "partition": 1, "replicas": list(plan.target[1])}


def test_heal_without_kafka_python_says_what_to_do(
    admin: LayoutAdmin, topic: str, monkeypatch: pytest.MonkeyPatch, cluster: _cluster.ClusterState
) -> None:
    admin.create_topic(topic, 2, replication_factor=1)
    if _live(cluster) < 2:
        _with_phantom_broker(monkeypatch, cluster)
    monkeypatch.setattr(_cluster, "_kafka_python_admin", lambda: None)
    with pytest.raises(UnsupportedBrokerApiError) as e:
        admin.heal(topic, replication_factor=2)
    assert e.value.api == "AlterPartitionReassignments"
    assert "pip install 'kafka-ordered[kafka-python]'" in str(e.value)
    assert '"version": 1' in str(e.value) and "--execute" in str(e.value)
    assert all(len(r) == 1 for r in _cluster.topic_assignment(admin._admin, topic).values())  # nothing moved


def test_heal_adds_missing_replicas(
    admin: LayoutAdmin, topic: str, client_config: Dict[str, Any], cluster: _cluster.ClusterState
) -> None:
    if _live(cluster) < 2:
        pytest.skip(SINGLE_BROKER.format(n=_live(cluster)))
    admin.create_topic(topic, 2, physical_partitions=3, replication_factor=1)
    before = _cluster.topic_assignment(client_config, topic)
    try:
        res = admin.heal(topic, replication_factor=2, elect_leaders=True)
    except UnsupportedBrokerApiError as e:
        pytest.skip(f"the broker has no {e.api}: {e}")
    assert res.ok and sorted(res.reassignments) == [0, 1, 2]
    for p, reps in res.plan.target.items():
        assert len(reps) == 2 and reps[0] == before[p][0]
    deadline = time.monotonic() + 60
    while _cluster.topic_assignment(client_config, topic) != {p: list(r) for p, r in res.plan.target.items()}:
        assert time.monotonic() < deadline, "reassignment did not finish within 60 s"
        time.sleep(0.5)
    assert sorted(res.elections) == [0, 1, 2] and all(r.ok for r in res.elections.values())
    assert dict(admin.plan_heal(topic, replication_factor=2).target) == {}


# -- explicit assignments on several brokers


def test_create_topic_sends_the_planned_assignment(
    admin: LayoutAdmin, topic: str, client_config: Dict[str, Any], cluster: _cluster.ClusterState
) -> None:
    if _live(cluster) < 2:
        pytest.skip(SINGLE_BROKER.format(n=_live(cluster)))
    admin.create_topic(topic, 2, physical_partitions=2 * _live(cluster), replication_factor=2,
                       ignore_racks=None in cluster.racks.values())
    placed = admin.last_placement
    assert placed is not None
    assert _cluster.topic_assignment(client_config, topic) == {p: list(r) for p, r in placed.assignment.items()}
    leaders = [r[0] for r in placed.assignment.values()]
    assert {leaders.count(b) for b in cluster.racks} == {2}


def test_expand_creates_planned_partitions(
    admin: LayoutAdmin, topic: str, client_config: Dict[str, Any], cluster: _cluster.ClusterState
) -> None:
    if _live(cluster) < 2:
        pytest.skip(SINGLE_BROKER.format(n=_live(cluster)) + "; with one the broker places new partitions itself")
    admin.create_topic(topic, 2, physical_partitions=2, replication_factor=2)
    hosted = _cluster.read_cluster(client_config).live_replica_counts
    try:
        res = admin.expand_with_report(topic, 4, max_partitions=max(hosted.values()) + 4, elect_leaders=True)
    except UnsupportedBrokerApiError as e:
        if e.api != "CreatePartitions":
            raise
        pytest.skip(f"the broker has no CreatePartitions: {e}")
    assert res.layout.partitions == 4 and res.layout.physical_partitions == 4
    placement = res.plan.placement
    assert placement is not None and res.plan.explicit_assignment and placement.partitions == [2, 3]
    got = _cluster.topic_assignment(client_config, topic)
    assert all(got[p] == list(r) for p, r in placement.assignment.items())
    assert sorted(res.elections) == [2, 3] and res.ok


# -- preferred leaders


def test_elect_leaders(
    admin: LayoutAdmin, topic: str, embedded: bool, bootstrap: str, layout_topic: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    admin.create_topic(topic, 2, physical_partitions=4)
    base = _cli_base(bootstrap, layout_topic)
    if embedded:
        with pytest.raises(UnsupportedBrokerApiError, match="ElectLeaders") as e:
            admin.elect_leaders(topic)
        assert e.value.api == "ElectLeaders"
        assert cli_main(["elect-leaders", topic, "--partitions", "0,1", *base]) == 1
        assert "ElectLeaders" in capsys.readouterr().err
    else:
        try:
            results = admin.elect_leaders(topic)
        except UnsupportedBrokerApiError as e:
            pytest.skip(f"the broker has no ElectLeaders: {e}")
        assert sorted(results) == [0, 1, 2, 3] and all(r.ok for r in results.values())
        assert cli_main(["elect-leaders", topic, "--partitions", "0,1", "--json", *base]) == 0
        assert sorted(json.loads(capsys.readouterr().out)["elections"]) == ["0", "1"]
    with pytest.raises(PlacementError, match="partition ids"):
        admin.elect_leaders(topic, [-1])

    # expand(elect_leaders=True): the expansion is applied; elections are reported per undeleted partition.
    res = admin.expand_with_report(topic, 3, elect_leaders=True)
    assert res.layout.partitions == 3 and admin.layout(topic).epoch == 2
    assert sorted(res.elections) == [2]
    if embedded:
        r = res.elections[2]
        assert r.status == "failed" and not res.ok and "ElectLeaders" in (r.message or "")
        # the expansion is done, the follow-up failed: exit 3 and what to run next
        assert cli_main(["expand", topic, "4", "--elect-leaders", *base]) == 3
        err = capsys.readouterr().err
        assert "expanded" in err and f"run: kafka-ordered elect-leaders {topic} --partitions 3" in err
        assert admin.layout(topic).partitions == 4
    else:
        assert res.ok


# -- CLI


def test_cli_plan_json_round_trip(
    bootstrap: str, layout_topic: str, topic: str, tmp_path: Path, client_config: Dict[str, Any],
    capsys: pytest.CaptureFixture[str], embedded: bool,
) -> None:
    base = _cli_base(bootstrap, layout_topic)
    assert cli_main(["create", topic, "--partitions", "2", "--physical", "4", "--json", *base]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["physical_partitions"] == 4 and [p["partition"] for p in created["placement"]["partitions"]] == [0, 1, 2, 3]

    assert cli_main(["plan", topic, "--to", "3", "--json", *base]) == 0
    spares = json.loads(capsys.readouterr().out)
    assert spares["reused_spares"] == [2] and spares["new_partitions"] == [] and spares["placement"] is None

    hosted = _cluster.read_cluster(client_config).live_replica_counts
    limits = tmp_path / "limits.json"
    limits.write_text(json.dumps({str(b): n + 20 for b, n in hosted.items()}))
    # exit 1 when expand would fail: the embedded broker cannot create partitions 4 and 5
    assert cli_main(["plan", topic, "--to", "6", "--max-partitions-file", str(limits), "--json", *base]) == embedded
    grow = json.loads(capsys.readouterr().out)
    assert grow["will_succeed"] is not embedded and grow["spares"] == [2, 3]
    assert grow["create_partitions"] == ("unsupported" if embedded else "supported")
    assert grow["reused_spares"] == [2, 3] and grow["new_partitions"] == [4, 5]
    assert grow["to_partitions"] == 6 and grow["target_physical_partitions"] == 6
    new = grow["placement"]["partitions"]
    assert [p["partition"] for p in new] == [4, 5] and all(set(p["replicas"]) <= {int(b) for b in map(str, hosted)} for p in new)
    used = {b: sum(p["replicas"].count(b) for p in new) for b in hosted}
    assert grow["remaining_capacity"] == {str(b): 20 - used[b] for b in hosted}

    assert cli_main(["plan", topic, "--to", "6", *base]) == embedded
    assert "creates partitions 4, 5" in capsys.readouterr().out
    assert cli_main(["plan", topic, "--to", "6", "--max-partitions", "0", *base]) == 1
    assert "guard rails" in capsys.readouterr().err
    limits.write_text('"lots"')
    assert cli_main(["plan", topic, "--to", "6", "--max-partitions-file", str(limits), *base]) == 2  # bad config
    assert "must hold an int" in capsys.readouterr().err
    assert cli_main(["plan", topic, "--to", "6", "--max-partitions", "1", "--max-partitions-file", str(limits),
                     *base]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert cli_main(["describe", topic, "--json", *base]) == 0
    assert json.loads(capsys.readouterr().out)["layout"]["epoch"] == 1  # plan changed nothing


# -- kafka-python connection mapping (no broker needed)


def test_kafka_python_connection_mapping() -> None:
    kw = _cluster.kafka_python_admin_config({
        "bootstrap.servers": "a:9092, b:9093", "security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "u", "sasl.password": "p", "ssl.ca.location": "/ca.pem",
        "ssl.endpoint.identification.algorithm": "none", "socket.keepalive.enable": True, "client.id": "me",
    }, timeout=5)
    assert kw == {
        "bootstrap_servers": ["a:9092", "b:9093"], "request_timeout_ms": 5000, "bootstrap_timeout_ms": 5000,
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "u",
        "sasl_plain_password": "p", "ssl_cafile": "/ca.pem", "ssl_check_hostname": False, "client_id": "me",
    }
    with pytest.raises(ConfigError, match="sasl.oauthbearer.config"):
        _cluster.kafka_python_admin_config({"bootstrap.servers": "a:1", "sasl.oauthbearer.config": "x"})
