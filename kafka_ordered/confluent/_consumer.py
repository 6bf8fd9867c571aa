"""``OrderedConsumer``: confluent-kafka's ``Consumer`` over the gating core."""

from __future__ import annotations

import functools
import logging
import operator
import time
from itertools import compress
from types import TracebackType
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Type

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, Message, TopicPartition

from . import _message  # noqa: F401  (reads Message fields in place once checked)
from .._fastpath import fast_fetch, fetch_shape, message_bytes, take_stamps
from .._gating import KEEP_IN_HAND_BYTES, KEEP_IN_HAND_RECORDS, GatingCore, GatingOptions, StartRead
from .._grouped import from_hand
from .._pollbatch import PollBatch
from .._ports import TP, OffsetsPort, Pending
from ..config import CONFLUENT_CONSUMER_OPTIONS, client_bool, client_config, client_int, metrics_client_id, split_config
from ..errors import ConfigError, KafkaOrderedError, translate
from ..gates import GateStatus, ResetPolicy, reset_policy
from ..history import LayoutHistory
from ..listener import PartitionKeyRebalanceListener
from ..metrics import ConsumerMetrics
from ..tokens import Run, stamp_prefix, take_stamp
from ..tombstones import is_move_tombstone
from ._common import _new_client, _shared

__all__ = ["OrderedConsumer", "METADATA_REFRESH_MS", "KEEP_IN_HAND_BYTES", "KEEP_IN_HAND_RECORDS"]

log = logging.getLogger("kafka_ordered.consumer")

#: Logical offsets of ``assign`` that name a start regardless of commits.
_LOGICAL_STARTS: Dict[int, ResetPolicy] = {OFFSET_BEGINNING: "earliest", OFFSET_END: "latest"}
#: ``OrderedConsumer``'s default ``topic.metadata.refresh.interval.ms``: how
#: soon a subscribed group notices the partitions an expansion created.
METADATA_REFRESH_MS = 5000
#: How long ``assign`` waits for the Metadata request it sends for a new topic
#: (see ``OrderedConsumer._learn_topics``): not for the answer.
_METADATA_NUDGE_S = 0.001
_headers, _topic = Message.headers, Message.topic


def _tp(m: Message) -> TP:
    return (m.topic(), m.partition())  # type: ignore[return-value]


def _take_stamps(raw: List[Message], log_id: str, moved: List[Message]) -> Dict[int, int]:
    """The stamps of log ``log_id`` in ``raw`` (records without errors),
    newest per partition; every
    ``kafka-ordered.reg`` header is removed on the way and move tombstones
    go into ``moved``. The records :func:`~kafka_ordered._fastpath.take_stamps`
    leaves (all with headers, without the C speed-ups) take
    :func:`~kafka_ordered.tokens.take_stamp` one by one."""
    stamps, rest = take_stamps(raw, stamp_prefix(log_id))
    for i in rest:
        m = raw[i]
        h = m.headers()
        taken = take_stamp(h, log_id) if h else None
        if taken is None:
            continue
        stamp, left = taken
        m.set_headers(left)  # type: ignore[arg-type]
        if is_move_tombstone(m.value(), h):
            moved.append(m)
        if stamp is not None:
            p = m.partition()
            if stamp > stamps.get(p, -1):  # type: ignore[arg-type]
                stamps[p] = stamp  # type: ignore[index]
    return stamps


_error = Message.error
_is_none = functools.partial(operator.is_, None)


