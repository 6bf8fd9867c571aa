"""Whether deciding a grouped fetch (kafka-python's ``poll``, aiokafka's
``getmany``) blocks: :func:`kafka_ordered._grouped.needs_catch_up` says,
from the records alone, exactly when :func:`~kafka_ordered._grouped.take`
catches the layout view up (a blocking read of the layout log). The
aiokafka adapter decides on its event loop the fetches it clears, and on
its worker thread the others."""

from __future__ import annotations

import random
from typing import Any, Dict, List, Tuple

import pytest

from kafka_ordered import _fastpath
from kafka_ordered._grouped import needs_catch_up, take
from kafka_ordered._hashing import _C as C
from kafka_ordered.tokens import HEADER

from .test_gating_core import TOPIC, _core
from .test_grouped_in_hand import Part, Rec, _replace

UNMANAGED = "u"


def _headers(rng: random.Random, view_next: int) -> Any:
    """No header, an application's, or a stamp: of this log below the view's
    next offset or at/after it, another log's, a malformed one; as a list
    (kafka-python) or a tuple (aiokafka)."""
    pick = rng.random()
    if pick < 0.4:
        got: List[Tuple[str, bytes]] = []
    elif pick < 0.5:
        got = [("app", b"1")]
    elif pick < 0.7:
        got = [(HEADER, b"fakelog:%d" % rng.randrange(view_next))]
    elif pick < 0.85:
        got = [("app", b"1"), (HEADER, b"fakelog:%d" % rng.randrange(view_next, view_next + 3))]
    elif pick < 0.93:
        got = [(HEADER, b"otherlog:%d" % rng.randrange(10))]
    else:
        got = [(HEADER, b"fakelog:")]
    return tuple(got) if rng.random() < 0.5 else got


@pytest.mark.parametrize("seed", range(400))
def test_needs_catch_up_says_exactly_when_take_catches_up(seed: int) -> None:
    rng = random.Random(seed)
    core, port = _core()  # owns partition 1, assigned at 0: a catch-up to the end is owed
    view = core.follower
    if rng.random() < 0.6:
        core.begin_poll()  # the owed catch-up is made: partition 1 expected at 0
    if rng.random() < 0.5:
        core.assigned_at({(TOPIC, 0): 0})
        if rng.random() < 0.7:
            core.begin_poll()
    view_next = view.history.next_offset
    raw: Dict[Part, List[Rec]] = {}
    for part in rng.sample([Part(TOPIC, 0), Part(TOPIC, 1), Part(UNMANAGED, 0)], rng.randint(1, 3)):
        first = rng.choice([0, 0, 0, 1, 4])
        offsets = list(range(first, first + rng.randint(1, 4)))
        if len(offsets) > 2 and rng.random() < 0.2:
            del offsets[1]  # a hole
        raw[part] = [Rec(part.topic, part.partition, o, headers=_headers(rng, view_next)) for o in offsets]
        port.position[(part.topic, part.partition)] = offsets[-1] + 1
    predicted = needs_catch_up(core, raw)
    view.calls.clear()
    take(core, raw, {}, _replace)
    made = [c for c in view.calls if c[0] in ("sync", "past")]
    assert predicted == bool(made), (raw, made)


def test_a_fetch_cleared_of_catch_ups_is_one_take_decides_without_any() -> None:
    """The plain case: expected offsets, no hole, stamps the view includes."""
    core, port = _core()
    core.begin_poll()
    recs = [Rec(TOPIC, 1, 0, headers=((HEADER, b"fakelog:1"),)), Rec(TOPIC, 1, 1)]
    port.position[(TOPIC, 1)] = 2
    assert not needs_catch_up(core, {Part(TOPIC, 1): recs})
    assert needs_catch_up(core, {Part(TOPIC, 1): recs[1:]}), "a fetch that does not follow on"
    beyond = [Rec(UNMANAGED, 0, 7, headers=[(HEADER, b"fakelog:3")])]
    assert needs_catch_up(core, {Part(UNMANAGED, 0): beyond}), "a stamp the view lacks, on a topic it calls unmanaged"


def _any_headers(rng: random.Random, view_next: int) -> Any:
    """:func:`_headers` plus the shapes the C stamp pass leaves to Python: a
    move tombstone's header, a name in bytes, a stamp without a value, one
    of too many digits; and two stamps of this log on one record."""
    pick = rng.random()
    if pick < 0.75:
        return _headers(rng, view_next)
    got: List[Tuple[Any, Any]] = rng.choice([
        [("kafka-ordered.moved", b"2"), (HEADER, b"fakelog:1")],
        [(HEADER.encode(), b"fakelog:1")],
        [(HEADER, None)],
        [(HEADER, b"fakelog:" + b"9" * 19)],
        [(HEADER, b"fakelog:1"), ("app", b"2"), (HEADER, b"fakelog:%d" % rng.randrange(view_next + 2))],
    ])
    return tuple(got) if rng.random() < 0.5 else got


@pytest.mark.skipif(C is None, reason="C speed-ups not built")
@pytest.mark.parametrize("seed", range(300))
def test_c_and_python_grouped_stamp_passes_decide_alike(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The full path's stamp pass over a grouped fetch (``run_stamps``): the
    C twin takes this log's stamps itself and leaves the rest to Python;
    :func:`~kafka_ordered._grouped.scan` and :func:`needs_catch_up` give the
    same records, headers, runs and answer either way."""
    import kafka_ordered._grouped as grouped

    rng = random.Random(seed)
    plan = []
    for part in rng.sample([Part(TOPIC, 0), Part(TOPIC, 1), Part(UNMANAGED, 0)], rng.randint(1, 3)):
        first = rng.choice([0, 0, 1, 4])
        plan.append((part, [(o, rng.random()) for o in range(first, first + rng.randint(1, 6))]))
    headers_seed = rng.random()
    decided = {}
    for name, impl in (("c", C.run_stamps), ("py", _fastpath.run_stamps_py)):
        monkeypatch.setattr(grouped, "run_stamps", impl)
        core, port = _core()
        core.begin_poll()
        view_next = core.follower.history.next_offset
        hrng = random.Random(headers_seed)
        raw = {part: [Rec(part.topic, part.partition, o, value=None if tomb < 0.1 else b"v",
                          headers=_any_headers(hrng, view_next)) for o, tomb in offsets]
               for part, offsets in plan}
        before = {part: list(recs) for part, recs in raw.items()}
        catch_up_needed = grouped.needs_catch_up(core, raw)
        out, runs = grouped.scan(core, raw, _replace)
        assert raw == before, "the client's lists are left as they are"
        decided[name] = (catch_up_needed, runs,
                         {p: [(r.offset, r.headers and list(r.headers)) for r in recs] for p, recs in out.items()})
    assert decided["c"] == decided["py"]
