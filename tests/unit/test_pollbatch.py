"""The records poll() fetched in a batch and has not returned (kafka_ordered._pollbatch)."""

from __future__ import annotations

from typing import List, Tuple

import pytest

from kafka_ordered._pollbatch import POLL_BATCH_HOLD_SECONDS, POLL_BATCH_SECONDS, PollBatch

Rec = Tuple[str, int, int]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def recs(partition: int, first: int, n: int) -> List[Rec]:
    return [("t", partition, o) for o in range(first, first + n)]


def batch(limit: int = 500) -> Tuple[PollBatch[Rec], Clock]:
    clock = Clock()
    return PollBatch(lambda r: (r[0], r[1]), lambda r: r[2], limit, clock), clock


def test_a_fetch_is_returned_in_order_and_positions_are_the_first_kept() -> None:
    b, clock = batch()
    fetched = recs(0, 10, 3) + recs(1, 5, 2) + recs(0, 13, 1)
    assert b.fill(list(fetched)) == ("t", 0, 10)
    assert b.first_offsets() == {("t", 0): 11, ("t", 1): 5}
    out = [b.records.pop() for _ in range(3)]
    assert out == fetched[1:4]
    assert b.first_offsets() == {("t", 1): 6, ("t", 0): 13}
    assert b.until == clock.now + POLL_BATCH_HOLD_SECONDS


def test_take_drop_and_extend_keep_fetch_order() -> None:
    b, _ = batch()
    b.fill(recs(0, 0, 4) + recs(1, 0, 4))
    assert b.take(2) == recs(0, 1, 2)
    b.extend(recs(0, 4, 2))
    assert b.drop([("t", 1)]) == {("t", 1): 0}
    assert b.take(0) == [] and b.take(10) == recs(0, 3, 3)
    assert len(b) == 0 and b.drop() == {} and b.first_offsets() == {}
    b.fill(recs(2, 7, 3))
    assert b.drop([]) == {} and b.drop() == {("t", 2): 8} and b.records == []


def test_size_follows_the_applications_pace() -> None:
    b, clock = batch(limit=500)
    assert b.size() == 1  # nothing known yet
    b.fill(recs(0, 0, 10))
    clock.now += 0.02  # 2 ms a record: 5 in POLL_BATCH_SECONDS
    assert POLL_BATCH_SECONDS == 0.01 and b.size() == 5
    b.fill(recs(0, 10, 10))
    clock.now += 10 * 2.0  # a slow application: one record a fetch
    assert b.size() == 1
    b.fill(recs(0, 20, 2))
    clock.now += 1e-6
    assert b.size() == 500  # never above the limit
    b.fill([])
    assert b.size() == 1  # an empty fetch: start small again


def test_a_limit_of_one_never_keeps_anything_and_zero_is_refused() -> None:
    b, clock = batch(limit=1)
    b.fill([("t", 0, 0)])
    clock.now += 1e-6
    assert b.size() == 1 and b.records == []
    with pytest.raises(ValueError):
        PollBatch(lambda r: ("t", 0), lambda r: 0, 0)
