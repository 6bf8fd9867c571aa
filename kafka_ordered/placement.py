"""Replica placement planning: which brokers host the replicas of new partitions.

Pure functions and values, no I/O. The admin layer reads brokers, racks and
per-broker replica counts from the cluster, asks this module for an explicit
replica assignment and passes it to CreateTopics/CreatePartitions, so the
guarantees below hold on unmodified brokers:

* rack-aware assignment exactly as Kafka's ``AdminUtils.assignReplicasToBrokers``
  (KIP-36): leaders round-robin over a rack-alternated broker list, followers
  shifted once per round, a partition's replicas on as many racks as possible;
* per-broker partition limits (KIP-578): brokers with no capacity left get no
  new replicas, and a request that cannot fit fails whole with
  :class:`~kafka_ordered.errors.GuardRailsError` listing every broker's
  remaining capacity;
* degraded creation while brokers are down: with a minimum required
  replication factor, partitions are created on the live brokers and the
  missing replicas are recorded; :func:`plan_heal` adds them once brokers return.

Every argument error raises :class:`~kafka_ordered.errors.PlacementError`
(a ``ValueError``) saying what is wrong.
"""

from __future__ import annotations

import json
import math
import random
from collections import deque
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Hashable,
    Iterable,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from .errors import GuardRailsError, PlacementError

__all__ = [
    "BrokerRacks",
    "PartitionLimits",
    "MinRequiredReplicationFactor",
    "MIN_INSYNC_REPLICAS",
    "rack_alternated_brokers",
    "assign_replicas",
    "remaining_capacity",
    "plan_partitions",
    "plan_heal",
    "PlacementPlan",
    "HealPlan",
]

#: broker id -> rack (``None`` when the broker has no ``broker.rack``).
BrokerRacks = Mapping[int, Optional[str]]
#: One limit for every broker, or broker id -> limit (brokers absent are unlimited).
PartitionLimits = Union[int, Mapping[int, int]]
#: ``min_required_replication_factor`` value meaning ``min(min.insync.replicas, replication factor)``.
MIN_INSYNC_REPLICAS: Literal["min.insync.replicas"] = "min.insync.replicas"
#: The fewest replicas a degraded creation accepts: a count, or :data:`MIN_INSYNC_REPLICAS`.
MinRequiredReplicationFactor = Union[int, Literal["min.insync.replicas"]]

_UNLIMITED = math.inf
_Capacity = Dict[int, float]


# -- validation


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlacementError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise PlacementError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_racks(racks: Any) -> Dict[int, Optional[str]]:
    if not isinstance(racks, Mapping):
        raise PlacementError(f"racks must be a mapping of broker id -> rack, got {type(racks).__name__}")
    if not racks:
        raise PlacementError("no brokers: racks is empty")
    out: Dict[int, Optional[str]] = {}
    for broker, rack in racks.items():
        b = _check_int("broker id", broker, 0)
        if rack is not None and (not isinstance(rack, str) or not rack):
            raise PlacementError(f"rack of broker {b} must be a non-empty string or None, got {rack!r}")
        out[b] = rack
    return dict(sorted(out.items()))


def _check_known(name: str, brokers: Iterable[int], known: Mapping[int, Any]) -> None:
    unknown = sorted(set(brokers) - set(known))
    if unknown:
        raise PlacementError(f"{name} names unknown broker(s) {unknown}; known brokers are {sorted(known)}")


def _check_counts(name: str, counts: Optional[Mapping[int, int]], known: Mapping[int, Any]) -> Dict[int, int]:
    if counts is None:
        return {}
    if not isinstance(counts, Mapping):
        raise PlacementError(f"{name} must be a mapping of broker id -> count, got {type(counts).__name__}")
    out = {_check_int(f"{name} broker id", b, 0): _check_int(f"{name}[{b}]", c, 0) for b, c in counts.items()}
    _check_known(name, out, known)
    return out


def _check_assignment(name: str, assignment: Any) -> Dict[int, Tuple[int, ...]]:
    if not isinstance(assignment, Mapping):
        raise PlacementError(f"{name} must be a mapping of partition -> replica list, got {type(assignment).__name__}")
    out: Dict[int, Tuple[int, ...]] = {}
    for p, replicas in assignment.items():
        pid = _check_int(f"{name} partition id", p, 0)
        if isinstance(replicas, (str, bytes)) or not isinstance(replicas, Iterable):
            raise PlacementError(f"{name}[{pid}] must be a list of broker ids, got {replicas!r}")
        reps = tuple(_check_int(f"{name}[{pid}] broker id", b, 0) for b in replicas)
        if len(set(reps)) != len(reps):
            raise PlacementError(f"{name}[{pid}] lists a broker twice: {list(reps)}")
        out[pid] = reps
    return dict(sorted(out.items()))


