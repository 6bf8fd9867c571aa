"""Layout-aware group assignment (KIP-253 §6) for kafka-python consumer groups.

:func:`assign_partitions` is pure (no I/O): per topic, among the members
subscribed to it,

1. the *undeleted* partitions ``[0, partitions)`` are spread evenly (member
   counts differ by at most one);
2. then the *draining* partitions, then the *spares*, so that every member's
   total for the topic also differs by at most one, draining ones spread
   evenly before spares;
3. within those bounds a partition goes to the member that owns its
   linear-hashing parent (:meth:`Layout.parent`), so that the gates of a
   layout change resolve inside one process without a commit round trip.

Every physical partition of a subscribed topic is assigned to exactly one
member (a producer that has not switched yet may still write to draining and
spare partitions). Topics without a layout are spread evenly with no parent
relation, like a round robin. The result is deterministic: member order in
the input does not matter, ties are broken by the member's load over the
topics assigned so far, then by member id.

:class:`kafka_ordered.kafka_python.OrderedAssignor` adapts it to
kafka-python's ``AbstractPartitionAssignor`` (``partition_assignment_strategy``).
"""

from __future__ import annotations

import logging
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from .layout import Layout

__all__ = ["assign_partitions"]

log = logging.getLogger("kafka_ordered.assignor")


class _Slots:
    """Balanced capacities: every member ends with ``base`` or ``base + 1``
    items and exactly ``extra`` members get ``base + 1``."""

    __slots__ = ("base", "extra")

    def __init__(self, total: int, members: int) -> None:
        self.base, self.extra = divmod(total, members)

    def allows(self, count: int) -> bool:
        return count < self.base or (count == self.base and self.extra > 0)

    def take(self, count: int) -> None:
        if count == self.base:
            self.extra -= 1


def _assign_topic(
    subscribers: List[str],
    count: int,
    layout: Optional[Layout],
    load: Dict[str, int],
) -> Dict[str, List[int]]:
    owner: Dict[int, str] = {}
    undeleted = min(count, layout.partitions) if layout is not None else count
    draining = sorted(p for p in layout.draining if p < count) if layout is not None else []
    dset = set(draining)
    spares = [p for p in range(undeleted, count) if p not in dset]
    m = len(subscribers)
    index = {mem: i for i, mem in enumerate(subscribers)}
    n_undel = {mem: 0 for mem in subscribers}
    n_drain = {mem: 0 for mem in subscribers}
    total = {mem: 0 for mem in subscribers}

    def parent_owner(p: int) -> Optional[str]:
        if layout is None:
            return None
        q = layout.parent(p)
        return owner.get(q) if q is not None else None

    def place(p: int, mem: str, kind: int) -> None:
        owner[p] = mem
        total[mem] += 1
        load[mem] += 1
        if kind == 0:
            n_undel[mem] += 1
        elif kind == 1:
            n_drain[mem] += 1

    # 1. undeleted: balanced counts (targets base/base+1, the extra ones to
    #    the least loaded members). The parent relation makes a forest (one
    #    tree per initial partition); whole subtrees go to the member they fit
    #    best, largest first; a subtree that fits nowhere is carved: the
    #    member with the most room takes its root and as much below it as fits.
    kids: Dict[int, List[int]] = {}
    roots: List[int] = []
    for c in range(undeleted):
        q = layout.parent(c) if layout is not None else None
        if q is None:
            roots.append(c)
        else:
            kids.setdefault(q, []).append(c)
    size: Dict[int, int] = {}
    for c in range(undeleted - 1, -1, -1):  # children are larger than parents
        size[c] = 1 + sum(size[k] for k in kids.get(c, ()))
    slots = _Slots(undeleted, m)
    by_load = sorted(subscribers, key=lambda x: (load[x], index[x]))
    room = {x: slots.base + (1 if i < slots.extra else 0) for i, x in enumerate(by_load)}
    pending = list(roots)

    def take(r: int, mem: str) -> None:
        stack = [r]
        while stack:
            c = stack.pop()
            place(c, mem, 0)
            stack.extend(kids.get(c, ()))

    def carve(r: int, mem: str, cap: int) -> int:
        place(r, mem, 0)
        cap -= 1
        rest = []
        for k in sorted(kids.get(r, ()), key=lambda k: (-size[k], k)):
            if size[k] <= cap:  # whole subtrees first
                take(k, mem)
                cap -= size[k]
            else:
                rest.append(k)
        for k in sorted(rest, key=lambda k: (size[k], k)):
            if cap > 0:
                cap = carve(k, mem, cap)
            else:
                pending.append(k)
        return cap

    while pending:
        pending.sort(key=lambda r: (-size[r], r))
        r = pending.pop(0)
        fits = [x for x in subscribers if room[x] >= size[r]]
        if fits:
            mem = min(fits, key=lambda x: (-room[x], load[x], index[x]))
            take(r, mem)
            room[mem] -= size[r]
        else:
            mem = min(subscribers, key=lambda x: (-room[x], load[x], index[x]))
            left = carve(r, mem, room[mem])
            assert left == 0
            room[mem] = 0
    slots.extra = 0

    # 2. draining, then spares: balanced totals (the undeleted phase left
    #    every total within the bounds), draining spread before spares.
    tslots = _Slots(count, m)
    tslots.extra -= sum(1 for x in subscribers if total[x] > tslots.base)
    for kind, group in ((1, draining), (2, spares)):
        for p in group:
            po = parent_owner(p)
            allowed = [x for x in subscribers if tslots.allows(total[x])]
            if po is not None and po in allowed and (kind == 2 or n_drain[po] <= min(n_drain[x] for x in allowed)):
                mem = po
            else:
                mem = min(allowed, key=lambda x: (total[x], n_drain[x], load[x], index[x]))
            tslots.take(total[mem])
            place(p, mem, kind)

    if layout is not None and m > 1:
        _improve(owner, count, undeleted, dset, layout, subscribers)

    out: Dict[str, List[int]] = {mem: [] for mem in subscribers}
    for p in range(count):
        out[owner[p]].append(p)
    return out


