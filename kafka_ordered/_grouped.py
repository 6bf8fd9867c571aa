"""Deciding a fetch grouped by partition (kafka-python's ``poll`` and
aiokafka's ``getmany``: ``{TopicPartition: [record, ...]}``, each list in
offset order) against a :class:`~kafka_ordered._gating.GatingCore`.

One home for both clients: the stamp and move-tombstone removal, the runs
the causal-token rule checks, and the cut of each watched partition at its
gate. The adapters pass how to copy one of their records with other headers.
"""

from __future__ import annotations

import operator
from typing import AbstractSet, Any, Callable, Dict, List, Mapping, Optional, Tuple

from ._gating import GatingCore
from ._ports import TP
from ._fastpath import run_stamps
from .tokens import NO_CATCH_UP, Run, catch_up, stamp_prefix, stamp_of, take_stamp
from .tombstones import is_move_tombstone

__all__ = ["Replace", "from_hand", "needs_catch_up", "released_in_hand", "scan", "serialized_bytes", "take"]

_KEY_SIZE = operator.attrgetter("serialized_key_size")
_VALUE_SIZE = operator.attrgetter("serialized_value_size")

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
    log_id = core.freshness.log_id
    prefix = stamp_prefix(log_id)
    for tp, fetched in raw.items():
        if not fetched:
            out[tp] = fetched
            continue
        tombstones: List[int] = []  # indexes of move tombstones in recs
        newest, recs, slow = run_stamps(fetched, prefix, replace)
        if slow and recs is fetched:
            recs = list(recs)
        for i in slow:  # what the C pass left: other logs' stamps, move tombstones, other shapes
            r = recs[i]
            taken = take_stamp(r.headers, log_id)
            if taken is not None:
                got, left = taken
                if got is not None and (newest is None or got > newest):
                    newest = got
                if is_move_tombstone(r.value, r.headers):
                    tombstones.append(i)
                recs[i] = replace(r, left or [])
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


def needs_catch_up(core: GatingCore, raw: Mapping[Any, List[Any]]) -> bool:
    """Whether deciding the fetch ``raw`` (:func:`take`) would first catch
    the layout view up, a blocking read of the layout log: what
    :func:`~kafka_ordered.tokens.catch_up` asks of the runs it holds, or a
    stamp the view lacks on a topic it calls unmanaged (:func:`scan`). Reads
    the records and the core only. The aiokafka adapter decides on its event
    loop the fetches this clears, the others on its worker thread."""
    if not core.opts.gating:
        return False
    view_next = core.follower.history.next_offset
    log_id = core.freshness.log_id
    prefix = stamp_prefix(log_id)
    runs: List[Run] = []
    for tp, recs in raw.items():
        if not recs:
            continue
        newest, _, slow = run_stamps(recs, prefix, None)
        for i in slow:
            got = stamp_of(recs[i].headers, log_id)
            if got is not None and (newest is None or got > newest):
                newest = got
        if core.managed(tp.topic):
            runs.append(Run((tp.topic, tp.partition), recs[0].offset, recs[-1].offset, len(recs), newest))
        elif newest is not None and newest >= view_next:
            return True
    return catch_up(view_next, runs, core.freshness.expected) != NO_CATCH_UP


def serialized_bytes(records: List[Any]) -> int:
    """kafka-python or aiokafka records' size in bytes, for the bounds of
    what a partition keeps in hand (:attr:`GatingCore.kept_bytes`); both
    clients give -1 for a missing key or value."""
    keys = list(map(_KEY_SIZE, records))
    values = list(map(_VALUE_SIZE, records))
    return sum(keys) + sum(values) + operator.countOf(keys, -1) + operator.countOf(values, -1)


def released_in_hand(core: GatingCore, among: Optional[AbstractSet[TP]] = None) -> bool:
    """Whether records kept in hand (of ``among``, default any partition)
    wait to be decided again (their partition was released): the adapters
    then call :func:`take` before fetching more, so they come out without
    waiting for the client."""
    return bool(core.kept) and bool(_released(core, among))


def _released(core: GatingCore, among: Optional[AbstractSet[TP]]) -> List[TP]:
    """The partitions with records in hand that are no longer held (of
    ``among``; all when ``None``), in the order they were kept."""
    held = core.parts.held
    return [tp for tp in core.kept if tp not in held and (among is None or tp in among)]