def _rack_mode(racks: Mapping[int, Optional[str]], ignore_racks: bool) -> bool:
    """True for rack-aware placement; raises on a partial rack configuration."""
    if ignore_racks:
        return False
    without = [b for b, r in racks.items() if r is None]
    if not without:
        return True
    if len(without) == len(racks):
        return False
    with_rack = [b for b, r in racks.items() if r is not None]
    raise PlacementError(
        f"broker(s) {sorted(without)} have no rack while {sorted(with_rack)} do: rack-aware placement needs "
        f"broker.rack on every broker; set it, or pass ignore_racks=True to place ignoring all racks"
    )


# -- capacity (KIP-578)


def _capacity(
    brokers: Iterable[int], max_partitions: Optional[PartitionLimits], current: Mapping[int, int]
) -> _Capacity:
    brokers = list(brokers)
    if max_partitions is None:
        return {b: _UNLIMITED for b in brokers}
    if isinstance(max_partitions, Mapping):
        limits: Dict[int, float] = {b: float(v) for b, v in max_partitions.items()}
    else:
        limits = {b: float(max_partitions) for b in brokers}
    return {b: max(0.0, limits.get(b, _UNLIMITED) - current.get(b, 0)) for b in brokers}


def _check_limits(max_partitions: Any, known: Mapping[int, Any]) -> Optional[PartitionLimits]:
    if max_partitions is None:
        return None
    if isinstance(max_partitions, Mapping):
        return _check_counts("max_partitions", max_partitions, known)
    return _check_int("max_partitions", max_partitions, 0)


def _public_capacity(cap: Mapping[int, float]) -> Dict[int, Optional[int]]:
    return {b: None if c == _UNLIMITED else int(c) for b, c in sorted(cap.items())}


def _format_capacity(cap: Mapping[int, Optional[int]]) -> str:
    return "{" + ", ".join(f"{b}: {'unlimited' if c is None else c}" for b, c in sorted(cap.items())) + "}"


def _guard_rails(what: str, cap: Mapping[int, float]) -> GuardRailsError:
    remaining = _public_capacity(cap)
    return GuardRailsError(
        f"Not possible to satisfy request due to guard rails: {what} would exceed the partition limit of "
        f"some broker; nothing was placed. Remaining partition capacity per broker: {_format_capacity(remaining)}",
        remaining={b: c for b, c in remaining.items() if c is not None},
    )


def remaining_capacity(
    racks: BrokerRacks,
    max_partitions: Optional[PartitionLimits] = None,
    current_replicas: Optional[Mapping[int, int]] = None,
) -> Dict[int, Optional[int]]:
    """Replicas each broker can still take: ``max(0, limit - hosted)``; ``None``
    means unlimited.

    ``max_partitions`` is one limit for all brokers or broker -> limit (absent
    brokers are unlimited); ``current_replicas`` is broker -> replicas hosted
    now (absent brokers host none). Raises ``PlacementError`` for unknown
    broker ids or negative counts.
    """
    known = _check_racks(racks)
    current = _check_counts("current_replicas", current_replicas, known)
    return _public_capacity(_capacity(known, _check_limits(max_partitions, known), current))


# -- KIP-36 assignment


def rack_alternated_brokers(racks: BrokerRacks) -> List[int]:
    """The KIP-36 rack-alternated broker list: racks in name order, each rack's
    brokers in id order, taking one broker from each rack in turn (racks that
    run out are skipped).

    ``{0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}``
    gives ``[0, 3, 1, 5, 4, 2]``. When no broker has a rack the list is the
    broker ids in order. Raises ``PlacementError`` when only some brokers have
    a rack, or for bad input.
    """
    known = _check_racks(racks)
    if not _rack_mode(known, ignore_racks=False):
        return list(known)
    by_rack: Dict[str, Deque[int]] = {}
    for b, r in known.items():
        assert r is not None
        by_rack.setdefault(r, deque()).append(b)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: List[int] = []
    while len(out) < len(known):
        for q in queues:
            if q:
                out.append(q.popleft())
    return out


def _replica_index(first: int, shift: int, k: int, n: int) -> int:
    return (first + 1 + (shift + k) % (n - 1)) % n