#: Bound on gain evaluations of the local search per topic (keeps a leader's
#: assignment fast for topics with thousands of partitions).
_SEARCH_BUDGET = 200_000


def _improve(owner: Dict[int, str], count: int, undeleted: int, draining: Set[int], layout: Layout,
             members: List[str]) -> None:
    """Hill-climb on colocated parent/child pairs with moves that keep every
    balance bound: swaps of two partitions of the same class (undeleted,
    draining, spare) between two members, and single moves from a member
    holding an extra slot of both the class and the total to one holding
    neither. Deterministic; stops at a local optimum or when the budget is
    spent."""
    cls = [0 if p < undeleted else (1 if p in draining else 2) for p in range(count)]
    nbrs: List[List[int]] = [[] for _ in range(count)]
    for c in range(count):
        q = layout.parent(c)
        if q is not None and q < count:
            nbrs[c].append(q)
            nbrs[q].append(c)
    held: Dict[Tuple[str, int], Set[int]] = {(x, k): set() for x in members for k in range(3)}
    for p in range(count):
        held[(owner[p], cls[p])].add(p)

    def valid(changes: Sequence[Tuple[int, str]]) -> bool:
        """Whether moving each partition to its member keeps the bounds."""
        delta: Dict[Tuple[str, int], int] = {}
        for p, y in changes:
            delta[(owner[p], cls[p])] = delta.get((owner[p], cls[p]), 0) - 1
            delta[(y, cls[p])] = delta.get((y, cls[p]), 0) + 1
        tot = {x: 0 for x in members}
        for k in range(3):
            vals = []
            for x in members:
                v = len(held[(x, k)]) + delta.get((x, k), 0)
                vals.append(v)
                tot[x] += v
            if k < 2 and max(vals) - min(vals) > 1:
                return False
        return max(tot.values()) - min(tot.values()) <= 1

    def gain(p: int, y: str) -> int:
        x = owner[p]
        return sum((owner[n] == y) - (owner[n] == x) for n in nbrs[p])

    def move(p: int, y: str) -> None:
        held[(owner[p], cls[p])].discard(p)
        owner[p] = y
        held[(y, cls[p])].add(p)

    budget = _SEARCH_BUDGET
    improved = True
    while improved and budget > 0:
        improved = False
        for a in range(count):
            x = owner[a]
            for y in sorted({owner[n] for n in nbrs[a]} - {x}):
                da = gain(a, y)
                budget -= 1
                if da > 0 and valid([(a, y)]):
                    move(a, y)
                    improved = True
                    break
                partner = -1
                for b in sorted(p for k in range(3) for p in held[(y, k)]):
                    budget -= 1
                    if da + gain(b, x) - (2 if b in nbrs[a] else 0) > 0 and valid([(a, y), (b, x)]):
                        partner = b
                        break
                if partner >= 0:
                    move(a, y)
                    move(partner, x)
                    improved = True
                    break
                if budget <= 0:
                    return


def assign_partitions(
    members: Sequence[str],
    partitions: Mapping[str, int],
    layouts: Mapping[str, Layout],
    subscriptions: Mapping[str, Iterable[str]],
) -> Dict[str, Dict[str, List[int]]]:
    """Assign every physical partition of every subscribed topic.

    ``members``: member ids; ``partitions``: topic -> physical partition
    count (what the cluster metadata says); ``layouts``: the current layout
    of managed topics (others are spread evenly); ``subscriptions``: member
    -> subscribed topics (a member missing here subscribes to nothing).
    Returns member -> topic -> sorted partitions (every member present;
    topics with no partition for a member are left out). Topics nobody
    subscribes to are not assigned.
    """
    mems = sorted(set(members))
    subs: Dict[str, Set[str]] = {m: set(subscriptions.get(m, ())) for m in mems}
    load = {m: 0 for m in mems}
    result: Dict[str, Dict[str, List[int]]] = {m: {} for m in mems}
    for topic in sorted(partitions):
        count = int(partitions[topic])
        subscribers = [m for m in mems if topic in subs[m]]
        if count <= 0 or not subscribers:
            continue
        layout = layouts.get(topic)
        if layout is not None and layout.topic != topic:
            raise ValueError(f"layout of {layout.topic} given for topic {topic}")
        for mem, ps in _assign_topic(subscribers, count, layout, load).items():
            if ps:
                result[mem][topic] = ps
    return result
