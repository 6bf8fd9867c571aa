"""Replica placement orchestration for :class:`~kafka_ordered.admin.LayoutAdmin`.

Reads what placement needs from the cluster (:mod:`._cluster`), asks the pure
planner (:mod:`kafka_ordered.placement`) where replicas go, and drives the
cluster calls that act on a plan: healing under-replicated partitions
(reassignment) and preferred leader elections. Creating the partitions of a
plan is the layout operation's job (``_admin``). No printing.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from confluent_kafka.admin import AdminClient

from ..errors import KafkaOrderedError, PlacementError
from ..placement import (
    MIN_INSYNC_REPLICAS,
    HealPlan,
    MinRequiredReplicationFactor,
    PartitionLimits,
    PlacementPlan,
    plan_heal,
    plan_partitions,
    remaining_capacity,
)
from . import _cluster
from ._results import ClusterState, ElectionResult, HealResult, PartitionReplication

__all__ = ["ReplicaPlacement"]

_logger = logging.getLogger("kafka_ordered.admin")


def _ids(ps: Iterable[int]) -> str:
    ps = sorted(ps)
    return ", ".join(map(str, ps)) if ps else "-"


class ReplicaPlacement:
    """Replica placement for one admin connection.

    ``admin`` is the admin's ``AdminClient``, ``conn`` its librdkafka
    connection config (reassignments go through kafka-python with it),
    ``timeout`` the metadata timeout in seconds. Remembers, per topic, the
    replication factor asked for when partitions were created
    under-replicated through it (:meth:`placed`), as :meth:`plan_heal`'s
    default target. Not thread-safe.
    """

    def __init__(self, admin: AdminClient, conn: Mapping[str, Any], timeout: float) -> None:
        self._admin = admin
        self._conn = dict(conn)
        self.timeout = timeout
        # topic -> replication factor asked for when it was created/expanded under-replicated here.
        self._intended_rf: Dict[str, int] = {}

    # -- cluster inputs

    def cluster_state(self) -> ClusterState:
        """Live brokers, racks and replica counts (raises what
        :func:`._cluster.read_cluster` raises)."""
        return _cluster.read_cluster(self._admin, timeout=self.timeout)

    def topic_assignment(self, topic: str) -> Dict[int, List[int]]:
        """Partition -> replicas of ``topic``; ``UnknownTopicError`` if absent."""
        return _cluster.topic_assignment(self._admin, topic, timeout=self.timeout)

    def replication(self, topic: str) -> Tuple[int, Tuple[PartitionReplication, ...]]:
        """``topic``'s replication factor (the one asked for when it was
        created or expanded under-replicated through this admin, else its
        largest replica count) and each partition's replicas, in-sync
        replicas and missing count, from Metadata. Raises
        ``UnknownTopicError`` when the topic does not exist."""
        reps = _cluster.in_sync_replicas(self._admin, topic, timeout=self.timeout)
        rf = max([self._intended_rf.get(topic, 0)] + [len(r) for r, _ in reps.values()])
        return rf, tuple(
            PartitionReplication(p, tuple(r), tuple(sorted(isr)), max(0, rf - len(r))) for p, (r, isr) in sorted(reps.items())
        )

    @staticmethod
    def explicit(state: ClusterState) -> bool:
        """Send explicit replica assignments only when they carry information:
        with one live broker every replica goes there whatever is asked (and
        the embedded Tansu ignores explicit assignments)."""
        return len(state.racks) > 1

    @staticmethod
    def limits(max_partitions: Optional[PartitionLimits], state: ClusterState) -> Optional[PartitionLimits]:
        """Per-broker limits without the brokers known to be offline (they get
        no replicas); unknown ids stay, so the planner reports typos."""
        if isinstance(max_partitions, Mapping):
            return {b: v for b, v in max_partitions.items() if b not in state.offline}
        return max_partitions

    def _default_broker(self, state: ClusterState) -> int:
        return state.controller if state.controller is not None and state.controller in state.racks else min(state.racks)

    def replication_factor(self, requested: int, state: ClusterState) -> int:
        """``requested``, or for ``-1`` the broker's ``default.replication.factor``
        (1 on a one-broker cluster that does not report it). Raises
        :class:`PlacementError` when it cannot be known."""
        if requested != -1:
            return requested
        broker = self._default_broker(state)
        try:
            value = _cluster.broker_config(self._admin, broker, timeout=self.timeout).get("default.replication.factor")
        except KafkaOrderedError:
            value = None
        if value is not None:
            return int(value)
        if len(state.racks) == 1:
            return 1
        raise PlacementError(
            f"broker {broker} does not report default.replication.factor: pass replication_factor explicitly"
        )

    def min_insync(
        self,
        min_required: Optional[MinRequiredReplicationFactor],
        state: ClusterState,
        *,
        config: Optional[Mapping[str, str]] = None,
        topic: Optional[str] = None,
    ) -> Optional[int]:
        """``min.insync.replicas`` of the topic (its config, else the broker
        default), read only when ``min_required`` asks for it (else ``None``).
        Raises :class:`PlacementError` when it cannot be read."""
        if min_required != MIN_INSYNC_REPLICAS:
            return None
        value = (config or {}).get("min.insync.replicas")
        try:
            if value is None and topic is not None:
                value = _cluster.topic_config(self._admin, topic, timeout=self.timeout).get("min.insync.replicas")
            if value is None:
                broker = self._default_broker(state)
                value = _cluster.broker_config(self._admin, broker, timeout=self.timeout).get("min.insync.replicas")
        except KafkaOrderedError as e:
            raise PlacementError(
                f"cannot read min.insync.replicas ({e}); pass an int min_required_replication_factor"
            ) from e
        if value is None:
            raise PlacementError(
                "the cluster does not report min.insync.replicas; pass an int min_required_replication_factor "
                "(or set min.insync.replicas in the topic config)"
            )
        return int(value)

    # -- planning

    def plan_new_topic(
        self,
        topic: str,
        partitions: int,
        replication_factor: int,
        state: ClusterState,
        *,
        config: Optional[Mapping[str, str]] = None,
        max_partitions: Optional[PartitionLimits] = None,
        min_required_replication_factor: Optional[MinRequiredReplicationFactor] = None,
        ignore_racks: bool = False,
    ) -> PlacementPlan:
        """The placement of a new ``topic`` with ``partitions`` partitions
        (``replication_factor=-1``: the broker default). Raises what
        :func:`kafka_ordered.placement.plan_partitions` raises
        (:class:`PlacementError`, :class:`GuardRailsError`)."""
        rf = self.replication_factor(replication_factor, state)
        return plan_partitions(
            state.racks, partitions, rf, topic=topic,
            min_required_replication_factor=min_required_replication_factor,
            min_insync_replicas=self.min_insync(min_required_replication_factor, state, config=config),
            max_partitions=self.limits(max_partitions, state),
            current_replicas=state.live_replica_counts, ignore_racks=ignore_racks,
        )

    def plan_growth(
        self,
        topic: str,
        physical_partitions: int,
        state: ClusterState,
        *,
        max_partitions: Optional[PartitionLimits] = None,
        min_required_replication_factor: Optional[MinRequiredReplicationFactor] = None,
        ignore_racks: bool = False,
    ) -> PlacementPlan:
        """The placement of the partitions that grow ``topic`` to
        ``physical_partitions``, with the topic's replication factor (the
        largest replica count, or the one remembered by :meth:`placed`)."""
        existing = self.topic_assignment(topic)
        rf = max([self._intended_rf.get(topic, 0)] + [len(r) for r in existing.values()])
        return plan_partitions(
            state.racks, physical_partitions - len(existing), rf, topic=topic, existing=existing,
            min_required_replication_factor=min_required_replication_factor,
            min_insync_replicas=self.min_insync(min_required_replication_factor, state, topic=topic),
            max_partitions=self.limits(max_partitions, state),
            current_replicas=state.live_replica_counts, ignore_racks=ignore_racks,
        )

    def remaining(self, state: ClusterState, max_partitions: Optional[PartitionLimits]) -> Mapping[int, Optional[int]]:
        """What each live broker can still take under ``max_partitions``."""
        return remaining_capacity(state.racks, self.limits(max_partitions, state), state.live_replica_counts)

    def placed(self, plan: PlacementPlan) -> None:
        """Note that ``plan``'s partitions were created: an under-replicated
        creation remembers the intended replication factor (for
        :meth:`plan_heal`) and logs a warning."""
        if plan.missing and plan.topic is not None:
            self._intended_rf[plan.topic] = plan.replication_factor
            _logger.warning(
                "%s: created partitions %s under-replicated (%d of %d replicas, too few live brokers); "
                "heal(%r) adds the missing replicas once brokers return",
                plan.topic, sorted(plan.missing), plan.replication_factor - max(plan.missing.values()),
                plan.replication_factor, plan.topic,
            )

    # -- healing and leaders

    def plan_heal(
        self,
        topic: str,
        *,
        replication_factor: Optional[int] = None,
        max_partitions: Optional[PartitionLimits] = None,
        ignore_racks: bool = False,
    ) -> HealPlan:
        """See :meth:`kafka_ordered.admin.LayoutAdmin.plan_heal`."""
        state = self.cluster_state()
        current = self.topic_assignment(topic)
        rf = replication_factor
        if rf is None:
            rf = max([self._intended_rf.get(topic, 0)] + [len(r) for r in current.values()])
        return plan_heal(
            current, state.racks, rf, topic=topic, max_partitions=self.limits(max_partitions, state),
            current_replicas=state.live_replica_counts, ignore_racks=ignore_racks,
        )

    def heal(
        self,
        topic: str,
        *,
        replication_factor: Optional[int] = None,
        max_partitions: Optional[PartitionLimits] = None,
        ignore_racks: bool = False,
        elect_leaders: bool = False,
        wait_s: float = 120.0,
    ) -> HealResult:
        """See :meth:`kafka_ordered.admin.LayoutAdmin.heal`."""
        plan = self.plan_heal(topic, replication_factor=replication_factor, max_partitions=max_partitions,
                              ignore_racks=ignore_racks)
        if not plan.target:
            return HealResult(plan)
        results = _cluster.alter_partition_reassignments(self._conn, topic, plan.target, timeout=max(self.timeout, 30.0))
        rejected = {p: r for p, r in results.items() if not r.ok}
        if rejected:
            accepted = sorted(p for p, r in results.items() if r.ok)
            first = next(iter(rejected.values()))
            raise KafkaOrderedError(
                f"healing {topic}: the broker rejected the reassignment of "
                + "; ".join(f"partition {p} to {list(r.replicas)} ({r.error}: {r.message})" for p, r in rejected.items())
                + f". Accepted (in progress): {_ids(accepted)}",
                code=first.code,
            )
        if topic in self._intended_rf and plan.complete:
            del self._intended_rf[topic]
        in_sync = self._wait_in_sync(topic, plan.target, wait_s)
        elections = self.elect_reporting(topic, sorted(plan.target)) if elect_leaders else {}
        return HealResult(plan, results, elections, in_sync)

    def _wait_in_sync(self, topic: str, target: Mapping[int, Sequence[int]], wait_s: float) -> Dict[int, bool]:
        """Per partition of ``target``: whether its replicas became exactly
        ``target`` and all of them joined the ISR within ``wait_s`` seconds."""
        deadline = time.monotonic() + wait_s
        while True:
            state = _cluster.in_sync_replicas(self._admin, topic, timeout=self.timeout)
            done = {p: state.get(p, ([], []))[0] == list(reps) and set(reps) <= set(state.get(p, ([], []))[1])
                    for p, reps in target.items()}
            if all(done.values()) or time.monotonic() >= deadline:
                return done
            time.sleep(0.5)

    def elect_leaders(self, topic: str, partitions: Optional[Iterable[int]] = None) -> Dict[int, ElectionResult]:
        """See :meth:`kafka_ordered.admin.LayoutAdmin.elect_leaders`."""
        if partitions is None:
            ps = sorted(self.topic_assignment(topic))
        else:
            ps = []
            for p in partitions:
                if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                    raise PlacementError(f"partition ids must be ints >= 0, got {p!r}")
                ps.append(int(p))
        got = _cluster.elect_preferred_leaders(self._admin, [(topic, p) for p in sorted(set(ps))],
                                               timeout=max(self.timeout, 30.0))
        return {p: r for (t, p), r in got.items() if t == topic}

    def elect_reporting(self, topic: str, partitions: Sequence[int]) -> Dict[int, ElectionResult]:
        """:meth:`elect_leaders` after a change that was applied: a request that
        fails as a whole becomes one failed result per partition."""
        if not partitions:
            return {}
        try:
            return self.elect_leaders(topic, partitions)
        except KafkaOrderedError as e:
            code = e.code if e.code is not None else -1
            return {p: ElectionResult(topic, p, "failed", code, type(e).__name__, str(e)) for p in partitions}
