"""The registering producer core, composed over a :class:`~kafka_ordered._ports.ProducerPort`.

One implementation of the producer side of the protocol for every client:
keyed records follow the topic's current layout, and before the first keyed
record under a new layout the producer flushes, reads the end offsets of the
partitions its keys leave (then, separately, of those they enter), appends a
registration to the layout log and only then sends under the new layout, with
no pause: keyed records to the partitions the registration gates carry the
``kafka-ordered.reg`` stamp until one stamped record per partition is
acknowledged. Sends made meanwhile are buffered in order. The decisions
(which epoch to register from, which gates, whether to append; what to
stamp) are in the pure :mod:`kafka_ordered.registration` and
:mod:`kafka_ordered.tokens`.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
import uuid
from typing import Any, Callable, Deque, Dict, Generator, List, Literal, Mapping, Optional, Tuple

from ._fastpath import ProducerRoute, close_route
from ._ports import LogResources, ProducerPort, Stamp
from .errors import RegistrationError, SwitchTimeoutError
from .history import Gate, LayoutHistory
from .layout import Layout
from .metrics import ProducerMetrics
from .registration import Flush, GateSpec, ReadEnds, SwitchPlan, SwitchStep, own_gates, plan_gates, switch_steps
from .tokens import HEADER as STAMP_HEADER, StampBook, encode, partitions_to_stamp
from .tombstones import HEADER as MOVED_HEADER, MoveTombstones

__all__ = ["RegisteringCore", "RegistrationRecord", "TopicState"]

log = logging.getLogger("kafka_ordered.producer")


class TopicState:
    """Per-topic switching state; changed under the core's lock.

    ``route`` is what the adapters' per-record path reads
    (:mod:`kafka_ordered._fastpath`): ``route.ready`` (keyed sends may go
    straight out: registered for the current layout, no switch running,
    nothing buffered), ``route.fn`` (the layout's key -> partition) and
    ``route.stamp`` (partitions whose records must come through :meth:`RegisteringCore.route`
    instead; empty in the steady state).
    """

    __slots__ = ("layout", "partitions", "busy", "buffer", "route")

    def __init__(self) -> None:
        self.layout: Optional[Layout] = None  # the layout sends are partitioned by
        self.partitions = 0
        self.busy = False  # a switch is running
        self.buffer: Deque[Tuple[Optional[bytes], Any]] = collections.deque()
        self.route: Any = ProducerRoute()


class RegistrationRecord:
    """What one registration did (kept for tests and observability)."""

    __slots__ = ("topic", "from_epoch", "epoch", "gates", "offset", "pause_s", "phases")

    def __init__(self, topic: str, from_epoch: int, epoch: int, gates: GateSpec,
                 offset: Optional[int], pause_s: float, phases: Optional[Dict[str, float]] = None) -> None:
        self.topic = topic
        self.from_epoch = from_epoch
        self.epoch = epoch
        self.gates = gates
        self.offset = offset
        self.pause_s = pause_s
        self.phases = phases or {}

    def __repr__(self) -> str:
        phases = ", ".join(f"{k} {v * 1000:.1f}" for k, v in self.phases.items())
        return (f"RegistrationRecord({self.topic!r}, {self.from_epoch}->{self.epoch}, gates={self.gates}, "
                f"offset={self.offset}, pause={self.pause_s * 1000:.1f} ms [{phases}])")


def anonymous_id() -> str:
    """A new id for a producer without ``ordered.producer.id``."""
    return f"anon-{uuid.uuid4().hex}"


class RegisteringCore:
    """Layout following and registration for one producer over a client port.

    ``states`` maps every topic seen to its :class:`TopicState` (``None``:
    unmanaged); ``routes`` maps managed topics to their ``TopicState.route``.
    The adapter's per-record path (:func:`kafka_ordered._fastpath.fast_produce`,
    or its own between ``route.enter()`` and ``route.leave()``) may send
    directly while ``route.ready`` holds and the key's partition is not in
    ``route.stamp``; everything else goes through :meth:`route`. Wherever a
    topic stops being ready the core calls
    :func:`~kafka_ordered._fastpath.close_route`, so no record computed under
    the old layout is enqueued after that.
    """

    def __init__(self, port: ProducerPort, shared: LogResources, opts: Mapping[str, Any], *,
                 producer_id: Optional[str] = None, routes: Optional[Dict[str, Any]] = None) -> None:
        """``producer_id``: the id of an anonymous producer made before the
        core (default: a new ``anon-...``); ``routes``: the (empty) dict an
        adapter's per-record path already reads."""
        self.port = port
        self.shared = shared
        self.follower = shared.follower
        self.timeout = opts["ordered.metadata.timeout.ms"] / 1000.0
        self.switch_timeout = opts["ordered.switch.timeout.ms"] / 1000.0
        self.window_ms: int = opts["ordered.transition.window.ms"]
        stable = opts["ordered.producer.id"]
        self.producer_id: str = stable or producer_id or anonymous_id()
        self.stable_id = stable is not None
        self.states: Dict[str, Optional[TopicState]] = {}
        self.routes: Dict[str, Any] = {} if routes is None else routes
        self.seen_version = -1
        self.lock = threading.RLock()
        self._idle = threading.Condition(self.lock)
        self.registrations: List[RegistrationRecord] = []
        #: Gates this instance registered, per topic (its view may lag its own appends).
        self.own_gates: Dict[str, List[Gate]] = {}
        #: How a switch is run: :meth:`switch`, or an adapter's wrapper of it
        #: (kafka-python moves switches started on its sender thread elsewhere).
        self.run_switch: Callable[[str, TopicState, Any], None] = self.switch
        #: Partitions still to stamp (guarded by its own lock: acknowledgements
        #: arrive on client threads that must never wait for a switch).
        self.stamps = StampBook()
        self._stamp_lock = threading.Lock()
        #: Set by the adapter for a transactional client: acknowledgements
        #: inside a transaction count only once it commits.
        self.transactional = False
        self.in_transaction = False
        #: ``ordered.tombstones`` (false only in tests: the control run).
        self.tombstones: bool = opts["ordered.tombstones"]
        #: Move tombstones still due, per compacted topic (see :mod:`kafka_ordered.tombstones`).
        self.moves: Dict[str, MoveTombstones] = {}
        #: Move tombstones whose key's new record is acknowledged, to send
        #: (appended by acknowledgements on client threads; deque ops are atomic).
        self.tombstones_due: Deque[Tuple[str, bytes, List[int], MoveTombstones]] = collections.deque()
        #: The order of a registration's offset reads: the one the design
        #: prescribes. ``"starts"`` exists only so that the simulation can show
        #: the deadlock the other order causes (a test-only knob).
        self.reads_first: Literal["waits", "starts"] = "waits"
        self.follower.add_listener(self.refresh_states)

    @property
    def history(self) -> LayoutHistory:
        return self.follower.history

    def close(self) -> None:
        self.follower.remove_listener(self.refresh_states)

    # -- layouts

    def refresh_states(self) -> None:
        """Track newly managed topics and mark topics whose layout changed."""
        history = self.follower.history
        with self.lock:
            if self.follower.fatal is not None:
                # The view cannot be trusted any more: every send takes the
                # slow path, which raises the follower's error.
                for st in self.states.values():
                    if st is not None:
                        close_route(st.route)
                return
            version = history.version
            for t in history.topics():
                st = self.states.get(t)
                if st is None:
                    st = self.states[t] = TopicState()
                    self.routes[t] = st.route
                elif st.route.ready and self._needs_switch(t, st):
                    close_route(st.route)
            self.seen_version = version

    def state(self, topic: str) -> Optional[TopicState]:
        """The topic's state, or ``None`` when it is not managed. Raises the
        follower's fatal error (a refused or unreadable layout-log record)."""
        fatal = self.follower.fatal
        if fatal is not None:
            raise fatal
        if self.follower.history.version != self.seen_version:
            self.refresh_states()
        try:
            return self.states[topic]
        except KeyError:
            pass
        # First send to this topic: it may have been put under management a
        # moment ago, so read the log to its end before calling it unmanaged.
        self.follower.sync()
        self.refresh_states()
        with self.lock:
            return self.states.setdefault(topic, None)

    def _needs_switch(self, topic: str, st: TopicState) -> bool:
        cur = self.follower.history.current(topic)
        return st.layout is None or (cur is not None and cur.epoch != st.layout.epoch)

    def unkeyed_partition(self, topic: str, st: TopicState) -> int:
        """A random undeleted partition for an unkeyed record."""
        count = st.partitions or self.follower.history.current(topic).partitions  # type: ignore[union-attr]
        return random.randrange(count)

    # -- sending

    def route(self, topic: str, st: TopicState, key: Optional[bytes], item: Any) -> Tuple[bool, Any]:
        """Send ``item`` now under the current layout, or buffer it behind a
        switch (running the switch on this thread if none is running).

        Returns ``(buffered, result)``: ``result`` is the port's return value
        when sent at once. Raises what the client raised for this record when
        it refused it (it is then neither sent nor buffered), or
        :class:`RegistrationError` when the switch failed (the record stays
        buffered and is retried by the next send or flush).
        """
        with self.lock:
            if st.busy or st.buffer:
                st.buffer.append((key, item))
                return True, None
            if key is None:
                return False, self.port.send(topic, self.unkeyed_partition(topic, st), item)
            if not self._needs_switch(topic, st):
                # Also the records whose partition is in ``st.route.stamp``.
                st.route.ready = True
                return False, self.send_keyed(topic, st, key, item)
            st.busy = True
            close_route(st.route)
            st.buffer.append((key, item))
        self.run_switch(topic, st, item)
        return True, None

    def retry(self, topic: str, st: TopicState) -> bool:
        """Retry a switch that failed earlier, if records wait behind it and no
        switch runs; returns whether it ran."""
        with self.lock:
            if st.busy or not st.buffer:
                return False
            st.busy = True
        self.run_switch(topic, st, None)
        return True

    def switch(self, topic: str, st: TopicState, own: Any = None) -> None:
        """Register for the topic's current layout, then send the buffer under it.

        On failure the buffered records stay buffered, in order, and the next
        send or flush retries; the error is raised. A buffered record the
        client refuses fails alone (:meth:`ProducerPort.failed`); when it is
        ``own`` (the record of the calling send) its error is raised here
        after the rest of the buffer went out.
        """
        began = time.monotonic()
        deadline = began + self.switch_timeout
        try:
            plan, phases = self._register(topic, st, began, deadline)
            pause_s = time.monotonic() - began
            compacted = self.tombstones and self.shared.compacted(topic, self._remaining(deadline))
        except BaseException as e:
            with self.lock:
                st.busy = False
                self._idle.notify_all()
            if isinstance(e, RegistrationError):  # e.g. SwitchTimeoutError: say what happened to the records too
                e.args = (f"{e.args[0] if e.args else e}. {len(st.buffer)} record(s) stay buffered and are "
                          "retried by the next send or flush.",)
                raise
            if isinstance(e, Exception):
                raise RegistrationError(
                    f"producer {self.producer_id} could not register for {topic}: {e}. "
                    f"{len(st.buffer)} record(s) stay buffered and are retried by the next send or flush."
                ) from e
            raise
        refused = self.switched(topic, st, plan, compacted, own, pause_s, phases)
        if refused is not None:
            raise refused

    def registration_steps(self, topic: str, st: TopicState, now_ms: int) -> Generator[SwitchStep, Any, SwitchPlan]:
        """The I/O of one registration for the topic's current layout, as
        requests for the caller to perform (the steps of
        :func:`registration.switch_steps`; a :class:`Flush` is asked for
        again while the acknowledgements it served made move tombstones due,
        which this sends). Returns the plan; the caller then completes the
        switch with :meth:`switched`. ``now_ms`` is the wall clock the
        transition window is measured against."""
        own = self.own_gates.setdefault(topic, [])
        steps = switch_steps(self.follower.history, topic, self.producer_id, self.stable_id, st.layout,
                             now_ms, self.window_ms, own, reads_first=self.reads_first)
        answer: Any = None
        while True:
            try:
                step = steps.send(answer)
            except StopIteration as done:
                plan: SwitchPlan = done.value
                break
            answer = yield step
            if isinstance(step, Flush):
                # A move tombstone must never land in a partition after its key moved back there.
                while self.send_due_tombstones():
                    yield step
        own.extend(plan_gates(plan, topic, self.producer_id))
        if plan.spec:
            log.info("producer %s registered for %s epoch %d (from %d) at layout-log offset %s with gates on %s",
                     self.producer_id, topic, plan.target.epoch, plan.from_epoch, plan.offset, sorted(plan.spec))
        return plan

    def _register(self, topic: str, st: TopicState, began: float,
                  deadline: float) -> Tuple[SwitchPlan, Dict[str, float]]:
        """Perform the requests of :meth:`registration_steps`; returns the
        plan and the time each phase took."""
        phases: Dict[str, float] = {}
        mark = began

        def phase(name: str) -> None:
            nonlocal mark
            now = time.monotonic()
            phases[name] = phases.get(name, 0.0) + now - mark
            mark = now

        target = self.follower.history.current(topic)
        if target is not None and (st.layout is None or target.physical_partitions > st.layout.physical_partitions):
            # Before anything is registered: a partition the expansion created may
            # not be in the client's metadata yet, and the client refuses records to it.
            self.port.learn_partitions(topic, target.physical_partitions, self._remaining(deadline))
            phase("metadata")
        steps = self.registration_steps(topic, st, int(time.time() * 1000))
        answer: Any = None
        while True:
            try:
                step = steps.send(answer)
            except StopIteration as done:
                return done.value, phases
            if isinstance(step, Flush):
                while self.port.flush(min(1.0, self._remaining(deadline))) > 0:
                    pass
                answer = None
                phase("flush")
            elif isinstance(step, ReadEnds):
                ends = self.shared.offsets.end_offsets({(topic, p) for p in step.partitions},
                                                       self._remaining(deadline))
                answer = {p: off for (_, p), off in ends.items()}
                phase(step.role)
            else:
                answer = self.shared.writer.append(step.key, step.value)
                phase("append")

    def switched(self, topic: str, st: TopicState, plan: SwitchPlan, compacted: bool, own: Any = None,
                 pause_s: float = 0.0, phases: Optional[Dict[str, float]] = None) -> Optional[BaseException]:
        """Complete a switch whose registration ``plan`` is done: stamp what it
        gates, follow its layout (with move tombstones on a ``compacted``
        topic) and send the buffer under it. Returns the client's error for
        ``own`` when it refused that record (see :meth:`switch`)."""
        record = RegistrationRecord(topic, plan.from_epoch, plan.target.epoch, plan.spec, plan.offset,
                                    pause_s, phases)
        self.registrations.append(record)
        target = plan.target
        with self.lock:
            self._track_moves(topic, target, compacted)
            self._add_stamps(topic, st, record, first_switch=st.layout is None)
            with self._stamp_lock:
                self._publish_stamps(topic, st)
            st.layout, st.route.fn, st.partitions = target, target._fn, target.partitions
            try:
                return self._drain(topic, st, own)
            finally:
                st.busy = False
                st.route.ready = not self._needs_switch(topic, st)
                self._idle.notify_all()

    # -- stamps

    def _add_stamps(self, topic: str, st: TopicState, record: RegistrationRecord, first_switch: bool) -> None:
        """After a switch: the partitions its registration gates (and, at a
        stable id's first switch, those its earlier registrations gated) are
        stamped from now on (:func:`tokens.partitions_to_stamp`)."""
        history = self.follower.history
        own_gated: List[int] = []
        own_newest: Optional[int] = None
        if first_switch and self.stable_id:
            own_gated = [g.partition for g in own_gates(history, topic, self.producer_id)]
            last = history.last_registration(topic, self.producer_id)
            own_newest = last.offset if last is not None else None
        parts, offset = partitions_to_stamp(record.gates, record.offset, first_switch, self.stable_id,
                                            own_gated, own_newest)
        if offset is None:
            return
        with self._stamp_lock:  # (the topic is not ready: no per-record send races this)
            self.stamps.add(topic, parts, offset)
            self._publish_stamps(topic, st)

    def _publish_stamps(self, topic: str, st: TopicState) -> None:
        """Make ``st.route.stamp`` the partitions still to stamp, or every
        partition while move tombstones may be due (stamp lock held). The
        per-record path reads the set without a lock, so new partitions are
        added before acknowledged ones are removed: a sender never sees a
        partition that needs the slow path missing from it."""
        pending = self.stamps.pending(topic)
        moves = self.moves.get(topic)
        if moves is not None:
            pending = frozenset(pending) | frozenset(range(moves.partitions))
        stamp = st.route.stamp
        stamp |= pending
        stamp -= stamp - pending

    def send_keyed(self, topic: str, st: TopicState, key: bytes, item: Any) -> Any:
        """Send a keyed record under the current layout, stamped when the
        partition still needs it. On a compacted topic the key's move
        tombstones that are due go out once the record is acknowledged (a
        key's old value is never deleted unless its new value is written: the
        record may still fail, or the process die); inside a transaction right
        after it, since the two commit or abort together."""
        if self.tombstones_due:
            self.send_due_tombstones()
        partition = st.route.fn(key)
        if partition not in st.route.stamp:
            return self.port.send(topic, partition, item)
        stamp: Optional[Stamp] = None
        with self._stamp_lock:
            offset = self.stamps.stamp(topic, partition)
        if offset is not None:
            stamp = Stamp(encode(self.follower.log_id, offset), self._acker(topic, st, partition, offset))
        moves = self.moves.get(topic)
        due = moves.due(key, partition) if moves is not None else []
        if not due:
            return self.port.send(topic, partition, item, stamp)
        assert moves is not None  # (due is empty without moves)
        mv = moves  # (narrowed, for the callback)
        entry = (topic, key, due, mv)

        def done(written: bool) -> None:
            if written:
                self.tombstones_due.append(entry)
            else:
                mv.retry(key)

        try:
            if self.transactional and self.in_transaction:
                result = self.port.send(topic, partition, item, stamp)
                self._send_tombstones(topic, key, due, mv)
                return result
            return self.port.send(topic, partition, item, stamp, done)
        except BaseException:
            mv.retry(key)
            raise

    def send_due_tombstones(self) -> int:
        """Send the move tombstones whose key's new record is acknowledged by
        now; returns how many were sent. Callers flush them: the layout
        switch's flush does (a tombstone must never land in a partition after
        its key moved back there), and so do the adapters' ``flush``."""
        sent = 0
        due = self.tombstones_due
        while due:
            topic, key, partitions, moves = due.popleft()
            self._send_tombstones(topic, key, partitions, moves)
            sent += len(partitions)
        return sent

    def _track_moves(self, topic: str, target: Layout, compacted: bool) -> None:
        """After a switch to ``target``: on a compacted topic whose earlier
        layouts map some keys elsewhere, every keyed record takes the slow
        path, which sends the key's move tombstones once."""
        self.moves.pop(topic, None)
        if not (compacted and self.tombstones):
            return
        moves = MoveTombstones.after_switch(self.follower.history, topic, target)
        if moves is not None:
            self.moves[topic] = moves

    def _send_tombstones(self, topic: str, key: bytes, partitions: List[int], moves: MoveTombstones) -> None:
        """The move tombstones of ``key``: marked (ordered consumers hide them)
        and stamped with the layout's log offset (so that the consumers'
        per-record paths hand them to the path that hides them)."""
        headers = [(MOVED_HEADER, str(moves.epoch).encode("ascii")),
                   (STAMP_HEADER, encode(self.follower.log_id, moves.stamp_offset))]
        for q in partitions:
            self.port.send_tombstone(topic, q, key, headers)

    def _acker(self, topic: str, st: TopicState, partition: int, offset: int) -> Callable[[], None]:
        def acked() -> None:
            with self._stamp_lock:
                if self.stamps.acked(topic, partition, offset, self.transactional and self.in_transaction):
                    self._publish_stamps(topic, st)
        return acked

    def begin_transaction(self) -> None:
        self.in_transaction = True

    def end_transaction(self, committed: bool) -> None:
        """The transaction ended: its stamped acknowledgements count when it
        committed; when it aborted, so were its move tombstones, and each key
        gets them again at its next write."""
        if not committed:
            with self.lock:
                for moves in self.moves.values():
                    moves.forget()
        with self._stamp_lock:
            if committed:
                for topic in self.stamps.committed():
                    st = self.states.get(topic)
                    if st is not None:
                        self._publish_stamps(topic, st)
            else:
                self.stamps.aborted()
            self.in_transaction = False

    def _drain(self, topic: str, st: TopicState, own: Any) -> Optional[BaseException]:
        """Send the buffer in order (lock held; callbacks that send again
        append to it). Returns the error of ``own`` if the client refused it."""
        buf = st.buffer
        refused: Optional[BaseException] = None
        while buf:
            key, item = buf[0]
            try:
                if key is not None:
                    self.send_keyed(topic, st, key, item)
                else:
                    self.port.send(topic, random.randrange(st.partitions), item)
            except Exception as e:
                log.warning("record for %s refused by the client while draining a layout switch: %s", topic, e)
                if item is own:
                    refused = e
                else:
                    self.port.failed(item, e)
            buf.popleft()
        return refused

    def _remaining(self, deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SwitchTimeoutError(f"layout switch took longer than {self.switch_timeout:.1f} s")
        return left

    def finish_switches(self, timeout: Optional[float]) -> None:
        """Complete pending switches of topics with buffered records (flush/close)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for topic, st in list(self.states.items()):
            if st is None:
                continue
            with self.lock:
                while st.busy:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return
                    self._idle.wait(left)
                if not st.buffer:
                    continue
                if not self._needs_switch(topic, st):
                    try:
                        refused = self._drain(topic, st, None)
                    finally:
                        st.route.ready = True
                    assert refused is None
                    continue
                st.busy = True
            self.switch(topic, st)

    def restart(self, timeout: Optional[float]) -> None:
        """Make this instance register again, at its next keyed send to each
        managed topic, exactly as a producer of the same id starting now
        would (:func:`registration.initial_from_epoch`): an anonymous id from
        just before the oldest layout change inside the transition window, a
        stable id from its last registration. Pending switches are completed
        and the layout view is read to the log's end first, so the
        registration's waits are read after this call and cover every record
        acknowledged before it, whoever wrote it. Raises
        :class:`SwitchTimeoutError` when a switch is still running after
        ``timeout``, and what :meth:`LayoutFollower.sync` raises."""
        self.finish_switches(timeout)
        self.follower.sync(timeout)
        self.refresh_states()
        with self.lock:
            running = sorted(t for t, st in self.states.items() if st is not None and (st.busy or st.buffer))
            if running:
                raise SwitchTimeoutError(f"layout switches of {', '.join(running)} still running after {timeout} s")
            for st in self.states.values():
                if st is not None:
                    close_route(st.route)
                    st.layout = None

    def metrics(self) -> ProducerMetrics:
        """A snapshot for :meth:`OrderedProducer.ordered_metrics`."""
        pauses = tuple(r.pause_s for r in self.registrations)
        epochs = {t: st.layout.epoch for t, st in sorted(self.states.items()) if st is not None and st.layout}
        return ProducerMetrics(
            producer_id=self.producer_id,
            layout_epochs=epochs,
            switches=len(pauses),
            last_switch_pause_s=pauses[-1] if pauses else None,
            max_switch_pause_s=max(pauses) if pauses else None,
            switch_pauses_s=pauses,
            records_buffered=self.buffered_count(),
            layout_view=self.follower.view_metrics(),
        )

    def buffered_count(self) -> int:
        return sum(len(st.buffer) for st in self.states.values() if st is not None)
