"""kafka-python ``partition_assignment_strategy`` entry running the pure
layout-aware assignment (:func:`kafka_ordered.assignment.assign_partitions`).

:class:`OrderedAssignor` reads layouts from the layout follower it was
constructed with, or from the followers registered in this process by
:class:`kafka_ordered.kafka_python.OrderedKafkaConsumer`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set

from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor as _Base
from kafka.coordinator.assignors.abstract import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from ..assignment import assign_partitions
from ..layout import Layout

__all__ = ["OrderedAssignor", "register_layouts", "unregister_layouts"]

log = logging.getLogger("kafka_ordered.assignor")

LayoutSource = Callable[[str], Optional[Layout]]

_registry_lock = threading.Lock()
# Followers of this process's OrderedKafkaConsumers (one entry per consumer;
# they share a follower per cluster). Looked up by topic: an assignor listed
# without a follower cannot know which cluster it serves.
_registry: List[Any] = []


def register_layouts(follower: Any) -> None:
    """Make ``follower`` (a :class:`~kafka_ordered.layout_log.LayoutFollower`)
    visible to :class:`OrderedAssignor` instances that were not given one."""
    with _registry_lock:
        _registry.append(follower)


def unregister_layouts(follower: Any) -> None:
    """Undo one :func:`register_layouts`."""
    with _registry_lock:
        if follower in _registry:
            _registry.remove(follower)


def _registered_layout(topic: str) -> Optional[Layout]:
    with _registry_lock:
        followers = list(_registry)
    best: Optional[Layout] = None
    for f in followers:
        lay = f.history.current(topic)
        if lay is not None and (best is None or lay.epoch > best.epoch):
            best = lay
    return best


class OrderedAssignor(_Base):  # type: ignore[misc,valid-type]
    """kafka-python ``partition_assignment_strategy`` entry (protocol name
    ``"ordered"``) running :func:`assign_partitions`.

    ``OrderedAssignor(follower)`` reads layouts from that layout follower
    (anything with ``.history.current(topic)``) or from a callable
    ``topic -> Layout | None``; without one (also when the class itself is
    listed) it uses the followers registered in this process by
    ``OrderedKafkaConsumer``. Topics without a known layout are spread
    evenly (round-robin-like). Every member of the group must list it.
    """

    name = "ordered"
    version = 0

    def __init__(self, layouts: Any = None) -> None:
        self._source = layouts

    def _layout(self, topic: str) -> Optional[Layout]:
        src = self._source
        if src is None:
            return _registered_layout(topic)
        if callable(src):
            return src(topic)
        return src.history.current(topic)

    def assign(self, cluster: Any, members: Sequence[Any]) -> Dict[str, Any]:
        """The group leader's assignment (kafka-python's
        ``AbstractPartitionAssignor.assign``): member id ->
        ``ConsumerProtocolAssignment``. Every physical partition of every
        subscribed topic is assigned (draining and spare ones included), by
        :func:`~kafka_ordered.assignment.assign_partitions` with the layouts
        known here. A topic without partition metadata is left out with a
        warning; a layout that cannot be read is logged and the topic spread
        evenly: a rebalance never fails over the layout view."""
        subs: Dict[str, Set[str]] = {}
        ids: List[str] = []
        for member in members:
            ids.append(member.member_id)
            subs[member.member_id] = set(member.metadata.topics)
        counts: Dict[str, int] = {}
        layouts: Dict[str, Layout] = {}
        for topic in sorted(set().union(*subs.values()) if subs else ()):
            ps = cluster.partitions_for_topic(topic)
            if not ps:
                log.warning("no partition metadata for topic %s", topic)
                continue
            counts[topic] = max(ps) + 1
            try:
                lay = self._layout(topic)
            except Exception as e:  # never fail a rebalance over the layout view
                log.warning("layout of %s unavailable for assignment (%s); spreading evenly", topic, e)
                lay = None
            if lay is not None and lay.topic == topic:
                layouts[topic] = lay
        plan = assign_partitions(ids, counts, layouts, subs)
        return {
            mid: ConsumerProtocolAssignment(self.version, sorted(plan.get(mid, {}).items()), b"")
            for mid in ids
        }

    def metadata(self, topics: Iterable[str]) -> Any:
        """This member's subscription for the JoinGroup request (no user data)."""
        return ConsumerProtocolSubscription(self.version, list(topics), b"")

    def on_assignment(self, assignment: Any, generation: int) -> None:
        """Nothing to do: the assignment carries no user data."""
        pass
