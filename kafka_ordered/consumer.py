"""The gating consumer: delivers a partition past a layout change only after
the group has processed the partitions its keys came from.

:class:`OrderedConsumer` wraps confluent-kafka's ``Consumer`` with the same
``subscribe``/``poll``/``consume``/``commit``/``committed``/``position``/
``pause``/``resume``/``seek``/``close`` interface. The gate bookkeeping is
shared with the kafka-python wrapper; the decisions are in
:mod:`kafka_ordered.gates`.

Offsets: the wrapper owns offset storage. The client's own auto-commit and
automatic offset store are turned off; with ``enable.auto.commit=true`` (the
default) the wrapper commits, every ``auto.commit.interval.ms``, the
positions of records returned by earlier polls, and commits promptly
(``ordered.commit.interval.ms``) when another member's gate waits on a
partition it owns. Records fetched but held at a gate are never committed.
With manual commits, the application's commits carry the gates: a member
that commits rarely delays other partitions.
"""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Type

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from ._kafka import OffsetReader
from .config import connection_config, split_config
from .errors import ConfigError, translate
from .gates import TP, GateKeeper, GateStatus, processed_offset
from .history import LayoutHistory
from .layout import DEFAULT_SETTLE_MS
from .layout_log import LayoutFollower
from .listener import PartitionKeyRebalanceListener

__all__ = ["OrderedConsumer"]

log = logging.getLogger("kafka_ordered.consumer")

CONSUMER_OPTIONS = (
    "ordered.layout.topic",
    "ordered.layout.corrupt.policy",
    "ordered.follower.poll.interval.ms",
    "ordered.registration.settle.ms",
    "ordered.commit.interval.ms",
    "ordered.gating",
    "ordered.metadata.timeout.ms",
)

_LOG_START_REFRESH_S = 5.0


def _msg_tp(m: Message) -> TP:
    return (m.topic(), m.partition())  # type: ignore[return-value]


def _reset_policy(value: Any) -> str:
    v = str(value).lower()
    if v in ("smallest", "earliest", "beginning"):
        return "earliest"
    if v in ("largest", "latest", "end"):
        return "latest"
    return "error"


def _truthy(v: Any) -> bool:
    return v if isinstance(v, bool) else str(v).lower() in ("true", "1", "yes")


