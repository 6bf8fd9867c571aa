"""The layout-log follower treats an offset jump as suspect (issue 10, item 0).

A scripted consumer stands in for the broker: it first hands out offsets
0 and 2 (offset 1 reserved but not yet written, as the embedded broker does),
then, after the follower seeks back, 1 and 2. The old follower applied 0 and
2 and never saw 1.
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


class _ScriptedConsumer:
    """Serves ``log`` from the position, hiding ``hidden`` offsets for the first ``hide_reads`` reads."""

    def __init__(self, log: List[bytes], hidden: set, hide_reads: int) -> None:
        self.log, self.hidden, self.hide_reads = log, hidden, hide_reads
        self.position = 0
        self.seeks: List[int] = []

    def consume(self, num: int, timeout: float) -> List[_Msg]:
        out = [_Msg(o, self.log[o]) for o in range(self.position, len(self.log))
               if not (self.hide_reads > 0 and o in self.hidden)]
        self.hide_reads -= 1
        self.position = len(self.log)
        return out

    def seek(self, tp: Any) -> None:
        self.position = tp.offset
        self.seeks.append(tp.offset)

    def get_watermark_offsets(self, tp: Any, cached: bool = False) -> Tuple[int, int]:
        return 0, len(self.log)

    def close(self) -> None:
        pass


def _follower(consumer: _ScriptedConsumer) -> LayoutFollower:
    f = LayoutFollower({"bootstrap.servers": "127.0.0.1:1"}, "_log", timeout=2.0)
    f._consumer = consumer  # type: ignore[assignment]
    f._bounds = lambda timeout, earliest: (0, len(consumer.log))  # type: ignore[method-assign]
    return f


def _log() -> List[bytes]:
    lay = Layout(TOPIC, 1, 2, 2, 2)
    return [encode_layout(lay, "create", "a")[1]] + [
        encode_registration(TOPIC, f"p{i}", True, 1, 1, {})[1] for i in range(3)
    ]


def test_a_transient_hole_is_read_again() -> None:
    consumer = _ScriptedConsumer(_log(), hidden={1}, hide_reads=1)
    f = _follower(consumer)
    history = f.sync()
    assert consumer.seeks == [1]
    assert [r.offset for r in history.registrations(TOPIC)] == [1, 2, 3]
    f.close()


def test_a_permanent_hole_is_accepted_after_rereads() -> None:
    consumer = _ScriptedConsumer(_log(), hidden={1}, hide_reads=100)
    f = _follower(consumer)
    history = f.sync()
    assert len(consumer.seeks) >= 3
    assert [r.offset for r in history.registrations(TOPIC)] == [2, 3]
    assert history.next_offset == 4
    f.close()
