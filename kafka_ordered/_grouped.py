"""Deciding a fetch grouped by partition (kafka-python's ``poll`` and
aiokafka's ``getmany``: ``{TopicPartition: [record, ...]}``, each list in
offset order) against a :class:`~kafka_ordered._gating.GatingCore`.

One home for both clients: the stamp and move-tombstone removal, the runs
the causal-token rule checks, and the cut of each watched partition at its
gate. The adapters pass how to copy one of their records with other headers.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ._gating import GatingCore
from .tokens import Run, take_stamp
from .tombstones import is_move_tombstone

__all__ = ["Replace", "scan", "take"]

#: ``replace(record, headers)``: a copy of ``record`` with ``headers``.
Replace = Callable[[Any, List[Tuple[str, bytes]]], Any]


def scan(core: GatingCore, raw: Mapping[Any, List[Any]], replace: Replace) -> Tuple[Dict[Any, List[Any]], List[Run]]:
    """What each managed partition of a fetch holds, for the causal-token
    rule, and the fetch with the ``kafka-ordered.reg`` stamp removed from
    every record (the application never sees it) and, on managed topics,
    without move tombstones. A stamp of this layout log on a topic the view
    calls unmanaged proves the view stale: it is caught up first
    (:meth:`GatingCore.managed_after_stamp`)."""
    out: Dict[Any, List[Any]] = {}
    runs: List[Run] = []
    for tp, recs in raw.items():
        if not recs:
            out[tp] = recs
            continue
        newest: Optional[int] = None
        tombstones: List[int] = []  # indexes of move tombstones in recs
        if any(r.headers for r in recs):
            log_id = core.freshness.log_id
            kept = []
            for i, r in enumerate(recs):
                taken = take_stamp(r.headers, log_id) if r.headers else None
                if taken is not None:
                    got, left = taken
                    if got is not None and (newest is None or got > newest):
                        newest = got
                    if is_move_tombstone(r.value, r.headers):
                        tombstones.append(i)
                    r = replace(r, left or [])
                kept.append(r)
            recs = kept
        managed = core.managed(tp.topic)
        if not managed and newest is not None:
            managed = core.managed_after_stamp(tp.topic, newest)
        if managed:
            # The run counts the hidden tombstones: they are consumed, never delivered.
            runs.append(Run((tp.topic, tp.partition), recs[0].offset, recs[-1].offset, len(recs), newest))
            if tombstones:
                hidden = set(tombstones)
                recs = [r for i, r in enumerate(recs) if i not in hidden]
        out[tp] = recs
    return out, runs


def take(core: GatingCore, raw: Mapping[Any, List[Any]], out: Dict[Any, List[Any]],
         replace: Replace) -> Dict[Any, List[Any]]:
    """Add to ``out`` what may be delivered of one fetch (per partition: the
    client's own list when nothing is cut; a watched partition's records are
    cut at its gate by bisection on offsets) and return it; the client's
    positions then count exactly the delivered records (held ones are sought
    back). On any error nothing of this fetch is delivered: its partitions
    are rewound to their first fetched offsets, and the error raised."""
    try:
        fetched, runs = scan(core, raw, replace)
        core.ensure_fresh(runs)
        watched = core.watched()
        if not watched and not out:
            return fetched
        for tp, recs in fetched.items():
            if not recs:
                continue
            key = (tp.topic, tp.partition)
            if key in watched:
                n = core.admit_run(key, len(recs), lambda i: recs[i].offset)  # noqa: B023
                if not n:
                    continue
                if n < len(recs):
                    recs = recs[:n]
            if tp in out:
                out[tp].extend(recs)
            else:
                out[tp] = recs
        return out
    except BaseException:
        for tp in raw:
            out.pop(tp, None)
        core.rewind({(tp.topic, tp.partition): recs[0].offset for tp, recs in raw.items() if recs})
        raise