def _kafka_assign(
    order: Sequence[int],
    rack_of: Mapping[int, Hashable],
    partitions: int,
    rf: int,
    start: int,
    shift: int,
    first_pid: int,
) -> Dict[int, List[int]]:
    """``AdminUtils.assignReplicasToBrokers`` over ``order``; rack-unaware
    placement is the special case of one rack per broker."""
    n = len(order)
    num_racks = len(set(rack_of.values()))
    out: Dict[int, List[int]] = {}
    for pid in range(first_pid, first_pid + partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        chosen = [order[first]]
        used_racks = {rack_of[order[first]]}
        k = 0
        while len(chosen) < rf:
            b = order[_replica_index(first, shift * num_racks, k, n)]
            k += 1
            rack = rack_of[b]
            if (rack not in used_racks or len(used_racks) == num_racks) and b not in chosen:
                chosen.append(b)
                used_racks.add(rack)
        out[pid] = chosen
    return out


def _fits(assignment: Mapping[int, Sequence[int]], cap: Mapping[int, float]) -> bool:
    used: Dict[int, int] = {}
    for reps in assignment.values():
        for b in reps:
            used[b] = used.get(b, 0) + 1
    return all(n <= cap[b] for b, n in used.items())


def _capacity_assign(
    order: Sequence[int],
    rack_of: Mapping[int, Hashable],
    partitions: int,
    rf: int,
    start: int,
    shift: int,
    first_pid: int,
    cap: _Capacity,
) -> Dict[int, List[int]]:
    """The KIP-36 walk, skipping brokers that are full or whose use would make
    the rest of the request unsatisfiable (the caller checked it is satisfiable).

    With ``left`` partitions to go, the request fits iff the sum over brokers
    of ``min(capacity, left)`` is at least ``left * rf``; keeping that true
    for the remaining partitions means taking at least ``must`` of the
    brokers that could host every remaining partition.
    """
    n = len(order)
    num_racks = len(set(rack_of.values()))
    cap = dict(cap)
    out: Dict[int, List[int]] = {}
    for i, pid in enumerate(range(first_pid, first_pid + partitions)):
        if pid > 0 and pid % n == 0:
            shift += 1
        left = partitions - i
        big = {b for b in order if cap[b] >= left}
        slack = sum(min(cap[b], left) for b in order) - left * rf
        must = max(0, len(big) - int(slack))
        chosen: List[int] = []

        def eligible(b: int) -> bool:
            if b in chosen or cap[b] <= 0:
                return False
            return b in big or rf - len(chosen) > must - sum(1 for c in chosen if c in big)

        base = (pid + start) % n
        first = next((base + j) % n for j in range(n) if eligible(order[(base + j) % n]))
        chosen.append(order[first])
        used_racks = {rack_of[order[first]]}
        k = 0
        while len(chosen) < rf:
            spread = any(eligible(b) and rack_of[b] not in used_racks for b in order)
            for _ in range(n - 1):
                b = order[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                if eligible(b) and (rack_of[b] not in used_racks or not spread):
                    chosen.append(b)
                    used_racks.add(rack_of[b])
                    break
            else:  # pragma: no cover - excluded by the feasibility check
                raise _guard_rails(f"partition {pid}", cap)
        for b in chosen:
            cap[b] -= 1
        out[pid] = chosen
    return out


@dataclass(frozen=True)
class _Placement:
    assignment: Dict[int, List[int]]
    remaining: _Capacity
    rack_aware: bool


def _place(
    racks: Dict[int, Optional[str]],
    brokers: Sequence[int],
    partitions: int,
    rf: int,
    *,
    start_index: Optional[int],
    replica_shift: Optional[int],
    start_partition: int,
    ignore_racks: bool,
    cap: _Capacity,
    rng: Optional[random.Random],
) -> _Placement:
    live = {b: racks[b] for b in brokers}
    rack_aware = _rack_mode(live, ignore_racks)
    if rack_aware:
        order = rack_alternated_brokers(live)
        rack_of: Dict[int, Hashable] = dict(live)
    else:
        order = sorted(live)
        rack_of = {b: b for b in order}
    r = rng if rng is not None else random.Random()
    start = start_index if start_index is not None else r.randrange(len(order))
    if replica_shift is not None:
        shift = replica_shift
    elif start_index is not None:
        shift = start_index
    else:
        shift = r.randrange(len(order))
    need = partitions * rf
    if sum(min(cap[b], partitions) for b in order) < need:
        raise _guard_rails(
            f"placing {partitions} new partition(s) with replication factor {rf} ({need} replicas)",
            {b: cap[b] for b in racks},
        )
    args = (order, rack_of, partitions, rf, start, shift, start_partition)
    assignment = _kafka_assign(*args)
    if not _fits(assignment, cap):
        assignment = _capacity_assign(*args, cap)
    left = dict(cap)
    for reps in assignment.values():
        for b in reps:
            left[b] -= 1
    return _Placement(assignment, left, rack_aware)


def assign_replicas(
    racks: BrokerRacks,
    partitions: int,
    replication_factor: int,
    *,
    start_index: Optional[int] = None,
    replica_shift: Optional[int] = None,
    start_partition: int = 0,
    ignore_racks: bool = False,
    max_partitions: Optional[PartitionLimits] = None,
    current_replicas: Optional[Mapping[int, int]] = None,
    rng: Optional[random.Random] = None,
) -> Dict[int, List[int]]:
    """Replica lists (leader first) for partitions ``start_partition ..
    start_partition + partitions - 1``, placed like Kafka's
    ``AdminUtils.assignReplicasToBrokers``.

    ``racks`` maps every broker id to its rack. When every broker has a rack
    the placement is rack-aware (KIP-36); when none has, it is Kafka's
    rack-unaware round-robin; a mix raises ``PlacementError`` unless
    ``ignore_racks=True``. ``start_index=None`` draws the start index and the
    follower shift at random (as Kafka does; ``rng`` makes it reproducible);
    a fixed ``start_index`` also fixes the shift to the same value unless
    ``replica_shift`` is given, so ``start_index=0`` reproduces KIP-36's
    worked examples.

    Capacity: ``max_partitions`` (one limit, or broker -> limit) and
    ``current_replicas`` (broker -> replicas hosted now) bound what each
    broker may take. Kafka's assignment is returned unchanged when it fits;
    otherwise full brokers are skipped. When the request cannot fit at all,
    ``GuardRailsError`` is raised (``.remaining`` maps broker -> capacity
    left) and nothing is placed.

    Raises ``PlacementError`` for a replication factor above the broker
    count, non-positive counts, or unknown broker ids in ``max_partitions``
    / ``current_replicas``.
    """
    known = _check_racks(racks)
    n = _check_int("partitions", partitions, 1)
    rf = _check_int("replication_factor", replication_factor, 1)
    if rf > len(known):
        raise PlacementError(
            f"replication factor {rf} is larger than the number of brokers ({len(known)}: {sorted(known)})"
        )
    start_index, replica_shift, first = _check_walk(start_index, replica_shift, start_partition)
    current = _check_counts("current_replicas", current_replicas, known)
    cap = _capacity(known, _check_limits(max_partitions, known), current)
    return _place(
        known, list(known), n, rf, start_index=start_index, replica_shift=replica_shift, start_partition=first,
        ignore_racks=ignore_racks, cap=cap, rng=rng,
    ).assignment


def _check_walk(
    start_index: Optional[int], replica_shift: Optional[int], start_partition: int
) -> Tuple[Optional[int], Optional[int], int]:
    return (
        None if start_index is None else _check_int("start_index", start_index, 0),
        None if replica_shift is None else _check_int("replica_shift", replica_shift, 0),
        _check_int("start_partition", start_partition, 0),
    )


# -- plans


def _freeze(d: Mapping[int, Any], value: Callable[[Any], Any] = lambda v: v) -> Mapping[int, Any]:
    return MappingProxyType({k: value(v) for k, v in sorted(d.items())})


def _json_map(d: Mapping[int, Any]) -> Dict[str, Any]:
    return {str(k): v for k, v in sorted(d.items())}


def _ranges(ids: Iterable[int]) -> str:
    runs: List[List[int]] = []
    for i in sorted(ids):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


@dataclass(frozen=True)
class PlacementPlan:
    """Where the replicas of new partitions go.

    ``assignment`` maps each new partition id to its replicas, leader first;
    ``racks`` is broker -> rack for every broker considered; ``remaining`` is
    the capacity each broker has left after the plan (``None``: unlimited);
    ``missing`` maps each partition created under-replicated (degraded
    creation) to how many replicas it still lacks. ``existing_partitions`` is
    how many partitions the topic had before (new ids start there).
    """

    assignment: Mapping[int, Tuple[int, ...]]
    replication_factor: int
    racks: Mapping[int, Optional[str]]
    remaining: Mapping[int, Optional[int]] = field(default_factory=dict)
    missing: Mapping[int, int] = field(default_factory=dict)
    topic: Optional[str] = None
    existing_partitions: int = 0
    rack_aware: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "assignment", _freeze(self.assignment, tuple))
        object.__setattr__(self, "racks", _freeze(self.racks))
        object.__setattr__(self, "remaining", _freeze(self.remaining))
        object.__setattr__(self, "missing", _freeze({p: m for p, m in self.missing.items() if m}))

    @property
    def partitions(self) -> List[int]:
        """The new partition ids, ascending."""
        return list(self.assignment)

    @property
    def total_partitions(self) -> int:
        """Physical partitions of the topic once the plan is applied: the existing
        ones plus the new ones."""
        return self.existing_partitions + len(self.assignment)

    @property
    def leaders(self) -> Dict[int, int]:
        """Partition -> preferred leader (first replica)."""
        return {p: reps[0] for p, reps in self.assignment.items()}

    @property
    def replica_racks(self) -> Dict[int, Tuple[Optional[str], ...]]:
        """Partition -> the rack of each replica, in replica order."""
        return {p: tuple(self.racks.get(b) for b in reps) for p, reps in self.assignment.items()}

    @property
    def under_replicated(self) -> bool:
        """Whether some new partition gets fewer replicas than the replication
        factor (a degraded creation; see ``missing``)."""
        return bool(self.missing)

    def replica_assignment(self) -> List[List[int]]:
        """The replica lists in partition order, as ``NewTopic``/``NewPartitions``
        take them."""
        return [list(reps) for reps in self.assignment.values()]

    def replicas_per_broker(self) -> Dict[int, int]:
        """Broker -> new replicas this plan puts on it (every considered broker)."""
        out = {b: 0 for b in self.racks}
        for reps in self.assignment.values():
            for b in reps:
                out[b] = out.get(b, 0) + 1
        return out

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready description (string keys)."""
        return {
            "topic": self.topic,
            "replication_factor": self.replication_factor,
            "existing_partitions": self.existing_partitions,
            "total_partitions": self.total_partitions,
            "rack_aware": self.rack_aware,
            "partitions": [
                {
                    "partition": p,
                    "replicas": list(reps),
                    "racks": list(self.replica_racks[p]),
                    "missing_replicas": self.missing.get(p, 0),
                }
                for p, reps in self.assignment.items()
            ],
            "remaining_capacity": _json_map(self.remaining),
        }

    def describe(self) -> str:
        """A human-readable table of the plan."""
        name = self.topic if self.topic is not None else "(topic)"
        mode = "rack-aware" if self.rack_aware else "rack-unaware"
        lines = [
            f"{name}: {len(self.assignment)} new partition(s), {self.existing_partitions} -> "
            f"{self.total_partitions}, replication factor {self.replication_factor}, {mode}",
            f"{'partition':>9}  {'replicas (leader first)':<24}  racks",
        ]
        for p, reps in self.assignment.items():
            racks = ", ".join("-" if r is None else r for r in self.replica_racks[p])
            miss = f"  (+{self.missing[p]} missing)" if p in self.missing else ""
            lines.append(f"{p:>9}  {', '.join(map(str, reps)):<24}  {racks}{miss}")
        if self.missing:
            lines.append(
                f"under-replicated: partitions {_ranges(self.missing)} lack replicas until brokers "
                f"return; plan_heal adds them"
            )
        counts = self.replicas_per_broker()
        lines.append(
            "per broker (new replicas / capacity left): "
            + ", ".join(
                f"{b}: {counts[b]}/{'unlimited' if self.remaining.get(b) is None else self.remaining[b]}"
                for b in self.racks
            )
        )
        return "\n".join(lines)


def _required_minimum(
    rf: int, min_required: Optional[MinRequiredReplicationFactor], min_insync_replicas: Optional[int]
) -> Optional[int]:
    isr = None if min_insync_replicas is None else min(_check_int("min_insync_replicas", min_insync_replicas, 1), rf)
    if min_required is None:
        return None
    if min_required == MIN_INSYNC_REPLICAS:
        if isr is None:
            raise PlacementError(
                "min_required_replication_factor='min.insync.replicas' needs the topic's min_insync_replicas"
            )
        return isr
    m = _check_int("min_required_replication_factor", min_required, 1)
    if m > rf:
        raise PlacementError(f"min_required_replication_factor ({m}) is larger than the replication factor ({rf})")
    return max(m, isr or 0)


def plan_partitions(
    racks: BrokerRacks,
    partitions: int,
    replication_factor: int,
    *,
    topic: Optional[str] = None,
    existing: Optional[Mapping[int, Sequence[int]]] = None,
    live_brokers: Optional[Iterable[int]] = None,
    min_required_replication_factor: Optional[MinRequiredReplicationFactor] = None,
    min_insync_replicas: Optional[int] = None,
    max_partitions: Optional[PartitionLimits] = None,
    current_replicas: Optional[Mapping[int, int]] = None,
    ignore_racks: bool = False,
    start_index: Optional[int] = None,
    replica_shift: Optional[int] = None,
    rng: Optional[random.Random] = None,
) -> PlacementPlan:
    """Plan ``partitions`` new partitions: a new topic, or partitions added to
    ``existing`` (its current assignment; new ids start at ``len(existing)``).

    ``racks`` maps every known broker to its rack; ``live_brokers`` (default:
    all of them) are the ones that may receive replicas. Placement is
    :func:`assign_replicas` over the live brokers. For added partitions,
    ``start_index`` defaults to the position of partition 0's leader in the
    broker order, so leaders continue the topic's round-robin.

    Degraded creation: when fewer brokers are live than
    ``replication_factor``, ``PlacementError`` says how many are live and how
    many are needed, unless ``min_required_replication_factor`` is given (an
    int, or ``"min.insync.replicas"`` meaning ``min(min_insync_replicas,
    replication_factor)``; with an int and ``min_insync_replicas`` both floors
    apply). With at least that many live brokers every partition is placed on
    all of them and ``plan.missing`` records the replicas it lacks.

    Capacity limits and ``GuardRailsError`` as in :func:`assign_replicas`.
    """
    known = _check_racks(racks)
    n = _check_int("partitions", partitions, 1)
    rf = _check_int("replication_factor", replication_factor, 1)
    if topic is not None and (not isinstance(topic, str) or not topic):
        raise PlacementError(f"topic must be a non-empty string, got {topic!r}")
    live = sorted(set(known) if live_brokers is None else {_check_int("live broker id", b, 0) for b in live_brokers})
    _check_known("live_brokers", live, known)
    if not live:
        raise PlacementError("no live brokers: live_brokers is empty")
    current_topic = _check_assignment("existing", existing or {})
    if sorted(current_topic) != list(range(len(current_topic))):
        raise PlacementError(f"existing partitions must be numbered 0..{len(current_topic) - 1}, got {sorted(current_topic)}")
    start_index, replica_shift, first = _check_walk(start_index, replica_shift, len(current_topic))
    current = _check_counts("current_replicas", current_replicas, known)
    cap = _capacity(known, _check_limits(max_partitions, known), current)

    floor = _required_minimum(rf, min_required_replication_factor, min_insync_replicas)
    effective = rf
    if rf > len(live):
        where = f" ({', '.join(map(str, live))})"
        if floor is None:
            raise PlacementError(
                f"replication factor {rf} needs {rf} live brokers but only {len(live)} "
                f"{'is' if len(live) == 1 else 'are'} live{where}; wait for brokers to return, or pass "
                f"min_required_replication_factor to create under-replicated partitions and heal them later"
            )
        if len(live) < floor:
            raise PlacementError(
                f"only {len(live)} broker(s) live{where}: at least {floor} needed to create partitions "
                f"under-replicated (replication factor {rf}, min_required_replication_factor {floor})"
            )
        effective = len(live)

    if current_topic and start_index is None:
        lead = current_topic[0][0] if current_topic[0] else None
        live_racks = {b: known[b] for b in live}
        order = rack_alternated_brokers(live_racks) if _rack_mode(live_racks, ignore_racks) else live
        start_index = order.index(lead) if lead in order else 0

    placed = _place(
        known, live, n, effective, start_index=start_index, replica_shift=replica_shift, start_partition=first,
        ignore_racks=ignore_racks, cap=cap, rng=rng,
    )
    return PlacementPlan(
        assignment={p: tuple(r) for p, r in placed.assignment.items()},
        replication_factor=rf,
        racks=known,
        remaining=_public_capacity(placed.remaining),
        missing={p: rf - effective for p in placed.assignment} if effective < rf else {},
        topic=topic,
        existing_partitions=len(current_topic),
        rack_aware=placed.rack_aware,
    )


# -- healing


@dataclass(frozen=True)
class HealPlan:
    """Replicas to add to under-replicated partitions.

    ``target`` maps each partition that changes to its new replica list (the
    current replicas first, in their order, then the added ones);
    ``still_missing`` maps partitions that still lack replicas because too
    few brokers are live; ``remaining`` is capacity left per broker after the
    plan (``None``: unlimited).
    """

    current: Mapping[int, Tuple[int, ...]]
    target: Mapping[int, Tuple[int, ...]]
    replication_factor: int
    racks: Mapping[int, Optional[str]]
    still_missing: Mapping[int, int] = field(default_factory=dict)
    remaining: Mapping[int, Optional[int]] = field(default_factory=dict)
    topic: Optional[str] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "current", _freeze(self.current, tuple))
        object.__setattr__(self, "target", _freeze(self.target, tuple))
        object.__setattr__(self, "racks", _freeze(self.racks))
        object.__setattr__(self, "still_missing", _freeze({p: m for p, m in self.still_missing.items() if m}))
        object.__setattr__(self, "remaining", _freeze(self.remaining))

    @property
    def added(self) -> Dict[int, Tuple[int, ...]]:
        """Partition -> the brokers that receive a new replica."""
        return {p: reps[len(self.current.get(p, ())):] for p, reps in self.target.items()}

    @property
    def complete(self) -> bool:
        """True when every partition reaches the replication factor."""
        return not self.still_missing

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready description (string keys): target replicas, racks and the
        replicas added per partition, what stays missing and the capacity left."""
        return {
            "topic": self.topic,
            "replication_factor": self.replication_factor,
            "partitions": [
                {
                    "partition": p,
                    "current": list(self.current.get(p, ())),
                    "target": list(reps),
                    "added": list(self.added[p]),
                    "racks": [self.racks.get(b) for b in reps],
                }
                for p, reps in self.target.items()
            ],
            "still_missing": _json_map(self.still_missing),
            "remaining_capacity": _json_map(self.remaining),
        }

    def to_reassignment_json(self) -> str:
        """The plan in ``kafka-reassign-partitions.sh --reassignment-json-file``
        format. Raises ``PlacementError`` when the plan has no topic."""
        if self.topic is None:
            raise PlacementError("the heal plan has no topic: pass topic= to plan_heal")
        return json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": self.topic, "partition": p, "replicas": list(reps)} for p, reps in self.target.items()
                ],
            }
        )

    def describe(self) -> str:
        """A human-readable table of the plan: current -> target replicas per
        partition and what stays under-replicated."""
        name = self.topic if self.topic is not None else "(topic)"
        if not self.target and not self.still_missing:
            return f"{name}: nothing to heal, every partition has {self.replication_factor} replicas"
        lines = [f"{name}: add replicas to {len(self.target)} partition(s), replication factor {self.replication_factor}"]
        for p, reps in self.target.items():
            added = ", ".join(map(str, self.added[p]))
            lines.append(f"{p:>9}  {', '.join(map(str, self.current.get(p, ())))} -> {', '.join(map(str, reps))}  (adds {added})")
        if self.still_missing:
            lines.append(
                f"still under-replicated (too few live brokers): partitions {_ranges(self.still_missing)}"
            )
        return "\n".join(lines)


