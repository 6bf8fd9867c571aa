"""Move tombstones (pure): which partitions, once per key, bounded memory."""

from __future__ import annotations

from kafka_ordered.layout import Layout
from kafka_ordered.tombstones import HEADER, MoveTombstones, compacting, is_move_tombstone


def _layouts(*counts: int) -> list:
    return [Layout("t", i + 1, counts[0], n, max(counts)) for i, n in enumerate(counts)]


def test_cleanup_policy_values() -> None:
    assert compacting("compact")
    assert compacting("delete,compact")
    assert compacting("compact, delete")
    assert not compacting("delete")
    assert not compacting(None)
    assert not compacting("")


def test_a_key_is_tombstoned_in_every_earlier_partition_once() -> None:
    a, b, c = _layouts(2, 3, 4)
    moves = MoveTombstones([a, b], c)
    assert moves.active
    keys = [f"k{i}".encode() for i in range(2000)]
    for k in keys:
        p = c.partition_for(k)
        due = moves.due(k, p)
        assert due == sorted({a.partition_for(k), b.partition_for(k)} - {p})
        assert moves.due(k, p) == []  # once
    moved = [k for k in keys if a.partition_for(k) != c.partition_for(k) or b.partition_for(k) != c.partition_for(k)]
    assert moved and len(moved) < len(keys)


def test_shrink_back_tombstones_the_partition_the_key_left() -> None:
    a, b, c = _layouts(2, 4, 2)
    moves = MoveTombstones([a, b], c)
    k = next(f"k{i}".encode() for i in range(1000) if b.partition_for(f"k{i}".encode()) >= 2)
    assert moves.due(k, c.partition_for(k)) == [b.partition_for(k)]


def test_no_moves_no_work() -> None:
    a, = _layouts(4)
    same = Layout("t", 2, 4, 4, 8)  # more physical partitions, same mapping
    moves = MoveTombstones([a], same)
    assert not moves.active
    assert moves.due(b"k", same.partition_for(b"k")) == []


def test_memory_is_bounded_and_forgetting_only_repeats() -> None:
    a, b = _layouts(2, 4)
    moves = MoveTombstones([a], b, capacity=10)
    keys = [f"k{i}".encode() for i in range(100)]
    first = {k: moves.due(k, b.partition_for(k)) for k in keys}
    assert len(moves) <= 10
    again = {k: moves.due(k, b.partition_for(k)) for k in keys}
    for k in keys:  # a forgotten key gets the same tombstones again, never others
        assert again[k] in ([], first[k])


def test_recognising_a_move_tombstone() -> None:
    assert is_move_tombstone(None, [(HEADER, b"3"), ("x", b"y")])
    assert is_move_tombstone(None, {HEADER: b"3"})
    assert is_move_tombstone(None, [(HEADER.encode(), b"3")])
    assert not is_move_tombstone(b"v", [(HEADER, b"3")])  # not a tombstone
    assert not is_move_tombstone(None, [("other", b"3")])  # the application's own tombstone
    assert not is_move_tombstone(None, None)


def test_after_an_abort_every_key_gets_its_tombstones_again() -> None:
    a, b = _layouts(2, 4)
    moves = MoveTombstones([a], b)
    k = next(f"k{i}".encode() for i in range(1000) if a.partition_for(f"k{i}".encode()) != b.partition_for(f"k{i}".encode()))
    first = moves.due(k, b.partition_for(k))
    assert first and moves.due(k, b.partition_for(k)) == []
    moves.forget()
    assert moves.due(k, b.partition_for(k)) == first


def test_after_switch_uses_every_earlier_layout_and_the_targets_change_offset() -> None:
    from kafka_ordered.history import LayoutHistory, encode_layout

    a, b, c = _layouts(2, 3, 4)
    h = LayoutHistory()
    for offset, (lay, op) in enumerate([(a, "create"), (b, "expand"), (c, "expand")]):
        h.apply(offset, *encode_layout(lay, op, "admin"), 0)
    moves = MoveTombstones.after_switch(h, "t", c)
    assert moves is not None and moves.stamp_offset == 2 and moves.epoch == 3
    keys = [f"k{i}".encode() for i in range(100)]
    for k in keys:
        p = c.partition_for(k)
        assert moves.due(k, p) == sorted({a.partition_for(k), b.partition_for(k)} - {p})
    assert any(moves.due(k, c.partition_for(k)) for k in [f"x{i}".encode() for i in range(100)])
    assert MoveTombstones.after_switch(h, "t", a) is None  # nothing earlier: no key moved
