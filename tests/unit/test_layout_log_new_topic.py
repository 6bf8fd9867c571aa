"""A layout log this process just created, asked about through a broker
whose metadata has not learnt it yet (Apache Kafka: each broker learns a new
topic on its own). DescribeConfigs and DescribeTopics then answer
UNKNOWN_TOPIC_OR_PART for a moment: the retention check must not be skipped
and the log's identity must not fall back to its name (other processes,
asking later, get its topic id: their stamps would not match)."""

from __future__ import annotations

import uuid
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any, Dict, List

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_ordered.errors import UnsafeLayoutLogError
from kafka_ordered.layout_log import LayoutLog


def _done(value: Any = None, error: Any = None) -> "Future[Any]":
    f: "Future[Any]" = Future()
    if error is not None:
        f.set_exception(KafkaException(KafkaError(error)))
    else:
        f.set_result(value)
    return f


class _LaggingAdmin:
    """Answers UNKNOWN_TOPIC_OR_PART ``lag`` times per call kind, then for real."""

    def __init__(self, lag: int, configs: Dict[str, str], topic_id: Any) -> None:
        self.lag = {"configs": lag, "topics": lag}
        self.configs = configs
        self.topic_id = topic_id
        self.calls: List[str] = []

    def _answer(self, kind: str, value: Any) -> "Future[Any]":
        self.calls.append(kind)
        if self.lag[kind] > 0:
            self.lag[kind] -= 1
            return _done(error=KafkaError.UNKNOWN_TOPIC_OR_PART)
        return _done(value)

    def describe_configs(self, resources: List[Any], request_timeout: float = 0) -> Dict[Any, "Future[Any]"]:
        cfg = {k: SimpleNamespace(value=v) for k, v in self.configs.items()}
        return {resources[0]: self._answer("configs", cfg)}

    def describe_topics(self, topics: Any, request_timeout: float = 0) -> Dict[str, "Future[Any]"]:
        name = list(topics.topic_names)[0]
        return {name: self._answer("topics", SimpleNamespace(topic_id=self.topic_id))}


def test_the_retention_check_waits_for_a_broker_that_knows_the_new_log() -> None:
    admin = _LaggingAdmin(2, {"retention.ms": "604800000", "retention.bytes": "-1", "cleanup.policy": "delete"}, None)
    log = LayoutLog({"bootstrap.servers": "unused:9092"}, "layouts", timeout=5.0, admin=admin)  # type: ignore[arg-type]
    with pytest.raises(UnsafeLayoutLogError, match="retention.ms=604800000"):
        log._check_config()
    assert admin.calls == ["configs"] * 3


def test_the_log_id_waits_for_a_broker_that_knows_the_new_log() -> None:
    tid = uuid.uuid4()
    admin = _LaggingAdmin(2, {}, tid)
    log = LayoutLog({"bootstrap.servers": "unused:9092"}, "layouts", timeout=5.0, admin=admin)  # type: ignore[arg-type]
    assert log.log_id() == str(tid)


def test_a_log_that_stays_unknown_is_reported_after_the_timeout() -> None:
    admin = _LaggingAdmin(10**6, {}, None)
    log = LayoutLog({"bootstrap.servers": "unused:9092"}, "layouts", timeout=0.3, admin=admin)  # type: ignore[arg-type]
    log._check_config()  # a WARNING, as before: the broker would not say
    assert log.log_id() == "name=layouts"
