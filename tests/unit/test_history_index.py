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
