""":class:`Autoscaler`: observes a managed topic, decides with the pure
:mod:`kafka_ordered.autoscale` policy and acts through :class:`LayoutAdmin`.

One autoscaler acts per topic: every instance joins a consumer group on a
one-partition *coordination topic*; the member the broker assigns that
partition is the leader, the others are standbys (a dead leader is replaced
after its session timeout). Every action names the layout epoch it was
decided on (``expected_epoch``), so two leaders for a moment cannot apply two
changes: the second finds the layout moved, or loses the first-claim race in
the layout log. The leader also writes its status (who it is, its latest
decision) to the coordination topic, keyed by the data topic, which
:func:`autoscaler_status` reads back for ``kafka-ordered describe``.
"""

from __future__ import annotations

import collections
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from .._kafka import topic_exists
from ..autoscale import AutoscalePolicy, Decision, Observation, PolicyState, decide
from ..config import internal_config, split_config
from ..errors import (
    ConcurrentLayoutChangeError,
    ConfigError,
    GuardRailsError,
    KafkaOrderedError,
    PlacementError,
    UnknownTopicError,
    translate,
)
from ..layout import Layout
from ..metrics import AutoscalerMetrics
from . import _cluster
from ._admin import LayoutAdmin

__all__ = ["Autoscaler", "AutoscalerStatus", "autoscaler_status", "coordination_topic_for"]

log = logging.getLogger("kafka_ordered.autoscale")

#: Seconds between two status records of an unchanged leader on the coordination topic.
STATUS_EVERY_S = 300.0
#: Seconds after which a capacity limit found by the placement planner is checked again.
CAPACITY_RECHECK_S = 600.0
#: Decisions kept in :attr:`Autoscaler.decisions`.
KEEP_DECISIONS = 10_000

_OPTIONS = ("ordered.layout.topic", "ordered.layout.corrupt.policy", "ordered.metadata.timeout.ms")


def coordination_topic_for(layout_topic: str) -> str:
    """The default coordination topic of the autoscalers that follow ``layout_topic``."""
    return f"{layout_topic}.autoscale"


