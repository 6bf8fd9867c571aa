"""The layout-log follower treats an offset jump as suspect (issue 10, item 0).

A scripted reader stands in for the broker: it first hands out offsets
0 and 2 (offset 1 reserved but not yet written, as the embedded broker does),
then, when the follower reads again from 1, 1 and 2. The old follower
applied 0 and 2 and never saw 1.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from kafka_ordered import LayoutFollower
from kafka_ordered.layout import Layout
from kafka_ordered.records import encode_layout, encode_registration

TOPIC = "orders"


class _Msg:
    def __init__(self, offset: int, value: bytes) -> None:
        self._offset, self._value = offset, value

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> Tuple[int, int]:
        return (1, 0)


class _ScriptedReader:
    """Serves ``log`` from the asked offset, hiding ``hidden`` offsets for the first ``hide_reads`` reads."""

    clients = 0

    def __init__(self, log: List[bytes], hidden: set, hide_reads: int) -> None:
        self.log, self.hidden, self.hide_reads = log, hidden, hide_reads
        self.reads: List[int] = []

    def read_from(self, tp: Any, offset: int, upto: Optional[int] = None,
                  timeout: Optional[float] = None) -> Tuple[List[_Msg], int]:
        self.reads.append(offset)
        out = [_Msg(o, self.log[o]) for o in range(offset, len(self.log))
               if not (self.hide_reads > 0 and o in self.hidden)]
        self.hide_reads -= 1
        return out, len(self.log)

    def listed_end_offsets(self, tps: Any, timeout: Optional[float] = None) -> Any:
        """As :class:`OffsetReader`: ListOffsets(latest), exact for the layout
        log (one record per batch)."""
        return {tp: len(self.log) for tp in tps}

    def close(self) -> None:
        pass


def _follower(reader: _ScriptedReader) -> LayoutFollower:
    f = LayoutFollower({"bootstrap.servers": "127.0.0.1:1"}, "_log", timeout=2.0, reader=reader)  # type: ignore[arg-type]
    f._bounds = lambda timeout: (0, len(reader.log))  # type: ignore[method-assign]
    return f


def _log() -> List[bytes]:
    lay = Layout(TOPIC, 1, 2, 2, 2)
    return [encode_layout(lay, "create", "a")[1]] + [
        encode_registration(TOPIC, f"p{i}", True, 1, 1, {})[1] for i in range(3)
    ]


def test_a_transient_hole_is_read_again() -> None:
    reader = _ScriptedReader(_log(), hidden={1}, hide_reads=1)
    f = _follower(reader)
    history = f.sync()
    assert reader.reads == [0, 1]  # the hole at 1 was read again before 2 was applied
    assert [r.offset for r in history.registrations(TOPIC)] == [1, 2, 3]
    f.close()


def test_a_permanent_hole_is_accepted_after_rereads() -> None:
    reader = _ScriptedReader(_log(), hidden={1}, hide_reads=100)
    f = _follower(reader)
    history = f.sync()
    assert len(reader.reads) >= 4
    assert [r.offset for r in history.registrations(TOPIC)] == [2, 3]
    assert history.next_offset == 4
    f.close()


def test_a_hole_in_the_long_poll_fetch_is_filled_before_the_records_after_it() -> None:
    """The background read hands out offsets 0, 2, 3 (1 not written yet): the
    follower reads 1 with the short-wait reader first."""
    log = _log()
    reader = _ScriptedReader(log, hidden=set(), hide_reads=0)
    f = _follower(reader)
    with f._lock:
        f._apply_all([_Msg(0, log[0]), _Msg(2, log[2]), _Msg(3, log[3])], deadline=1e18)
    assert reader.reads == [1]
    assert [r.offset for r in f.history.registrations(TOPIC)] == [1, 2, 3]
    f.close()


def test_catch_up_past_reads_only_when_the_view_lacks_the_offset() -> None:
    reader = _ScriptedReader(_log(), hidden=set(), hide_reads=0)
    f = _follower(reader)
    f.catch_up_past(1)
    assert reader.reads == [0] and f.history.next_offset == 4  # one read brought everything there was
    f.catch_up_past(3)
    assert reader.reads == [0]  # already in the view: no request
    f.close()


def test_a_hole_that_outlasts_five_rereads_is_still_read_not_skipped() -> None:
    """A loaded broker may take longer than five quick re-reads to write a
    batch whose offsets it handed out. A hole is accepted as permanent only
    after it has stayed for half the follower's timeout."""
    reader = _ScriptedReader(_log(), hidden={1}, hide_reads=8)
    f = _follower(reader)
    history = f.sync()
    assert [r.offset for r in history.registrations(TOPIC)] == [1, 2, 3]
    assert history.problems == []
    f.close()


def test_sync_reads_every_record_appended_before_it_was_called() -> None:
    """sync() asks the log's end when it is called (ListOffsets, exact for
    the layout log) and reads to it, also when the follower's own bounds,
    read earlier, are behind."""
    log = _log()
    reader = _ScriptedReader(log[:2], hidden=set(), hide_reads=0)
    f = _follower(reader)
    f._bounds = lambda timeout: (0, 2)  # type: ignore[method-assign]
    assert f.sync().next_offset == 2
    reader.log = log  # two more records appended
    history = f.sync()
    assert history.next_offset == 4
    assert [r.offset for r in history.registrations(TOPIC)] == [1, 2, 3]
    f.close()
