"""Holds in hand on the grouped fetch path (kafka-python, aiokafka, the
simulation): :func:`kafka_ordered._grouped.take` keeps the records of a
partition held at a gate this member opens itself, instead of pausing the
client and seeking it back, and decides them again once the gate opened."""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import pytest

from kafka_ordered import _gating
from kafka_ordered._gating import GatingCore
from kafka_ordered._grouped import released_in_hand, take
from kafka_ordered.records import encode_registration

from .test_gating_core import TOPIC, FakePort, _core


class Part(NamedTuple):
    topic: str
    partition: int


class Rec(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: Optional[bytes] = b"k"
    value: Optional[bytes] = b"v"
    headers: List[Tuple[str, bytes]] = []
    serialized_key_size: int = 1
    serialized_value_size: int = 1


def _replace(rec: Rec, headers: List[Tuple[str, bytes]]) -> Rec:
    return rec._replace(headers=headers)


P0, P1 = Part(TOPIC, 0), Part(TOPIC, 1)
TP1 = (TOPIC, 1)


def _recs(p: int, first: int, end: int) -> List[Rec]:
    return [Rec(TOPIC, p, o) for o in range(first, end)]


def _offsets(out: Dict[Any, List[Rec]], part: Part) -> List[int]:
    return [r.offset for r in out.get(part, [])]


def _grouped_core() -> Tuple[GatingCore, FakePort]:
    """A member holding in hand that owns partition 1 (gate at 5 waiting on
    partition 0 up to 10) and the gate's source, partition 0."""
    core, port = _core()
    core.keep_in_hand = True
    core.assigned_at({(TOPIC, 0): 0})
    port.position[(TOPIC, 0)] = 0
    port.position[TP1] = 0
    return core, port


def _fetch(core: GatingCore, port: FakePort, raw: Dict[Part, List[Rec]],
           limit: Optional[int] = None) -> Dict[Any, List[Rec]]:
    """A client fetch (positions move past what it hands out), decided by take."""
    for part, recs in raw.items():
        port.position[(part.topic, part.partition)] = recs[-1].offset + 1
    return take(core, raw, {}, _replace, limit)


def _source_processed(core: GatingCore, port: FakePort) -> None:
    out = _fetch(core, port, {P0: _recs(0, 0, 10)})
    assert _offsets(out, P0) == list(range(10))
    core.begin_poll()  # the application processed them: the gate opens


def test_take_holds_in_hand_without_pausing_or_seeking() -> None:
    core, port = _grouped_core()
    out = _fetch(core, port, {P1: _recs(1, 0, 8)})
    assert _offsets(out, P1) == [0, 1, 2, 3, 4]
    assert core.in_hand(TP1) and [r.offset for r in core.kept[TP1]] == [5, 6, 7]
    assert port.calls == [], "no pause, no seek: nothing is fetched twice"
    assert core.positions([TP1]) == {TP1: 5} and core.uncommitted([TP1]) == {TP1: 5}


def test_later_records_of_a_partition_in_hand_are_kept_after_the_first() -> None:
    core, port = _grouped_core()
    _fetch(core, port, {P1: _recs(1, 0, 8)})
    out = _fetch(core, port, {P1: _recs(1, 8, 12)})
    assert P1 not in out or not out[P1]
    assert [r.offset for r in core.kept[TP1]] == list(range(5, 12))
    assert port.calls == []


def test_records_in_hand_come_out_in_order_before_later_fetched_ones() -> None:
    core, port = _grouped_core()
    _fetch(core, port, {P1: _recs(1, 0, 8)})
    _source_processed(core, port)
    assert not core.held() and released_in_hand(core)
    out = _fetch(core, port, {P1: _recs(1, 8, 10)})
    assert _offsets(out, P1) == list(range(5, 10))
    assert not core.kept and port.calls == []
    assert core.positions([TP1]) == {TP1: 10}


def test_records_in_hand_come_out_without_a_new_fetch() -> None:
    core, port = _grouped_core()
    _fetch(core, port, {P1: _recs(1, 0, 8)})
    _source_processed(core, port)
    out = take(core, {}, {}, _replace)
    assert _offsets(out, P1) == [5, 6, 7] and not core.kept and not released_in_hand(core)


def test_records_in_hand_come_out_up_to_a_limit() -> None:
    core, port = _grouped_core()
    _fetch(core, port, {P1: _recs(1, 0, 8)})
    _source_processed(core, port)
    out = take(core, {}, {}, _replace, 2)
    assert _offsets(out, P1) == [5, 6]
    assert core.positions([TP1]) == {TP1: 7}, "the rest is not processed yet"
    out = take(core, {}, {}, _replace, 2)
    assert _offsets(out, P1) == [7] and not core.kept


def test_records_in_hand_are_held_in_hand_again_at_the_next_closed_gate() -> None:
    core, port = _grouped_core()
    _fetch(core, port, {P1: _recs(1, 0, 12)})
    # another producer's gate on partition 1 from offset 8, waiting on partition 0 up to 20
    history = core.follower.history
    history.apply(history.next_offset, TOPIC.encode(),
                  encode_registration(TOPIC, "q", True, 2, 1, {1: (8, {0: 20})})[1])
    core.refresh_gates(force=True)
    _source_processed(core, port)
    out = take(core, {}, {}, _replace)
    assert _offsets(out, P1) == [5, 6, 7]
    assert core.in_hand(TP1) and [r.offset for r in core.kept[TP1]] == list(range(8, 12))
    assert port.calls == []
    out = _fetch(core, port, {P0: _recs(0, 10, 20), P1: _recs(1, 12, 14)})
    assert _offsets(out, P0) == list(range(10, 20)) and P1 not in out
    core.begin_poll()
    out = take(core, {}, {}, _replace)
    assert _offsets(out, P1) == list(range(8, 14)) and not core.kept and port.calls == []


def test_a_hold_in_hand_beyond_the_record_bound_becomes_a_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_gating, "KEEP_IN_HAND_RECORDS", 4)
    core, port = _grouped_core()
    _fetch(core, port, {P1: _recs(1, 0, 8)})
    assert core.in_hand(TP1)
    out = _fetch(core, port, {P1: _recs(1, 8, 10)})
    assert P1 not in out
    assert not core.in_hand(TP1) and TP1 in core.held() and TP1 not in core.kept
    assert TP1 in port.paused and port.position[TP1] == 5, "paused and sought back to the hold"


