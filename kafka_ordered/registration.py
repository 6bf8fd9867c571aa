"""What a producer registers, and when (pure decisions, no I/O).

A producer never writes a keyed record under layout ``e`` before it has
registered for ``e`` (design section 3). These functions decide the
registration; the registering core (:mod:`kafka_ordered._registering`) does
the I/O in the required order (flush, wait offsets, then start offsets,
append) and the simulation in :mod:`kafka_ordered.testing` calls the same
functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Generator, Iterable, List, Literal, Mapping, Optional, Sequence, Set, Tuple, Union

from .history import Gate, LayoutHistory
from .layout import Layout, transition_sources
from .records import encode_registration

__all__ = [
    "GateSpec",
    "initial_from_epoch",
    "transition",
    "inherited_waits",
    "gate_specs",
    "needs_record",
    "own_gates",
    "Flush",
    "ReadEnds",
    "Append",
    "SwitchStep",
    "SwitchPlan",
    "switch_steps",
    "plan_gates",
]

#: target partition -> (start offset, {source partition: wait offset})
GateSpec = Dict[int, Tuple[int, Dict[int, int]]]


def initial_from_epoch(history: LayoutHistory, topic: str, producer_id: str, stable: bool,
                       now_ms: int, window_ms: int) -> int:
    """The epoch a starting producer registers *from*.

    A stable id continues from its last registration. An anonymous producer
    cannot know what an earlier incarnation wrote: it registers from just
    before the oldest layout change still inside the transition window
    (none inside it: from the current epoch, so no gates).
    """
    target = history.current(topic)
    assert target is not None, f"{topic} is not managed"
    if stable:
        last = history.last_registration(topic, producer_id)
        if last is not None:
            return last.epoch
    recent = history.epochs_changed_since(topic, now_ms - window_ms)
    return min(recent) - 1 if recent else target.epoch


def transition(history: LayoutHistory, topic: str, from_epoch: int, target: Layout) -> Dict[int, Set[int]]:
    """Target partition -> its sources for a switch from ``from_epoch`` to
    ``target`` (empty when nothing moves)."""
    if from_epoch >= target.epoch:
        return {}
    before = [history.layout(topic, e) for e in range(from_epoch, target.epoch)]
    return {p: set(qs) for p, qs in transition_sources(before, target).items()}


def inherited_waits(partition: int, start: int, waits: Mapping[int, int], own: Sequence[Gate]) -> Dict[int, int]:
    """``waits`` plus, transitively, the waits of this producer's own earlier
    gates on each source whose start is at or below the wait offset.

    A key that moves twice (p0 -> p2 -> p6) before the group catches up would
    otherwise only wait for p2, which may hold nothing of it yet while its
    earlier record still waits on p0. Only the same producer's gates are
    inherited: inheriting across producers deadlocks concurrent registrations.
    A wait on the target itself below its own start is already met and dropped.
    """
    by_partition: Dict[int, List[Gate]] = {}
    for g in own:
        by_partition.setdefault(g.partition, []).append(g)
    out = dict(waits)
    frontier = list(waits.items())
    while frontier:
        q, w = frontier.pop()
        for g in by_partition.get(q, ()):
            if g.start > w:
                continue
            for q2, w2 in g.wait.items():
                if q2 == partition and w2 <= start:
                    continue
                if out.get(q2, -1) < w2:
                    out[q2] = w2
                    frontier.append((q2, w2))
    return out


def gate_specs(sources: Mapping[int, Iterable[int]], waits: Mapping[int, int], starts: Mapping[int, int],
               own: Sequence[Gate] = ()) -> GateSpec:
    """The gates of a registration from the offsets read (``waits`` first,
    then ``starts``, in two separate reads) and the producer's own earlier
    gates of the topic (see :func:`inherited_waits`)."""
    out: GateSpec = {}
    for p, qs in sorted(sources.items()):
        direct = {q: waits[q] for q in sorted(qs)}
        out[p] = (starts[p], inherited_waits(p, starts[p], direct, own))
    return out


def needs_record(spec: GateSpec, stable: bool, last_epoch: Optional[int], epoch: int) -> bool:
    """Whether a registration must be appended to the log: it carries gates,
    or a stable id moves to an epoch it has not registered for (so that its
    restart continues from there). Anonymous producers without gates append
    nothing, so the log grows with transitions, not with restarts."""
    return bool(spec) or (stable and last_epoch != epoch)


def own_gates(history: LayoutHistory, topic: str, producer_id: str) -> List[Gate]:
    """Every gate ``producer_id`` registered on ``topic``, in log order."""
    return [g for r in history.registrations(topic) if r.producer_id == producer_id for g in r.gates]


# -- the order of a switch ----------------------------------------------------


@dataclass(frozen=True)
class Flush:
    """Wait until nothing this producer sent is in flight (answer: ``None``)."""


@dataclass(frozen=True)
class ReadEnds:
    """Read the log-end offsets of ``partitions``, true or higher, in one
    request issued now (answer: ``{partition: offset}``). ``role`` is
    ``"waits"`` (sources) or ``"starts"`` (targets)."""

    partitions: Tuple[int, ...]
    role: Literal["waits", "starts"]


@dataclass(frozen=True)
class Append:
    """Append this record to the layout log and wait for its acknowledgement
    (answer: its offset)."""

    key: bytes
    value: bytes


#: One step of a layout switch, in the order :func:`switch_steps` gives them.
SwitchStep = Union[Flush, ReadEnds, Append]


@dataclass(frozen=True)
class SwitchPlan:
    """What a switch registered: the layout it switched to, from which epoch,
    its gates, and the registration's layout-log offset (``None``: nothing
    was appended)."""

    target: Layout
    from_epoch: int
    spec: GateSpec
    offset: Optional[int]


def switch_steps(history: LayoutHistory, topic: str, producer_id: str, stable: bool, current: Optional[Layout],
                 now_ms: int, window_ms: int, own: Sequence[Gate] = (),
                 reads_first: Literal["waits", "starts"] = "waits") -> Generator[SwitchStep, Any, SwitchPlan]:
    """The steps of one switch to the topic's current layout (design section 3),
    as requests for the caller to perform, without doing any I/O.

    The caller sends each step's answer back; the generator returns the
    :class:`SwitchPlan`. ``current`` is the layout the producer sends under
    (``None`` at its first keyed send). ``own`` are the gates this producer
    instance registered itself: its view of the log may not include its own
    latest registrations yet, and their waits must be inherited all the same
    (those of earlier incarnations come from the log). The order is the rule: flush, then
    every wait offset (sources) in one read, then, in a second read, every
    start offset (targets), then the append. ``reads_first="starts"`` exists
    only so that the simulation can show the deadlock the other order causes.
    """
    target = history.current(topic)
    assert target is not None, f"{topic} is not managed"
    if current is not None:
        from_epoch = current.epoch
    else:
        from_epoch = initial_from_epoch(history, topic, producer_id, stable, now_ms, window_ms)
    srcs = transition(history, topic, from_epoch, target)
    spec: GateSpec = {}
    if srcs:
        yield Flush()
        reads: List[Tuple[Literal["waits", "starts"], Tuple[int, ...]]] = [
            ("waits", tuple(sorted({q for qs in srcs.values() for q in qs}))),
            ("starts", tuple(sorted(srcs))),
        ]
        if reads_first == "starts":
            reads.reverse()
        got: Dict[str, Mapping[int, int]] = {}
        for role, partitions in reads:
            got[role] = yield ReadEnds(partitions, role)
        spec = gate_specs(srcs, got["waits"], got["starts"], [*own_gates(history, topic, producer_id), *own])
    last = history.last_registration(topic, producer_id) if stable else None
    offset: Optional[int] = None
    if needs_record(spec, stable, last.epoch if last is not None else None, target.epoch):
        offset = yield Append(*encode_registration(topic, producer_id, stable, target.epoch,
                                                   min(from_epoch, target.epoch), spec))
    return SwitchPlan(target, from_epoch, spec, offset)


def plan_gates(plan: SwitchPlan, topic: str, producer_id: str) -> List[Gate]:
    """The gates a finished switch registered, as the log will replay them."""
    if plan.offset is None:
        return []
    return [Gate(topic, p, start, dict(wait), producer_id, plan.target.epoch, plan.offset)
            for p, (start, wait) in sorted(plan.spec.items())]