class _ConsumerPort:
    """:class:`~kafka_ordered._ports.ConsumerPort` over a confluent ``Consumer``."""

    def __init__(self, consumer: Consumer, timeout: float, batch: PollBatch[Message], group: str,
                 reader: OffsetsPort) -> None:
        self.consumer = consumer
        self.timeout = timeout
        self.batch = batch
        self.group = group
        self.reader = reader

    def partitions(self, tps: List[TP]) -> List[TopicPartition]:
        return [TopicPartition(t, p) for t, p in tps]

    def pause(self, tps: List[TP]) -> None:
        self.consumer.pause(self.partitions(tps))

    def resume(self, tps: List[TP]) -> None:
        self.consumer.resume(self.partitions(tps))

    def seek(self, tp: TP, offset: int) -> None:
        self.consumer.seek(TopicPartition(tp[0], tp[1], offset))

    def committed(self, tps: List[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        try:
            res = self.consumer.committed(self.partitions(tps), timeout=self.timeout if timeout is None else timeout)
        except KafkaException as e:
            raise translate(e, "reading committed offsets") from e
        return {(r.topic, r.partition): r.offset for r in res if r.offset >= 0}

    def committed_later(self, tps: List[TP], timeout: float) -> Pending[Dict[TP, int]]:
        return self.reader.group_commits(self.group, tps, timeout)

    def positions(self, tps: List[TP]) -> Dict[TP, int]:
        out = {(p.topic, p.partition): p.offset for p in self.consumer.position(self.partitions(tps))}
        if self.batch.records:  # fetched by poll(), not returned yet: the client is past them
            for tp, off in self.batch.first_offsets().items():
                if tp in out:
                    out[tp] = off
        return out

    def learn_partitions(self, topic: str) -> None:
        # An application's Metadata request does not update librdkafka's group;
        # its own periodic refresh does (METADATA_REFRESH_MS by default).
        pass

    def commit(self, offsets: Dict[TP, int], asynchronous: bool) -> Any:
        tps = [TopicPartition(t, p, off) for (t, p), off in sorted(offsets.items())]
        if asynchronous:
            return self.consumer.commit(offsets=tps, asynchronous=True)
        return self.consumer.commit(offsets=tps, asynchronous=False)


class OrderedConsumer:
    """confluent-kafka ``Consumer`` that delivers keyed records in order across
    layout changes of managed topics.

    ``config`` is the usual librdkafka dict (``group.id`` required) plus
    ``ordered.*`` keys. Unmanaged topics are consumed as usual. Partitions
    that became undeleted after the topic was managed, and have no committed
    offset, start at the earliest offset whatever ``auto.offset.reset`` says.
    Records are never dropped by gating, only delayed; ``poll`` returns
    ``None`` and ``consume`` fewer records while partitions wait.
    ``topic.metadata.refresh.interval.ms`` defaults to
    :data:`METADATA_REFRESH_MS` (librdkafka: 300000) so that a subscribed
    group takes on the partitions an expansion creates within seconds; an
    explicit value is kept. A partition held at a gate whose sources this
    consumer owns itself is held *in hand*: the records fetched from the
    gate on stay in this process's memory, up to
    :data:`KEEP_IN_HAND_RECORDS` records or :data:`KEEP_IN_HAND_BYTES`
    bytes per partition, and are delivered once the gate opens; past that,
    or at a gate that waits on other members, the partition is paused and
    fetched again later.

    Unlike the client, construction reads the layout log (the process's
    shared layout-log clients, made and caught up by the first client of a
    cluster and layout topic), waiting at most ``ordered.metadata.timeout.ms``:
    it raises :class:`~kafka_ordered.errors.BrokerUnavailableError` naming
    ``bootstrap.servers`` when the cluster cannot be reached, and
    :class:`~kafka_ordered.errors.ConfigError` for a setting the client
    refuses; nothing is left open then.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        opts, conf = split_config(config, CONFLUENT_CONSUMER_OPTIONS, "OrderedConsumer")
        if not conf.get("group.id"):
            raise ConfigError("OrderedConsumer needs group.id: gates are evaluated per consumer group")
        # The wrapper owns commits and the offset store: it reads these
        # settings as the client would, and refuses what the client would.
        auto_commit = client_bool(conf, "enable.auto.commit", True)
        interval = client_int(conf, "auto.commit.interval.ms", 5000) / 1000.0
        auto_store = client_bool(conf, "enable.auto.offset.store", True)
        for key in ("enable.auto.commit", "auto.commit.interval.ms", "enable.auto.offset.store"):
            conf.pop(key, None)
        conf["enable.auto.commit"] = False
        conf["enable.auto.offset.store"] = False
        conf = client_config(conf, "consumer")
        # KIP-848's consumer protocol is incremental too: a full assign() there fails (_STATE).
        self._cooperative = ("cooperative" in str(conf.get("partition.assignment.strategy", ""))
                             or str(conf.get("group.protocol", "classic")).lower() == "consumer")
        # The shared layout-log clients first: the client made right before
        # the application's assign or subscribe asks for the topics' metadata
        # with its first request, as a raw client made then does (made before
        # the catch-up, its first connection was often gone by then, and its
        # first fetch came 40 ms later on Apache Kafka; see _learn_topics).
        shared = _shared(opts, conf, "OrderedConsumer")
        try:
            # Managed topics gain partitions under a running group: librdkafka's
            # group takes them on at its next metadata refresh (5 min by default).
            # (The internal clients keep the application's settings: shared per connection.)
            consumer = _new_client(Consumer, {"topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS, **conf},
                                   "OrderedConsumer")
        except BaseException:
            shared.release()
            raise
        self._consumer = consumer
        self._shared = shared
        self._known_topics: Set[str] = set()  # topics whose metadata this client has (see _learn_topics)
        options = GatingOptions(opts, auto_commit, interval, reset_policy(conf.get("auto.offset.reset", "latest")),
                                auto_store)
        self._batch: PollBatch[Message] = PollBatch(_tp, Message.offset,  # type: ignore[arg-type]
                                                    opts["ordered.poll.batch.records"])
        port = self._port = _ConsumerPort(self._consumer, options.timeout, self._batch, str(conf["group.id"]),
                                          shared.offsets)
        self._core = GatingCore(port, shared.follower, shared.offsets, options)
        shared.offsets.use_group(port.group)
        self._core.keep_in_hand = True
        self._core.kept_offset = Message.offset  # type: ignore[assignment]
        self._core.kept_bytes = message_bytes
        self._raw_consume = consumer.consume
        self._calm = calm = self._core.calm
        # poll(timeout), consume(num_messages, timeout)
        self._fast_poll = fast_fetch(consumer.poll, self._poll_one, self._poll_fetched, self._core.idle, calm, 0)
        self._fast_consume = fast_fetch(consumer.consume, self._consume, self._consume_fetched,
                                        self._core.idle, calm, 1)
        self._group_id = str(conf["group.id"])
        self._client_id = metrics_client_id(conf, "consumer", self._group_id)
        self._user_cbs: Dict[str, Optional[Callable[..., None]]] = {}
        self._closed = False

    @property
    def consumer(self) -> Consumer:
        """The wrapped confluent-kafka ``Consumer``."""
        return self._consumer

    @property
    def history(self) -> LayoutHistory:
        """The layout history this consumer follows."""
        return self._core.history

    @property
    def stall_seconds(self) -> Dict[TP, float]:
        """Total time each partition waited at gates that since opened."""
        return self._core.stall_seconds

    def ordered_metrics(self) -> ConsumerMetrics:
        """A snapshot of this member's gates, held records, gate waits and
        layout-log view (see :class:`kafka_ordered.metrics.ConsumerMetrics`)."""
        return self._core.metrics(self._group_id, self._client_id)

    def gate_status(self) -> List[GateStatus]:
        """Every partition with a closed gate: first held offset, the sources
        it waits on as ``(wait, processed)``, since when it was seen closed
        (``since``: monotonic; ``since_wall``: wall clock) and since when this
        consumer holds the partition there (``held_since``: wall clock)."""
        return self._core.gate_status()

    # -- subscription and assignment

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
        self._core.listener = listener
        self._user_cbs = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        self._core.subscribed = {t for t in topics if not t.startswith("^")}
        self._consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)

    def _start_positions(self, partitions: List[TopicPartition]) -> None:
        """Record an assignment and set the start of each partition: an
        explicit offset as given; ``OFFSET_BEGINNING``/``OFFSET_END`` at the
        log start/end whatever the group committed (as librdkafka does);
        without an offset, the group's commit, else the resolved start."""
        explicit = {(p.topic, p.partition): p.offset for p in partitions if p.offset >= 0}
        forced: Dict[TP, ResetPolicy] = {(p.topic, p.partition): _LOGICAL_STARTS[p.offset]
                                         for p in partitions if p.offset in _LOGICAL_STARTS}
        resolve = [(p.topic, p.partition) for p in partitions if p.offset < 0 and (p.topic, p.partition) not in forced]
        committed = self._read_starts(resolve) if resolve else {}
        starts = self._core.assigned(resolve + list(forced), committed, forced)
        self._core.assigned_at(explicit)
        for p in partitions:
            off = starts.get((p.topic, p.partition))
            if off is not None:
                p.offset = off

    def _read_starts(self, tps: List[TP]) -> Dict[TP, int]:
        """The group's commits of ``tps``, tried again by :class:`StartRead`'s rule."""
        rule = StartRead()
        while True:
            try:
                return self._port.committed(tps)
            except KafkaOrderedError as e:
                time.sleep(rule.retry_after(e))

    def _assign_started(self, partitions: List[TopicPartition], assign: Callable[[List[TopicPartition]], None]
                        ) -> None:
        """``assign`` (the client's ``assign`` or ``incremental_assign``) at
        the start positions, once the core recorded them: the client never
        fetches a partition the core does not gate. (At explicit offsets
        recording them reads nothing: the layout log is caught up when the
        next poll begins, while the client fetches.)"""
        self._start_positions(partitions)
        assign(partitions)
        self._learn_topics(partitions)
        self._resume_assigned(partitions)

    def _learn_topics(self, partitions: List[TopicPartition]) -> None:
        """Ask now for the metadata of topics this client was not assigned
        before (one Metadata request each, about 1 ms). librdkafka asks for a
        newly assigned topic's leaders itself, but with another client of the
        process long-polling a Fetch (every ordered process has one: the
        layout log's follower) that request waited for its next periodic
        scan: the first fetch came 0.9 s after ``assign`` on Apache Kafka,
        against 10 ms for a raw consumer alone. The request is sent and not
        waited for (:data:`_METADATA_NUDGE_S`): librdkafka takes the answer
        into its metadata cache when it comes, and waiting for it had
        stalled ``assign`` for 5-90 ms on Apache Kafka (a new group's first
        records came 20-40 ms later than a raw consumer's). Best effort: a
        request that fails only leaves the client to its own scan."""
        for topic in sorted({p.topic for p in partitions} - self._known_topics):
            try:
                self._consumer.list_topics(topic, timeout=_METADATA_NUDGE_S)
            except KafkaException as e:
                if e.args[0].code() != KafkaError._TIMED_OUT:
                    log.debug("metadata of %s not asked for at assignment: %s", topic, e)
                    continue
            self._known_topics.add(topic)

    def _resume_assigned(self, partitions: List[TopicPartition]) -> None:
        self._core.unpause_assigned([(p.topic, p.partition) for p in partitions])

    def _on_assign(self, consumer: Consumer, partitions: List[TopicPartition]) -> None:
        try:
            self._start_positions(partitions)
        except BaseException:
            # confluent-kafka would assign them itself, to be fetched ungated.
            assign = self._consumer.incremental_assign if self._cooperative else self._consumer.assign
            assign(partitions)
            self._core.start_failed([(p.topic, p.partition) for p in partitions])
            raise
        cb = self._user_cbs.get("assign")
        if cb is not None:
            cb(self, partitions)
        if self._cooperative:
            self._consumer.incremental_assign(partitions)
        else:
            self._consumer.assign(partitions)
        self._resume_assigned(partitions)

    def _commit_before_losing(self, tps: Sequence[TP]) -> None:
        if not self._core.opts.auto_commit:
            return
        offsets = self._core.uncommitted()
        if offsets:
            try:
                self._core.commit(offsets, asynchronous=False)
            except KafkaException as e:
                log.warning("commit before losing %d partition(s) failed: %s", len(tps), e)

    def _on_revoke(self, consumer: Consumer, partitions: List[TopicPartition]) -> None:
        cb = self._user_cbs.get("revoke")
        if cb is not None:
            cb(self, partitions)
        tps = [(p.topic, p.partition) for p in partitions]
        self._commit_before_losing(tps)
        self._core.revoked(tps)
        self._batch.drop(tps)
        if self._cooperative:
            self._consumer.incremental_unassign(partitions)
        else:
            self._consumer.unassign()

    def _on_lost(self, consumer: Consumer, partitions: List[TopicPartition]) -> None:
        cb = self._user_cbs.get("lost") or self._user_cbs.get("revoke")
        if cb is not None:
            cb(self, partitions)
        tps = [(p.topic, p.partition) for p in partitions]
        self._core.revoked(tps)
        self._batch.drop(tps)
        if self._cooperative:
            self._consumer.incremental_unassign(partitions)
        else:
            self._consumer.unassign()

    def unsubscribe(self) -> None:
        """``Consumer.unsubscribe``."""
        self._consumer.unsubscribe()
        self._core.subscribed = set()

    def assign(self, partitions: List[TopicPartition], *,
               listener: Optional[PartitionKeyRebalanceListener] = None) -> None:
        """Manual assignment (no group rebalancing); gates still apply.
        ``listener`` as for :meth:`subscribe`."""
        if listener is not None:
            if not isinstance(listener, PartitionKeyRebalanceListener):
                raise TypeError("listener must be a PartitionKeyRebalanceListener")
            self._core.listener = listener
        self._core.revoked(list(self._core.owned))
        self._batch.drop()
        self._assign_started(partitions, self._consumer.assign)

    def unassign(self) -> None:
        """``Consumer.unassign``."""
        self._core.revoked(list(self._core.owned))
        self._batch.drop()
        self._consumer.unassign()

    def incremental_assign(self, partitions: List[TopicPartition]) -> None:
        """``Consumer.incremental_assign``, through the gates: start positions
        are resolved as for a subscription and gates apply."""
        self._assign_started(partitions, self._consumer.incremental_assign)

    def incremental_unassign(self, partitions: List[TopicPartition]) -> None:
        """``Consumer.incremental_unassign``; the partitions' gate state is dropped."""
        tps = [(p.topic, p.partition) for p in partitions]
        self._core.revoked(tps)
        self._batch.drop(tps)
        self._consumer.incremental_unassign(partitions)

    def assignment(self) -> List[TopicPartition]:
        """``Consumer.assignment``: every assigned partition, including those held at
        a gate."""
        return self._consumer.assignment()

    # -- consuming

    def poll(self, timeout: float = -1) -> Optional[Message]:
        """``Consumer.poll``: the next deliverable message, or ``None``.

        While this member has no gating work pending and the client has
        records ready, one call fetches a batch of them with the client's
        ``consume`` (sized to the application's pace, at most
        ``ordered.poll.batch.records``) and the next calls return the rest
        (:mod:`kafka_ordered._pollbatch`: positions, commits, ``pause``,
        ``seek`` and rebalances see only what was returned). A fetch goes
        to the instance's fetch path first
        (:func:`kafka_ordered._fastpath.fast_fetch`): the client's own call,
        records untouched, while nothing needs gating."""
        batch = self._batch
        recs = batch.records
        if recs:
            if time.monotonic() < batch.until:
                return recs.pop()
            return self._poll_held_long(timeout)
        if batch.limit > 1 and self._calm.quiet:
            got = self._fast_consume(batch.size(), 0)
            if got:
                return batch.fill(got)
        m = self._fast_poll(timeout)
        batch.fill([] if m is None else [m])
        return m

    def _poll_held_long(self, timeout: float) -> Optional[Message]:
        """:meth:`poll` with records kept past their hold: the client is
        polled (it may hand out more, kept after them; its rebalance
        callbacks may take some out) before the next is returned."""
        batch = self._batch
        batch.extend(self._fast_consume(1, 0))
        if batch.records:
            return batch.records.pop()
        return self.poll(timeout)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> List[Message]:
        """``Consumer.consume``: up to ``num_messages`` deliverable messages
        (the client's own list when nothing needs gating; see :meth:`poll`).
        Records an earlier :meth:`poll` fetched and did not return come first."""
        if self._batch.records:
            if not 0 <= num_messages <= 1_000_000:
                raise ValueError("num_messages must be between 0 and 1000000 (1M)")
            return self._batch.take(num_messages)
        return self._fast_consume(num_messages, timeout)

    def _poll_one(self, timeout: float = -1) -> Optional[Message]:
        msgs = self._consume(1, timeout)
        return msgs[0] if msgs else None

    def _poll_fetched(self, m: Message) -> Optional[Message]:
        self._core.fetched_late()
        got = self._deliverable([m])
        return got[0] if got else None

    def _consume_fetched(self, raw: List[Message]) -> List[Message]:
        self._core.fetched_late()
        return self._deliverable(raw)

    def _consume(self, num: int, timeout: Optional[float]) -> List[Message]:
        cycle = self._core.poll_cycle(None if timeout is None or timeout < 0 else timeout)
        while True:
            if self._core.kept:
                out = self._from_hand(num)
                if out:
                    cycle.done(True)
                    return out
            wait = cycle.wait()
            raw = self._raw_consume(num, -1 if wait is None else wait)
            out = self._deliverable(raw) if raw else raw
            if cycle.done(bool(out)):
                return out

    def _from_hand(self, num: int) -> List[Message]:
        """Up to ``num`` records kept in hand of partitions released since
        (in offset order, before anything the client fetched of them later),
        decided again at their gates (:func:`kafka_ordered._grouped.from_hand`):
        what passes is delivered, the rest stays in hand (held again) or
        goes back to the client (paused)."""
        out = from_hand(self._core, num)
        return out.popitem()[1] if len(out) == 1 else [m for msgs in out.values() for m in msgs]

    def _keep(self, raw: List[Message], parts: List[Optional[int]], errors: bool
              ) -> Tuple[List[Message], List[Optional[int]]]:
        """Move the records of partitions with records in hand out of ``raw``
        (``parts``: their partitions; ``errors``: whether any is an error)
        into the core's ``kept`` (:meth:`GatingCore.keep`, which pauses a
        hold in hand that keeps too much); returns what is left and its
        partitions. (Records of other partitions are not looked at one by
        one, nor those of a partition number all of one topic: a member of
        one topic's partitions reads no topic names, and a fetch all of one
        kept partition goes to it whole.)"""
        core = self._core
        kept = core.kept
        numbers = {p for _, p in kept}
        hits = [n for n in numbers if n in parts]
        if not hits:
            return raw, parts
        topics = core.owned_topics()
        only = next(iter(topics)) if len(topics) == 1 else None
        if only is not None and not errors and len(hits) == 1 and parts.count(hits[0]) == len(parts):
            tp = (only, hits[0])
            if tp in kept:
                core.keep(tp, raw)
                return [], []
        everything = range(len(raw))
        mask = bytearray(b"\x01") * len(raw)
        taken: Dict[TP, List[Message]] = {}
        for n in hits:
            idx = list(compress(everything, map(n.__eq__, parts)))
            if not errors:
                msgs = list(map(raw.__getitem__, idx))
                if only is None:
                    names = list(map(_topic, msgs))
                    one: Optional[TP] = (str(names[0]), n) if names.count(names[0]) == len(names) else None
                else:
                    one = (only, n)
                if one is not None:
                    if one in kept:
                        taken[one] = msgs
                        for i in idx:
                            mask[i] = 0
                    continue
            for i in idx:
                m = raw[i]
                if m.error() is not None:
                    continue
                tp = _tp(m)
                if tp not in kept:
                    continue
                mask[i] = 0
                if tp in taken:
                    taken[tp].append(m)
                else:
                    taken[tp] = [m]
        for tp, msgs in taken.items():
            core.keep(tp, msgs)
        return list(compress(raw, mask)), list(compress(parts, mask))

    def _deliverable(self, raw: List[Message]) -> List[Message]:
        """What may be delivered of one fetched batch: the batch itself when no
        partition is watched (or only held ones, whose records librdkafka
        drops after the hold's seek); else each watched partition's run of
        records is cut at its gate (by bisection on offsets)."""
        core = self._core
        try:
            moved: List[Message] = []
            parts, errors, headers = fetch_shape(raw)
            core.ensure_fresh(self._runs(raw, parts, errors, headers, moved))
            if moved:  # consumed, never delivered (see kafka_ordered.tombstones)
                hidden = set(map(id, moved))
                keep = [id(m) not in hidden for m in raw]
                raw, parts = list(compress(raw, keep)), list(compress(parts, keep))
            if core.kept:
                raw, parts = self._keep(raw, parts, errors)
            watched = core.watched()
            if not watched:
                return raw
            inspect = core.to_inspect(watched)
            if not inspect:
                return raw
            return self._cut(raw, parts, errors, inspect)
        except BaseException:
            # Nothing of this batch reaches the application: fetch it again.
            first: Dict[TP, int] = {}
            for m in raw:
                if m.error() is None:
                    first.setdefault(_tp(m), int(m.offset() or 0))
            core.rewind(first)
            raise

    def _cut(self, raw: List[Message], parts: List[Optional[int]], errors: bool, watched: Set[TP]
             ) -> List[Message]:
        """``raw`` (``parts``: its partitions; ``errors``: whether any record
        is an error) without what lies at or past the gates of ``watched``
        partitions: each one's run of records is cut by bisection on offsets
        (:meth:`GatingCore.admit_run`); what a hold in hand cuts is kept."""
        numbers = {p for _, p in watched}
        hits = [n for n in numbers if n in parts] if len(numbers) <= 8 else numbers.intersection(parts)
        if not hits:
            return raw
        topics = self._core.owned_topics()
        names = list(map(_topic, raw)) if len(topics) > 1 else None
        only = next(iter(topics)) if len(topics) == 1 else None
        everything = range(len(raw))
        mask: Optional[bytearray] = None
        for n in hits:
            idx = list(compress(everything, map(n.__eq__, parts)))
            runs: Dict[TP, List[int]] = {}
            if names is None:
                runs[(only, n)] = idx  # type: ignore[index]
            else:
                for i in idx:
                    runs.setdefault((str(names[i]), n), []).append(i)
            for tp, ids in runs.items():
                if tp not in watched:
                    continue
                ok = list(compress(ids, map(_is_none, map(_error, map(raw.__getitem__, ids))))) if errors else ids
                n_ok = self._core.admit_run(tp, len(ok), lambda i: raw[ok[i]].offset())  # type: ignore[arg-type,return-value]
                if n_ok < len(ok):
                    if mask is None:
                        mask = bytearray(b"\x01") * len(raw)
                    for i in ok[n_ok:]:
                        mask[i] = 0
                    if self._core.in_hand(tp):  # held in hand: the held records are kept, in order
                        self._core.keep(tp, [raw[i] for i in ok[n_ok:]])
        return raw if mask is None else list(compress(raw, mask))

    def _runs(self, raw: List[Message], parts: List[Optional[int]], errors: bool, headers: bool,
              moved: List[Message]) -> List[Run]:
        """What ``raw`` holds per managed partition, for the causal-token rule
        (:func:`kafka_ordered.tokens.catch_up`); stamps are removed from the
        records on the way. ``parts``, ``errors``, ``headers``: the fetch's
        shape (:func:`~kafka_ordered._fastpath.fetch_shape`). Per record this
        costs that one pass; records carrying headers, and fetches that span
        several partitions, take the per-record loop, which also puts move
        tombstones into ``moved``."""
        if not headers and not errors and parts.count(parts[0]) == len(parts):
            topics = list(map(_topic, raw)) if len(self._core.owned_topics()) > 1 else None
            if topics is None or topics.count(topics[0]) == len(topics):
                first = raw[0]
                topic = first.topic()
                if not self._core.managed(topic):  # type: ignore[arg-type]
                    return []
                return [Run((topic, parts[0]), first.offset(), raw[-1].offset(), len(raw))]  # type: ignore[arg-type]
        runs = None if errors else self._runs_of_one_topic(raw, parts, headers, moved)
        return runs if runs is not None else self._runs_per_record(raw, moved)

    def _runs_of_one_topic(self, raw: List[Message], parts: List[Optional[int]], headers: bool,
                           moved: List[Message]) -> Optional[List[Run]]:
        """:meth:`_runs_per_record` for a fetch without errors (``parts``:
        its partitions; ``headers``: whether any record may carry headers)
        from a member that owns partitions of one managed topic only, in
        C-level passes: only the records carrying headers are looked at one
        by one (a replay of history is full of stamped records). ``None``:
        not such a fetch."""
        core = self._core
        owned = core.owned_topics()
        if len(owned) != 1:
            return None
        topic = next(iter(owned))
        if raw[0].topic() != topic or not core.managed(topic):
            return None
        stamps = _take_stamps(raw, core.freshness.log_id, moved) if headers else {}
        numbers = set(parts)
        if len(numbers) == 1:
            n = parts[0]
            return [Run((topic, n), raw[0].offset(), raw[-1].offset(), len(raw), stamps.get(n))]  # type: ignore[arg-type]
        backwards, last = parts[::-1], len(parts) - 1
        return [Run((topic, n), raw[parts.index(n)].offset(), raw[last - backwards.index(n)].offset(),  # type: ignore[arg-type]
                    parts.count(n), stamps.get(n))  # type: ignore[arg-type]
                for n in numbers]

    def _runs_per_record(self, raw: List[Message], moved: List[Message]) -> List[Run]:
        core = self._core
        log_id = core.freshness.log_id
        managed: Dict[str, bool] = {}
        acc: Dict[TP, List[Any]] = {}
        for m in raw:
            if m.error() is not None:
                continue
            topic = m.topic()
            ok = managed.get(topic)  # type: ignore[arg-type]
            if ok is None:
                ok = managed[topic] = core.managed(topic)  # type: ignore[index,arg-type]
            stamp = None
            h = m.headers()
            taken = take_stamp(h, log_id) if h else None
            if taken is not None:
                stamp, left = taken
                m.set_headers(left)  # type: ignore[arg-type]
                if not ok and stamp is not None:
                    ok = managed[topic] = core.managed_after_stamp(topic, stamp)  # type: ignore[index,arg-type]
            if not ok:
                continue
            tp = (topic, m.partition())
            off = m.offset()
            if taken is not None and is_move_tombstone(m.value(), h):
                moved.append(m)
            r = acc.get(tp)  # type: ignore[arg-type]
            if r is None:
                acc[tp] = [off, off, 1, stamp]  # type: ignore[index]
            else:
                r[1] = off
                r[2] += 1
                if stamp is not None and (r[3] is None or stamp > r[3]):
                    r[3] = stamp
        return [Run(tp, f, la, n, st) for tp, (f, la, n, st) in acc.items()]

    # -- offsets

    def commit(self, message: Optional[Message] = None, offsets: Optional[List[TopicPartition]] = None,
               asynchronous: bool = True) -> Any:
        """``Consumer.commit``. Without arguments commits the positions of every
        record returned so far. Commits that move a partition past a gate that
        opened inside this consumer also carry the source offsets it waited on."""
        if message is not None and offsets is not None:
            raise ValueError("message and offsets are mutually exclusive")
        if message is not None:
            want = {_tp(message): int(message.offset() or 0) + 1}
        elif offsets is not None:
            want = {(str(o.topic), int(o.partition)): int(o.offset) for o in offsets}
        else:
            want = self._core.processed_offsets()
            if not want:
                return None if asynchronous else []
        self._core.last_commit = time.monotonic()
        return self._core.commit(want, asynchronous)

    def store_offsets(self, message: Optional[Message] = None, offsets: Optional[List[TopicPartition]] = None) -> None:
        """``Consumer.store_offsets``: from now on auto-commit commits the stored
        offsets instead of the positions of returned records. With
        ``enable.auto.offset.store=false`` (or once this was called) a gate
        opens only when the source offsets it waits on are stored: a commit
        past it, which carries those source offsets, then never passes a
        record the application did not finish."""
        stored: Dict[TP, int] = {}
        if message is not None:
            stored[_tp(message)] = int(message.offset() or 0) + 1
        for o in offsets or ():
            stored[(o.topic, o.partition)] = o.offset
        self._core.store(stored)

    def committed(self, partitions: List[TopicPartition], timeout: float = -1) -> List[TopicPartition]:
        """``Consumer.committed``: the group's committed offsets; plain delegation.
        Records held at a gate are never committed."""
        return self._consumer.committed(partitions, timeout=timeout)

    def position(self, partitions: List[TopicPartition]) -> List[TopicPartition]:
        """Positions of returned records (held records do not count)."""
        known = self._core.positions([(p.topic, p.partition) for p in partitions])
        return [TopicPartition(p.topic, p.partition, known.get((p.topic, p.partition), -1001)) for p in partitions]

    def seek(self, partition: TopicPartition) -> None:
        """``Consumer.seek``; the new position counts as processed for gates."""
        self._batch.drop([(partition.topic, partition.partition)])
        self._consumer.seek(partition)
        self._core.seeked((partition.topic, partition.partition), partition.offset)

    def pause(self, partitions: List[TopicPartition]) -> None:
        """``Consumer.pause``; kept across rebalances and gate releases.
        Records a :meth:`poll` fetched of them and did not return yet are
        fetched again once resumed."""
        tps = [(p.topic, p.partition) for p in partitions]
        self._core.user_pause(tps)
        for tp, offset in self._batch.drop(tps).items():
            self._core.refetch(tp, offset)
        self._consumer.pause(partitions)

    def resume(self, partitions: List[TopicPartition]) -> None:
        """``Consumer.resume``; a partition held at a gate resumes when it opens."""
        ok = set(self._core.user_resume([(p.topic, p.partition) for p in partitions]))
        self._consumer.resume([p for p in partitions if (p.topic, p.partition) in ok])

    # -- plain delegations (cannot affect order)

    def get_watermark_offsets(self, partition: TopicPartition, timeout: Optional[float] = None,
                              cached: bool = False) -> Tuple[int, int]:
        """``Consumer.get_watermark_offsets``; plain delegation. On brokers whose
        ListOffsets is wrong after multi-record batches (the embedded broker)
        ``cached=True`` after a fetch gives the true high watermark."""
        if timeout is None:
            return self._consumer.get_watermark_offsets(partition, cached=cached)
        return self._consumer.get_watermark_offsets(partition, timeout=timeout, cached=cached)

    def offsets_for_times(self, partitions: List[TopicPartition], timeout: float = -1) -> List[TopicPartition]:
        """``Consumer.offsets_for_times``; plain delegation (seek to the result
        with :meth:`seek`, which the gates see)."""
        return self._consumer.offsets_for_times(partitions, timeout=timeout)

    def list_topics(self, topic: Optional[str] = None, timeout: float = -1) -> Any:
        """``Consumer.list_topics``: cluster metadata; plain delegation."""
        return self._consumer.list_topics(topic, timeout)

    def cluster_id(self, timeout: float = -1) -> Optional[str]:
        """``Consumer.cluster_id``; plain delegation."""
        return self._consumer.cluster_id(timeout)

    def memberid(self) -> Optional[str]:
        """``Consumer.memberid``: this member's id in the group (``None`` before
        the first assignment); plain delegation."""
        return self._consumer.memberid()

    def consumer_group_metadata(self) -> Any:
        """``Consumer.consumer_group_metadata``, for
        :meth:`OrderedProducer.send_offsets_to_transaction`; plain delegation."""
        return self._consumer.consumer_group_metadata()

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """``Consumer.set_sasl_credentials``; plain delegation. The process's
        internal layout-log clients keep the credentials they were created with."""
        self._consumer.set_sasl_credentials(username, password)

    def close(self) -> None:
        """Commit returned records (with auto-commit), leave the group, release
        the layout-log resources."""
        if self._closed:
            return
        self._closed = True
        try:
            self._commit_before_losing(list(self._core.owned))
            self._batch.drop()
            self._consumer.close()
        finally:
            self._core.close()
            self._shared.offsets.release_group(self._port.group)
            self._shared.release()

    def __enter__(self) -> "OrderedConsumer":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()
