"""LayoutHistory's gate look-ups: by registration offset (bisection) and by
target and source partition, all equal to a scan of the registrations."""

from __future__ import annotations

import random

from kafka_ordered.history import LayoutHistory
from kafka_ordered.layout import Layout
from kafka_ordered.records import encode_layout, encode_registration


def test_gate_lookups_equal_a_scan() -> None:
    rng = random.Random(7)
    h = LayoutHistory()
    for topic in ("a", "b"):
        h.apply(h.next_offset, topic.encode(), encode_layout(Layout(topic, 1, 2, 8, 8), "create", "x")[1])
    for i in range(300):
        topic = rng.choice("ab")
        gates = {p: (rng.randrange(1000), {q: rng.randrange(1000) for q in rng.sample(range(8), rng.randint(0, 3))
                                            if q != p})
                 for p in rng.sample(range(8), rng.randint(1, 4))}
        h.apply(h.next_offset, topic.encode(), encode_registration(topic, f"p{i}", True, 1, 1, gates)[1])
    for topic in ("a", "b"):
        every = [g for r in h.registrations(topic) for g in r.gates]
        for since in (0, 1, 2, 57, 150, 301, 400):
            assert h.gates(topic, since) == [g for g in every if g.offset >= since]
        for p in range(8):
            for before in (None, 0, 3, 100, 302):
                cut = [g for g in every if before is None or g.offset < before]
                assert h.gates_on(topic, p, before) == [g for g in cut if g.partition == p]
                assert h.gates_waiting_on(topic, p, before) == [g for g in cut if p in g.wait]
    assert h.gates_on("c", 0) == [] and h.gates("c") == []


def test_a_registration_written_twice_counts_once() -> None:
    """The same registration appended again (a writer's retry after the layout
    log's leader failed before acknowledging the first) adds no registration
    and no gate, also with other records between the two; a later
    registration of the same producer with other gates does count, and so
    does the same content from another producer."""
    h = LayoutHistory()
    h.apply(0, b"t", encode_layout(Layout("t", 1, 2, 2, 4), "create", "a")[1])
    h.apply(1, b"t", encode_layout(Layout("t", 2, 2, 4, 4), "expand", "a")[1])
    gates = {2: (0, {0: 10}), 3: (0, {1: 12})}
    reg = encode_registration("t", "p", True, 2, 1, gates)[1]
    h.apply(2, b"t", reg)
    h.apply(3, b"t", encode_registration("t", "q", True, 2, 1, {2: (5, {0: 11})})[1])
    h.apply(4, b"t", reg)
    assert [(r.producer_id, r.offset) for r in h.registrations("t")] == [("p", 2), ("q", 3)]
    assert [(g.producer_id, g.offset) for g in h.gates_on("t", 2)] == [("p", 2), ("q", 3)]
    assert h.duplicates == [4] and h.next_offset == 5
    assert h.last_registration("t", "p").offset == 2  # type: ignore[union-attr]
    h.apply(5, b"t", encode_registration("t", "q", True, 2, 1, gates)[1])  # same content, another producer
    h.apply(6, b"t", encode_registration("t", "p", True, 2, 1, {2: (7, {0: 20}), 3: (7, {1: 21})})[1])
    assert [(r.producer_id, r.offset) for r in h.registrations("t")] == [("p", 2), ("q", 3), ("q", 5), ("p", 6)]