def test_a_hold_in_hand_beyond_the_byte_bound_becomes_a_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_gating, "KEEP_IN_HAND_BYTES", 9)
    core, port = _grouped_core()
    core.kept_bytes = lambda rs: sum(r.serialized_key_size + r.serialized_value_size for r in rs)
    _fetch(core, port, {P1: _recs(1, 0, 8)})
    assert core.in_hand(TP1)  # 3 records, 6 bytes
    _fetch(core, port, {P1: _recs(1, 8, 10)})
    assert not core.in_hand(TP1) and TP1 in port.paused and port.position[TP1] == 5


def test_kept_records_are_sized_only_while_their_partition_is_held_in_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """The byte bound applies to holds in hand only: records kept of a
    released partition are not sized as they come and go (a replay keeps
    and hands out thousands); a new hold in hand sizes what is kept once,
    when it keeps more, then only what it keeps."""
    monkeypatch.setattr(_gating, "KEEP_IN_HAND_BYTES", 20)
    core, port = _grouped_core()
    sized: List[int] = []

    def size(rs: List[Rec]) -> int:
        sized.extend(r.offset for r in rs)
        return sum(r.serialized_key_size + r.serialized_value_size for r in rs)

    core.kept_bytes = size
    _fetch(core, port, {P1: _recs(1, 0, 12)})
    assert core.in_hand(TP1) and sized == list(range(5, 12))
    history = core.follower.history  # a second gate on partition 1 from offset 14, waiting on partition 0 up to 30
    history.apply(history.next_offset, TOPIC.encode(),
                  encode_registration(TOPIC, "q", True, 2, 1, {1: (14, {0: 30})})[1])
    core.refresh_gates(force=True)
    _source_processed(core, port)
    sized.clear()
    out = _fetch(core, port, {P1: _recs(1, 12, 16)}, limit=3)
    assert _offsets(out, P1) == [5, 6, 7] and not core.in_hand(TP1)
    assert sized == [], "released: what is kept and handed out is not sized"
    out = take(core, {}, {}, _replace)
    assert _offsets(out, P1) == list(range(8, 14)) and core.in_hand(TP1)
    assert [r.offset for r in core.kept[TP1]] == [14, 15] and sized == []
    _fetch(core, port, {P1: _recs(1, 16, 30)})
    assert not core.in_hand(TP1) and TP1 in port.paused, "past the byte bound: a pause"
    assert sized == list(range(14, 30)), "held in hand again: what it keeps is sized, once"


