"""The group's commits, as the confluent OrderedConsumer reads them: through
the process's shared admin client (see ``_ConsumerPort.committed``)."""

from __future__ import annotations

import concurrent.futures
from typing import Any, Dict, List, Optional, Tuple

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException

from kafka_ordered.confluent._consumer import OrderedConsumer, _ConsumerPort
from kafka_ordered.errors import BrokerUnavailableError, KafkaOrderedError


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


class _Admin:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: List[Tuple[List[Any], Dict[str, Any]]] = []

    def list_consumer_group_offsets(self, req: List[Any], **kwargs: Any) -> Dict[str, Any]:
        self.calls.append((req, kwargs))
        fut: concurrent.futures.Future = concurrent.futures.Future()
        if isinstance(self.answer, BaseException):
            fut.set_exception(self.answer)
        elif self.answer is not None:
            fut.set_result(self.answer)
        return {req[0].group_id: fut}


class _Answered:
    """A TopicPartition of an admin answer (its ``error`` is read-only on the real one)."""

    def __init__(self, partition: int, offset: int, error: Optional[KafkaError]) -> None:
        self.topic, self.partition, self.offset, self.error = "t", partition, offset, error


def _answer(*offsets: Tuple[int, int, Optional[KafkaError]]) -> ConsumerGroupTopicPartitions:
    return ConsumerGroupTopicPartitions("g", [_Answered(*o) for o in offsets])  # type: ignore[misc]


@pytest.mark.parametrize("stable", [True, False])
def test_commits_are_read_through_the_admin_client_as_the_consumer_would(stable: bool) -> None:
    """The group's commits come from the shared admin client (its own
    connections: a new consumer's lookup of the group coordinator otherwise
    waited behind its first multi-megabyte fetch, 20-40 ms), with the
    consumer's isolation (``require_stable`` for read_committed, as
    librdkafka's own OffsetFetch) and the read's timeout; no commit is
    left out of the result."""
    admin = _Admin(_answer((0, 17, None), (1, -1001, None)))
    port = _ConsumerPort(None, 10.0, admin, "g", stable)  # type: ignore[arg-type]
    assert port.committed([("t", 0), ("t", 1)], timeout=1.0) == {("t", 0): 17}
    (req, kwargs), = admin.calls
    assert req[0].group_id == "g" and [(p.topic, p.partition) for p in req[0].topic_partitions] == [("t", 0), ("t", 1)]
    assert kwargs == {"require_stable": stable, "request_timeout": pytest.approx(1.0, abs=0.05)}
    port.committed([("t", 0)])
    assert admin.calls[1][1]["request_timeout"] == pytest.approx(10.0, abs=0.05)


def test_a_partitions_error_is_raised_never_read_as_no_commit() -> None:
    """A partition the broker answered with an error is not "nothing
    committed" (a start there would go back to auto.offset.reset); a pending
    transactional commit (UNSTABLE_OFFSET_COMMIT under require_stable) is
    asked again until the read's timeout, as librdkafka's consumer does."""
    unstable = _Admin(_answer((0, 17, None), (1, -1, KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT))))
    with pytest.raises(BrokerUnavailableError) as e:
        _ConsumerPort(None, 10.0, unstable, "g", True).committed([("t", 0), ("t", 1)], timeout=0.2)  # type: ignore[arg-type]
    assert len(unstable.calls) >= 3 and e.value.retriable
    refused = _Admin(_answer((0, 17, None), (1, -1, KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))))
    with pytest.raises(KafkaOrderedError) as e:
        _ConsumerPort(None, 10.0, refused, "g", True).committed([("t", 0), ("t", 1)])  # type: ignore[arg-type]
    assert e.value.code == KafkaError.GROUP_AUTHORIZATION_FAILED and not e.value.retriable
    assert len(refused.calls) == 1


@pytest.mark.parametrize("failure", [KafkaException(KafkaError(KafkaError._TIMED_OUT)), None])
def test_no_answer_in_time_is_a_retriable_error(failure: Optional[BaseException],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    port = _ConsumerPort(None, 0.05, _Admin(failure), "g", True)  # type: ignore[arg-type]
    with pytest.raises(BrokerUnavailableError):
        port.committed([("t", 0)], timeout=0.01)
