"""A secured cluster for real (issue 22, part 2): the session's Apache Kafka
cluster has a SASL_SSL listener (SASL/PLAIN over TLS, a CA made by the test
set-up). Data and the layout log flow through it with the user's own
security settings, for each client; a wrong password is a clear error, not
a hang. Runs on ``KAFKA_ORDERED_BROKER=kafka`` only (the embedded broker has
no TLS or SASL)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafka_ordered import KafkaOrderedError, LayoutAdmin, OrderedConsumer, OrderedProducer
from kafka_ordered.cli import main as cli_main
from kafka_ordered.testing import KafkaCluster, SaslUser, group_config

from ..conftest import SASL_USER

WRONG = SaslUser(SASL_USER.username, "not-the-password")


def _layout_records(cluster: KafkaCluster, layout_topic: str) -> int:
    """How many records the layout log holds, read over the PLAINTEXT
    listener (an independent witness)."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "kafka-ordered-tests-witness"})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(layout_topic, 0), timeout=10)
        return hi - lo
    finally:
        c.close()


def _consume(consumer: Any, n: int, timeout: float = 60.0) -> List[Any]:
    got: List[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        for m in consumer.consume(100, 0.5):
            if m.error() is None:
                got.append(m)
    return got


def test_confluent_kafka_clients_and_the_layout_log_flow_through_sasl_ssl(
        cluster_or_skip: KafkaCluster, topic: str, layout_topic: str, unique: Callable[[str], str],
        closing: Callable[[Any], Any]) -> None:
    cluster = cluster_or_skip
    conf: Dict[str, Any] = {**cluster.sasl_config(SASL_USER), "ordered.layout.topic": layout_topic}
    with LayoutAdmin(conf) as admin:
        admin.create_topic(topic, 2)
        admin.expand(topic, 3)
    assert _layout_records(cluster, layout_topic) >= 2  # the layout log was written over SASL_SSL
    p = closing(OrderedProducer({**conf, "linger.ms": 5}))
    for i in range(30):
        p.produce(topic, f"v{i}".encode(), f"k{i % 5}".encode())
    assert p.flush(30) == 0
    c = closing(OrderedConsumer({**conf, **group_config(False), "group.id": unique("g"),
                                 "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got = _consume(c, 30)
    assert sorted(m.value() for m in got) == sorted(f"v{i}".encode() for i in range(30))


@pytest.mark.parametrize("client", ["producer", "consumer", "admin"])
def test_a_wrong_password_is_a_clear_error_not_a_hang(cluster_or_skip: KafkaCluster, topic: str,
                                                      layout_topic: str, client: str) -> None:
    conf: Dict[str, Any] = {**cluster_or_skip.sasl_config(WRONG), "ordered.layout.topic": layout_topic}
    started = time.monotonic()
    with pytest.raises(KafkaOrderedError) as e:
        if client == "producer":  # construction needs no broker: the first send reads the layout log
            with OrderedProducer(conf) as producer:
                producer.produce(topic, b"v", b"k")
        elif client == "consumer":
            OrderedConsumer({**conf, "group.id": "g"}).close()
        else:
            with LayoutAdmin(conf) as admin:
                admin.create_topic(topic, 2)
    took = time.monotonic() - started
    message = str(e.value).lower()
    assert "authentication" in message, str(e.value)
    assert took < 30, f"a wrong password took {took:.0f} s to report"


def test_kafka_python_clients_flow_through_sasl_ssl(cluster_or_skip: KafkaCluster, topic: str, layout_topic: str,
                                                    unique: Callable[[str], str], closing: Callable[[Any], Any]) -> None:
    from kafka_ordered.kafka_python import OrderedKafkaConsumer, OrderedKafkaProducer

    cluster = cluster_or_skip
    with LayoutAdmin({**cluster.sasl_config(SASL_USER), "ordered.layout.topic": layout_topic}) as admin:
        admin.create_topic(topic, 2)
    kp: Dict[str, Any] = {
        "bootstrap_servers": cluster.sasl_bootstrap_servers.split(","), "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN", "sasl_plain_username": SASL_USER.username,
        "sasl_plain_password": SASL_USER.password, "ssl_cafile": cluster.ca_location,
        "ordered.layout.topic": layout_topic,
    }
    p = closing(OrderedKafkaProducer(**kp))
    for i in range(20):
        p.send(topic, key=f"k{i % 4}".encode(), value=f"v{i}".encode())
    p.flush(30)
    c = closing(OrderedKafkaConsumer(topic, group_id=unique("g"), auto_offset_reset="earliest",
                                     **group_config(False, kafka_python=True), **kp))
    got: List[Any] = []
    deadline = time.monotonic() + 60
    while len(got) < 20 and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=500).values():
            got.extend(records)
    assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(20))


def test_the_cli_with_command_config_flows_through_sasl_ssl(cluster_or_skip: KafkaCluster, topic: str,
                                                            layout_topic: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    cluster = cluster_or_skip
    props = tmp_path / "client.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in cluster.sasl_config(SASL_USER).items()))
    base = ["--command-config", str(props), "--layout-topic", layout_topic]
    assert cli_main(["create", topic, "-p", "2", *base]) == 0
    assert cli_main(["expand", topic, "3", *base]) == 0
    capsys.readouterr()
    assert cli_main(["describe", topic, "--json", *base]) == 0
    assert json.loads(capsys.readouterr().out)["layout"]["partitions"] == 3
    props.write_text("".join(f"{k}={v}\n" for k, v in cluster.sasl_config(WRONG).items()))
    started = time.monotonic()
    code = cli_main(["describe", topic, *base])
    err = capsys.readouterr().err
    assert code != 0 and "authentication" in err.lower() and time.monotonic() - started < 30
    assert len(err.strip().splitlines()) == 1