def _max_flow_fill(
    needs: Mapping[int, int], allowed: Mapping[int, List[int]], cap: Mapping[int, float]
) -> Optional[Dict[int, List[int]]]:
    """Exact check: can every partition get ``needs[p]`` distinct brokers from
    ``allowed[p]`` within ``cap``? Returns one such choice, or None."""
    flow: Dict[Tuple[int, int], int] = {}
    load: Dict[int, int] = {b: 0 for bs in allowed.values() for b in bs}
    got: Dict[int, int] = {p: 0 for p in needs}
    by_broker: Dict[int, List[int]] = {}
    for p, bs in allowed.items():
        for b in bs:
            by_broker.setdefault(b, []).append(p)
    for p in needs:
        while got[p] < needs[p]:
            # BFS over the residual graph: partition -> broker (unused pair), broker -> partition (used pair).
            prev: Dict[Tuple[str, int], Optional[Tuple[str, int]]] = {("p", p): None}
            queue: Deque[Tuple[str, int]] = deque([("p", p)])
            end: Optional[Tuple[str, int]] = None
            while queue and end is None:
                kind, x = queue.popleft()
                if kind == "p":
                    for b in allowed[x]:
                        if not flow.get((x, b)) and ("b", b) not in prev:
                            prev[("b", b)] = (kind, x)
                            if load[b] < cap[b]:
                                end = ("b", b)
                                break
                            queue.append(("b", b))
                else:
                    for q in by_broker[x]:
                        if flow.get((q, x)) and ("p", q) not in prev:
                            prev[("p", q)] = (kind, x)
                            queue.append(("p", q))
            if end is None:
                return None
            node: Optional[Tuple[str, int]] = end
            load[end[1]] += 1
            while node is not None and prev[node] is not None:
                parent = prev[node]
                assert parent is not None
                if node[0] == "b":
                    flow[(parent[1], node[1])] = 1
                else:
                    flow[(node[1], parent[1])] = 0
                node = parent
            got[p] += 1
    return {p: [b for b in allowed[p] if flow.get((p, b))] for p in needs}


