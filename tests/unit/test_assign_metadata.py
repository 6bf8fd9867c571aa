"""OrderedConsumer asks for the metadata of manually assigned topics without
waiting (librdkafka otherwise finds a newly assigned topic's leaders only at
its next periodic scan when the client was connected before ``assign``; see
``OrderedConsumer._learn_topics``)."""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Tuple

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kafka_ordered.confluent._consumer import OrderedConsumer


class _Inner:
    def __init__(self, code: int) -> None:
        self.code = code
        self.calls: List[Tuple[Optional[str], float]] = []

    def list_topics(self, topic: Optional[str] = None, timeout: float = -1) -> Any:
        self.calls.append((topic, timeout))
        raise KafkaException(KafkaError(self.code, "Failed to get metadata"))


class _Stub:
    _learn_topics = OrderedConsumer._learn_topics

    def __init__(self, code: int) -> None:
        self._consumer = _Inner(code)


@pytest.mark.parametrize("code", [KafkaError._TIMED_OUT, KafkaError._TRANSPORT])
def test_each_assigned_topic_is_asked_for_once_without_waiting(code: int, caplog: pytest.LogCaptureFixture) -> None:
    """One request per topic, at every assignment (nothing cached that could
    go stale), with timeout 0: the answer is applied by librdkafka when it
    comes (``_TIMED_OUT``), and a client not connected yet needs none
    (``_TRANSPORT``): neither is worth a log line."""
    stub = _Stub(code)
    with caplog.at_level(logging.DEBUG, logger="kafka_ordered"):
        stub._learn_topics([TopicPartition("b", 0), TopicPartition("a", 1), TopicPartition("b", 3)])
        stub._learn_topics([TopicPartition("a", 0)])
    assert stub._consumer.calls == [("a", 0), ("b", 0), ("a", 0)]
    assert caplog.records == []


def test_another_failure_is_logged_and_never_fails_the_assignment(caplog: pytest.LogCaptureFixture) -> None:
    stub = _Stub(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with caplog.at_level(logging.DEBUG, logger="kafka_ordered"):
        stub._learn_topics([TopicPartition("a", 0)])
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert "metadata of a not asked for" in caplog.records[0].getMessage()
