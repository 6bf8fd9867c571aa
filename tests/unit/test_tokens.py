"""The causal-token rule (kafka_ordered.tokens): stamps, when to stamp, when to catch up."""

from __future__ import annotations

import pytest

from kafka_ordered import tokens
from kafka_ordered.tokens import HEADER, CatchUp, Run, StampBook, catch_up, partitions_to_stamp

LOG = "AaIGT1UtcHGkmS1xgUHtDw"


def test_encode_decode_round_trip_and_malformed_values() -> None:
    v = tokens.encode(LOG, 42)
    assert v == f"{LOG}:42".encode()
    assert tokens.decode(v) == (LOG, 42)
    for bad in (b"", b"42", b":42", b"x:", b"x:-1", b"x:4a", None, 42, "\xff:1".encode("latin-1")):
        assert tokens.decode(bad) is None
    with pytest.raises(ValueError):
        tokens.encode("a:b", 1)
    with pytest.raises(ValueError):
        tokens.encode(LOG, -1)


def test_stamp_of_ignores_other_logs_and_takes_the_newest() -> None:
    h = [("app", b"1"), (HEADER, tokens.encode("otherlog", 900)), (HEADER, tokens.encode(LOG, 7))]
    assert tokens.stamp_of(h, LOG) == 7
    assert tokens.stamp_of(h, "otherlog") == 900
    assert tokens.stamp_of([(HEADER, tokens.encode("otherlog", 900))], LOG) is None  # foreign stamp: ignored
    assert tokens.stamp_of([(HEADER, b"garbage")], LOG) is None
    assert tokens.stamp_of(None, LOG) is None and tokens.stamp_of([], LOG) is None
    assert tokens.stamp_of([(HEADER, tokens.encode(LOG, 3)), (HEADER, tokens.encode(LOG, 9))], LOG) == 9
    assert tokens.stamp_of({HEADER: tokens.encode(LOG, 5)}, LOG) == 5


def test_strip_and_with_stamp() -> None:
    h = [("app", b"1"), (HEADER, b"x:1")]
    assert tokens.strip(h) == [("app", b"1")]
    assert tokens.strip([(HEADER, b"x:1")]) is None
    assert tokens.has_header(h) and not tokens.has_header([("app", b"1")]) and not tokens.has_header(None)
    assert tokens.with_stamp(None, b"v") == [(HEADER, b"v")]
    assert tokens.with_stamp({"a": b"1"}, b"v") == [("a", b"1"), (HEADER, b"v")]
    assert tokens.with_stamp([("a", b"1"), (HEADER, b"old")], b"v") == [("a", b"1"), (HEADER, b"v")]


def test_stamps_accumulate_and_leave_only_with_an_ack_of_at_least_their_offset() -> None:
    book = StampBook()
    book.add("t", [4, 5], 10)
    assert book.stamp("t", 4) == 10 and book.stamp("t", 0) is None
    book.add("t", [6], 20)  # a second registration keeps the first one's stamps
    assert book.pending("t") == {4, 5, 6}
    assert book.stamp("t", 4) == 20  # every stamp carries the newest offset
    assert book.acked("t", 4, 20)
    assert not book.acked("t", 6, 10)  # stamped before the registration that added it: stays
    assert book.pending("t") == {5, 6}
    book.add("t", [5], 30)
    assert not book.acked("t", 5, 20)  # the offset that added it last is 30
    assert book.acked("t", 5, 30) and book.pending("t") == {6}
    assert book.pending("other") == frozenset()


def test_transactional_acks_count_at_commit_only() -> None:
    book = StampBook()
    book.add("t", [1, 2], 5)
    assert not book.acked("t", 1, 5, in_transaction=True)
    book.aborted()
    assert book.pending("t") == {1, 2}
    book.acked("t", 1, 5, in_transaction=True)
    assert book.committed() == {"t"}
    assert book.pending("t") == {2}


def test_partitions_to_stamp() -> None:
    assert partitions_to_stamp([4, 5], 10, False, False, [], None) == ({4, 5}, 10)
    assert partitions_to_stamp([], None, True, False, [1], 3) == (frozenset(), None)  # anonymous: nothing old
    # A restarting stable id stamps what its earlier registrations gated, even with nothing new.
    assert partitions_to_stamp([], None, True, True, [2, 3], 7) == ({2, 3}, 7)
    assert partitions_to_stamp([4], 12, True, True, [2], 7) == ({2, 4}, 12)
    assert partitions_to_stamp([4], 12, False, True, [2], 7) == ({4}, 12)  # a live switch: only the new ones
    assert partitions_to_stamp([], 12, False, True, [], None) == (frozenset(), None)  # appended, no gates


def test_catch_up_rules() -> None:
    tp = ("t", 0)
    ok = {tp: 100}
    assert catch_up(50, [Run(tp, 100, 109, 10)], ok) == CatchUp()
    assert not catch_up(50, [Run(tp, 100, 109, 10)], ok).needed
    # A stamp the view already includes: nothing to do; beyond it: read past it.
    assert catch_up(50, [Run(tp, 100, 109, 10, stamp=49)], ok) == CatchUp()
    assert catch_up(50, [Run(tp, 100, 109, 10, stamp=50)], ok) == CatchUp(past=50)
    assert catch_up(50, [Run(tp, 100, 109, 10, stamp=60), Run(("t", 1), 0, 0, 1, stamp=55)],
                    {**ok, ("t", 1): 0}) == CatchUp(past=60)
    # First fetch after an assignment, a seek or a reset: to the end.
    assert catch_up(50, [Run(tp, 100, 109, 10)], {}) == CatchUp(to_end=True)
    assert catch_up(50, [Run(tp, 100, 109, 10)], {tp: None}) == CatchUp(to_end=True)
    # A jump (silent reset) or a hole inside the fetch: to the end.
    assert catch_up(50, [Run(tp, 120, 129, 10)], ok) == CatchUp(to_end=True)
    assert catch_up(50, [Run(tp, 100, 110, 10)], ok) == CatchUp(to_end=True)
    assert catch_up(50, [], ok) == CatchUp()


def test_take_stamp_reads_and_removes_in_one_pass() -> None:
    """Adapters' one reading of a record's headers: ``None`` without a stamp
    header; else the newest stamp of this log (malformed ones and other
    logs' count as none) and the headers without any stamp header."""
    take = tokens.take_stamp
    assert take([("a", b"1")], "L") is None
    assert take({"a": b"1"}, "L") is None
    assert take([(HEADER, b"L:3"), ("a", b"1"), (HEADER, b"L:9")], "L") == (9, [("a", b"1")])
    assert take([(HEADER, b"M:3")], "L") == (None, None)
    assert take([(HEADER, b"L:x:3")], "L") == (None, None)
    assert take([(HEADER, b"L:")], "L") == (None, None)
    assert take([(HEADER, "L:4")], "L") == (4, None)
    assert take([(HEADER.encode(), b"L:5")], "L") == (5, None)
    assert take({HEADER: b"L:6", "a": b"1"}, "L") == (6, [("a", b"1")])
    assert take([(HEADER, b":7")], "") == (None, None)
    for headers in ([(HEADER, b"L:3"), ("a", b"1")], [(HEADER, b"M:3")], [(HEADER, b"L:oops")]):
        assert take(headers, "L") == (tokens.stamp_of(headers, "L"), tokens.strip(headers))
