"""The C calm check and the full path's stamp pass (``take_stamps``) read a
fetched confluent-kafka message's headers where librdkafka keeps them
(until ``headers()`` converts them) and remove this log's stamps there.
Real fetched messages, decided both ways (through librdkafka's header
functions, and through ``headers()``), must give the same decisions and
leave the same headers to the application."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_ordered import _fastpath
from kafka_ordered._hashing import _C as C
from kafka_ordered.confluent import _message
from tests.conftest import create_plain_topic

pytestmark = pytest.mark.skipif(C is None or not _message.message_layout_matches(),
                                reason="fields are read in place only by the C check, on a client whose layout matches")

LOG = "AaIlhxoQdmOxus3Ev1rkCg"
STAMP = "kafka-ordered.reg"
Headers = Optional[List[Tuple[str, Optional[bytes]]]]

#: (what, headers of the middle record, whether the calm check admits it)
SHAPES: List[Tuple[str, Headers, bool]] = [
    ("no headers", None, True),
    ("an included stamp", [(STAMP, b"%s:5" % LOG.encode())], True),
    ("an included stamp among other headers", [("a", b"1"), (STAMP, b"%s:41" % LOG.encode()), ("b", None)], True),
    ("two included stamps", [(STAMP, b"%s:5" % LOG.encode()), (STAMP, b"%s:7" % LOG.encode())], True),
    ("other headers only", [("x", b"y"), ("x", b"")], True),
    ("a stamp the view lacks", [(STAMP, b"%s:100" % LOG.encode())], False),
    ("another log's stamp", [(STAMP, b"other:5")], False),
    ("a stamp without a value", [(STAMP, None)], False),
    ("a stamp that is no offset", [(STAMP, b"%s:5x" % LOG.encode())], False),
    ("a stamp of too many digits", [(STAMP, b"%s:%s" % (LOG.encode(), b"1" * 19))], False),
    ("a move tombstone's header", [("kafka-ordered.moved", b"1"), (STAMP, b"%s:5" % LOG.encode())], False),
]


@pytest.fixture
def shaped(bootstrap: str, topic: str) -> int:
    """``topic`` (one partition) holds, for each shape, a record without
    headers, one with the shape's headers, and one with an app header;
    returns how many records."""
    create_plain_topic(bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": bootstrap})
    for _, headers, _ in SHAPES:
        p.produce(topic, b"before", b"k")
        p.produce(topic, b"shaped", b"k", headers=headers)
        p.produce(topic, b"after", b"k", headers=[("after", b"1")])
    assert p.flush(30) == 0
    return 3 * len(SHAPES)


def _both_ways(bootstrap: str, topic: str, n: int, decide: Callable[[List[Any]], Any]) -> Dict[bool, Any]:
    """``decide`` on the fetched records, with librdkafka's header functions and without."""
    decided: Dict[bool, Any] = {}
    try:
        for through_librdkafka in (True, False):
            _message.use_message_layout(True, through_librdkafka=through_librdkafka)
            assert _message.librdkafka_headers() is through_librdkafka
            decided[through_librdkafka] = decide(_fetch(bootstrap, topic, n))
    finally:
        _message.use_message_layout(True)
    return decided


def _fetch(bootstrap: str, topic: str, n: int) -> List[Any]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: List[Any] = []
        while len(got) < n:
            got += [m for m in c.consume(n - len(got), 5.0) if m.error() is None]
        return got
    finally:
        c.close()


def _decide(msgs: List[Any], topic: str) -> Tuple[bool, int, List[Headers]]:
    """One calm fetch of ``msgs`` through the C fetch path: whether it was
    admitted, how far it moved the expected offset, and the headers the
    application sees."""
    calm = _fastpath.Calm()
    calm.managed = frozenset({topic})
    calm.expected = {(topic, 0): msgs[0].offset()}
    calm.stamp_prefix = f"{LOG}:".encode()
    calm.view_next = 42
    calm.until = float("inf")
    calm.quiet = True
    slow: List[Any] = []
    fetch: Callable[..., Any] = _fastpath.fast_fetch(lambda n, t: msgs, lambda *a: None,
                                                     lambda got: slow.append(got) or got, lambda: None, calm, 1)
    assert fetch(len(msgs), 0) is msgs
    return not slow, calm.expected[(topic, 0)] - msgs[0].offset(), [m.headers() for m in msgs]


def test_fetched_headers_are_decided_alike_through_librdkafka_and_through_headers(
        bootstrap: str, topic: str, shaped: int) -> None:
    decided = _both_ways(bootstrap, topic, shaped,
                         lambda msgs: [_decide(msgs[i:i + 3], topic) for i in range(0, shaped, 3)])
    for (what, headers, admitted), via_librdkafka, via_headers in zip(SHAPES, decided[True], decided[False]):
        assert via_librdkafka == via_headers, what
        ok, moved, seen = via_librdkafka
        assert ok is admitted and moved == (3 if ok else 0), what
        left = [h for h in headers or [] if h[0] != STAMP] or None
        assert seen[1] == (left if ok else headers), what
        assert seen[0] is None and seen[2] == [("after", b"1")], what


def test_the_full_paths_stamp_pass_reads_fetched_headers_alike_both_ways(
        bootstrap: str, topic: str, shaped: int) -> None:
    def take(msgs: List[Any]) -> Tuple[Any, List[Headers]]:
        return C.take_stamps(msgs, f"{LOG}:".encode()), [m.headers() for m in msgs]

    decided = _both_ways(bootstrap, topic, shaped, take)
    assert decided[True] == decided[False]
    (stamps, slow), seen = decided[True]
    assert stamps == {0: 100}, "the newest stamp of this log (the catch-up decides whether the view has it)"
    assert slow == [3 * i + 1 for i, (what, _, admitted) in enumerate(SHAPES)
                    if not admitted and what != "a stamp the view lacks"], "the rest is the Python path's"
    for (what, headers, _), i in zip(SHAPES, range(1, shaped, 3)):
        stripped = [h for h in headers or [] if h[0] != STAMP] or None
        assert seen[i] == (headers if i in slow else stripped), what
