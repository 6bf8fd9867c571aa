"""``kafka_ordered.testing.KafkaCluster``: a real Apache Kafka KRaft cluster
from Maven Central jars (issue 22, part 1). Set-up errors are checked on
every broker kind (they fail before any JVM starts); the node life cycle
runs on the session's Apache Kafka cluster (``KAFKA_ORDERED_BROKER=kafka``),
and every test leaves all its nodes running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_ordered.errors import BrokerUnavailableError
from kafka_ordered.testing import KafkaCluster, KafkaSetupError
from kafka_ordered.testing._cluster import MANIFEST, java_version, kafka_classpath

from .. import cli_json_schema as schema_doc


def _fake_java(tmp_path: Path, version: str) -> str:
    exe = tmp_path / "java"
    exe.write_text(f'#!/bin/sh\necho \'openjdk version "{version}" 2021-01-19\' >&2\n')
    exe.chmod(0o755)
    return str(exe)


def test_no_java_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KafkaSetupError, match="needs Java 17 or newer: no 'no-such-java' on PATH"):
        KafkaCluster(nodes=1, java="no-such-java", data_dir=str(tmp_path / "d")).start()
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("version, major", [("11.0.2", 11), ("1.8.0_292", 8)])
def test_old_java_is_one_clear_error(tmp_path: Path, version: str, major: int) -> None:
    java = _fake_java(tmp_path, version)
    assert java_version(java) == major
    with pytest.raises(KafkaSetupError, match=f"needs Java 17 or newer; .* is Java {major}"):
        KafkaCluster(nodes=1, java=java).start()


def test_no_maven_is_one_clear_error(tmp_path: Path) -> None:
    manifest = tmp_path / "pom.xml"
    manifest.write_text(MANIFEST.read_text() + "\n<!-- a manifest no cache has seen -->\n")
    with pytest.raises(KafkaSetupError, match="needs Maven: no 'no-such-mvn' on PATH"):
        kafka_classpath("no-such-mvn", manifest=manifest)


def test_an_artifact_that_cannot_be_fetched_is_named(tmp_path: Path) -> None:
    manifest = tmp_path / "pom.xml"
    manifest.write_text(MANIFEST.read_text().replace("<kafka.version>", "<kafka.version>0.0.0-no-such-"))
    with pytest.raises(KafkaSetupError) as e:
        kafka_classpath(manifest=manifest, timeout=300)
    assert "org.apache.kafka:kafka_2.13" in str(e.value) and "0.0.0-no-such-" in str(e.value)


def test_a_stale_data_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "node-0").mkdir()
    with pytest.raises(KafkaSetupError, match="stale data directory"):
        KafkaCluster(nodes=1, data_dir=str(tmp_path)).start()
    assert (tmp_path / "node-0").is_dir()  # nothing of the user's is deleted


def test_bad_broker_settings_fail_at_format_with_the_tools_message() -> None:
    bad = KafkaCluster(nodes=1, overrides={"num.io.threads": "not-a-number"})
    with pytest.raises(KafkaSetupError) as e:
        bad.start()
    assert "node 0" in str(e.value) and "num.io.threads" in str(e.value)
    assert not bad._nodes and bad._root is None  # nothing left behind


def test_a_node_that_does_not_come_up_in_time_names_itself_with_its_log_tail() -> None:
    # A JVM answers Metadata after ~2.5 s on an idle machine: 1 s is too short.
    slow = KafkaCluster(nodes=1, startup_timeout=1.0, log_level="INFO")
    with pytest.raises(BrokerUnavailableError) as e:
        slow.start()
    message = str(e.value)
    assert "node 0" in message and "did not answer Metadata within 1 s" in message
    tail = message.split("\n", 1)[1]  # the node's log tail follows the first line
    assert "INFO" in tail or "org.apache.kafka" in tail, tail
    assert not slow._nodes and slow._root is None


def test_life_cycle_of_a_node(cluster_or_skip: KafkaCluster, topic: str) -> None:
    """stop/kill/pause/resume/start of one node of the session cluster: a
    topic with replication factor 3 keeps taking acks=all writes while one
    node is away (min.insync.replicas=2), and every node is back at the end."""
    cluster = cluster_or_skip
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 60000})

    def write() -> None:
        errors: list = []
        p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
        assert p.flush(60) == 0 and errors == [None]

    write()
    last = cluster.nodes - 1
    pid = cluster.pid(last)
    for away, back in ((cluster.stop, None), (cluster.kill, None), (cluster.pause, cluster.resume)):
        away(last)
        if back is None:
            assert not cluster.running(last) and cluster.pid(last) is None
        write()
        if back is not None:
            back(last)
        else:
            cluster.start_node(last)
        assert cluster.running(last)
    assert cluster.pid(last) != pid
    cluster.wait_healthy()
    md = admin.list_topics(timeout=10)
    assert sorted(md.brokers) == [cluster.node_id(i) for i in range(cluster.nodes)]


def test_a_node_started_from_a_short_lived_thread_outlives_it(cluster_or_skip: KafkaCluster) -> None:
    """Nodes die with the process that runs the cluster (PR_SET_PDEATHSIG),
    which Linux ties to the forking *thread*: a node restarted from a timer
    thread must not be SIGKILLed when that thread ends."""
    cluster = cluster_or_skip
    last = cluster.nodes - 1
    cluster.kill(last)
    t = threading.Thread(target=cluster.start_node, args=(last,), kwargs={"wait": False})
    t.start()
    t.join()
    pid = cluster.pid(last)
    cluster.wait_healthy()
    assert cluster.running(last) and cluster.pid(last) == pid


def test_broker_kafka_runs_a_cluster_in_the_foreground_and_leaves_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """``kafka-ordered broker --kafka --json``: one JSON line when the cluster
    answers, SIGTERM stops it with exit 0, no JVM or data directory left."""
    proc = subprocess.Popen([sys.executable, "-m", "kafka_ordered.cli", "broker", "--kafka", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, proc.stderr.read() if proc.stderr else ""
        data = json.loads(first)
        schemas, defs = schema_doc.load()
        assert schema_doc.validate(data, schemas["broker"], defs) == []
        assert len(data["pids"]) == 1 and data["kafka_version"].startswith("4.")
        md = AdminClient({"bootstrap.servers": data["bootstrap_servers"]}).list_topics(timeout=10)
        assert list(md.brokers) == [1]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 0
    time.sleep(0.5)
    for pid in data["pids"]:
        assert not os.path.exists(f"/proc/{pid}"), f"JVM {pid} outlived kafka-ordered broker --kafka"
