"""Micro-batch planning of the ``kafka_ordered`` source (pure, no Spark, no I/O).

Offsets are ``{(topic, partition): offset}`` inside, and JSON dicts like the
built-in Kafka source's outside: ``{"topic": {"0": 23, "1": 40}}``.

The gate decision itself is :func:`kafka_ordered.gates.plan_end_offsets`;
this module only feeds it (per topic) and applies read limits afterwards.
"""

from __future__ import annotations

import math
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from kafka_ordered.gates import pending_waits, plan_end_offsets
from kafka_ordered.history import Gate

__all__ = [
    "TP",
    "to_json",
    "from_json",
    "gated_ends",
    "rate_limit",
    "available",
    "extend_target",
    "split_range",
]

#: A ``(topic, partition)`` pair.
TP = Tuple[str, int]


def to_json(offsets: Mapping[TP, int]) -> Dict[str, Dict[str, int]]:
    """Offsets as the checkpoint JSON of Spark's Kafka source,
    ``{"topic": {"0": offset}}``, sorted by topic and partition."""
    out: Dict[str, Dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def from_json(d: Optional[Mapping[str, Mapping[str, int]]]) -> Dict[TP, int]:
    """Inverse of :func:`to_json` (``None`` gives ``{}``); raises ``ValueError``
    for a partition or offset that is not an integer."""
    out: Dict[TP, int] = {}
    for t, ps in (d or {}).items():
        for p, o in ps.items():
            out[(t, int(p))] = int(o)
    return out


def _by_topic(offsets: Mapping[TP, int]) -> Dict[str, Dict[int, int]]:
    out: Dict[str, Dict[int, int]] = {}
    for (t, p), o in offsets.items():
        out.setdefault(t, {})[p] = o
    return out


def gated_ends(
    gates_by_topic: Mapping[str, Sequence[Gate]],
    start: Mapping[TP, int],
    latest: Mapping[TP, int],
) -> Dict[TP, int]:
    """End offsets of the next batch: ``latest`` capped at each partition's
    first gate whose sources ``start`` does not cover. A gate the query has
    already read past (learned after a batch read other producers' records
    behind its start) still holds the partition where it is: the registering
    producer's own records come later. ``start`` must hold
    every partition of ``latest`` (processed offsets, log-start already
    applied). Topics without gates pass through."""
    out: Dict[TP, int] = {}
    starts = _by_topic(start)
    for t, lat in _by_topic(latest).items():
        st = starts.get(t, {})
        gates = gates_by_topic.get(t)
        if not gates:
            ends = {p: max(st.get(p, 0), hi) for p, hi in lat.items()}
        else:
            ends = plan_end_offsets(gates, st, lat)
        for p, e in ends.items():
            out[(t, p)] = e
    return out


def pending_sources(gates_by_topic: Mapping[str, Sequence[Gate]], start: Mapping[TP, int]) -> Dict[TP, int]:
    """Source partitions that some closed gate still waits on -> highest wait."""
    out: Dict[TP, int] = {}
    for t, gates in gates_by_topic.items():
        st = {p: o for (tt, p), o in start.items() if tt == t}
        for q, w in pending_waits(gates, st).items():
            out[(t, q)] = w
    return out


def available(start: Mapping[TP, int], end: Mapping[TP, int]) -> int:
    """Records in the batch ``[start, end)`` summed over partitions; a
    partition missing from ``start`` counts as empty, and an end below its
    start counts 0."""
    return sum(max(0, e - start.get(tp, e)) for tp, e in end.items())


def rate_limit(start: Mapping[TP, int], end: Mapping[TP, int], max_rows: int) -> Dict[TP, int]:
    """Cap the batch ``[start, end)`` at about ``max_rows`` records, shared in
    proportion to each partition's available records (as Spark's Kafka
    source does). A partition with records available always advances by at
    least one, so a gate waiting on any partition opens eventually: capping
    only delays, and never starves a source (no livelock)."""
    sizes = {tp: max(0, e - start.get(tp, e)) for tp, e in end.items()}
    total = sum(sizes.values())
    if total <= max_rows:
        return dict(end)
    out: Dict[TP, int] = {}
    for tp, e in end.items():
        size = sizes[tp]
        if size == 0:
            out[tp] = e
            continue
        share = max_rows * (size / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(e, start[tp] + step)
    return out


def extend_target(
    target: Mapping[TP, int],
    latest: Mapping[TP, int],
    gates_by_topic: Mapping[str, Sequence[Gate]],
) -> Dict[TP, int]:
    """The ``Trigger.AvailableNow`` target, raised where a gate on a record
    inside the target waits for source records beyond it (offsets read in one
    sweep are not a consistent cut). Those source records existed before the
    gated record, so reading them respects the trigger's "no data newer than
    the target"; without this the gated records could not be read in the run.
    Never beyond ``latest``."""
    out = dict(target)
    changed = True
    while changed:
        changed = False
        for t, gates in gates_by_topic.items():
            for g in gates:
                tp = (t, g.partition)
                if out.get(tp, 0) <= g.start:
                    continue
                for q, w in g.wait.items():
                    tq = (t, q)
                    want = min(w, latest.get(tq, w))
                    if tq in out and out[tq] < want:
                        out[tq] = want
                        changed = True
    return out


def split_range(start: int, end: int, pieces: int) -> List[Tuple[int, int]]:
    """``[start, end)`` in ``pieces`` contiguous, near-equal ranges."""
    n = end - start
    pieces = max(1, min(pieces, n))
    out = []
    lo = start
    for i in range(pieces):
        hi = start + (n * (i + 1)) // pieces
        if hi > lo:
            out.append((lo, hi))
        lo = hi
    return out