def from_hand(core: GatingCore, limit: Optional[int] = None,
              among: Optional[AbstractSet[TP]] = None) -> Dict[Any, List[Any]]:
    """:func:`take` without a fetch: up to ``limit`` records in hand of
    released partitions (of ``among``, default all), decided again, by the
    client's partition (see :func:`released_in_hand`)."""
    return take(core, {}, {}, _unused, limit, among)


def _unused(record: Any, headers: List[Tuple[str, bytes]]) -> Any:  # pragma: no cover - no record to replace
    raise AssertionError("nothing fetched: no stamp to remove")


def take(core: GatingCore, raw: Mapping[Any, List[Any]], out: Dict[Any, List[Any]],
         replace: Replace, limit: Optional[int] = None,
         among: Optional[AbstractSet[TP]] = None) -> Dict[Any, List[Any]]:
    """Add to ``out`` what may be delivered of one fetch (per partition: the
    client's own list when nothing is cut; a watched partition's records are
    cut at its gate by bisection on offsets) and return it.

    Records in hand (:attr:`GatingCore.kept`, with
    :attr:`GatingCore.keep_in_hand`) come first: those of partitions
    released since are decided again (at most ``limit`` of them) and
    delivered before anything fetched later of the same partition (of the
    partitions ``among``, default all: those the application asked for); what
    their next closed gate holds stays in hand. Fetched records of a
    partition that has records in hand are kept after them, never
    delivered before them; a partition held in hand keeps the records from
    its hold on (:meth:`GatingCore.keep`, which turns a hold that keeps too
    much into a pause). Otherwise the client's positions count exactly the
    delivered records (a hold by a pause seeks back).

    On any error nothing of this call is delivered: its partitions are
    rewound to their first fetched (or kept) offsets, records in hand go
    back to the client, and the error is raised."""
    handed: Dict[Any, int] = {}  # first offset delivered from hand, per client partition
    try:
        fetched, runs = scan(core, raw, replace)
        core.ensure_fresh(runs)
        kept = core.kept
        if kept:
            _from_hand(core, out, limit, among, handed)
            if kept:
                for tp, recs in list(fetched.items()):
                    key = (tp.topic, tp.partition)
                    if recs and key in kept:
                        core.keep(key, recs)
                        del fetched[tp]
        watched = core.watched()
        if not watched and not out:
            return fetched
        for tp, recs in fetched.items():
            if not recs:
                continue
            key = (tp.topic, tp.partition)
            if key in watched:
                n = core.admit_run(key, len(recs), lambda i: recs[i].offset)  # noqa: B023
                if n < len(recs) and core.in_hand(key):
                    core.keep(key, recs[n:])
                if not n:
                    continue
                if n < len(recs):
                    recs = recs[:n]
            if tp in out:
                out[tp] = out[tp] + recs
            else:
                out[tp] = recs
        return out
    except BaseException:
        first = {(tp.topic, tp.partition): recs[0].offset for tp, recs in raw.items() if recs}
        for tp, off in handed.items():
            key = (tp.topic, tp.partition)
            first[key] = min(first.get(key, off), off)
        for tp in list(raw) + list(handed):
            out.pop(tp, None)
        core.rewind(first)
        raise


def _from_hand(core: GatingCore, out: Dict[Any, List[Any]], limit: Optional[int],
               among: Optional[AbstractSet[TP]], handed: Dict[Any, int]) -> None:
    """Decide again up to ``limit`` records kept in hand of partitions no
    longer held (of ``among``; all when ``None``), in offset order, into
    ``out`` (keyed by the client's partitions, ``handed`` noting the first
    offset delivered of each): what passes goes from hand; a partition
    held again keeps the rest in hand, or (held by a pause) its client
    fetches it again."""
    kept = core.kept
    room = limit
    offset = core.kept_offset
    for key in _released(core, among):
        if room is not None and room <= 0:
            break
        recs = kept[key]
        if not recs:
            core.handed(key, 0)  # an empty entry goes
            continue
        batch = recs if room is None or room >= len(recs) else recs[:room]
        n = len(batch)
        if key in core.watched():
            n = core.admit_run(key, n, lambda i: offset(batch[i]))  # noqa: B023
        if not n:
            continue
        got = batch[:n]
        if key in kept:
            core.handed(key, n)
        tp = core.port.partitions([key])[0]
        handed.setdefault(tp, offset(got[0]))
        out[tp] = out[tp] + got if tp in out else got
        if room is not None:
            room -= n
