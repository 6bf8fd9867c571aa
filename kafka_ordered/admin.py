"""Admin API: put topics under management and change their layouts.

Every change is one record appended to the layout log; producers and
consumers follow the log. Physical partitions are only ever added (Kafka
cannot delete partitions): a *shrink* is a layout change that marks the
removed partitions draining, and a later expansion reuses them.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple, Type

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

from ._kafka import OffsetReader, new_admin, partition_count, topic_exists, translate
from .config import connection_config, split_config
from .errors import (
    ConcurrentLayoutChangeError,
    InvalidLayoutError,
    KafkaOrderedError,
    TopicAlreadyManagedError,
    TopicNotManagedError,
    UnknownTopicError,
    UnsupportedBrokerApiError,
)
from .gates import GateStatus, gate_open
from .history import Gate, LayoutChange, LayoutHistory, LogProblem, Registration, encode_layout
from .layout import DEFAULT_SETTLE_MS, HashName, Layout
from .layout_log import LayoutFollower, LayoutLog

__all__ = ["LayoutAdmin", "TopicDescription", "RetireResult", "GroupGateState"]

_ADMIN_OPTIONS = (
    "ordered.layout.topic",
    "ordered.layout.corrupt.policy",
    "ordered.metadata.timeout.ms",
    "ordered.follower.poll.interval.ms",
)


@dataclass(frozen=True)
class GroupGateState:
    """One gate as a consumer group sees it: open, or waiting on sources
    (``waiting_on``: source -> (wait offset, group's processed offset)) for
    ``waiting_s`` seconds since the registration was written."""

    partition: int
    start: int
    producer_id: str
    epoch: int
    open: bool
    waiting_on: Mapping[int, Tuple[int, int]]
    waiting_s: float


@dataclass(frozen=True)
class TopicDescription:
    """Everything the layout log knows about one managed topic."""

    topic: str
    layout: Layout
    history: Tuple[LayoutChange, ...]
    physical_partitions: int
    draining: FrozenSet[int]
    spares: FrozenSet[int]
    lineage: Mapping[int, Optional[int]]
    registrations: Tuple[Registration, ...]
    problems: Tuple[LogProblem, ...] = ()
    group: Optional[str] = None
    gates: Tuple[GroupGateState, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {
            "topic": self.topic,
            "layout": self.layout.to_dict(),
            "physical_partitions": self.physical_partitions,
            "draining": sorted(self.draining),
            "spares": sorted(self.spares),
            "lineage": {str(p): parent for p, parent in sorted(self.lineage.items())},
            "history": [
                {"epoch": c.layout.epoch, "op": c.op, "partitions": c.layout.partitions,
                 "physical_partitions": c.layout.physical_partitions, "draining": sorted(c.layout.draining),
                 "offset": c.offset, "timestamp_ms": c.timestamp_ms}
                for c in self.history
            ],
            "registrations": [
                {"producer": r.producer_id, "stable": r.stable, "epoch": r.epoch, "from_epoch": r.from_epoch,
                 "offset": r.offset, "timestamp_ms": r.timestamp_ms,
                 "gates": {str(g.partition): {"start": g.start, "wait": {str(q): w for q, w in g.wait.items()}}
                           for g in r.gates}}
                for r in self.registrations
            ],
            "problems": [{"offset": p.offset, "reason": p.reason} for p in self.problems],
        }
        if self.group is not None:
            d["group"] = self.group
            d["gates"] = [
                {"partition": g.partition, "start": g.start, "producer": g.producer_id, "epoch": g.epoch,
                 "open": g.open, "waiting_s": round(g.waiting_s, 3),
                 "waiting_on": {str(q): {"wait": w, "processed": pr} for q, (w, pr) in g.waiting_on.items()}}
                for g in self.gates
            ]
        return d


@dataclass(frozen=True)
class RetireResult:
    """Outcome of :meth:`LayoutAdmin.retire`: the partitions that became spares,
    those still draining with the reason, and the new layout (unchanged when
    nothing was retired)."""

    layout: Layout
    retired: FrozenSet[int]
    still_draining: Mapping[int, str]
    deleted_records: Mapping[int, int] = field(default_factory=dict)


class LayoutAdmin:
    """Creates managed topics and changes their layouts through the layout log.

    ``config`` is a librdkafka config dict (``bootstrap.servers``, security
    settings) plus optional ``ordered.layout.topic``,
    ``ordered.layout.corrupt.policy``, ``ordered.metadata.timeout.ms``.
    Constructing it connects and reads the layout log; raises
    :class:`BrokerUnavailableError` when no broker answers and
    :class:`LayoutLogError` when the log cannot be created or trusted.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        opts, rest = split_config(config, _ADMIN_OPTIONS, "LayoutAdmin")
        self._conn = connection_config(rest)
        self.timeout = opts["ordered.metadata.timeout.ms"] / 1000.0
        self.layout_topic: str = opts["ordered.layout.topic"]
        self.admin_id = f"admin-{uuid.uuid4().hex[:12]}"
        self._admin = new_admin(self._conn)
        self._log = LayoutLog(self._conn, self.layout_topic, timeout=self.timeout)
        self._follower = LayoutFollower(
            self._conn,
            self.layout_topic,
            poll_interval_ms=opts["ordered.follower.poll.interval.ms"],
            corrupt_policy=opts["ordered.layout.corrupt.policy"],
            timeout=self.timeout,
        )
        self._follower.start()
        self._offsets = OffsetReader(self._conn, self.timeout)

    # -- reading

    @property
    def history(self) -> LayoutHistory:
        """The layout history as of the last sync."""
        return self._follower.history

    def sync(self) -> LayoutHistory:
        """Read the layout log up to its current end."""
        return self._follower.sync()

    def layout(self, topic: str) -> Layout:
        """The current layout of a managed topic. Raises :class:`UnknownTopicError`
        or :class:`TopicNotManagedError`."""
        cur = self.sync().current(topic)
        if cur is None:
            if not topic_exists(self._admin, topic, self.timeout):
                raise UnknownTopicError(f"topic {topic} does not exist", code=KafkaError.UNKNOWN_TOPIC_OR_PART)
            raise TopicNotManagedError(
                f"topic {topic} is not managed by kafka-ordered (no layout in {self.layout_topic}); "
                f"use adopt({topic!r}) or `kafka-ordered adopt {topic}`"
            )
        return cur

    def topics(self) -> List[str]:
        """Every managed topic."""
        return self.sync().topics()

    # -- changing

    def _append(self, layout: Layout, op: str) -> Layout:
        offset = self._log.append(*encode_layout(layout, op, self.admin_id))
        history = self._follower.sync()
        if history.find_change(layout.topic, offset) is None:
            winner = history.current(layout.topic)
            raise ConcurrentLayoutChangeError(
                f"another admin changed {layout.topic} first (epoch {layout.epoch} is now "
                f"{winner.partitions if winner else '?'} partitions); this {op} was not applied. "
                "Re-read the layout and retry if it is still wanted."
            )
        return layout

    def create_topic(
        self,
        topic: str,
        initial_partitions: int,
        physical_partitions: Optional[int] = None,
        replication_factor: int = -1,
        *,
        hash: HashName = "murmur2",
        settle_ms: int = DEFAULT_SETTLE_MS,
        config: Optional[Mapping[str, str]] = None,
    ) -> Layout:
        """Create ``topic`` with ``physical_partitions`` (default: the initial
        count) and put it under management with ``initial_partitions``
        undeleted. Extra physical partitions are spares that expansions use
        without CreatePartitions (needed on brokers without that API).

        ``replication_factor=-1`` takes the broker default. Raises
        :class:`InvalidLayoutError` for bad counts,
        :class:`TopicAlreadyManagedError` if the topic exists (use :meth:`adopt`).
        """
        layout = Layout(topic, 1, initial_partitions, initial_partitions,
                        physical_partitions if physical_partitions is not None else initial_partitions,
                        hash=hash, settle_ms=settle_ms)
        if self.sync().current(topic) is not None:
            raise TopicAlreadyManagedError(f"topic {topic} is already managed")
        fs = self._admin.create_topics(
            [NewTopic(topic, layout.physical_partitions, replication_factor, config=dict(config or {}))],
            request_timeout=self.timeout,
        )
        try:
            fs[topic].result()
        except KafkaException as e:
            if e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                raise TopicAlreadyManagedError(
                    f"topic {topic} already exists; use adopt({topic!r}) to manage it", code=e.args[0].code()
                ) from e
            raise translate(e, f"creating topic {topic}", api="CreateTopics") from e
        self._wait_partitions(topic, layout.physical_partitions)
        return self._append(layout, "create")

    def adopt(self, topic: str, *, hash: HashName = "murmur2", settle_ms: int = DEFAULT_SETTLE_MS) -> Layout:
        """Put an existing topic under management with ``initial = current
        partition count``. With ``hash="murmur2"`` (Java clients, librdkafka
        ``murmur2_random``) or ``"crc32"`` (librdkafka's default
        ``consistent_random``) no key moves."""
        if self.sync().current(topic) is not None:
            raise TopicAlreadyManagedError(f"topic {topic} is already managed")
        count = partition_count(self._admin, topic, self.timeout)
        return self._append(Layout(topic, 1, count, count, count, hash=hash, settle_ms=settle_ms), "adopt")

    def expand(self, topic: str, partitions: int) -> Layout:
        """Grow the undeleted partition count to ``partitions``.

        Draining and spare partitions are reused first; CreatePartitions is
        called only when more physical partitions are needed. Allowed while
        partitions drain. Raises :class:`InvalidLayoutError` (not larger),
        :class:`UnsupportedBrokerApiError` (more partitions needed and the
        broker lacks CreatePartitions; nothing changed).
        """
        cur = self.layout(topic)
        physical = max(cur.physical_partitions, partition_count(self._admin, topic, self.timeout))
        new = cur.expanded(partitions, physical)
        if new.physical_partitions > physical:
            self._create_partitions(topic, new.physical_partitions)
        return self._append(new, "expand")

    def shrink(self, topic: str, partitions: int) -> Layout:
        """Reduce the undeleted partition count to ``partitions`` (never below
        the initial count); the removed partitions become draining."""
        return self._append(self.layout(topic).shrunk(partitions), "shrink")

    def retire(self, topic: str, groups: Iterable[str] = (), *, delete_records: bool = False) -> RetireResult:
        """Turn draining partitions that are empty, or fully consumed by every
        group in ``groups``, into spares.

        With ``delete_records=True`` the records of retired partitions are
        deleted (DeleteRecords; raises :class:`UnsupportedBrokerApiError` on
        brokers without it, before anything changes).
        """
        cur = self.layout(topic)
        groups = list(groups)
        draining = sorted(cur.draining)
        if not draining:
            return RetireResult(cur, frozenset(), {})
        tps = [(topic, q) for q in draining]
        ends = self._offsets.end_offsets(tps)
        starts = self._offsets.start_offsets(tps)
        committed = {g: self.committed(g, tps) for g in groups}
        retired: List[int] = []
        still: Dict[int, str] = {}
        for q in draining:
            end, start = ends[(topic, q)], starts[(topic, q)]
            if start >= end:
                retired.append(q)
                continue
            if not groups:
                still[q] = f"holds offsets {start}..{end - 1} and no consumer group was named"
                continue
            behind = {g: committed[g].get((topic, q), -1) for g in groups if committed[g].get((topic, q), -1) < end}
            if behind:
                still[q] = "not fully consumed: " + ", ".join(
                    f"{g} at {off if off >= 0 else 'no commit'} of {end}" for g, off in sorted(behind.items())
                )
            else:
                retired.append(q)
        deleted: Dict[int, int] = {}
        if delete_records and retired:
            deleted = self._delete_records(topic, {q: ends[(topic, q)] for q in retired if starts[(topic, q)] < ends[(topic, q)]})
        if not retired:
            return RetireResult(cur, frozenset(), still)
        new = self._append(cur.retired(retired), "retire")
        return RetireResult(new, frozenset(retired), still, deleted)

    # -- describing

    def committed(self, group: str, tps: Sequence[Tuple[str, int]]) -> Dict[Tuple[str, int], int]:
        """A group's committed offsets (``-1`` when none)."""
        req = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in tps])]
        try:
            res = self._admin.list_consumer_group_offsets(req, request_timeout=self.timeout)[group].result()
        except KafkaException as e:
            raise translate(e, f"reading committed offsets of group {group}", api="OffsetFetch") from e
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else -1) for tp in res.topic_partitions}

    def describe(self, topic: str, group: Optional[str] = None) -> TopicDescription:
        """The topic's layout, history, draining/spare partitions, lineage and
        registrations; with ``group``, every gate's state for that group."""
        cur = self.layout(topic)
        h = self.history
        physical = max(cur.physical_partitions, partition_count(self._admin, topic, self.timeout))
        regs = tuple(h.registrations(topic))
        gates: Tuple[GroupGateState, ...] = ()
        if group is not None:
            gates = self._group_gates(topic, group, regs)
        problems = tuple(h.problems)
        return TopicDescription(
            topic, cur, tuple(h.changes(topic)), physical, cur.draining,
            frozenset(range(cur.partitions, physical)) - cur.draining,
            {p: cur.parent(p) for p in range(physical)}, regs, problems, group, gates,
        )

    def _group_gates(self, topic: str, group: str, regs: Sequence[Registration]) -> Tuple[GroupGateState, ...]:
        all_gates: List[Tuple[Gate, int]] = [(g, r.timestamp_ms) for r in regs for g in r.gates]
        sources = sorted({(topic, q) for g, _ in all_gates for q in g.wait})
        if not sources:
            return ()
        committed = self.committed(group, sources)
        starts = self._offsets.start_offsets(sources)
        processed = {q: max(committed.get((topic, q), -1), starts.get((topic, q), 0)) for _, q in sources}
        now_ms = time.time() * 1000
        out = []
        for g, ts in all_gates:
            waiting = {q: (w, processed.get(q, -1)) for q, w in sorted(g.wait.items()) if processed.get(q, -1) < w}
            out.append(GroupGateState(g.partition, g.start, g.producer_id, g.epoch, not waiting, waiting,
                                      0.0 if not waiting else max(0.0, (now_ms - ts) / 1000.0)))
        return tuple(out)

    # -- physical partitions

    def _wait_partitions(self, topic: str, count: int) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            try:
                if partition_count(self._admin, topic, self.timeout) >= count:
                    return
            except UnknownTopicError:
                pass
            time.sleep(0.05)
        raise KafkaOrderedError(f"topic {topic} did not show {count} partitions in metadata within the timeout")

    def _create_partitions(self, topic: str, total: int) -> None:
        fs = self._admin.create_partitions([NewPartitions(topic, total)], request_timeout=self.timeout)
        try:
            fs[topic].result()
        except KafkaException as e:
            err = translate(e, f"adding partitions to {topic}", api="CreatePartitions")
            if isinstance(err, UnsupportedBrokerApiError):
                raise UnsupportedBrokerApiError(
                    f"cannot expand {topic} to {total} physical partitions: the broker does not support "
                    "the CreatePartitions API. Nothing was changed. Pre-provision spare partitions instead: "
                    f"create the topic with physical_partitions >= {total} "
                    "(`kafka-ordered create TOPIC --partitions N --physical M`); expansions up to that count "
                    "need no broker support.",
                    api="CreatePartitions",
                    code=err.code,
                ) from e
            raise err from e
        self._wait_partitions(topic, total)

    def _delete_records(self, topic: str, before: Mapping[int, int]) -> Dict[int, int]:
        if not before:
            return {}
        fs = self._admin.delete_records(
            [TopicPartition(topic, q, off) for q, off in before.items()], request_timeout=self.timeout
        )
        out: Dict[int, int] = {}
        for tp, f in fs.items():
            try:
                out[tp.partition] = f.result().low_watermark
            except KafkaException as e:
                raise translate(e, f"deleting records of {topic}[{tp.partition}]", api="DeleteRecords") from e
        return out

    # -- lifecycle

    def close(self) -> None:
        self._follower.close()
        self._offsets.close()
        self._log.close()

    def __enter__(self) -> "LayoutAdmin":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()
