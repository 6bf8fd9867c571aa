"""OrderedConsumer's C-level pass over a fetch of one topic (stamped records
looked at one by one) decides as its per-record loop: same runs, same
stamps removed, same move tombstones."""

from __future__ import annotations

import random
from typing import Any, List, Set

import pytest

from kafka_ordered import _fastpath, _hashing, tokens
from kafka_ordered.confluent._consumer import OrderedConsumer
from kafka_ordered.tombstones import HEADER as MOVED

TOPIC = "t"
LOG = "log1"


class _Core:
    def __init__(self, topics: Set[str], managed: Set[str]) -> None:
        self._topics, self._managed = topics, managed
        self.freshness = type("F", (), {"log_id": LOG})()

    def owned_topics(self) -> Set[str]:
        return self._topics

    def managed(self, topic: str) -> bool:
        return topic in self._managed

    def managed_after_stamp(self, topic: str, stamp: int) -> bool:
        return topic in self._managed


class _Consumer:
    _runs = OrderedConsumer._runs
    _runs_of_one_topic = OrderedConsumer._runs_of_one_topic
    _runs_per_record = OrderedConsumer._runs_per_record

    def __init__(self, core: _Core) -> None:
        self._core = core


def _batch(rng: random.Random) -> List[Any]:
    from confluent_kafka import Message

    out = []
    offsets = {p: rng.randint(0, 50) for p in range(4)}
    for _ in range(rng.randint(1, 60)):
        p = rng.randrange(4)
        offsets[p] += rng.choice([1, 1, 1, 2])
        h: Any = None
        r = rng.random()
        if r < 0.3:
            h = [(tokens.HEADER, tokens.encode(LOG, rng.randint(0, 30)))]
        elif r < 0.35:
            h = [(tokens.HEADER, tokens.encode("otherlog", 3)), ("app", b"x")]
        elif r < 0.4:
            h = [(tokens.HEADER, tokens.encode(LOG, 2)), (MOVED, b"3")]
        elif r < 0.45:
            h = [("app", b"y")]
        value = None if h and any(k == MOVED for k, _ in h) else b"v"
        try:
            out.append(Message(topic=TOPIC, partition=p, offset=offsets[p], key=b"k", value=value, headers=h))
        except (TypeError, ValueError):
            pytest.skip("the client's Message takes no such headers")
    return out


_SHAPES = [_fastpath.fetch_shape_py] + ([_hashing._C.fetch_shape] if _hashing._C is not None else [])


@pytest.mark.parametrize("shape", _SHAPES, ids=lambda f: "py" if f is _fastpath.fetch_shape_py else "c")
@pytest.mark.parametrize("seed", range(200))
def test_the_one_topic_pass_decides_as_the_per_record_loop(seed: int, shape: Any) -> None:
    rng = random.Random(seed)
    batch = _batch(rng)
    parts, errors, headers = shape(batch)
    assert not errors

    def clone(ms: List[Any]) -> List[Any]:
        return [type(m)(topic=m.topic(), partition=m.partition(), offset=m.offset(), key=m.key(), value=m.value(),
                        headers=m.headers()) for m in ms]

    copy, third = clone(batch), clone(batch)
    c = _Consumer(_Core({TOPIC}, {TOPIC}))
    moved_a: List[Any] = []
    moved_b: List[Any] = []
    a = c._runs_of_one_topic(batch, parts, headers, moved_a)
    b = c._runs_per_record(copy, moved_b)
    assert a is not None
    assert sorted(a, key=lambda r: r.tp) == sorted(b, key=lambda r: r.tp)
    assert [m.headers() for m in batch] == [m.headers() for m in copy]
    assert [(m.partition(), m.offset()) for m in moved_a] == [(m.partition(), m.offset()) for m in moved_b]
    assert sorted(c._runs(third, *shape(third), []), key=lambda r: r.tp) == sorted(b, key=lambda r: r.tp)


def test_the_one_topic_pass_leaves_other_fetches_to_the_per_record_loop() -> None:
    rng = random.Random(1)
    batch = _batch(rng)
    parts, _, headers = _fastpath.fetch_shape_py(batch)
    assert _Consumer(_Core({TOPIC, "u"}, {TOPIC}))._runs_of_one_topic(batch, parts, headers, []) is None
    assert _Consumer(_Core({TOPIC}, set()))._runs_of_one_topic(batch, parts, headers, []) is None


class _KeepingCore:
    def __init__(self, kept: Set[Any], topics: Set[str]) -> None:
        self.kept: dict = {tp: [] for tp in kept}
        self.topics = topics

    def keep(self, tp: Any, records: List[Any]) -> None:
        self.kept[tp].extend(records)

    def owned_topics(self) -> Set[str]:
        return self.topics


class _Keeper:
    _keep = OrderedConsumer._keep

    def __init__(self, core: _KeepingCore) -> None:
        self._core = core


@pytest.mark.parametrize("seed", range(100))
def test_records_in_hand_are_taken_alike_by_partition_and_record_by_record(seed: int) -> None:
    """OrderedConsumer._keep moves the records of partitions with records in
    hand out of a fetch: taking a partition number's records at once (a
    fetch without errors, all of one topic; without reading topic names
    when the member owns one topic; the whole fetch when it is all of one
    kept partition) leaves and keeps exactly what the record-by-record pass
    does, in order."""
    from confluent_kafka import Message

    rng = random.Random(seed)
    topics = ["t"] if seed % 2 else ["t", "t", "u"]
    one_partition = rng.randrange(4) if seed % 4 == 1 else None
    raw = [Message(topic=rng.choice(topics), partition=rng.randrange(4) if one_partition is None else one_partition,
                   offset=i, value=b"v")
           for i in range(rng.randint(1, 80))]
    in_hand = {(t, p) for t in set(topics) for p in range(4) if rng.random() < 0.3}
    if one_partition is not None and seed % 8 == 1:
        in_hand.add(("t", one_partition))
    ends = []
    for errors in (False, True):  # True: the record-by-record pass
        core = _KeepingCore(in_hand, set(topics))
        parts = [m.partition() for m in raw]
        left, left_parts = _Keeper(core)._keep(list(raw), parts, errors)
        assert left_parts == [m.partition() for m in left]
        ends.append(([m.offset() for m in left], {tp: [m.offset() for m in ms] for tp, ms in core.kept.items()}))
    assert ends[0] == ends[1]
    assert [m.offset() for m in raw if (m.topic(), m.partition()) not in in_hand] == ends[0][0]