def plan_heal(
    current_assignment: Mapping[int, Sequence[int]],
    racks: BrokerRacks,
    replication_factor: int,
    *,
    topic: Optional[str] = None,
    live_brokers: Optional[Iterable[int]] = None,
    max_partitions: Optional[PartitionLimits] = None,
    current_replicas: Optional[Mapping[int, int]] = None,
    ignore_racks: bool = False,
) -> HealPlan:
    """Add replicas to partitions of ``current_assignment`` that have fewer
    than ``replication_factor``.

    Existing replicas are kept, in order (the leader stays). Added replicas go
    to live brokers (``live_brokers``, default every broker in ``racks``) not
    already hosting the partition: first to racks the partition does not use
    yet, then to the least loaded broker (``current_replicas``, else the
    replica counts in ``current_assignment``), then in rack-alternated order.
    So a partition whose current replicas are on distinct racks ends on
    ``min(replication_factor, racks available)`` racks. Replicas on brokers
    outside ``racks`` (offline) count as present, rack unknown.

    Partitions that cannot reach the replication factor because too few live
    brokers exist get what is possible and are listed in ``still_missing``.
    Capacity limits (``max_partitions``, current counts as above) are
    respected; when the additions cannot fit, ``GuardRailsError`` is raised
    and nothing is planned. Raises ``PlacementError`` for bad input.
    """
    known = _check_racks(racks)
    rf = _check_int("replication_factor", replication_factor, 1)
    current = _check_assignment("current_assignment", current_assignment)
    live = sorted(set(known) if live_brokers is None else {_check_int("live broker id", b, 0) for b in live_brokers})
    _check_known("live_brokers", live, known)
    if current_replicas is None:
        counts: Dict[int, int] = {b: 0 for b in known}
        for held in current.values():
            for b in held:
                if b in counts:
                    counts[b] += 1
    else:
        counts = {b: 0 for b in known}
        counts.update(_check_counts("current_replicas", current_replicas, known))
    cap = _capacity(known, _check_limits(max_partitions, known), counts)
    live_racks = {b: known[b] for b in live}
    rack_aware = bool(live) and _rack_mode(live_racks, ignore_racks)
    order = rack_alternated_brokers(live_racks) if rack_aware else live
    position = {b: i for i, b in enumerate(order)}

    def rack(b: int) -> Hashable:
        return known[b] if rack_aware and b in known else ("broker", b)

    needs: Dict[int, int] = {}
    allowed: Dict[int, List[int]] = {}
    still: Dict[int, int] = {}
    for p, reps in current.items():
        lack = rf - len(reps)
        if lack <= 0:
            continue
        allowed[p] = [b for b in order if b not in reps and cap[b] > 0]
        possible = len([b for b in order if b not in reps])
        needs[p] = min(lack, possible)
        still[p] = lack - needs[p]

    limited = any(c != _UNLIMITED for c in cap.values())
    exact = _max_flow_fill(needs, allowed, cap) if limited else None
    if limited and exact is None:
        total = sum(needs.values())
        raise _guard_rails(f"adding {total} replica(s) to {len(needs)} under-replicated partition(s)", cap)

    left = dict(cap)
    load = dict(counts)
    target: Dict[int, List[int]] = {}
    greedy_ok = True
    for p, k in needs.items():
        grown: List[int] = list(current[p])
        used = {rack(b) for b in grown}
        for _ in range(k):
            options = [b for b in order if b not in grown and left[b] > 0]
            if not options:
                greedy_ok = False
                break
            b = min(options, key=lambda b: (rack(b) in used, load[b], position[b]))
            grown.append(b)
            used.add(rack(b))
            left[b] -= 1
            load[b] += 1
        if not greedy_ok:
            break
        if len(grown) > len(current[p]):
            target[p] = grown
    if not greedy_ok:
        assert exact is not None
        left = dict(cap)
        target = {}
        for p, added in exact.items():
            for b in added:
                left[b] -= 1
            if added:
                target[p] = list(current[p]) + list(added)
    return HealPlan(
        current=current,
        target={p: tuple(r) for p, r in target.items()},
        replication_factor=rf,
        racks=known,
        still_missing=still,
        remaining=_public_capacity(left),
        topic=topic,
    )
