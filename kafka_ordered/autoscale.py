"""The autoscaling policy: when to grow, shrink or retire a managed topic (pure, no I/O).

:class:`AutoscalePolicy` holds the knobs, :func:`decide` turns one
:class:`Observation` (per-partition produce rates, group lag, pending gates,
drained partitions) and the previous :class:`PolicyState` into a
:class:`Decision`. :class:`~kafka_ordered.admin.Autoscaler` gathers the
observations and applies the decisions; ``benchmarks/autoscale.py`` replays a
synthetic day through the same function.

**The policy chooses a count, not which partition splits.** Linear hashing
splits buckets in a fixed order: growing from ``N`` to ``N + 1`` partitions
always splits :func:`~kafka_ordered.layout.parent_partition` ``(N)``, and
shrinking always merges the last partition back into its parent. The
hottest partition only cools down when the split reaches it. :func:`predict`
models this: a split moves half of the parent's observed rate to the child
(keys hash evenly inside a bucket; a single hot key does not split), a merge
adds the child's rate to its parent (exact). The policy picks the smallest
count whose *predicted* hottest partition is below its threshold.

The thresholds, as shares of the per-partition target (hysteresis: a count
reached by growing is not shrunk again until the load has fallen well below
where it grew):

- grow when the hottest partition stays above :data:`GROW_AT` of the target
  for ``scale_up_after`` seconds, to the smallest count predicted at or below
  :data:`GROW_TO`;
- shrink when some smaller count is predicted at or below :data:`SHRINK_AT`
  for ``scale_down_after`` seconds (to the largest such minimal count seen
  over that time), while no named group is more than :data:`LAG_HOLD_S`
  seconds behind and no gate of the previous transition is still closed
  (the lag of the named groups never triggers growth: more partitions do
  not drain records already written);
- retire draining partitions every named group has consumed as soon as
  there are any (this moves no key and costs no gate);
- no grow or shrink within ``cooldown`` seconds of the last one, none beyond
  ``max_step`` partitions at a time, never above ``max_partitions`` or the
  placement planner's capacity, never below ``min_partitions``;
- gates: a grow may start while the previous transition's gates are still
  closed (a load surge should not wait for a slow consumer) but not once
  they have been closed for more than :data:`GATE_PENDING_BOUND_S` seconds
  (something is stuck, docs/howto/stuck-gate.md); a shrink always waits
  for them to open.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Dict, FrozenSet, List, Literal, Mapping, Optional, Sequence, Tuple

from .errors import ConfigError
from .layout import parent_partition

__all__ = [
    "GROW_AT",
    "GROW_TO",
    "SHRINK_AT",
    "GATE_PENDING_BOUND_S",
    "LAG_HOLD_S",
    "DecisionKind",
    "Unit",
    "AutoscalePolicy",
    "Observation",
    "PolicyState",
    "Decision",
    "decide",
    "predict",
]

#: Grow when the hottest partition stays above this share of the target.
GROW_AT = 0.8
#: Grow to the smallest count whose predicted hottest partition is at or below this share.
GROW_TO = 0.7
#: Shrink to a count whose predicted hottest partition stays at or below this share.
SHRINK_AT = 0.4
#: Seconds the previous transition's gates may stay closed before growth stops too.
GATE_PENDING_BOUND_S = 300.0
#: A shrink waits while a named group is more than this many seconds of produce rate behind
#: (committed offsets trail by the auto-commit interval, 5 s by default, so it is not zero).
LAG_HOLD_S = 30.0

#: What a decision does.
DecisionKind = Literal["grow", "shrink", "retire", "hold"]
#: What the rates count.
Unit = Literal["records", "bytes"]


def _number(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"AutoscalePolicy.{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise ConfigError(f"AutoscalePolicy.{name} must be {'> 0' if positive else '>= 0'} and finite, got {value!r}")
    return v


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"AutoscalePolicy.{name} must be an int >= 1, got {value!r}")
    return value


@dataclass(frozen=True)
class AutoscalePolicy:
    """How an autoscaled topic may change.

    ``min_partitions`` / ``max_partitions``: bounds of the undeleted count
    (the autoscaler also refuses a minimum below the topic's initial count).
    Exactly one of ``target_records_per_s`` and ``target_bytes_per_s``: the
    rate one partition should carry. ``scale_up_after`` / ``scale_down_after``:
    seconds the load must stay above / below its threshold before a grow /
    shrink; ``cooldown``: seconds after a grow or shrink before the next one;
    ``max_step``: most partitions added or removed by one change (``None``:
    no limit); ``groups``: the consumer groups whose lag and gates count
    (and that must have consumed a draining partition before it is retired).

    Raises :class:`~kafka_ordered.errors.ConfigError` for any bad value
    (min > max, a zero, negative or missing target, both targets, negative
    times, a ``max_step`` below 1, a group that is not a non-empty string).
    ``groups`` may be given as any sequence; it is stored as a tuple.
    """

    min_partitions: int
    max_partitions: int
    target_records_per_s: Optional[float] = None
    target_bytes_per_s: Optional[float] = None
    scale_up_after: float = 60.0
    scale_down_after: float = 600.0
    cooldown: float = 120.0
    max_step: Optional[int] = None
    groups: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        lo = _count("min_partitions", self.min_partitions)
        hi = _count("max_partitions", self.max_partitions)
        if lo > hi:
            raise ConfigError(f"AutoscalePolicy: min_partitions ({lo}) is above max_partitions ({hi})")
        if (self.target_records_per_s is None) == (self.target_bytes_per_s is None):
            raise ConfigError("AutoscalePolicy needs exactly one of target_records_per_s and target_bytes_per_s")
        if self.target_records_per_s is not None:
            _number("target_records_per_s", self.target_records_per_s, positive=True)
        if self.target_bytes_per_s is not None:
            _number("target_bytes_per_s", self.target_bytes_per_s, positive=True)
        for name in ("scale_up_after", "scale_down_after", "cooldown"):
            _number(name, getattr(self, name), positive=False)
        if self.max_step is not None:
            _count("max_step", self.max_step)
        groups = self.groups
        if isinstance(groups, (str, bytes)) or not isinstance(groups, (list, tuple, frozenset, set)):
            raise ConfigError(f"AutoscalePolicy.groups must be a sequence of group ids, got {groups!r}")
        bad = [g for g in groups if not isinstance(g, str) or not g]
        if bad:
            raise ConfigError(f"AutoscalePolicy.groups: not a group id: {bad[0]!r}")
        ordered = sorted(groups) if isinstance(groups, (set, frozenset)) else groups
        object.__setattr__(self, "groups", tuple(dict.fromkeys(ordered)))

    @property
    def unit(self) -> Unit:
        """``"bytes"`` when the target is in bytes per second, else ``"records"``."""
        return "bytes" if self.target_bytes_per_s is not None else "records"

    @property
    def target(self) -> float:
        """The per-partition target rate, in :attr:`unit` per second."""
        return float(self.target_bytes_per_s if self.target_bytes_per_s is not None
                     else self.target_records_per_s)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Observation:
    """What the autoscaler saw at ``time`` (seconds on any monotonic clock).

    ``epoch``, ``initial_partitions``, ``partitions``: the layout the rates
    were measured under. ``rates``: the produce rate of each undeleted
    partition (index = partition, in the policy's unit per second).
    ``lag_s``: per named group, how many seconds of the topic's produce rate
    it is behind (``math.inf`` when it is behind and nothing is produced).
    ``drained``: draining partitions that every named group has consumed (or
    that are empty). ``gates_pending_since``: when the oldest gate that is
    still closed for a named group was registered (``None``: none).
    ``capacity``: the most undeleted partitions the cluster can take (the
    placement planner's limit, or the physical count on a broker that cannot
    add partitions); ``None`` when not limited.
    """

    time: float
    epoch: int
    initial_partitions: int
    partitions: int
    rates: Tuple[float, ...]
    lag_s: Mapping[str, float] = field(default_factory=dict)
    drained: FrozenSet[int] = frozenset()
    gates_pending_since: Optional[float] = None
    capacity: Optional[int] = None

    def __post_init__(self) -> None:
        if len(self.rates) != self.partitions:
            raise ValueError(f"Observation: {len(self.rates)} rates for {self.partitions} undeleted partitions")
        if any(not math.isfinite(r) or r < 0 for r in self.rates):
            raise ValueError(f"Observation: rates must be finite and >= 0, got {self.rates}")
        object.__setattr__(self, "rates", tuple(float(r) for r in self.rates))
        object.__setattr__(self, "drained", frozenset(self.drained))


@dataclass(frozen=True)
class PolicyState:
    """What :func:`decide` remembers between observations (start with ``PolicyState()``).

    ``above_since``: start of the current run of observations above
    :data:`GROW_AT`; ``below_since``: start of the current run in which a
    shrink was possible, and ``shrink_to``: the largest minimal count over
    that run; ``last_change``: time of the last grow or shrink.
    """

    above_since: Optional[float] = None
    below_since: Optional[float] = None
    shrink_to: Optional[int] = None
    last_change: Optional[float] = None


@dataclass(frozen=True)
class Decision:
    """One decision and the numbers behind it.

    ``kind``: ``grow`` / ``shrink`` to ``partitions_to``, ``retire`` the
    partitions in ``retire``, or ``hold``; ``reason``: why, in words.
    ``epoch`` is the layout epoch decided on (an action applies only if the
    layout is still at it); ``partitions``: the undeleted count then.
    ``hottest``: the hottest partition's rate, ``predicted_hottest``: its
    prediction under ``partitions_to``, ``total``: the topic's rate, all in
    ``unit`` per second against ``target``. ``state``: pass it to the next
    :func:`decide`.
    """

    kind: DecisionKind
    reason: str
    time: float
    epoch: int
    partitions: int
    partitions_to: int
    retire: FrozenSet[int]
    hottest: float
    predicted_hottest: float
    total: float
    target: float
    unit: Unit
    state: PolicyState = field(compare=False)

    def to_dict(self) -> Dict[str, object]:
        """A JSON-ready dict of the decision (without ``state``)."""
        return {
            "kind": self.kind, "reason": self.reason, "time": self.time, "epoch": self.epoch,
            "partitions": self.partitions, "partitions_to": self.partitions_to, "retire": sorted(self.retire),
            "hottest": self.hottest, "predicted_hottest": self.predicted_hottest, "total": self.total,
            "target": self.target, "unit": self.unit,
        }


def predict(rates: Sequence[float], initial_partitions: int, partitions: int) -> List[float]:
    """The per-partition rates under ``partitions`` undeleted partitions,
    from ``rates`` observed under ``len(rates)`` of them (same initial count).

    Growing splits partitions in linear hashing's fixed order, each split
    moving half of the parent's rate to the new partition; shrinking merges
    the last partitions back into their parents, adding their rates. Raises
    ``ValueError`` for a count below ``initial_partitions``."""
    if partitions < initial_partitions or len(rates) < initial_partitions:
        raise ValueError(f"cannot predict below the initial partition count {initial_partitions}")
    out = [float(r) for r in rates]
    while len(out) < partitions:
        parent = parent_partition(len(out), initial_partitions)
        assert parent is not None
        out[parent] /= 2.0
        out.append(out[parent])
    while len(out) > partitions:
        child = len(out) - 1
        parent = parent_partition(child, initial_partitions)
        assert parent is not None
        out[parent] += out.pop()
    return out


def _hottest(rates: Sequence[float]) -> float:
    return max(rates, default=0.0)


def decide(policy: AutoscalePolicy, obs: Observation, state: PolicyState = PolicyState()) -> Decision:
    """The decision for ``obs`` under ``policy``, given the ``state`` the
    previous decision returned. Pure: same inputs, same decision.

    Raises ``ValueError`` when ``obs`` has fewer undeleted partitions than
    its initial count."""
    target = policy.target
    now = obs.time
    n, n0 = obs.partitions, obs.initial_partitions
    hottest = _hottest(obs.rates)
    total = sum(obs.rates)
    floor = max(policy.min_partitions, n0)
    ceiling = policy.max_partitions if obs.capacity is None else min(policy.max_partitions, obs.capacity)
    step = policy.max_step if policy.max_step is not None else max(n, ceiling)

    def out(kind: DecisionKind, reason: str, to: int, st: PolicyState, retire: FrozenSet[int] = frozenset(),
            predicted: Optional[float] = None) -> Decision:
        return Decision(kind, reason, now, obs.epoch, n, to, retire, hottest,
                        hottest if predicted is None else predicted, total, target, policy.unit, st)

    # The runs above / below the thresholds.
    above = hottest > GROW_AT * target
    above_since = (state.above_since if state.above_since is not None else now) if above else None
    lagging = sorted(g for g in policy.groups if obs.lag_s.get(g, 0.0) > LAG_HOLD_S)
    minimal: Optional[int] = None
    if not above and not lagging:
        for m in range(max(floor, n - step), n):
            if _hottest(predict(obs.rates, n0, m)) <= SHRINK_AT * target:
                minimal = m
                break
    if minimal is None:
        below_since, shrink_to = None, None
    else:
        below_since = state.below_since if state.below_since is not None else now
        # (a remembered count at or above n is from before someone else changed the topic)
        remembered = state.shrink_to if state.shrink_to is not None and state.shrink_to < n else minimal
        shrink_to = max(minimal, remembered)
    st = PolicyState(above_since, below_since, shrink_to, state.last_change)
    cooling = state.last_change is not None and now - state.last_change < policy.cooldown
    pending = None if obs.gates_pending_since is None else max(0.0, now - obs.gates_pending_since)
    changed = replace(st, above_since=None, below_since=None, shrink_to=None, last_change=now)

    if not floor <= n <= policy.max_partitions and not cooling:
        # Outside the bounds (the policy changed, or the topic was changed by hand): walk back in.
        to = max(floor, n - step) if n > policy.max_partitions else min(floor, n + step, ceiling)
        if to != n and (to > n or pending is None):
            kind: DecisionKind = "grow" if to > n else "shrink"
            return out(kind, f"{n} partitions is outside the policy's bounds [{policy.min_partitions}, "
                             f"{policy.max_partitions}]", to, changed, predicted=_hottest(predict(obs.rates, n0, to)))
    blocked: Optional[str] = None  # why a due grow cannot happen
    if above and now - above_since >= policy.scale_up_after:  # type: ignore[operator]
        if n >= ceiling:
            what = ("max_partitions" if ceiling == policy.max_partitions
                    else "the cluster's capacity for this topic")
            blocked = (f"hottest partition at {hottest:.4g}/s is above {GROW_AT:.0%} of the target {target:.4g}/s "
                       f"but the topic is at {what} ({ceiling})")
        elif pending is not None and pending > GATE_PENDING_BOUND_S:
            blocked = (f"hottest partition at {hottest:.4g}/s is above {GROW_AT:.0%} of the target, but a gate of the "
                       f"previous transition has been closed for {pending:.0f} s (> {GATE_PENDING_BOUND_S:.0f} s): "
                       f"a consumer of {', '.join(policy.groups) or 'the topic'} is stuck or down")
        elif not cooling:
            limit = min(ceiling, n + step)
            to, pred = limit, _hottest(predict(obs.rates, n0, limit))
            for m in range(n + 1, limit + 1):
                p = _hottest(predict(obs.rates, n0, m))
                if p <= GROW_TO * target:
                    to, pred = m, p
                    break
            sustained = now - above_since  # type: ignore[operator]
            return out("grow", f"hottest partition at {hottest:.4g}/s has been above {GROW_AT:.0%} of the target "
                               f"{target:.4g}/s for {sustained:.0f} s; {to} partitions are predicted at "
                               f"{pred:.4g}/s", to, changed, predicted=pred)
    if obs.drained:
        ds = sorted(obs.drained)
        return out("retire", f"draining partition(s) {', '.join(map(str, ds))} are consumed by every named group "
                             "and become spares", n, st, retire=obs.drained)
    if (shrink_to is not None and now - below_since >= policy.scale_down_after  # type: ignore[operator]
            and not cooling and pending is None):
        pred = _hottest(predict(obs.rates, n0, shrink_to))
        return out("shrink", f"{shrink_to} partitions have been predicted at or below {SHRINK_AT:.0%} of the target "
                             f"{target:.4g}/s for {now - below_since:.0f} s (now {pred:.4g}/s)",  # type: ignore[operator]
                   shrink_to, changed, predicted=pred)
    # Hold: say what it waits for.
    if blocked is not None:
        why = blocked
    elif cooling:
        why = f"cooldown: {policy.cooldown - (now - state.last_change):.0f} s left"  # type: ignore[operator]
    elif above:
        why = (f"hottest partition at {hottest:.4g}/s above {GROW_AT:.0%} of the target for "
               f"{now - above_since:.0f} of {policy.scale_up_after:.0f} s")  # type: ignore[operator]
    elif lagging:
        why = f"not shrinking: group(s) {', '.join(lagging)} more than {LAG_HOLD_S:.0f} s behind"
    elif shrink_to is not None and pending is not None:
        why = f"not shrinking: a gate of the previous transition is still closed ({pending:.0f} s)"
    elif shrink_to is not None:
        why = (f"{shrink_to} partitions predicted at or below {SHRINK_AT:.0%} of the target for "
               f"{now - below_since:.0f} of {policy.scale_down_after:.0f} s")  # type: ignore[operator]
    else:
        why = f"hottest partition at {hottest:.4g}/s is within the band for the target {target:.4g}/s"
    return out("hold", why, n, st)