@dataclass(frozen=True)
class AutoscalerStatus:
    """The latest status the acting autoscaler wrote for a topic: who it is
    (``autoscaler_id``, ``host``, ``pid``), when it wrote (``time``, Unix
    seconds) and its latest decision (a
    :meth:`~kafka_ordered.autoscale.Decision.to_dict`, ``None`` before the
    first). A dry run writes none."""

    topic: str
    autoscaler_id: str
    host: str
    pid: int
    time: float
    decision: Optional[Mapping[str, Any]]

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready description."""
        return {"topic": self.topic, "autoscaler_id": self.autoscaler_id, "host": self.host, "pid": self.pid,
                "time": self.time,
                "decision": dict(self.decision) if self.decision is not None else None}


class Autoscaler:
    """Grows and shrinks a managed topic with its load, in order.

    ``config``: a librdkafka config (``bootstrap.servers``, security, and the
    group settings of the leader election, e.g. ``session.timeout.ms``) plus
    ``ordered.layout.topic`` and the other :class:`LayoutAdmin` options.
    ``policy``: the :class:`~kafka_ordered.autoscale.AutoscalePolicy`.
    ``interval``: seconds between observations; ``window``: seconds over
    which rates are measured (default ``3 * interval``); ``dry_run``: decide
    and report, change nothing; ``delete_records``: retire with
    DeleteRecords (only on brokers that support it);
    ``coordination_topic``: the leader-election topic (default
    :func:`coordination_topic_for` the layout topic); ``on_decision``: called
    with every :class:`~kafka_ordered.autoscale.Decision` (from the
    autoscaler's thread).

    :meth:`start` checks everything before anything changes and raises
    :class:`TopicNotManagedError` / :class:`UnknownTopicError` for a topic
    that is not managed, :class:`ConfigError` for a policy that does not
    fit the topic (``min_partitions`` below its initial count) or a named
    group that does not exist, :class:`UnsupportedBrokerApiError` (api
    ``"DescribeLogDirs"``) when the target is in bytes and the broker does
    not report log sizes. Then it runs in a background thread until
    :meth:`close`. Errors while running are logged (WARNING) and the next
    round tries again; growth stopped by the cluster's capacity (KIP-578
    limits, no CreatePartitions) is a WARNING and a hold, not a crash.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        topic: str,
        policy: AutoscalePolicy,
        *,
        interval: float = 10.0,
        window: Optional[float] = None,
        dry_run: bool = False,
        delete_records: bool = False,
        coordination_topic: Optional[str] = None,
        on_decision: Optional[Callable[[Decision], None]] = None,
    ) -> None:
        if not isinstance(policy, AutoscalePolicy):
            raise TypeError(f"policy must be an AutoscalePolicy, got {type(policy).__name__}")
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 < interval < math.inf:
            raise ConfigError(f"Autoscaler interval must be > 0 seconds, got {interval!r}")
        self.window = float(window) if window is not None else 3.0 * interval
        if not self.window > 0:
            raise ConfigError(f"Autoscaler window must be > 0 seconds, got {window!r}")
        opts, rest = split_config(config, _OPTIONS, "Autoscaler")
        self.config = dict(config)
        self.topic = topic
        self.policy = policy
        self.interval = float(interval)
        self.dry_run = bool(dry_run)
        self.delete_records = bool(delete_records)
        self.coordination_topic = coordination_topic or coordination_topic_for(opts["ordered.layout.topic"])
        self.autoscaler_id = f"autoscaler-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._rest = rest
        self._on_decision = on_decision
        self._lock = threading.Lock()
        self._decisions: Deque[Decision] = collections.deque(maxlen=KEEP_DECISIONS)
        self._counts: Dict[str, int] = collections.Counter()
        self._leader = False
        self._state = PolicyState()
        self._samples: Deque[Tuple[float, Dict[int, int], Dict[int, int]]] = collections.deque()
        self._sample_epoch: Optional[int] = None
        self._partitions: Optional[int] = None
        self._rates: Dict[int, float] = {}
        self._capacity: Optional[Tuple[int, float]] = None  # (limit, found at)
        self._last_status = -math.inf
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._admin: Optional[LayoutAdmin] = None
        self._consumer: Optional[Consumer] = None
        self._producer: Optional[Producer] = None
        self._kp_admin: Any = None

    # -- public

    @property
    def decisions(self) -> List[Decision]:
        """Every decision taken so far (the latest :data:`KEEP_DECISIONS`), oldest first."""
        with self._lock:
            return list(self._decisions)

    @property
    def is_leader(self) -> bool:
        """Whether this instance is the one that acts for the topic now."""
        return self._leader

    def start(self) -> None:
        """Check the topic, policy, groups and broker, then run in a
        background thread. Raises (before anything changes) as the class
        describes; ``RuntimeError`` when already started."""
        if self._thread is not None:
            raise RuntimeError("Autoscaler already started")
        admin = LayoutAdmin(self.config)
        try:
            self._check(admin)
            self._ensure_coordination_topic(admin)
        except BaseException:
            admin.close()
            self._close_clients()
            raise
        self._admin = admin
        self._thread = threading.Thread(target=self._run, name=f"kafka-ordered-autoscaler-{self.topic}", daemon=True)
        if self.dry_run:  # decides for itself; never stands in the election nor writes a status
            self._thread.start()
            return
        self._producer = Producer(internal_config(self._rest, "producer"))
        self._consumer = Consumer({
            **internal_config(self._rest, "consumer"),
            "group.id": f"{self.coordination_topic}.{self.topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            "partition.assignment.strategy": "range",
        })
        self._consumer.subscribe([self.coordination_topic], on_assign=self._assigned, on_revoke=self._revoked,
                                 on_lost=self._revoked)
        self._thread.start()

    def close(self) -> None:
        """Stop the thread and leave the election (a standby takes over).
        Idempotent."""
        self._stop.set()
        t, self._thread = self._thread, None
        if t is not None and t is not threading.current_thread():
            t.join()
        self._close_clients()

    def __enter__(self) -> "Autoscaler":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def ordered_metrics(self) -> AutoscalerMetrics:
        """A snapshot for :mod:`kafka_ordered.prometheus`."""
        with self._lock:
            last = self._decisions[-1] if self._decisions else None
            return AutoscalerMetrics(self.topic, self.autoscaler_id, self._leader, self.policy.unit,
                                     dict(self._rates), dict(self._counts),
                                     last.time if last is not None else None, last.kind if last is not None else None)

    # -- checks

    def _check(self, admin: LayoutAdmin) -> None:
        cur = admin.layout(self.topic)  # UnknownTopicError / TopicNotManagedError
        if self.policy.min_partitions < cur.initial_partitions:
            raise ConfigError(
                f"min_partitions {self.policy.min_partitions} is below the initial partition count "
                f"{cur.initial_partitions} of {self.topic}: linear hashing never goes below it"
            )
        if self.policy.groups:
            known = _cluster.list_groups(admin._admin, timeout=admin.timeout)
            for g in self.policy.groups:
                if g in known:
                    continue
                committed = admin.committed(g, [(self.topic, p) for p in range(cur.physical_partitions)])
                if not any(off >= 0 for off in committed.values()):
                    raise ConfigError(
                        f"consumer group {g} does not exist (the broker lists no such group and it has no "
                        f"committed offset on {self.topic}): start its consumers first, or check the name"
                    )
        if self.policy.unit == "bytes":
            self._kp_admin = _cluster.log_dir_admin(self._rest, admin.timeout)
            _cluster.log_sizes(self._kp_admin, self.topic)  # raises UnsupportedBrokerApiError

    def _ensure_coordination_topic(self, admin: LayoutAdmin) -> None:
        fs = admin._admin.create_topics([NewTopic(self.coordination_topic, 1, -1)], request_timeout=admin.timeout)
        try:
            fs[self.coordination_topic].result()
        except KafkaException as e:
            err = translate(e, f"creating the coordination topic {self.coordination_topic}", api="CreateTopics")
            if err.code != KafkaError.TOPIC_ALREADY_EXISTS:
                raise err from e

    # -- election

    def _assigned(self, consumer: Any, partitions: List[TopicPartition]) -> None:
        leader = any(tp.topic == self.coordination_topic and tp.partition == 0 for tp in partitions)
        if leader and not self._leader:
            log.info("%s: %s is now the acting autoscaler", self.topic, self.autoscaler_id)
            self._last_status = -math.inf
        self._leader = leader

    def _revoked(self, consumer: Any, partitions: List[TopicPartition]) -> None:
        if self._leader:
            log.info("%s: %s is a standby now", self.topic, self.autoscaler_id)
        self._leader = False

    # -- the loop

    def _run(self) -> None:
        next_round = time.monotonic()
        while not self._stop.is_set():
            wait = max(0.0, min(0.2, next_round - time.monotonic()))
            if self._consumer is None:
                self._stop.wait(wait)
            else:
                try:
                    self._consumer.poll(wait)
                except Exception as e:  # the election consumer's errors are reported, the loop goes on
                    log.warning("%s: election consumer: %s", self.topic, e)
            if time.monotonic() < next_round or self._stop.is_set():
                continue
            next_round = time.monotonic() + self.interval
            try:
                self._round()
            except KafkaOrderedError as e:
                log.warning("%s: autoscaler round failed (trying again in %.0f s): %s", self.topic, self.interval, e)
            except Exception as e:  # never let one bad round end the autoscaler silently
                log.exception("%s: autoscaler round failed: %s", self.topic, e)

    def _round(self) -> Optional[Decision]:
        admin = self._admin
        assert admin is not None
        cur = admin.layout(self.topic)
        now = time.time()
        obs = self._observe(admin, cur, now)
        if obs is None:
            return None
        state = self._state
        if self._partitions is not None and cur.partitions != self._partitions:
            # The count changed (by us, or by hand): the load runs measured before it are void.
            state = replace(state, above_since=None, below_since=None, shrink_to=None)
        self._partitions = cur.partitions
        last_change = self._last_change(admin)
        if last_change is not None and (state.last_change is None or last_change > state.last_change):
            state = replace(state, last_change=last_change)
        d = decide(self.policy, obs, state)
        if not (self._leader or self.dry_run):
            # A standby follows the load (sustain times) but neither acts nor records.
            self._state = d.state if d.kind == "hold" else state
            return None
        self._state = d.state
        if not self.dry_run and d.kind != "hold":
            d = self._act(admin, cur, d, state)
        with self._lock:
            self._decisions.append(d)
            self._counts[d.kind] += 1
        if self._on_decision is not None:
            self._on_decision(d)
        if not self.dry_run and (d.kind != "hold" or now - self._last_status >= STATUS_EVERY_S):
            self._publish(d, now)
        return d

    def _observe(self, admin: LayoutAdmin, cur: Layout, now: float) -> Optional[Observation]:
        physical = max(cur.physical_partitions, 1)
        tps = [(self.topic, p) for p in range(physical)]
        ends = {p: off for (_, p), off in admin._offsets.end_offsets(tps).items()}
        sizes = _cluster.log_sizes(self._kp_admin, self.topic) if self.policy.unit == "bytes" else {}
        if self._sample_epoch != cur.epoch:
            self._samples.clear()  # rates measured across a layout change mix two layouts
            self._sample_epoch = cur.epoch
        self._samples.append((now, ends, sizes))
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.window:
            self._samples.popleft()
        if len(self._samples) < 2:
            return None
        t0, ends0, sizes0 = self._samples[0]
        dt = max(now - t0, 1e-3)
        records = [max(0, ends.get(p, 0) - ends0.get(p, 0)) / dt for p in range(cur.partitions)]
        if self.policy.unit == "bytes":
            rates = [max(0, sizes.get(p, 0) - sizes0.get(p, 0)) / dt for p in range(cur.partitions)]
        else:
            rates = records
        with self._lock:
            self._rates = dict(enumerate(rates))
        lag_s: Dict[str, float] = {}
        drained = set(cur.draining)
        pending: Optional[float] = None
        total_records = sum(records)
        for g in self.policy.groups:
            desc = admin.describe(self.topic, g)
            lag = 0
            for ps in desc.partitions:
                if ps.partition < cur.partitions:
                    lag += ps.lag if ps.lag is not None else max(0, ps.log_end - ps.log_start)
                if ps.partition in cur.draining and ps.log_start < ps.log_end and ps.committed < ps.log_end:
                    drained.discard(ps.partition)
            lag_s[g] = 0.0 if lag == 0 else (lag / total_records if total_records > 0 else math.inf)
            for gate in desc.gates:
                if not gate.open and gate.held_since is not None:
                    pending = gate.held_since if pending is None else min(pending, gate.held_since)
        if not self.policy.groups and cur.draining:
            starts = admin._offsets.start_offsets([(self.topic, q) for q in cur.draining])
            drained = {q for q in cur.draining if starts[(self.topic, q)] >= ends.get(q, 0)}
        return Observation(now, cur.epoch, cur.initial_partitions, cur.partitions, tuple(rates), lag_s,
                           frozenset(drained), pending, self._capacity_now(now))

    def _capacity_now(self, now: float) -> Optional[int]:
        if self._capacity is not None and now - self._capacity[1] > CAPACITY_RECHECK_S:
            self._capacity = None
        return self._capacity[0] if self._capacity is not None else None

    def _last_change(self, admin: LayoutAdmin) -> Optional[float]:
        changes = [c for c in admin.history.changes(self.topic) if c.op in ("expand", "shrink")]
        return changes[-1].timestamp_ms / 1000.0 if changes else None

    def _act(self, admin: LayoutAdmin, cur: Layout, d: Decision, before: PolicyState) -> Decision:
        try:
            if d.kind == "grow":
                problem: Optional[str] = None
                try:
                    plan = admin.plan(self.topic, d.partitions_to)
                    problem = plan.problem
                    physical = plan.physical_partitions
                except (GuardRailsError, PlacementError) as e:
                    problem, physical = str(e), cur.physical_partitions
                if problem is not None:
                    limit = max(cur.partitions, min(physical, d.partitions_to - 1))
                    self._capacity = (limit, d.time)
                    log.warning("%s: cannot grow to %d partitions, growth stops at %d (checked again in %.0f s): %s",
                                self.topic, d.partitions_to, limit, CAPACITY_RECHECK_S, problem)
                    self._state = before
                    return replace(d, kind="hold", partitions_to=cur.partitions,
                                   reason=f"{d.reason}; but the cluster cannot take it: {problem}")
                admin.expand(self.topic, d.partitions_to, expected_epoch=d.epoch)
            elif d.kind == "shrink":
                admin.shrink(self.topic, d.partitions_to, expected_epoch=d.epoch)
            elif d.kind == "retire":
                res = admin.retire(self.topic, self.policy.groups, delete_records=self.delete_records,
                                   expected_epoch=d.epoch)
                if not res.retired:
                    return replace(d, kind="hold", retire=frozenset(), reason="retire not applied: " + "; ".join(
                        f"{q}: {why}" for q, why in sorted(res.still_draining.items())))
                if res.retired != d.retire:
                    d = replace(d, retire=frozenset(res.retired),
                                reason=d.reason + f"; retired {sorted(res.retired)} (still draining: "
                                                  f"{', '.join(f'{q}: {why}' for q, why in sorted(res.still_draining.items()))})")
            log.info("%s: %s applied at epoch %d: %s", self.topic, d.kind, d.epoch, d.reason)
            return d
        except ConcurrentLayoutChangeError as e:
            self._state = before
            self._samples.clear()
            log.info("%s: %s not applied, the layout moved: %s", self.topic, d.kind, e)
            return replace(d, kind="hold", partitions_to=d.partitions, retire=frozenset(),
                           reason=f"{d.kind} not applied: the layout moved past epoch {d.epoch}")
        except KafkaOrderedError as e:
            # The cooldown the decision started is the back-off before the next attempt.
            log.warning("%s: %s to %d failed (next attempt after the cooldown): %s", self.topic, d.kind,
                        d.partitions_to, e)
            return replace(d, kind="hold", partitions_to=d.partitions, retire=frozenset(),
                           reason=f"{d.kind} failed: {e}")

    def _publish(self, d: Optional[Decision], now: float) -> None:
        if self._producer is None:
            return
        status = AutoscalerStatus(self.topic, self.autoscaler_id, socket.gethostname(), os.getpid(), now,
                                  d.to_dict() if d is not None else None)
        try:
            self._producer.produce(self.coordination_topic, key=self.topic.encode(),
                                   value=json.dumps(status.to_dict()).encode())
            self._producer.poll(0)
            self._last_status = now
        except (KafkaException, BufferError) as e:
            log.warning("%s: could not write the autoscaler status: %s", self.topic, e)

    def _close_clients(self) -> None:
        c, self._consumer = self._consumer, None
        if c is not None:
            try:
                c.close()
            except Exception:
                pass
        p, self._producer = self._producer, None
        if p is not None:
            p.flush(5)
        kp, self._kp_admin = self._kp_admin, None
        if kp is not None:
            kp.close()
        a, self._admin = self._admin, None
        if a is not None:
            a.close()
        self._leader = False


