"""Shared fixtures.

Integration tests use one session-scoped broker, chosen by
``KAFKA_ORDERED_BROKER``: ``embedded`` (default: a Tansu process) or ``kafka``
(a 3-node Apache Kafka KRaft cluster, :class:`KafkaCluster`); or the broker
named by ``KAFKA_ORDERED_BOOTSTRAP``. Topic names are unique per test; factory
fixtures close every client they made.
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

from kafka_ordered.testing import BOOTSTRAP_ENV, EmbeddedBroker, KafkaCluster, SaslUser
from kafka_ordered.testing import group_config as settings_for


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    for item in items:
        path = str(item.fspath)
        if f"{os.sep}integration{os.sep}" in path:
            item.add_marker(pytest.mark.integration)
        if f"{os.sep}spark{os.sep}" in path:
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.integration)


#: Which broker the session runs on: ``embedded`` or ``kafka``.
BROKER_ENV = "KAFKA_ORDERED_BROKER"
#: The SASL/PLAIN user of the Apache Kafka test cluster's SASL_SSL listener.
SASL_USER = SaslUser("alice", "alice-secret")


def broker_kind() -> str:
    kind = os.environ.get(BROKER_ENV, "embedded")
    if kind not in ("embedded", "kafka"):
        raise pytest.UsageError(f"{BROKER_ENV} must be 'embedded' or 'kafka', got {kind!r}")
    return kind


def on_embedded_broker() -> bool:
    """Whether this session's broker is the embedded Tansu (what the
    ``embedded`` fixture says, for code outside fixtures)."""
    return not os.environ.get(BOOTSTRAP_ENV) and broker_kind() == "embedded"


def spare(physical: int) -> Optional[int]:
    """``admin.create_topic(t, 2, physical_partitions=spare(4))``: spare
    partitions only on the embedded broker, which cannot create partitions;
    elsewhere ``None`` (no spares), so that expansions take the real path
    (CreatePartitions with the placement planner's assignment)."""
    return physical if on_embedded_broker() else None


def create_plain_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int = -1,
                       config: Optional[Dict[str, str]] = None, timeout: float = 30.0) -> None:
    """Create an unmanaged topic and return once every broker asked shows all
    its partitions: on a 3-node cluster CreateTopics returns before each
    broker's metadata knows the topic, and the next client to ask may be told
    it does not exist."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kafka_ordered._kafka import wait_for_partitions

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    new = NewTopic(topic, partitions, replication_factor, config=dict(config or {}))
    admin.create_topics([new], request_timeout=timeout)[topic].result(timeout)
    wait_for_partitions(admin, topic, partitions, timeout)


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[Optional[KafkaCluster]]:
    """The session's Apache Kafka cluster (3 nodes, replication factor 3,
    ``min.insync.replicas=2``, a SASL_SSL listener), or ``None`` on any
    other broker."""
    if broker_kind() != "kafka" or os.environ.get(BOOTSTRAP_ENV):
        yield None
        return
    with KafkaCluster(nodes=3, sasl_users=[SASL_USER]) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def bootstrap(kafka_cluster: Optional[KafkaCluster]) -> Iterator[str]:
    """``host:port`` of the broker every integration test talks to."""
    external = os.environ.get(BOOTSTRAP_ENV)
    if external:
        yield external
    elif kafka_cluster is not None:
        yield kafka_cluster.bootstrap_servers
    else:
        with EmbeddedBroker() as broker:
            yield broker.bootstrap_servers


@pytest.fixture(scope="session")
def embedded(bootstrap: str) -> bool:
    """True when the tests run on the embedded Tansu broker."""
    return on_embedded_broker()


@pytest.fixture
def cluster_or_skip(kafka_cluster: Optional[KafkaCluster]) -> KafkaCluster:
    """The session's Apache Kafka cluster; skips on other brokers."""
    if kafka_cluster is None:
        pytest.skip("needs the Apache Kafka test cluster (KAFKA_ORDERED_BROKER=kafka)")
    return kafka_cluster


@pytest.fixture
def unique() -> Callable[[str], str]:
    """``unique("orders")`` -> a topic/group name no other test uses."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:10]}"

    return make


@pytest.fixture
def topic(unique: Callable[[str], str]) -> str:
    return unique("topic")


@pytest.fixture
def layout_topic(unique: Callable[[str], str]) -> str:
    """A fresh layout-log topic, so tests do not see each other's history."""
    return unique("_kafka_ordered")


@pytest.fixture
def client_config(bootstrap: str) -> Dict[str, Any]:
    return {"bootstrap.servers": bootstrap}


@pytest.fixture
def group_settings(embedded: bool) -> Dict[str, Any]:
    """confluent-kafka group settings: fast ones only on the embedded broker,
    values a stock Apache Kafka accepts under ``KAFKA_ORDERED_BOOTSTRAP``."""
    return settings_for(embedded)


@pytest.fixture
def group_settings_kafka_python(embedded: bool) -> Dict[str, Any]:
    """The same for kafka-python."""
    return settings_for(embedded, kafka_python=True)


@pytest.fixture
def group_config(bootstrap: str, unique: Callable[[str], str], group_settings: Dict[str, Any]) -> Dict[str, Any]:
    """A consumer config with a fresh group id and the broker's group settings."""
    return {"bootstrap.servers": bootstrap, "group.id": unique("group"), **group_settings}


@pytest.fixture
def closing() -> Iterator[Callable[[Any], Any]]:
    """``closing(client)`` registers a client to be closed after the test
    (``close()``, else ``flush()``); returns the client."""
    made: List[Any] = []

    def register(client: Any) -> Any:
        made.append(client)
        return client

    yield register
    for client in reversed(made):
        for name in ("close", "flush"):
            fn = getattr(client, name, None)
            if fn is not None:
                try:
                    fn()
                except Exception:
                    pass
                break