def test_an_error_in_take_gives_records_in_hand_back() -> None:
    core, port = _grouped_core()
    _fetch(core, port, {P1: _recs(1, 0, 8)})
    _source_processed(core, port)

    def fail(runs: Any = ()) -> None:
        raise RuntimeError("catch-up failed")

    core.ensure_fresh = fail  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        _fetch(core, port, {P1: _recs(1, 8, 10)})
    assert not core.kept and port.position[TP1] == 5, "fetched again from the first record in hand"
    assert core.positions([TP1]) == {TP1: 5}


def test_an_error_in_take_while_held_in_hand_pauses_at_the_hold() -> None:
    core, port = _grouped_core()
    _fetch(core, port, {P1: _recs(1, 0, 8)})

    def fail(runs: Any = ()) -> None:
        raise RuntimeError("catch-up failed")

    core.ensure_fresh = fail  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        _fetch(core, port, {P1: _recs(1, 8, 10)})
    assert not core.kept and port.position[TP1] == 5 and TP1 in port.paused


def test_settle_refuses_the_calm_while_records_are_in_hand() -> None:
    core, port = _grouped_core()
    _fetch(core, port, {P1: _recs(1, 0, 8)})
    _source_processed(core, port)
    core.settle()
    assert not core.calm.quiet
    assert _offsets(take(core, {}, {}, _replace), P1) == [5, 6, 7]
    core.begin_poll()
    core.commit_processed(asynchronous=False)  # the hand-off wait on the source passes
    assert port.commits == {(TOPIC, 0): 10, TP1: 8}, "commits follow what was delivered"
    core.maintain()
    core.settle()
    assert core.calm.quiet


def test_a_hold_in_hand_that_kept_nothing_leaves_nothing_in_hand_once_released() -> None:
    """Found by the aiokafka history-replay benchmark: a partition held in
    hand at its position before anything past the gate was fetched (its
    kept list empty) stayed in ``kept`` once released, so every poll asked
    for records in hand and the calm never came back."""
    core, port = _grouped_core()
    assert _offsets(_fetch(core, port, {P1: _recs(1, 0, 5)}), P1) == [0, 1, 2, 3, 4]
    core.maintain()  # at its gate already: held there, in hand, nothing kept yet
    assert core.in_hand(TP1) and core.kept == {TP1: []}
    _source_processed(core, port)
    assert TP1 not in core.held() and not core.kept and not released_in_hand(core)
    core.commit_processed(asynchronous=False)
    core.maintain()
    core.settle()
    assert core.calm.quiet


def test_serialized_bytes_counts_keys_and_values_a_missing_one_as_none() -> None:
    from kafka_ordered._grouped import serialized_bytes

    recs = [Rec(TOPIC, 0, 0, serialized_key_size=3, serialized_value_size=10),
            Rec(TOPIC, 0, 1, key=None, serialized_key_size=-1, serialized_value_size=7),
            Rec(TOPIC, 0, 2, value=None, serialized_key_size=2, serialized_value_size=-1)]
    assert serialized_bytes(recs) == 22
    assert serialized_bytes([]) == 0
