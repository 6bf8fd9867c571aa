"""Snapshots of the layout log (``kafka_ordered.snapshots``): the codec and its
checks, and that a snapshot plus the log's tail gives the state a full replay
gives, over random logs."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Tuple

import pytest

from kafka_ordered.history import LayoutHistory
from kafka_ordered.layout import Layout
from kafka_ordered.records import encode_layout, encode_protocol, encode_registration
from kafka_ordered.snapshots import (
    InvalidSnapshot,
    Snapshot,
    decode,
    encode,
    live_records,
    restore,
    snapshot_topic,
    take,
)

Rec = Tuple[bytes, bytes, int]


def _random_log(rng: random.Random, n: int) -> List[Rec]:
    """A layout log: a protocol record, topics created and expanded, stable
    and anonymous producers registering (with and without gates), and now and
    then a corrupt record."""
    out: List[Rec] = []
    k, v = encode_protocol()
    out.append((k, v, 1))
    layouts: Dict[str, Layout] = {}
    for i in range(n):
        r = rng.random()
        ts = 1000 + i
        if not layouts or r < 0.08:
            name = f"t{len(layouts)}" if not layouts or rng.random() < 0.5 else rng.choice(sorted(layouts))
            if name not in layouts:
                lay = Layout(name, 1, 2, 2, 8)
                layouts[name] = lay
                out.append((*encode_layout(lay, "create", "a"), ts))
                continue
            cur = layouts[name]
            if cur.partitions < 8:
                nxt = cur.expanded(cur.partitions + 1)
                layouts[name] = nxt
                out.append((*encode_layout(nxt, "expand", "a"), ts))
                continue
        if r < 0.1:
            out.append((b"x", b"\xffnot json", ts))
            continue
        name = rng.choice(sorted(layouts))
        lay = layouts[name]
        stable = rng.random() < 0.6
        pid = f"p{rng.randrange(6)}" if stable else f"anon-{i}"
        gates: Dict[int, Tuple[int, Dict[int, int]]] = {}
        if rng.random() < 0.4:
            for p in rng.sample(range(lay.partitions), rng.randint(1, min(2, lay.partitions))):
                gates[p] = (rng.randrange(100), {rng.randrange(lay.physical_partitions): rng.randrange(50)})
        elif not stable:
            continue  # anonymous producers append registrations only with gates
        out.append((*encode_registration(name, pid, stable, lay.epoch, max(1, lay.epoch - 1), gates), ts))
    return out


def _replay(records: List[Rec], history: LayoutHistory, start: int = 0) -> LayoutHistory:
    for off in range(start, len(records)):
        k, v, ts = records[off]
        history.apply(off, k, v, ts)
    return history


def _state(h: LayoutHistory) -> Dict[str, Any]:
    out: Dict[str, Any] = {"next": h.next_offset, "protocol": (h.protocol, h.protocol_offset), "topics": h.topics(),
                           "problems": [p.offset for p in h.problems]}
    for t in h.topics():
        cur = h.current(t)
        assert cur is not None
        out[t] = {
            "changes": h.changes(t),
            "gated": [r for r in h.registrations(t) if r.gates],
            "last": {p: h.last_registration(t, p) for p in [f"p{i}" for i in range(6)]},
            "on": {p: h.gates_on(t, p) for p in range(cur.physical_partitions)},
            "from": {p: h.gates_waiting_on(t, p) for p in range(cur.physical_partitions)},
            "gates": h.gates(t),
        }
    return out


@pytest.mark.parametrize("seed", range(40))
def test_snapshot_and_tail_give_the_state_of_a_full_replay(seed: int) -> None:
    rng = random.Random(seed)
    log = _random_log(rng, 120)
    full = _replay(log, LayoutHistory())
    cut = rng.randrange(len(log) + 1)
    prefix = _replay(log[:cut], LayoutHistory())
    snap = decode(encode(take(prefix, "log-1")))
    assert snap.next_offset == cut
    restored = _replay(log, restore(snap), start=cut)
    assert _state(restored) == _state(full)


def test_a_snapshot_keeps_only_the_live_records() -> None:
    h = LayoutHistory()
    lay = Layout("t", 1, 2, 2, 4)
    recs: List[Rec] = [(*encode_protocol(), 0), (*encode_layout(lay, "create", "a"), 0)]
    recs += [(*encode_registration("t", "svc", True, 1, 1, {}), i) for i in range(50)]  # a stable id restarting
    recs.append((*encode_layout(lay.expanded(3), "expand", "a"), 0))
    recs.append((*encode_registration("t", "anon-1", False, 2, 1, {2: (10, {0: 7})}), 0))
    _replay(recs, h)
    kept = live_records(h)
    assert [o for o, *_ in kept] == [0, 1, 51, 52, 53]  # protocol, create, svc's last, expand, the gate
    # once partition 0's log start passed the gate's wait, no group needs it
    assert [o for o, *_ in live_records(h, lambda tp: 7)] == [0, 1, 51, 52, 53]
    assert [o for o, *_ in live_records(h, lambda tp: 8)] == [0, 1, 51, 52]


def test_a_flipped_byte_a_newer_format_or_another_record_is_refused() -> None:
    h = _replay([(*encode_protocol(), 0), (*encode_layout(Layout("t", 1, 2, 2, 4), "create", "a"), 0)],
                LayoutHistory())
    good = encode(take(h, "log-1"))
    assert decode(good) == take(h, "log-1")
    bad = bytearray(good)
    bad[-3] ^= 0x01
    with pytest.raises(InvalidSnapshot, match="checksum"):
        decode(bytes(bad))
    with pytest.raises(InvalidSnapshot, match="not a kafka-ordered snapshot"):
        decode(b'{"v": 2}')
    import hashlib
    import json
    import zlib

    payload = zlib.compress(json.dumps({"format": 99, "log": "x", "next": 0, "records": []}).encode())
    newer = b"kafka-ordered-snapshot\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
    with pytest.raises(InvalidSnapshot, match="newer"):
        decode(newer)


def test_a_snapshot_record_that_does_not_apply_is_refused() -> None:
    bogus = Snapshot("log-1", 5, ((3, 0, b"t", encode_registration("t", "p", True, 1, 1, {})[1]),))
    with pytest.raises(InvalidSnapshot, match="offset 3"):
        restore(bogus)  # a registration for a topic the snapshot has no layout of


def test_the_snapshots_topic_is_named_after_the_log() -> None:
    assert snapshot_topic("_kafka_ordered_layouts") == "_kafka_ordered_layouts.snapshots"


def test_a_refusing_reader_does_not_use_a_snapshot_that_skipped_corrupt_records() -> None:
    recs: List[Rec] = [(*encode_protocol(), 0), (*encode_layout(Layout("t", 1, 2, 2, 4), "create", "a"), 0),
                       (b"x", b"\xffnot json", 0)]
    h = _replay(recs, LayoutHistory())
    snap = decode(encode(take(h, "log-1")))
    assert snap.skipped and restore(snap).problems[0].offset == 2
    with pytest.raises(InvalidSnapshot, match="refuse"):
        restore(snap, "refuse")
