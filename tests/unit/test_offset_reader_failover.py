"""OffsetReader's ListOffsets after a leader failover (pure: fake admin
clients). librdkafka's long-lived admin client answered with leader errors,
or with offset -1001 and no error, for partitions whose leader had failed
over; a new admin client answers right (test_layout_log_failover)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Dict, List

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_ordered import _kafka
from kafka_ordered._kafka import OffsetReader
from kafka_ordered.errors import BrokerUnavailableError, KafkaOrderedError


class _Info:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class _Admin:
    """Answers ListOffsets from ``answers``: an offset, or ``("error", code)`` raised."""

    def __init__(self, answers: Dict[int, Any]) -> None:
        self.answers = answers
        self.calls = 0

    def list_offsets(self, specs: Dict[Any, Any], request_timeout: float, **_: Any) -> Dict[Any, Future]:
        self.calls += 1
        out = {}
        for tp in specs:
            f: Future = Future()
            a = self.answers[tp.partition]
            if isinstance(a, int):
                f.set_result(_Info(a))
            else:
                f.set_exception(KafkaException(KafkaError(a[1])))
            out[tp] = f
        return out


def _reader(stale: _Admin, fresh: List[_Admin], monkeypatch: pytest.MonkeyPatch) -> OffsetReader:
    made = iter(fresh)
    monkeypatch.setattr(_kafka, "new_admin", lambda conn: next(made))
    return OffsetReader({"bootstrap.servers": "x:1"}, 2.0, admin=stale)


def test_an_answer_without_an_offset_is_asked_again_through_a_new_admin(monkeypatch: pytest.MonkeyPatch) -> None:
    stale, fresh = _Admin({0: -1001, 1: 41}), _Admin({0: 17, 1: 41})
    r = _reader(stale, [fresh], monkeypatch)
    assert r.listed_end_offsets([("t", 0), ("t", 1)]) == {("t", 0): 17, ("t", 1): 41}  # never an end of -1001 or 0
    assert (stale.calls, fresh.calls) == (1, 1)


def test_a_leader_error_is_asked_again_through_a_new_admin(monkeypatch: pytest.MonkeyPatch) -> None:
    stale, fresh = _Admin({0: ("error", KafkaError.FENCED_LEADER_EPOCH)}), _Admin({0: 5})
    r = _reader(stale, [fresh], monkeypatch)
    assert r.start_offsets([("t", 0)]) == {("t", 0): 5}


def test_no_offset_until_the_timeout_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {0: -1001}
    r = _reader(_Admin(answers), [_Admin(answers) for _ in range(200)], monkeypatch)
    with pytest.raises(BrokerUnavailableError, match="no broker answered with an offset"):
        r.listed_end_offsets([("t", 0)], timeout=0.3)


def test_other_errors_are_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    stale = _Admin({0: ("error", KafkaError.TOPIC_AUTHORIZATION_FAILED)})
    r = _reader(stale, [], monkeypatch)
    with pytest.raises(KafkaOrderedError) as e:
        r.listed_end_offsets([("t", 0)])
    assert e.value.code == KafkaError.TOPIC_AUTHORIZATION_FAILED and stale.calls == 1


def test_a_leader_error_until_the_timeout_is_a_retriable_broker_unavailable_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader that did not settle within the timeout (FENCED_LEADER_EPOCH
    to the end: a killed broker's partitions still moving) is the broker being
    unavailable, and retrying may succeed: not a bare KafkaOrderedError (an
    application would not know to retry; chaos seed 24 on Apache Kafka)."""
    answers = {0: ("error", KafkaError.FENCED_LEADER_EPOCH)}
    r = _reader(_Admin(answers), [_Admin(answers) for _ in range(200)], monkeypatch)
    with pytest.raises(BrokerUnavailableError, match="FENCED_LEADER_EPOCH") as e:
        r.listed_end_offsets([("t", 0)], timeout=0.3)
    assert e.value.retriable and e.value.code == KafkaError.FENCED_LEADER_EPOCH
