"""``LayoutAdmin.committed`` and the gates' ``OffsetReader.group_commits``
read a group's commits through a consumer of the group that never joins it
(librdkafka's admin ListConsumerGroupOffsets crashes the process when the
coordinator's broker dies; the integration test
``test_reading_a_groups_commits_survives_its_coordinator_broker_dying``
shows it). Here, against a stub consumer: what is returned, what is raised,
what is closed."""

from __future__ import annotations

from typing import Any, List, Optional

import pytest
from confluent_kafka import KafkaError

from kafka_ordered._kafka import OffsetReader
from kafka_ordered.admin import LayoutAdmin
from kafka_ordered.errors import KafkaOrderedError


class _Answered:
    """A TopicPartition of an answer (its ``error`` is read-only on the real one)."""

    def __init__(self, partition: int, offset: int, error: Optional[KafkaError] = None) -> None:
        self.topic, self.partition, self.offset, self.error = "t", partition, offset, error


class _Reader:
    def __init__(self, answer: List[_Answered]) -> None:
        self.answer = answer
        self.asked: List[Any] = []
        self.closed = False

    def committed(self, partitions: List[Any], timeout: float = -1) -> List[_Answered]:
        self.asked.append(([(p.topic, p.partition) for p in partitions], timeout))
        return self.answer

    def close(self) -> None:
        self.closed = True


def _admin(reader: _Reader) -> LayoutAdmin:
    admin = LayoutAdmin.__new__(LayoutAdmin)
    admin.timeout = 3.0
    admin._group_readers = {"g": reader}  # type: ignore[assignment]
    admin._shared = None  # type: ignore[assignment]
    return admin


def test_commits_come_from_the_groups_reader_none_as_minus_one() -> None:
    reader = _Reader([_Answered(0, 17), _Answered(1, -1001)])
    admin = _admin(reader)
    assert admin.committed("g", [("t", 0), ("t", 1)]) == {("t", 0): 17, ("t", 1): -1}
    assert reader.asked == [([("t", 0), ("t", 1)], 3.0)]
    admin.close()
    assert reader.closed and admin._group_readers == {}


def test_a_partitions_error_is_raised_never_read_as_no_commit() -> None:
    reader = _Reader([_Answered(0, 17), _Answered(1, -1, KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))])
    with pytest.raises(KafkaOrderedError, match=r"t\[1\] for group g") as e:
        _admin(reader).committed("g", [("t", 0), ("t", 1)])
    assert e.value.code == KafkaError.GROUP_AUTHORIZATION_FAILED and not e.value.retriable


@pytest.mark.parametrize("code, retriable", [(KafkaError.TOPIC_AUTHORIZATION_FAILED, False),
                                             (KafkaError.NOT_COORDINATOR, True),
                                             (KafkaError.UNSTABLE_OFFSET_COMMIT, True)])
def test_the_gates_read_raises_a_partitions_error_never_reads_it_as_no_commit(code: int, retriable: bool) -> None:
    """A partition left out of the answer counts as one without a commit
    (waits above -1 are then this member's to announce and commit: a commit
    behind the group's). One whose commit the coordinator could not give
    fails the read instead, retriable or not as its code is."""
    stub = _Reader([_Answered(0, 17), _Answered(1, -1, KafkaError(code))])
    reader = OffsetReader({"bootstrap.servers": "127.0.0.1:9"})
    reader._group_readers["g"] = (stub, 0.0)  # type: ignore[assignment]
    try:
        with pytest.raises(KafkaOrderedError, match=r"t\[1\] for group g") as e:
            reader.group_commits("g", [("t", 0), ("t", 1)], 3.0).result()
        assert e.value.code == code and e.value.retriable is retriable
        assert stub.asked == [([("t", 0), ("t", 1)], 3.0)]
    finally:
        reader.close()
