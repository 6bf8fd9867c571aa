"""Requests asked again when the cluster moved: ``OffsetReader`` asks
ListOffsets again after a leader change (errors the broker answers while a
partition's leadership moves), and ``to_controller`` sends a controller
request again when librdkafka timed out waiting for a controller that is
gone; both within their timeout."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kafka_ordered._kafka import OffsetReader, to_controller
from kafka_ordered.errors import KafkaOrderedError


class _Result:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class _Future:
    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        if isinstance(self.value, KafkaError):
            raise KafkaException(self.value)
        return _Result(self.value)


class _Admin:
    """list_offsets answers ``errors`` first (one per call), then offset 42;
    counts the metadata refreshes between."""

    def __init__(self, errors: List[int]) -> None:
        self.errors = list(errors)
        self.refreshed = 0

    def list_offsets(self, wanted: Dict[TopicPartition, Any], **_: Any) -> Dict[TopicPartition, _Future]:
        code = self.errors.pop(0) if self.errors else None
        return {tp: _Future(KafkaError(code) if code is not None else 42) for tp in wanted}

    def list_topics(self, topic: str, timeout: float) -> None:
        self.refreshed += 1


LEADER_MOVES = [KafkaError.FENCED_LEADER_EPOCH, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.UNKNOWN_LEADER_EPOCH,
                KafkaError.LEADER_NOT_AVAILABLE, KafkaError._NOENT]


@pytest.mark.parametrize("code", LEADER_MOVES, ids=[KafkaError(c).name() for c in LEADER_MOVES])
def test_list_offsets_is_asked_again_after_a_leader_change(code: int) -> None:
    admin = _Admin([code, code])
    reader = OffsetReader({"bootstrap.servers": "127.0.0.1:1"}, timeout=5.0, admin=admin)  # type: ignore[arg-type]
    assert reader.start_offsets([("t", 0), ("t", 1)]) == {("t", 0): 42, ("t", 1): 42}
    assert admin.refreshed >= 2


def test_a_leader_that_never_settles_is_an_error_at_the_deadline() -> None:
    admin = _Admin([KafkaError.FENCED_LEADER_EPOCH] * 10_000)
    reader = OffsetReader({"bootstrap.servers": "127.0.0.1:1"}, timeout=0.3, admin=admin)  # type: ignore[arg-type]
    with pytest.raises(KafkaOrderedError, match="FENCED_LEADER_EPOCH"):
        reader.start_offsets([("t", 0)])


def test_other_errors_are_raised_at_once() -> None:
    admin = _Admin([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    reader = OffsetReader({"bootstrap.servers": "127.0.0.1:1"}, timeout=5.0, admin=admin)  # type: ignore[arg-type]
    with pytest.raises(KafkaOrderedError):
        reader.start_offsets([("t", 0)])
    assert admin.refreshed == 0



class _Refresher:
    def __init__(self) -> None:
        self.refreshed = 0

    def list_topics(self, timeout: float) -> None:
        self.refreshed += 1


def test_a_request_for_a_gone_controller_is_sent_again_after_a_metadata_refresh() -> None:
    admin = _Refresher()
    calls: List[float] = []

    def call(t: float) -> str:
        calls.append(t)
        if len(calls) < 3:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Timed out waiting for controller"))
        return "done"

    assert to_controller(admin, 30.0, call) == "done"  # type: ignore[arg-type]
    assert admin.refreshed == 2 and all(t <= 10.0 for t in calls)


def test_other_timeouts_are_not_sent_again() -> None:
    admin = _Refresher()

    def call(t: float) -> str:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get metadata"))

    with pytest.raises(KafkaException):
        to_controller(admin, 30.0, call)  # type: ignore[arg-type]
    assert admin.refreshed == 0
