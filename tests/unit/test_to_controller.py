"""``to_controller`` sends a controller request again when librdkafka timed
out waiting for a controller that is gone, within its timeout (the offset
reader's retries after a leader change: test_offset_reader_failover.py)."""

from __future__ import annotations

from typing import List

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_ordered._kafka import to_controller


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