def autoscaler_status(admin: LayoutAdmin, topic: str, *, coordination_topic: Optional[str] = None,
                      scan: int = 1000) -> Optional[AutoscalerStatus]:
    """The latest status an acting autoscaler of ``topic`` wrote (among the
    last ``scan`` records of the coordination topic), or ``None`` when there
    is none (no autoscaler ran, or the coordination topic does not exist)."""
    ctopic = coordination_topic or coordination_topic_for(admin.layout_topic)
    tp = (ctopic, 0)
    if not topic_exists(admin._admin, ctopic, admin.timeout):
        return None  # no autoscaler ever ran with this layout log
    try:
        end = admin._offsets.end_offsets([tp])[tp]
        start = admin._offsets.start_offsets([tp])[tp]
        if end <= start:
            return None
        records, _ = admin._offsets.read_from(tp, max(start, end - scan), end)
    except UnknownTopicError:  # deleted meanwhile
        return None
    latest: Optional[AutoscalerStatus] = None
    for rec in records:
        if rec.key() != topic.encode():
            continue
        try:
            d = json.loads(rec.value())
            latest = AutoscalerStatus(d["topic"], d["autoscaler_id"], d["host"], int(d["pid"]), float(d["time"]),
                                      d.get("decision"))
        except (ValueError, KeyError, TypeError):
            continue
    return latest