class _GatingConsumer:
    """Gate bookkeeping independent of the client library.

    Subclasses implement the ``_c_*`` hooks over their client; partitions
    are ``(topic, partition)`` tuples here.
    """

    def _init_gating(self, opts: Mapping[str, Any], conn: Mapping[str, Any], auto_commit: bool,
                     auto_commit_interval_s: float, reset: str = "latest") -> None:
        """``reset`` is the client's offset reset policy, normalised to
        ``"earliest"``, ``"latest"`` or ``"error"``."""
        self._timeout = opts["ordered.metadata.timeout.ms"] / 1000.0
        self._gating: bool = opts["ordered.gating"]
        self._commit_interval = opts["ordered.commit.interval.ms"] / 1000.0
        self._settle_override = opts["ordered.registration.settle.ms"]
        self._auto_commit = auto_commit
        self._auto_commit_interval = auto_commit_interval_s
        self._reset = reset
        self._follower = LayoutFollower(
            conn,
            opts["ordered.layout.topic"],
            poll_interval_ms=opts["ordered.follower.poll.interval.ms"],
            corrupt_policy=opts["ordered.layout.corrupt.policy"],
            timeout=self._timeout,
        ).start()
        self._offsets = OffsetReader(conn, self._timeout)
        self._keeper = GateKeeper()
        self._listener: Optional[PartitionKeyRebalanceListener] = None
        self._subscribed: Set[str] = set()
        self._owned: Set[TP] = set()
        # Positions the client cannot tell (it reports none after a seek until
        # the next record): starts, holds, seeks. Otherwise the client's own
        # position is exact, since every record it returns is delivered or held.
        self._pos: Dict[TP, int] = {}
        self._processed: Dict[TP, int] = {}  # positions as of the previous poll (sources only)
        self._revoke_mark: Dict[TP, int] = {}
        self._committed: Dict[TP, int] = {}  # group's committed offsets, as last known
        self._committed_at = float("-inf")
        self._log_start: Dict[TP, int] = {}
        self._log_start_at = float("-inf")
        self._held: Dict[TP, int] = {}
        self._user_paused: Set[TP] = set()
        self._stored: Optional[Dict[TP, int]] = None
        self._deps: Dict[TP, List[Tuple[int, Dict[TP, int]]]] = {}
        self._init_commit: Set[TP] = set()
        self._gate_offsets: Dict[str, int] = {}
        self._seen_version = -1
        self._delta = DEFAULT_SETTLE_MS / 1000.0
        self._last_commit = time.monotonic()
        self.stall_seconds: Dict[TP, float] = {}
        self._held_since: Dict[TP, float] = {}

    # -- hooks
    def _c_pause(self, tps: List[TP]) -> None: raise NotImplementedError  # noqa: E704
    def _c_resume(self, tps: List[TP]) -> None: raise NotImplementedError  # noqa: E704
    def _c_seek(self, tp: TP, offset: int) -> None: raise NotImplementedError  # noqa: E704
    def _c_committed(self, tps: List[TP]) -> Dict[TP, int]: raise NotImplementedError  # noqa: E704
    def _c_commit(self, offsets: Dict[TP, int], asynchronous: bool) -> Any: raise NotImplementedError  # noqa: E704
    def _c_partitions(self, tps: List[TP]) -> List[Any]: raise NotImplementedError  # noqa: E704
    def _c_positions(self, tps: List[TP]) -> Dict[TP, int]: raise NotImplementedError  # noqa: E704

    @property
    def history(self) -> LayoutHistory:
        """The layout history this consumer follows."""
        return self._follower.history

    def _managed(self, topic: str) -> bool:
        return self._follower.history.current(topic) is not None

    # -- assignment

    def _assigned(self, tps: Sequence[TP], committed: Mapping[TP, int]) -> Dict[TP, int]:
        """Record an assignment; returns explicit start offsets for managed
        partitions without a committed offset.

        Partitions that became undeleted after the topic was managed start at
        their log start whatever the reset policy; the others follow it,
        resolved here to a true offset (never the broker's possibly stale
        ListOffsets). Those starts are committed at the next poll so that
        gates waiting on them can open before any record arrives.
        """
        history = self._follower.sync()  # a topic may have become managed a moment ago
        earliest: List[TP] = []
        latest: List[TP] = []
        for tp in tps:
            self._owned.add(tp)
            c = committed.get(tp, -1)
            layout = history.current(tp[0])
            if c >= 0:
                self._committed[tp] = c
                self._pos[tp] = self._processed[tp] = self._revoke_mark[tp] = c
                self._keeper.forget_announcements(tp, c)
            elif layout is not None:
                if tp[1] >= layout.initial_partitions or self._reset == "earliest":
                    earliest.append(tp)
                elif self._reset == "latest":
                    latest.append(tp)
        starts = {**self._offsets.start_offsets(earliest), **self._offsets.end_offsets(latest)}
        for tp, off in starts.items():
            self._pos[tp] = self._processed[tp] = self._revoke_mark[tp] = off
            self._keeper.forget_announcements(tp, off)
            self._init_commit.add(tp)
        self._refresh_gates(force=True)
        return starts

    def _assigned_at(self, offsets: Mapping[TP, int]) -> None:
        """Record partitions assigned at explicit offsets (nothing to resolve)."""
        for tp, off in offsets.items():
            self._owned.add(tp)
            self._pos[tp] = self._processed[tp] = self._revoke_mark[tp] = off
            self._keeper.forget_announcements(tp, off)
        if offsets:
            self._refresh_gates(force=True)

    def _revoked(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            self._owned.discard(tp)
            for d in (self._pos, self._processed, self._revoke_mark, self._held, self._deps, self._held_since):
                d.pop(tp, None)  # type: ignore[attr-defined]
            self._init_commit.discard(tp)
            if self._stored is not None:
                self._stored.pop(tp, None)

    # -- per poll

    def _positions(self, tps: Iterable[TP]) -> Dict[TP, int]:
        """Next offset to deliver for each owned partition (records returned
        so far count; held ones do not); partitions without one are left out."""
        want = [tp for tp in tps if tp in self._owned]
        if not want:
            return {}
        client = self._c_positions(want)
        out: Dict[TP, int] = {}
        for tp in want:
            held = self._held.get(tp)
            if held is not None:
                out[tp] = held
                continue
            off = client.get(tp, -1)
            if off >= 0:
                out[tp] = off
            elif tp in self._pos:
                out[tp] = self._pos[tp]
        return out

    def _begin_poll(self) -> None:
        """The application processed what earlier polls returned: announce
        crossed waits, refresh gates, commit if due."""
        new = self._positions(self._keeper.waited_on())
        crossed = [tp for tp, off in new.items() if self._keeper.crossed(tp, self._revoke_mark.get(tp, -1), off)]
        self._revoke_mark.update(new)
        self._processed.update(new)
        if crossed and self._listener is not None:
            self._listener.on_partition_key_maybe_revoked(self._c_partitions(sorted(crossed)))
        if crossed and self._auto_commit:
            self._commit_processed()
        self._maintain()

    def _settle_s(self) -> float:
        history = self._follower.history
        topics = {t for t, _ in self._owned} | self._subscribed
        settles = [lay.settle_ms for t in topics if (lay := history.current(t)) is not None]
        ms = min(settles) if settles else DEFAULT_SETTLE_MS
        if self._settle_override is not None:
            ms = min(ms, self._settle_override)
        return ms / 1000.0

    def _refresh_gates(self, force: bool = False) -> None:
        history = self._follower.history
        version = history.version
        if not force and version == self._seen_version:
            return
        # Read the log position before the gates: a registration applied in
        # between is then read again next time instead of being skipped.
        upto = history.next_offset
        now = time.monotonic()
        for topic in {t for t, _ in self._owned} | self._subscribed:
            if history.current(topic) is None:
                continue
            self._keeper.add_gates(history.gates(topic, self._gate_offsets.get(topic, 0)), now)
            self._gate_offsets[topic] = upto
        self._seen_version = version
        self._delta = self._settle_s()

    def _ensure_fresh(self) -> None:
        """Freshness rule: deliver only while the layout view includes every
        registration appended more than ``settle`` ago."""
        if not self._follower.fresh_within(self._delta):
            self._follower.sync()
        self._refresh_gates()

    def _maintain(self) -> None:
        now = time.monotonic()
        self._refresh_gates()
        sources = self._keeper.sources()
        if sources:
            unowned = [tp for tp in sources if tp not in self._owned]
            if unowned and now - self._committed_at >= self._commit_interval / 2:
                self._committed.update(self._c_committed(unowned))
                self._committed_at = now
            if now - self._log_start_at >= _LOG_START_REFRESH_S:
                self._log_start.update(self._offsets.start_offsets(sources))
                self._log_start_at = now
            processed = {
                tp: processed_offset(self._committed.get(tp), self._log_start.get(tp),
                                     self._processed.get(tp) if tp in self._owned else None)
                for tp in sources
            }
            for g in self._keeper.update(processed):
                tp = (g.topic, g.partition)
                if tp in self._owned:
                    local = {(g.topic, q): w for q, w in g.wait.items() if self._committed.get((g.topic, q), -1) < w}
                    if local:
                        self._deps.setdefault(tp, []).append((g.start, local))
            for tp, off in list(self._held.items()):
                limit = self._keeper.limit(tp)
                if limit is None or limit > off:
                    self._release(tp)
        if self._init_commit:
            self._commit_initial()
        if self._auto_commit and self._commit_due(now):
            self._commit_processed()

    def _commit_due(self, now: float) -> bool:
        since = now - self._last_commit
        if since >= self._auto_commit_interval:
            return True
        if since < self._commit_interval:
            return False
        base = self._stored if self._stored is not None else self._processed
        return any(
            base.get(tp, -1) > self._committed.get(tp, -1) and self._keeper.needs_commit(tp, self._committed.get(tp, -1))
            for tp in self._keeper.waited_on() if tp in self._owned
        )

    def _commit_initial(self) -> None:
        """Commit the resolved start of owned partitions that had no commit."""
        offsets = self._positions(self._init_commit)
        self._init_commit.clear()
        if offsets:
            self._commit(offsets, asynchronous=True)

    def _commit_processed(self, asynchronous: bool = True) -> None:
        """Commit what the application processed (returned by earlier polls,
        or stored with ``store_offsets``); call at the start of a poll."""
        base = self._stored if self._stored is not None else self._positions(self._owned)
        offsets = {tp: off for tp, off in base.items() if tp in self._owned and off > self._committed.get(tp, -1)}
        self._last_commit = time.monotonic()
        if offsets:
            self._commit(offsets, asynchronous)

    def _with_dependencies(self, offsets: Dict[TP, int]) -> Dict[TP, int]:
        """Add the source commits that gates opened inside this consumer need
        to be durable before (or with) commits past their start."""
        out = dict(offsets)
        for tp, off in offsets.items():
            for start, waits in self._deps.get(tp, ()):
                if off > start:
                    for q, w in waits.items():
                        # A source lost meanwhile is its new owner's to commit.
                        if q in self._owned and self._committed.get(q, -1) < w and out.get(q, -1) < w:
                            out[q] = w
        return out

    def _commit(self, offsets: Dict[TP, int], asynchronous: bool) -> Any:
        offsets = self._with_dependencies(offsets)
        result = self._c_commit(offsets, asynchronous)
        for tp, off in offsets.items():
            if off > self._committed.get(tp, -1):
                self._committed[tp] = off
        for tp in list(self._deps):
            kept = [(s, w) for s, w in self._deps[tp] if any(self._committed.get(q, -1) < x for q, x in w.items())]
            if kept:
                self._deps[tp] = kept
            else:
                del self._deps[tp]
        return result

    def _hold(self, tp: TP, offset: int) -> None:
        self._held[tp] = self._pos[tp] = offset
        self._held_since.setdefault(tp, time.monotonic())
        self._c_pause([tp])
        self._c_seek(tp, offset)

    def _release(self, tp: TP) -> None:
        self._held.pop(tp, None)
        since = self._held_since.pop(tp, None)
        if since is not None:
            self.stall_seconds[tp] = self.stall_seconds.get(tp, 0.0) + time.monotonic() - since
        if tp not in self._user_paused:
            self._c_resume([tp])

    def _admit(self, tp: TP, offset: int) -> bool:
        """Decide one record of a watched partition: True to deliver (after
        announcing an opened gate), False when held at a closed gate."""
        if tp in self._held:
            return False
        limit = self._keeper.limit(tp)
        if limit is not None and offset >= limit:
            self._hold(tp, offset)
            return False
        if self._keeper.announce(tp, offset) and self._listener is not None:
            self._listener.on_partition_key_assigned(self._c_partitions([tp]))
        return True

    def _watched(self) -> frozenset:
        if not self._gating:
            return frozenset()
        return self._keeper.watched() | frozenset(self._held)

    def _has_closed_gates(self) -> bool:
        return self._gating and bool(self._keeper.closed_partitions())

    def gate_status(self) -> List[GateStatus]:
        """Every partition with a closed gate: first held offset, the sources
        it waits on as ``(wait, processed)``, and since when (monotonic)."""
        processed = {
            tp: processed_offset(self._committed.get(tp), self._log_start.get(tp),
                                 self._processed.get(tp) if tp in self._owned else None)
            for tp in self._keeper.sources()
        }
        return self._keeper.status(processed)

    def _close_gating(self) -> None:
        self._follower.close()
        self._offsets.close()


class OrderedConsumer(_GatingConsumer):
    """confluent-kafka ``Consumer`` that delivers keyed records in order across
    layout changes of managed topics.

    ``config`` is the usual librdkafka dict (``group.id`` required) plus
    ``ordered.*`` keys. Unmanaged topics are consumed as usual. Partitions
    that became undeleted after the topic was managed, and have no committed
    offset, start at the earliest offset whatever ``auto.offset.reset`` says.
    Records are never dropped by gating, only delayed; ``poll`` returns
    ``None`` and ``consume`` fewer records while partitions wait.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        opts, conf = split_config(config, CONSUMER_OPTIONS, "OrderedConsumer")
        if not conf.get("group.id"):
            raise ConfigError("OrderedConsumer needs group.id: gates are evaluated per consumer group")
        auto_commit = _truthy(conf.pop("enable.auto.commit", True))
        interval = int(conf.pop("auto.commit.interval.ms", 5000)) / 1000.0
        conf.pop("enable.auto.offset.store", None)
        conf["enable.auto.commit"] = False
        conf["enable.auto.offset.store"] = False
        self._cooperative = "cooperative" in str(conf.get("partition.assignment.strategy", ""))
        self._init_gating(opts, connection_config(conf), auto_commit, interval,
                          _reset_policy(conf.get("auto.offset.reset", "latest")))
        self._consumer = Consumer(conf)
        self._user_cbs: Dict[str, Optional[Callable[..., None]]] = {}
        self._closed = False

    @property
    def consumer(self) -> Consumer:
        """The wrapped confluent-kafka ``Consumer``."""
        return self._consumer

    # -- hooks

    def _c_partitions(self, tps: List[TP]) -> List[TopicPartition]:
        return [TopicPartition(t, p) for t, p in tps]

    def _c_pause(self, tps: List[TP]) -> None:
        self._consumer.pause(self._c_partitions(tps))

    def _c_resume(self, tps: List[TP]) -> None:
        self._consumer.resume(self._c_partitions(tps))

    def _c_seek(self, tp: TP, offset: int) -> None:
        self._consumer.seek(TopicPartition(tp[0], tp[1], offset))

    def _c_committed(self, tps: List[TP]) -> Dict[TP, int]:
        try:
            res = self._consumer.committed(self._c_partitions(tps), timeout=self._timeout)
        except KafkaException as e:
            raise translate(e, "reading committed offsets") from e
        return {(r.topic, r.partition): r.offset for r in res if r.offset >= 0}

    def _c_positions(self, tps: List[TP]) -> Dict[TP, int]:
        return {(p.topic, p.partition): p.offset for p in self._consumer.position(self._c_partitions(tps))}

    def _c_commit(self, offsets: Dict[TP, int], asynchronous: bool) -> Any:
        tps = [TopicPartition(t, p, off) for (t, p), off in sorted(offsets.items())]
        if asynchronous:
            return self._consumer.commit(offsets=tps, asynchronous=True)
        return self._consumer.commit(offsets=tps, asynchronous=False)

    # -- subscription

    def subscribe(
        self,
        topics: List[str],
        on_assign: Optional[Callable[..., None]] = None,
        on_revoke: Optional[Callable[..., None]] = None,
        on_lost: Optional[Callable[..., None]] = None,
        *,
        listener: Optional[PartitionKeyRebalanceListener] = None,
    ) -> None:
        """``Consumer.subscribe`` plus ``listener`` for per-key state hand-off.
        The callbacks receive this wrapper as their consumer argument."""
        if listener is not None and not isinstance(listener, PartitionKeyRebalanceListener):
            raise TypeError("listener must be a PartitionKeyRebalanceListener")
        self._listener = listener
        self._user_cbs = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        self._subscribed = {t for t in topics if not t.startswith("^")}
        self._consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)

    def _start_positions(self, partitions: List[TopicPartition]) -> None:
        """Record an assignment and set the start of each partition given
        without an offset: the group's commit, else the resolved start."""
        explicit = {(p.topic, p.partition): p.offset for p in partitions if p.offset >= 0}
        resolve = [(p.topic, p.partition) for p in partitions if p.offset < 0]
        committed = self._c_committed(resolve) if resolve else {}
        starts = self._assigned(resolve, committed)
        self._assigned_at(explicit)
        for p in partitions:
            tp = (p.topic, p.partition)
            if tp in committed:
                p.offset = committed[tp]
            elif tp in starts:
                p.offset = starts[tp]

    def _on_assign(self, consumer: Consumer, partitions: List[TopicPartition]) -> None:
        self._start_positions(partitions)
        cb = self._user_cbs.get("assign")
        if cb is not None:
            cb(self, partitions)
        if self._cooperative:
            self._consumer.incremental_assign(partitions)
        else:
            self._consumer.assign(partitions)
        # librdkafka keeps a partition paused across reassignment; a hold from
        # before the rebalance is forgotten, so its pause must go too.
        self._consumer.resume([p for p in partitions if (p.topic, p.partition) not in self._user_paused])

    def _on_revoke(self, consumer: Consumer, partitions: List[TopicPartition]) -> None:
        cb = self._user_cbs.get("revoke")
        if cb is not None:
            cb(self, partitions)
        tps = [(p.topic, p.partition) for p in partitions]
        if self._auto_commit:
            offsets = {tp: off for tp, off in self._positions(self._owned).items()
                       if off > self._committed.get(tp, -1)}
            if offsets:
                try:
                    self._commit(offsets, asynchronous=False)
                except KafkaException as e:
                    log.warning("commit on revoke failed: %s", e)
        self._revoked(tps)
        if self._cooperative:
            self._consumer.incremental_unassign(partitions)
        else:
            self._consumer.unassign()

    def _on_lost(self, consumer: Consumer, partitions: List[TopicPartition]) -> None:
        cb = self._user_cbs.get("lost") or self._user_cbs.get("revoke")
        if cb is not None:
            cb(self, partitions)
        self._revoked([(p.topic, p.partition) for p in partitions])
        if self._cooperative:
            self._consumer.incremental_unassign(partitions)
        else:
            self._consumer.unassign()

    def unsubscribe(self) -> None:
        self._consumer.unsubscribe()
        self._subscribed = set()

    def assign(self, partitions: List[TopicPartition]) -> None:
        """Manual assignment (no group rebalancing); gates still apply."""
        self._start_positions(partitions)
        self._consumer.assign(partitions)

    def unassign(self) -> None:
        self._revoked(list(self._owned))
        self._consumer.unassign()

    # -- consuming

    def poll(self, timeout: float = -1) -> Optional[Message]:
        """``Consumer.poll``: the next deliverable message, or ``None``."""
        msgs = self._consume(1, timeout)
        return msgs[0] if msgs else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> List[Message]:
        """``Consumer.consume``: up to ``num_messages`` deliverable messages."""
        return self._consume(num_messages, timeout)

    def _consume(self, num: int, timeout: Optional[float]) -> List[Message]:
        if timeout is None or timeout < 0:
            deadline = None
        else:
            deadline = time.monotonic() + timeout
        self._begin_poll()
        out: List[Message] = []
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            chunk = left
            if self._has_closed_gates() or self._init_commit:
                chunk = self._commit_interval / 2 if left is None else min(left, self._commit_interval / 2)
            raw = self._consumer.consume(num - len(out), -1 if chunk is None else chunk)
            if raw:
                i = 0
                try:
                    if self._gating:
                        self._ensure_fresh()
                    watched = self._watched()
                    if not watched:
                        out.extend(raw)
                    else:
                        for i, m in enumerate(raw):
                            if m.error() is not None:
                                out.append(m)
                                continue
                            tp = _msg_tp(m)
                            if tp in watched and not self._admit(tp, m.offset()):  # type: ignore[arg-type]
                                continue
                            out.append(m)
                except BaseException:
                    # Nothing of this call reaches the application: fetch it again.
                    self._rewind(out + raw[i:])
                    raise
            if out or (deadline is not None and time.monotonic() >= deadline):
                return out
            self._maintain()

    def _rewind(self, undelivered: List[Message]) -> None:
        """Seek back so records fetched but not returned are fetched again."""
        first: Dict[TP, int] = {}
        for m in undelivered:
            if m.error() is None:
                first.setdefault(_msg_tp(m), int(m.offset() or 0))
        for tp, off in first.items():
            held = self._held.get(tp)
            if held is None or off < held:
                if held is not None:
                    self._held[tp] = off
                self._pos[tp] = off
                self._c_seek(tp, off)

    # -- offsets

    def commit(self, message: Optional[Message] = None, offsets: Optional[List[TopicPartition]] = None,
               asynchronous: bool = True) -> Any:
        """``Consumer.commit``. Without arguments commits the positions of every
        record returned so far. Commits that move a partition past a gate that
        opened inside this consumer also carry the source offsets it waited on."""
        if message is not None and offsets is not None:
            raise ValueError("message and offsets are mutually exclusive")
        if message is not None:
            want = {_msg_tp(message): int(message.offset() or 0) + 1}
        elif offsets is not None:
            want = {(str(o.topic), int(o.partition)): int(o.offset) for o in offsets}
        else:
            base = self._stored if self._stored is not None else self._positions(self._owned)
            want = {tp: off for tp, off in base.items() if tp in self._owned}
            if not want:
                return None if asynchronous else []
        self._last_commit = time.monotonic()
        return self._commit(want, asynchronous)

    def store_offsets(self, message: Optional[Message] = None, offsets: Optional[List[TopicPartition]] = None) -> None:
        """``Consumer.store_offsets``: from now on auto-commit commits the stored
        offsets instead of the positions of returned records."""
        if self._stored is None:
            self._stored = {}
        if message is not None:
            self._stored[_msg_tp(message)] = int(message.offset() or 0) + 1
        for o in offsets or ():
            self._stored[(o.topic, o.partition)] = o.offset

    def committed(self, partitions: List[TopicPartition], timeout: float = -1) -> List[TopicPartition]:
        return self._consumer.committed(partitions, timeout=timeout)

    def position(self, partitions: List[TopicPartition]) -> List[TopicPartition]:
        """Positions of returned records (held records do not count)."""
        known = self._positions([(p.topic, p.partition) for p in partitions])
        return [TopicPartition(p.topic, p.partition, known.get((p.topic, p.partition), -1001)) for p in partitions]

    def seek(self, partition: TopicPartition) -> None:
        """``Consumer.seek``; the new position counts as processed for gates."""
        tp = (partition.topic, partition.partition)
        self._consumer.seek(partition)
        if partition.offset >= 0:
            self._pos[tp] = self._processed[tp] = partition.offset
        if tp in self._held:
            self._held.pop(tp)
            self._held_since.pop(tp, None)
            if tp not in self._user_paused:
                self._consumer.resume([TopicPartition(*tp)])

    def pause(self, partitions: List[TopicPartition]) -> None:
        self._user_paused |= {(p.topic, p.partition) for p in partitions}
        self._consumer.pause(partitions)

    def resume(self, partitions: List[TopicPartition]) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        self._user_paused -= tps
        self._consumer.resume([p for p in partitions if (p.topic, p.partition) not in self._held])

    def __getattr__(self, name: str) -> Any:
        # assignment, list_topics, get_watermark_offsets, memberid, ... are the client's own.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._consumer, name)

    def close(self) -> None:
        """Commit returned records (with auto-commit), leave the group, stop following."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._auto_commit:
                base = self._stored if self._stored is not None else self._positions(self._owned)
                offsets = {tp: off for tp, off in base.items() if tp in self._owned and off > self._committed.get(tp, -1)}
                if offsets:
                    try:
                        self._commit(offsets, asynchronous=False)
                    except KafkaException as e:
                        log.warning("final commit failed: %s", e)
            self._consumer.close()
        finally:
            self._close_gating()

    def __enter__(self) -> "OrderedConsumer":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()
