"""The fault suite's producer lines (pure): every acknowledged record is
read, also one whose offset the client could not tell."""

from __future__ import annotations

from dataclasses import replace
from typing import List

import pytest

from kafka_ordered import Layout
from kafka_ordered.errors import ConcurrentLayoutChangeError, LayoutLogUnwritableError
from kafka_ordered.testing.demo import _acknowledgement, _change_layout, _started


def test_a_placed_acknowledgement_is_read_whole() -> None:
    assert _acknowledgement("key-1\tP0:3\t2\t17\t200\t100") == ("key-1", "P0:3", 2, 17, 200, 100)


def test_an_acknowledgement_without_an_offset_still_counts() -> None:
    """librdkafka's idempotent producer acknowledges a batch whose answer was
    lost, once a later answer proves it written, without an offset
    (``msg.offset()`` is None): seen in the Apache Kafka fault suite, seed
    21, when a broker was killed."""
    assert _acknowledgement("key-1\tP1:5\t0\tNone\t200\t100") == ("key-1", "P1:5", 0, None, 200, 100)


class _AdminWhoseFirstAppendTimesOut:
    """An admin whose first expand is written but not acknowledged (the
    layout-log leader was killed): the change is in the log, the call raised."""

    def __init__(self) -> None:
        self.current = Layout(topic="t", epoch=1, initial_partitions=2, partitions=2, physical_partitions=2)
        self.calls = 0

    def layout(self, topic: str) -> Layout:
        return self.current

    def expand(self, topic: str, partitions: int, *, expected_epoch: int) -> Layout:
        self.calls += 1
        if expected_epoch != self.current.epoch:
            raise ConcurrentLayoutChangeError("epoch moved")
        self.current = replace(self.current, partitions=partitions, physical_partitions=partitions,
                               epoch=self.current.epoch + 1)
        if self.calls == 1:
            raise LayoutLogUnwritableError("append to layout log failed: Local: Message timed out", code=-192)
        return self.current


def test_an_unacknowledged_layout_change_is_read_back_not_made_twice() -> None:
    """Seen in the Apache Kafka fault suite, seed 21: the layout-log leader
    was killed while a change was appended, the append timed out, and the
    operator loop gave up. The error says to read the log before retrying:
    the loop reads the layout anew and finds the change made."""
    admin = _AdminWhoseFirstAppendTimesOut()
    lay = _change_layout(admin, "t", 4, patience_s=5.0)
    assert lay is not None and lay.partitions == 4 and lay.epoch == 2
    assert admin.calls == 1


def test_a_worker_makes_its_client_again_after_a_retriable_error() -> None:
    """Found by the fault suite on Apache Kafka (seed 6): a consumer
    restarted while a broker was down could not read the layout log's end
    within the timeout, and the worker died of the retriable error its
    constructor raised. It makes the client again, as a supervisor would
    restart it; any other error still ends it."""
    from kafka_ordered.errors import BrokerUnavailableError, ConfigError

    tries: List[int] = []

    def make() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise BrokerUnavailableError("reading end offsets: no broker answered")
        return "client"

    assert _started(make, {"now": False}, retry_after=0) == "client" and len(tries) == 3
    stop = {"now": False}

    def down() -> str:
        stop["now"] = True  # SIGTERM while the cluster does not answer
        raise BrokerUnavailableError("reading end offsets: no broker answered")

    assert _started(down, stop, retry_after=0) is None

    def bad() -> str:
        raise ConfigError("ordered.layout.topic: not a topic name")

    with pytest.raises(ConfigError):
        _started(bad, {"now": False}, retry_after=0)
