"""The gating core driven through fake ports (no broker): holds, releases,
rewinds and revokes go through one path, whatever the client."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from kafka_ordered._gating import GatingCore, GatingOptions
from kafka_ordered._ports import TP, Answered
from kafka_ordered.history import LayoutHistory
from kafka_ordered.layout import Layout
from kafka_ordered.listener import PartitionKeyRebalanceListener
from kafka_ordered.metrics import LayoutViewMetrics
from kafka_ordered.records import encode_layout, encode_registration

TOPIC = "t"
OPTS = {"ordered.metadata.timeout.ms": 1000, "ordered.gating": True, "ordered.commit.interval.ms": 200}


class FakePort:
    def __init__(self) -> None:
        self.paused: set = set()
        self.calls: List[Tuple[str, Any]] = []
        self.position: Dict[TP, int] = {}
        self.commits: Dict[TP, int] = {}

    def pause(self, tps: List[TP]) -> None:
        self.paused |= set(tps)
        self.calls.append(("pause", tuple(tps)))

    def resume(self, tps: List[TP]) -> None:
        self.paused -= set(tps)
        self.calls.append(("resume", tuple(tps)))

    def seek(self, tp: TP, offset: int) -> None:
        self.position[tp] = offset
        self.calls.append(("seek", (tp, offset)))

    def committed(self, tps: List[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        return {tp: self.commits[tp] for tp in tps if tp in self.commits}

    def committed_later(self, tps: List[TP], timeout: float) -> Answered[Dict[TP, int]]:
        return Answered(self.committed(tps, timeout))

    def commit(self, offsets: Dict[TP, int], asynchronous: bool) -> None:
        self.commits.update(offsets)

    def positions(self, tps: List[TP]) -> Dict[TP, int]:
        return {tp: self.position[tp] for tp in tps if tp in self.position}

    def partitions(self, tps: List[TP]) -> List[TP]:
        return list(tps)

    def learn_partitions(self, topic: str) -> None:
        self.calls.append(("learn_partitions", (topic,)))


class FakeView:
    fatal: Optional[BaseException] = None
    log_id = "fakelog"

    def __init__(self, history: LayoutHistory) -> None:
        self.history = history
        self.calls: List[Tuple[str, Any]] = []

    def sync(self, timeout: Optional[float] = None) -> LayoutHistory:
        self.calls.append(("sync", None))
        return self.history

    def catch_up_past(self, offset: int, timeout: Optional[float] = None) -> LayoutHistory:
        self.calls.append(("past", offset))
        return self.history

    def add_listener(self, listener: Callable[[], None]) -> None:
        pass

    def remove_listener(self, listener: Callable[[], None]) -> None:
        pass

    def view_metrics(self) -> LayoutViewMetrics:
        return LayoutViewMetrics("_log", self.history.next_offset, self.history.next_offset, 0, 0.0)


class FakeOffsets:
    def end_offsets(self, tps: Any, timeout: Optional[float] = None) -> Dict[TP, int]:
        return {tp: 0 for tp in tps}

    def start_offsets(self, tps: Any, timeout: Optional[float] = None) -> Dict[TP, int]:
        return {tp: 0 for tp in tps}

    def start_offsets_later(self, tps: Any, timeout: Optional[float] = None) -> Answered[Dict[TP, int]]:
        return Answered(self.start_offsets(tps, timeout))


def _core() -> Tuple[GatingCore, FakePort]:
    history = LayoutHistory()
    lay1 = Layout(TOPIC, 1, 1, 1, 2)
    for i, value in enumerate([
        encode_layout(lay1, "create", "a")[1],
        encode_layout(lay1.expanded(2), "expand", "a")[1],
        encode_registration(TOPIC, "p", True, 2, 1, {1: (5, {0: 10})})[1],
    ]):
        history.apply(i, TOPIC.encode(), value)
    port = FakePort()
    core = GatingCore(port, FakeView(history), FakeOffsets(), GatingOptions(OPTS, False, 5.0, "earliest"))
    core.subscribed = {TOPIC}
    core.assigned_at({(TOPIC, 1): 0})
    return core, port


def test_hold_then_release_when_the_source_is_committed() -> None:
    core, port = _core()
    assert core.watched() == {(TOPIC, 1)}
    assert all(core.admit((TOPIC, 1), o) for o in range(5))
    assert not core.admit((TOPIC, 1), 5)
    assert (TOPIC, 1) in port.paused and port.position[(TOPIC, 1)] == 5
    port.commits[(TOPIC, 0)] = 10  # another member processed the source
    core.maintain()
    assert (TOPIC, 1) not in port.paused and core.watched() == set()
    assert core.metrics("g").gate_waits.count == 1


def test_revoking_a_held_partition_resumes_it() -> None:
    core, port = _core()
    core.admit((TOPIC, 1), 7)
    assert (TOPIC, 1) in port.paused
    core.revoked([(TOPIC, 1)])
    assert (TOPIC, 1) not in port.paused, "a revoked partition must not stay paused in the client"
    assert core.held() == set() and core.owned == set()


def test_user_pause_survives_a_gate_release() -> None:
    core, port = _core()
    core.admit((TOPIC, 1), 6)
    core.user_pause([(TOPIC, 1)])
    port.commits[(TOPIC, 0)] = 10
    core.maintain()
    assert ("resume", ((TOPIC, 1),)) not in port.calls


def test_rewind_before_a_hold_releases_it_and_seeks_back() -> None:
    core, port = _core()
    core.admit((TOPIC, 1), 5)
    core.rewind({(TOPIC, 1): 3})
    assert (TOPIC, 1) not in core.held() and port.position[(TOPIC, 1)] == 3


def test_an_assignment_catches_up_once_and_a_seek_or_gap_at_the_next_fetch() -> None:
    from kafka_ordered.tokens import Run

    core, port = _core()
    view = core.follower
    tp, other = (TOPIC, 0), (TOPIC, 1)
    core.revoked([other])
    view.calls.clear()
    core.assigned_at({tp: 0, other: 7})
    assert view.calls == []  # recording the assignment reads nothing
    core.ensure_fresh([Run(tp, 0, 9, 10)])  # the first fetch after it: the assignment's one catch-up
    core.ensure_fresh([Run(tp, 10, 19, 10)])  # the next one follows on: nothing
    assert view.calls == [("sync", None)]
    core.ensure_fresh([Run(other, 9, 9, 1)])  # a first fetch past its position (a record gone): to the end
    assert view.calls == [("sync", None)] * 2
    view.calls.clear()
    view.calls.append(("sync", None))
    core.ensure_fresh([Run(tp, 25, 29, 5)])  # a silent reset (or a gap): to the end again
    core.seeked(tp, 40)
    core.ensure_fresh([Run(tp, 40, 40, 1)])  # the first fetch after a seek
    assert view.calls == [("sync", None)] * 3
    core.ensure_fresh([Run(tp, 41, 42, 2, stamp=view.history.next_offset)])  # a stamp beyond the view
    core.ensure_fresh([Run(tp, 43, 43, 1, stamp=view.history.next_offset - 1)])  # one it includes
    assert view.calls[3:] == [("past", view.history.next_offset)]


def test_an_assignment_of_explicit_and_resolved_offsets_catches_up_once() -> None:
    """The confluent adapter records an assignment in two calls (resolved
    starts, then explicit offsets). Neither reads the layout log when no
    start depends on a layout (committed offsets, reset to the log start):
    the first fetch catches up once for every partition (their positions
    were fixed before it); an empty call reads nothing either."""
    from kafka_ordered.tokens import Run

    core, port = _core()
    view = core.follower
    core.revoked([(TOPIC, 1)])
    view.calls.clear()
    assert core.assigned([], {}) == {}
    starts = core.assigned([(TOPIC, 0)], {(TOPIC, 0): 3})
    core.assigned_at({(TOPIC, 1): 7})
    assert starts == {(TOPIC, 0): 3}
    assert view.calls == []
    core.ensure_fresh([Run((TOPIC, 1), 7, 8, 2)])
    core.ensure_fresh([Run((TOPIC, 0), 3, 3, 1)])
    assert view.calls == [("sync", None)]


def test_a_start_that_depends_on_the_layout_is_resolved_on_a_fresh_view() -> None:
    """With ``auto.offset.reset=latest`` a partition without a commit starts
    by its layout (a partition added by an expansion starts at its log
    start): the view is caught up first, and that catch-up came after the
    committed offsets were read, so their first fetches need none; the
    resolved starts are owed one, made by the first fetch."""
    from kafka_ordered.tokens import Run

    core, port = _core()
    core.opts.reset = "latest"
    view = core.follower
    core.revoked([(TOPIC, 1)])
    view.calls.clear()
    starts = core.assigned([(TOPIC, 0), (TOPIC, 1)], {(TOPIC, 0): 3})
    assert view.calls == [("sync", None)]
    assert starts == {(TOPIC, 0): 3, (TOPIC, 1): 0}  # partition 1 came with the expansion: its log start
    core.ensure_fresh([Run((TOPIC, 0), 3, 3, 1)])
    assert view.calls == [("sync", None)]
    core.ensure_fresh([Run((TOPIC, 1), 0, 0, 1)])
    assert view.calls == [("sync", None)] * 2


def test_partitions_sought_together_share_one_catch_up() -> None:
    """An application that seeks every partition after an assignment: the
    first fetch after the seeks catches up once for all of them (their
    positions were fixed before it); a partition whose first fetch does not
    start where it was sought to, or was reset to an unknown position,
    still catches up on its own."""
    from kafka_ordered.tokens import Run

    core, port = _core()
    view = core.follower
    a, b = (TOPIC, 0), (TOPIC, 1)
    core.assigned_at({a: 0})
    view.calls.clear()
    core.seeked(a, 10)
    core.seeked(b, 20)
    core.ensure_fresh([Run(a, 10, 12, 3)])
    assert view.calls == [("sync", None)]
    core.ensure_fresh([Run(b, 20, 20, 1)])  # covered by the catch-up above
    assert view.calls == [("sync", None)]
    core.seeked(a, 30)
    core.seeked(b, -2)  # a logical offset: where it lands is not known yet
    core.ensure_fresh([Run(a, 30, 30, 1)])
    core.ensure_fresh([Run(b, 0, 0, 1)])
    assert view.calls == [("sync", None)] * 3
    core.seeked(a, 40)
    core.seeked(b, 50)
    core.ensure_fresh([Run(a, 40, 40, 1)])
    core.ensure_fresh([Run(b, 52, 52, 1)])  # not where it was sought to: a gap
    assert view.calls == [("sync", None)] * 5


def test_a_hold_seeks_back_without_owing_a_catch_up_but_a_failed_one_stays_owed() -> None:
    from kafka_ordered.tokens import Run

    core, port = _core()
    view = core.follower
    tp = (TOPIC, 1)
    core.ensure_fresh([Run(tp, 0, 6, 7)])
    assert not core.admit(tp, 5)  # held at the gate: sought back to 5
    core.ensure_fresh([Run(tp, 5, 6, 2)])  # fetched again from the hold: no catch-up
    assert view.calls == [("sync", None)]

    def broken(timeout: Optional[float] = None) -> LayoutHistory:
        raise RuntimeError("broker down")

    view.sync = broken  # type: ignore[method-assign]
    core.seeked(tp, 0)
    try:
        core.ensure_fresh([Run(tp, 0, 3, 4)])
    except RuntimeError:
        core.rewind({tp: 0})
    assert tp not in core.freshness.expected  # the next fetch still catches up to the end


def test_gate_status_carries_wall_clock_times() -> None:
    import time

    before = time.time()
    core, port = _core()
    (st,) = core.gate_status()
    assert before <= st.since_wall <= time.time() and st.held_since is None  # type: ignore[operator]
    core.admit((TOPIC, 1), 5)  # held now
    (held,) = core.gate_status()
    assert held.since_wall == st.since_wall and st.since_wall <= held.held_since <= time.time()  # type: ignore[operator]


# -- scope, cost and calm (issue 12 "per-poll and per-message cost", issue 13)


class ListeningView(FakeView):
    """A view whose history grows: listeners run after records are applied."""

    def __init__(self, history: LayoutHistory) -> None:
        super().__init__(history)
        self.listeners: List[Callable[[], None]] = []

    def add_listener(self, listener: Callable[[], None]) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        self.listeners.remove(listener)

    def append(self, value: bytes) -> None:
        self.history.apply(self.history.next_offset, TOPIC.encode(), value)
        for listener in list(self.listeners):
            listener()


def _grown_core(owned: List[int], gates: int) -> Tuple[GatingCore, FakePort, ListeningView]:
    """Topic t: 1 -> 8 partitions (initial 1), ``gates`` registrations, each
    with a gate on every partition 1..7 waiting on partition 0 (closed until
    the group processes 0 far enough)."""
    history = LayoutHistory()
    lay = Layout(TOPIC, 1, 1, 8, 8)
    history.apply(0, TOPIC.encode(), encode_layout(lay, "create", "a")[1])
    view = ListeningView(history)
    for i in range(gates):
        view.append(encode_registration(TOPIC, f"p{i}", True, 1, 1,
                                        {p: (10 * i, {0: 1000 + i}) for p in range(1, 8)})[1])
    port = FakePort()
    core = GatingCore(port, view, FakeOffsets(), GatingOptions(OPTS, False, 5.0, "earliest"))
    core.subscribed = {TOPIC}
    core.assigned_at({(TOPIC, p): 0 for p in owned})
    return core, port, view


def test_gates_and_state_only_for_owned_partitions() -> None:
    core, port, view = _grown_core(owned=[2], gates=50)
    assert core.watched() == {(TOPIC, 2)}
    assert core.keeper.closed_partitions() == [(TOPIC, 2)], "gates on partitions another member owns are not kept"
    assert core.keeper.waited_on() == frozenset(), "source 0 is not ours: no hand-off waits"
    core.maintain()
    assert set(core.parts) == {(TOPIC, 2), (TOPIC, 0)}  # 0: an unowned source of our closed gates
    port.commits[(TOPIC, 0)] = 2000
    core._commits_read.due = float("-inf")
    core.maintain()
    assert core.keeper.closed_partitions() == [] and set(core.parts) == {(TOPIC, 2)}
    assert core.watched() == set()


def test_the_owner_of_a_source_keeps_only_waits_above_the_commit() -> None:
    core, port, view = _grown_core(owned=[0], gates=20)
    assert core.keeper.closed_partitions() == []  # the gates are on partitions others own
    assert core.keeper.waited_on() == frozenset({(TOPIC, 0)})
    core.begin_poll()  # reads the group's commit (none): this member's commits end waits from now on
    assert not core.parts.commit_unknown
    core.commit({(TOPIC, 0): 1010}, asynchronous=False)
    assert core.keeper.needs_commit((TOPIC, 0), 1010) and not core.keeper.crossed((TOPIC, 0), 0, 1010)
    core.commit({(TOPIC, 0): 1019}, asynchronous=False)
    assert core.keeper.waited_on() == frozenset()


def test_the_calm_comes_back_when_a_gate_opens_before_its_reads_were_answered() -> None:
    """A read sent for a gate (here the sources' log starts) whose answer
    has not come when the gate opens is not waited for any more: the calm
    is not cut short to look for it (it had sent every poll of a consumer
    past its transitions to the full path)."""
    core, port, view = _grown_core(owned=[0, 3], gates=5)

    class Never:
        def done(self) -> bool:
            return False

        def result(self) -> Dict[TP, int]:
            raise AssertionError("never answered")

    core.offsets.start_offsets_later = lambda tps, timeout=None: Never()  # type: ignore[method-assign]
    core.begin_poll()
    core.settle()
    # partition 3 held at its gate, which this member's deliveries of 0 open;
    # the calm lasts only until the read's answer is looked for
    assert core.held() == {(TOPIC, 3)} and core._log_starts_read.pending is not None
    assert core.calm.quiet and core.calm.until == core._log_starts_read.due
    port.commits[(TOPIC, 0)] = 2000
    core.commit({(TOPIC, 0): 2000}, asynchronous=False)
    core.begin_poll()
    core.settle()
    assert core.calm.quiet and core.keeper.closed_partitions() == []
    assert core.calm.until == float("inf")


def test_gates_of_a_partition_assigned_later_are_loaded_from_the_index() -> None:
    core, port, view = _grown_core(owned=[1], gates=30)
    core.maintain()
    assert core.keeper.closed_partitions() == [(TOPIC, 1)]
    core.assigned_at({(TOPIC, 5): 0})
    assert core.keeper.closed_partitions() == [(TOPIC, 1), (TOPIC, 5)]
    assert core.keeper.limit((TOPIC, 5)) == 0
    core.revoked([(TOPIC, 1)])
    assert core.keeper.closed_partitions() == [(TOPIC, 5)] and (TOPIC, 1) not in core.parts


def test_calm_after_transitions_pass_and_every_event_ends_it() -> None:
    core, port, view = _grown_core(owned=[0, 3], gates=5)
    core.begin_poll()
    core.settle()
    assert core.held() == {(TOPIC, 3)}, "a closed gate on an owned partition holds it"
    assert core.calm.until_offsets == {(TOPIC, 0): 1000}, "the calm ends where its source meets the gate"
    port.commits[(TOPIC, 0)] = 2000
    core.commit({(TOPIC, 0): 2000}, asynchronous=False)
    core.begin_poll()
    core.settle()
    assert core.calm.quiet and core.keeper.closed_partitions() == [] and core.keeper.waited_on() == frozenset()
    assert core.calm.until == float("inf")  # no auto-commit, a view that stays fresh
    # a new registration (the follower applies it on its thread) ends the calm
    view.append(encode_registration(TOPIC, "late", True, 1, 1, {3: (500, {0: 3000})})[1])
    assert not core.calm.quiet
    core.begin_poll()
    core.settle()
    assert core.keeper.closed_partitions() == [(TOPIC, 3)]
    assert core.calm.quiet and core.calm.limits == {(TOPIC, 3): 500}, "its records stop at the gate"
    # so does an assignment change
    core.commit({(TOPIC, 0): 3000}, asynchronous=False)
    core.begin_poll()
    core.settle()
    assert core.calm.quiet
    core.assigned_at({(TOPIC, 6): 0})
    assert not core.calm.quiet
    core.close()
    assert view.listeners == []


def test_admit_run_cuts_a_batch_by_bisection_and_announces_first() -> None:
    core, port, view = _grown_core(owned=[4], gates=3)  # gates on 4 at starts 0, 10, 20
    announced: List[Any] = []

    class L:
        def on_partition_key_maybe_revoked(self, tps: Any) -> None:
            pass

        def on_partition_key_assigned(self, tps: Any) -> None:
            announced.append((tuple(tps), len(seen)))

    seen: List[int] = []
    core.listener = L()  # type: ignore[assignment]
    port.commits[(TOPIC, 0)] = 1001  # opens the gates at 0 and 10; 20 (waits for 1002) stays closed
    core.maintain()
    assert core.keeper.limit((TOPIC, 4)) == 20
    offsets = list(range(3, 40, 2))
    calls = []

    def offset_at(i: int) -> int:
        calls.append(i)
        seen.append(i)
        return offsets[i]

    n = core.admit_run((TOPIC, 4), len(offsets), offset_at)
    assert offsets[:n] == [o for o in offsets if o < 20]
    assert (TOPIC, 4) in core.held() and port.position[(TOPIC, 4)] == 21 and (TOPIC, 4) in port.paused
    assert len(calls) < 15, "bisection, not a walk over every record"
    # gates at 0 and 10 opened: one announcement each (records 3 and 11 are
    # the first past their starts), made before the batch is returned
    assert [a for a, _ in announced] == [((TOPIC, 4),)] * 2
    assert core.records_held_back == len(offsets) - n
    assert core.admit_run((TOPIC, 4), 5, lambda i: 21 + i) == 0  # held: nothing passes


def test_positions_of_a_held_partition_never_pass_what_the_client_delivered() -> None:
    core, port, view = _grown_core(owned=[2], gates=1)
    core.admit((TOPIC, 2), 0)
    assert core.positions([(TOPIC, 2)]) == {(TOPIC, 2): 0}
    port.position[(TOPIC, 2)] = 0
    core.parts.hold((TOPIC, 2), 7, 0.0, 0.0)  # e.g. the iterator is still handing out records before the hold
    assert core.positions([(TOPIC, 2)]) == {(TOPIC, 2): 0}


def test_records_of_a_held_partition_that_arrive_anyway_are_held_again() -> None:
    """A client may hand out records of a partition held at a gate when its
    pause was lost (aiokafka forgets pauses when its assignment changes
    under it): nothing passes, and the partition is paused and sought back
    to its hold again, so its position never skips the held records (a
    chaos run lost 380 records of a partition this way)."""
    core, port, view = _grown_core(owned=[4], gates=1)
    assert core.admit_run((TOPIC, 4), 3, lambda i: 5 + i) == 0
    held_at = port.position[(TOPIC, 4)]
    assert (TOPIC, 4) in core.held() and (TOPIC, 4) in port.paused
    port.paused.discard((TOPIC, 4))  # the client forgot the pause ...
    port.position[(TOPIC, 4)] = 105  # ... and moved past the records it handed out
    assert core.admit_run((TOPIC, 4), 100, lambda i: 5 + i) == 0
    assert port.position[(TOPIC, 4)] == held_at and (TOPIC, 4) in port.paused
    assert core.positions([(TOPIC, 4)]) == {(TOPIC, 4): held_at}


class Rec:
    """A fetched record as the core's kept records see it."""

    def __init__(self, offset: int) -> None:
        self.offset = offset


def _in_hand_core() -> Tuple[GatingCore, FakePort]:
    """A member holding in hand that owns the gate's source (partition 0) too."""
    core, port = _core()
    core.keep_in_hand = True
    core.assigned_at({(TOPIC, 0): 0})
    return core, port


def _process_the_source(core: GatingCore, port: FakePort) -> None:
    port.position[(TOPIC, 0)] = 10  # this member delivered partition 0 up to the wait
    core.begin_poll()


class Unanswered:
    """A read on its way, answered when the test says so."""

    def __init__(self) -> None:
        self.value: Optional[Dict[TP, int]] = None

    def done(self) -> bool:
        return self.value is not None

    def result(self) -> Dict[TP, int]:
        assert self.value is not None
        return self.value


class Announced(PartitionKeyRebalanceListener):
    """A key listener that notes the partitions announced maybe revoked."""

    def __init__(self) -> None:
        self.revoked: List[Any] = []

    def on_partition_key_maybe_revoked(self, partitions: Any) -> None:
        self.revoked.append(tuple(partitions))

    def on_partition_key_assigned(self, partitions: Any) -> None:
        pass


def _reading_core() -> Tuple[GatingCore, FakePort, Unanswered]:
    """:func:`_in_hand_core` whose read of the group's commits answers when
    the test says so."""
    core, port = _in_hand_core()
    read = Unanswered()
    port.committed_later = lambda tps, timeout: read  # type: ignore[assignment,method-assign]
    return core, port, read


def test_a_gate_on_a_source_this_member_processed_opens_before_the_groups_commit_is_read() -> None:
    """Partitions assigned at explicit offsets: the group's commit of an owned
    source is read (never waited for) only to tell which of its hand-off
    waits an earlier member passed. This member's own deliveries of the
    source open the gates it owns on it meanwhile (a new group replaying
    history would otherwise hold them until the read answers, tens of
    milliseconds on a fresh client); the crossing of the wait is announced
    once the read answers, and only if the group had not passed it."""
    core, port, read = _reading_core()
    keys = Announced()
    tp = (TOPIC, 1)
    port.position[tp] = 8
    assert core.admit_run(tp, 8, lambda i: i) == 5
    core.kept[tp] += [Rec(5), Rec(6), Rec(7)]
    core.begin_poll()
    assert core.parts.commit_unknown and core.in_hand(tp)
    _process_the_source(core, port)
    assert tp not in core.held(), "this member processed the source: the gate opened"
    assert keys.revoked == [] and core.parts.commit_unknown, "the crossing waits for the group's commit"
    core.handed(tp, 3)
    core.settle()
    assert core.calm.quiet and core.calm.until <= core._starts_read.due, "the calm ends to look for the answer"
    core.listener = keys
    read.value = {}  # the group had committed nothing
    core.begin_poll()
    assert keys.revoked == [((TOPIC, 0),)] and not core.parts.commit_unknown
    other, port, read = _reading_core()
    other.listener = keys = Announced()
    _process_the_source(other, port)
    read.value = {(TOPIC, 0): 10}  # an earlier member passed the wait: nothing to announce
    other.begin_poll()
    assert keys.revoked == [] and other.keeper.waited_on() == frozenset()


def test_a_commit_of_this_member_while_the_groups_commit_is_read_hides_no_crossing() -> None:
    """Partitions assigned at explicit offsets, the read of the group's
    commit still on its way: an auto-commit or ``commit()`` of what this
    member processed meanwhile is not the group's earlier commit. The
    crossing of a hand-off wait it covers is still announced when the read
    answers that no earlier member passed the wait."""
    core, port, read = _reading_core()
    keys = Announced()
    core.listener = keys
    _process_the_source(core, port)
    assert keys.revoked == [] and core.parts.commit_unknown
    core.commit_processed(asynchronous=False)  # as an auto-commit would, before the read answers
    assert port.commits[(TOPIC, 0)] == 10
    read.value = {}  # the group had committed nothing: this member crossed the wait
    core.begin_poll()
    assert keys.revoked == [((TOPIC, 0),)] and not core.parts.commit_unknown
    assert core.keeper.waited_on() == frozenset(), "announced and committed: nothing more to hand off"


def test_a_hold_in_hand_neither_pauses_nor_seeks_and_its_release_does_not_resume() -> None:
    # Pausing makes librdkafka drop what it prefetched; the refetch after the
    # release then waits behind the Fetch in flight (a long poll of up to
    # fetch.wait.max.ms once the other partitions are caught up).
    core, port = _in_hand_core()
    tp = (TOPIC, 1)
    port.position[tp] = 8  # the client fetched 0-7
    assert core.admit_run(tp, 8, lambda i: i) == 5
    assert core.in_hand(tp) and tp in core.held() and core.kept == {tp: []}
    assert port.calls == [] and port.paused == set(), "no pause, no seek: nothing is fetched twice"
    core.kept[tp] += [Rec(5), Rec(6), Rec(7)]
    assert core.positions([tp]) == {tp: 5}, "held records are not processed"
    core.settle()
    assert not core.calm.quiet
    _process_the_source(core, port)
    assert tp not in core.held() and not core.in_hand(tp) and port.calls == []
    assert core.positions([tp]) == {tp: 5}, "kept records of a released partition are not processed either"
    core.settle()
    assert not core.calm.quiet, "kept records are delivered by the full path"
    core.kept.pop(tp)
    assert core.positions([tp]) == {tp: 8}


def test_a_released_partition_held_again_at_its_kept_records_keeps_them() -> None:
    """Found by the chaos suite (seed 8, CI): a partition released with
    records still in hand, then held again before they were delivered (a
    second gate on it starts at the first of them), lost them: the new hold
    started an empty list of kept records, and the client, never sought
    back, was already past them. The group then committed past them."""
    core, port = _in_hand_core()
    tp = (TOPIC, 1)
    port.position[tp] = 8
    assert core.admit_run(tp, 8, lambda i: i) == 5
    core.kept[tp] += [Rec(5), Rec(6), Rec(7)]
    _process_the_source(core, port)
    assert tp not in core.held() and [r.offset for r in core.kept[tp]] == [5, 6, 7]
    # another producer's gate on partition 1, also from offset 5, waiting on 0 up to 20
    history = core.follower.history
    history.apply(history.next_offset, TOPIC.encode(), encode_registration(TOPIC, "q", True, 2, 1, {1: (5, {0: 20})})[1])
    core.refresh_gates(force=True)
    core.maintain()
    assert tp in core.held()
    assert [r.offset for r in core.kept.get(tp, [])] == [5, 6, 7] or port.position[tp] == 5, \
        "the held records are kept, or the client is sought back to them"
    assert core.positions([tp]) == {tp: 5}


def test_a_hold_in_hand_that_keeps_too_much_becomes_a_pause() -> None:
    core, port = _in_hand_core()
    tp = (TOPIC, 1)
    core.admit_run(tp, 7, lambda i: i)
    core.kept[tp] += [Rec(5), Rec(6)]
    core.pause_in_hand(tp)
    assert not core.in_hand(tp) and tp not in core.kept and tp in core.held()
    assert tp in port.paused and port.position[tp] == 5
    _process_the_source(core, port)
    assert tp not in port.paused


def test_kept_records_go_back_to_the_client_on_rewind_revoke_seek_and_user_pause() -> None:
    tp = (TOPIC, 1)
    # a rewind: holds in hand become pauses at the hold
    core, port = _in_hand_core()
    core.admit_run(tp, 7, lambda i: i)
    core.kept[tp] += [Rec(5), Rec(6)]
    core.rewind({tp: 7})
    assert tp in port.paused and port.position[tp] == 5 and not core.kept
    # a rewind after the release: the client seeks back to the first kept record
    core, port = _in_hand_core()
    core.admit_run(tp, 7, lambda i: i)
    core.kept[tp] += [Rec(5), Rec(6)]
    _process_the_source(core, port)
    core.rewind({tp: 7})
    assert port.position[tp] == 5 and not core.kept and tp not in port.paused
    # a revoke forgets them, and resumes nothing (nothing was paused)
    core, port = _in_hand_core()
    core.admit_run(tp, 7, lambda i: i)
    core.kept[tp] += [Rec(5)]
    core.revoked([tp])
    assert not core.kept and not core.in_hand(tp) and port.calls == []
    # the application's seek: the client fetches from there
    core, port = _in_hand_core()
    core.admit_run(tp, 7, lambda i: i)
    core.kept[tp] += [Rec(5)]
    core.seeked(tp, 2)
    assert not core.kept and tp not in core.held() and ("resume", (tp,)) not in port.calls
    # the application's pause: a held partition is paused at its hold
    core, port = _in_hand_core()
    core.admit_run(tp, 7, lambda i: i)
    core.kept[tp] += [Rec(5)]
    core.user_pause([tp])
    assert not core.kept and port.position[tp] == 5 and tp in port.paused
    _process_the_source(core, port)
    assert tp in port.paused, "still paused by the application"
    # a partition the application paused is held by a pause, never in hand
    core, port = _in_hand_core()
    core.user_pause([tp])
    core.admit_run(tp, 7, lambda i: i)
    assert not core.in_hand(tp) and port.position[tp] == 5


def test_a_gate_waiting_on_a_partition_this_member_does_not_own_holds_by_a_pause() -> None:
    # Only this member's own progress opens a gate soon; one that waits for
    # another member's commits may stay closed long (the records would pile
    # up in hand, and a client that keeps fetching the held partition hands
    # out records that fill no batch).
    core, port = _core()  # owns partition 1 only; its gate waits on partition 0
    core.keep_in_hand = True
    tp = (TOPIC, 1)
    assert core.admit_run(tp, 7, lambda i: i) == 5
    assert not core.in_hand(tp) and tp in port.paused and port.position[tp] == 5
    core2, port2 = _core()
    core2.keep_in_hand = True
    core2.assigned_at({(TOPIC, 0): 0})
    assert core2.admit_run(tp, 7, lambda i: i) == 5
    assert core2.in_hand(tp) and port2.paused == set()


def test_calm_while_every_closed_gate_is_held_by_a_pause() -> None:
    """A member whose only gating work is partitions at gates that wait on
    another member skips the core between the gates' re-evaluations: the
    calm lasts until the next read of the sources' commits; records of a
    partition below its gate pass the calm check up to the gate's start
    (``Calm.limits``), and none of a held partition pass (a client that
    forgot the pause hands them out: the full path holds them again)."""
    core, port, view = _grown_core(owned=[2, 3], gates=0)
    view.append(encode_registration(TOPIC, "p", True, 1, 1, {2: (50, {0: 1000}), 3: (50, {0: 1000})})[1])
    core._clock = lambda: now  # type: ignore[method-assign]
    now = 100.0
    core.begin_poll()
    core.settle()
    assert core.calm.quiet and core.calm.limits == {(TOPIC, 2): 50, (TOPIC, 3): 50}
    assert core.calm.held == frozenset()
    assert core.admit_run((TOPIC, 2), 3, lambda i: 48 + i) == 2
    core.settle()
    assert core.calm.quiet and core.calm.limits == {(TOPIC, 3): 50}
    assert core.calm.held == frozenset({(TOPIC, 2)})
    assert core.admit_run((TOPIC, 3), 3, lambda i: 50 + i) == 0
    assert core.held() == {(TOPIC, 2), (TOPIC, 3)} and port.paused == {(TOPIC, 2), (TOPIC, 3)}
    core.begin_poll()
    core.settle()
    assert core.calm.quiet and core.calm.limits == {}
    assert core.calm.held == frozenset({(TOPIC, 2), (TOPIC, 3)})
    # the sources' commits are read again at the next re-evaluation (every commit interval / 2)
    assert core.calm.until == now + OPTS["ordered.commit.interval.ms"] / 2000
    port.commits[(TOPIC, 0)] = 2000
    now += 0.2
    core.begin_poll()
    core.settle()
    assert core.held() == set() and core.calm.quiet and core.calm.held == frozenset()
    assert core.calm.until == float("inf")


def test_a_calm_beside_a_gate_not_reached_yet_stops_its_records_at_the_gate() -> None:
    """A closed gate on an owned partition whose position has not reached
    it: the calm check lets through that partition's records below the
    gate's start only (``Calm.limits``); the full path holds it at the gate.
    Without a limit to check, no calm."""
    core, port, view = _grown_core(owned=[0, 2, 3], gates=0)
    view.append(encode_registration(TOPIC, "p", True, 1, 1, {2: (5, {0: 1000}), 3: (40, {0: 1000})})[1])
    core.keep_in_hand = True
    core.begin_poll()  # takes in the gates
    core.begin_poll()  # reads the group's commit of the source they wait on
    core.settle()
    assert core.calm.quiet and core.calm.limits == {(TOPIC, 2): 5, (TOPIC, 3): 40}
    assert core.calm.until_offsets == {(TOPIC, 0): 1000}
    assert core.admit_run((TOPIC, 2), 3, lambda i: 5 + i) == 0  # its source 0 is ours: held in hand
    assert core.in_hand((TOPIC, 2)) and (TOPIC, 3) not in core.held()
    core.settle()
    assert core.calm.quiet and core.calm.limits == {(TOPIC, 3): 40} and core.calm.held == frozenset({(TOPIC, 2)})
    core.keeper.limit = lambda tp: None  # type: ignore[method-assign]
    core.settle()
    assert not core.calm.quiet


def test_a_calm_beside_a_hold_in_hand_ends_where_its_source_meets_the_gate() -> None:
    """A new group replaying history holds partitions in hand at gates its
    own deliveries of their sources open, often for most of the replay.
    The calm goes on meanwhile (the held partition's records still take the
    full path, as ``Calm.held`` says) and ends where a source's next
    offset reaches the gate's wait (``Calm.until_offsets``), or one commit
    interval on at the latest; then the gate opens, and the calm waits
    until the records in hand are delivered."""
    core, port, view = _grown_core(owned=[0, 2], gates=1)  # the gate on 2 at 0 waits on 0 at 1000
    core.keep_in_hand = True
    now = 50.0
    core._clock = lambda: now  # type: ignore[method-assign]
    core.last_commit = now - 1
    core.freshness.expected.update({(TOPIC, 0): 0, (TOPIC, 2): 0})
    assert core.admit_run((TOPIC, 2), 3, lambda i: i) == 0
    core.kept[(TOPIC, 2)] += [Rec(0), Rec(1), Rec(2)]
    core.begin_poll()
    core.settle()
    calm = core.calm
    assert core.in_hand((TOPIC, 2)) and calm.quiet
    assert calm.held == frozenset({(TOPIC, 2)}) and calm.until_offsets == {(TOPIC, 0): 1000}
    assert calm.until == now + OPTS["ordered.commit.interval.ms"] / 1000
    # a fetch got partition 0 to 1000 (the calm path ends the calm there; so does settle)
    core.freshness.expected[(TOPIC, 0)] = 1000
    core.settle()
    assert not calm.quiet
    port.position[(TOPIC, 0)] = 1000
    core.begin_poll()
    assert core.held() == set() and [r.offset for r in core.kept[(TOPIC, 2)]] == [0, 1, 2]
    core.settle()
    assert not calm.quiet, "the records in hand go first"
    core.handed((TOPIC, 2), 3)
    core.settle()
    assert calm.quiet and calm.held == frozenset() and calm.until_offsets == {}


def test_a_failed_read_of_the_commits_at_explicit_offsets_is_sent_again() -> None:
    """Partitions assigned at explicit offsets whose hand-off waits need the
    group's commit: a read that fails (the coordinator not answering) leaves
    the commit unknown and is sent again after its backoff (a calm meanwhile
    ends then); its answer then settles the waits (the group committed past
    them)."""
    from kafka_ordered.errors import BrokerUnavailableError

    core, port, view = _grown_core(owned=[0], gates=1)  # other members' gates wait on 0 at 1000
    clock = [1.0]
    core._clock = lambda: clock[0]  # type: ignore[method-assign]
    reads: List[float] = []

    def committed(tps: List[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        assert tps == [(TOPIC, 0)]
        reads.append(clock[0])
        if len(reads) == 1:
            raise BrokerUnavailableError("reading committed offsets: no coordinator")
        return {(TOPIC, 0): 1200}

    port.committed = committed  # type: ignore[method-assign]
    core.begin_poll()
    core.settle()
    assert reads == [1.0] and core.calm.quiet and core.calm.until == 2.0, "until the read is due again"
    clock[0] = 3.5
    core.begin_poll()
    core.settle()
    assert reads == [1.0, 3.5], "sent again after its backoff"
    assert core.calm.quiet and core.keeper.waited_on() == frozenset(), "the group committed past the wait"


def test_a_failed_read_of_a_sources_commit_keeps_the_gate_and_is_tried_again() -> None:
    """The group coordinator not answering (a broker failing over) is not an
    error of the poll, as it is not for the raw client's: the gate stays
    closed and its source's commit is read again, after twice, then four
    times max(half a commit interval, 0.5 s), never waiting longer than
    GATE_READ_TIMEOUT_S. Any other failure still raises."""
    from kafka_ordered._gating import GATE_READ_TIMEOUT_S
    from kafka_ordered.errors import BrokerUnavailableError, KafkaOrderedError

    clock = [0.0]
    core, port = _core()
    core._clock = lambda: clock[0]
    core.admit((TOPIC, 1), 5)
    reads: List[Tuple[float, Optional[float]]] = []
    failing: List[BaseException] = [BrokerUnavailableError("reading committed offsets: no coordinator")]
    answer = port.committed

    def committed(tps: List[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        assert tps == [(TOPIC, 0)]
        reads.append((clock[0], timeout))
        if failing:
            raise failing[0]
        return answer(tps)

    def polls_until(t: float) -> None:
        while clock[0] < t:
            core.begin_poll()
            clock[0] = round(clock[0] + 0.05, 2)

    port.committed = committed  # type: ignore[method-assign]
    port.commits[(TOPIC, 0)] = 10
    clock[0] = 1.0
    polls_until(6.0)
    assert reads == [(1.0, GATE_READ_TIMEOUT_S), (2.0, GATE_READ_TIMEOUT_S), (4.0, GATE_READ_TIMEOUT_S)]
    assert (TOPIC, 1) in port.paused and core.held() == {(TOPIC, 1)}
    failing.clear()
    polls_until(6.5)
    assert reads[3:] == [(6.0, GATE_READ_TIMEOUT_S)], "the gate opened at the first read that succeeded"
    assert (TOPIC, 1) not in port.paused and core.held() == set()
    other, port = _core()
    other.admit((TOPIC, 1), 5)
    port.committed = committed  # type: ignore[method-assign]
    failing.append(KafkaOrderedError("reading committed offsets: not authorized"))
    with pytest.raises(KafkaOrderedError, match="not authorized"):
        other.begin_poll()


def test_the_read_that_starts_an_assignment_is_tried_again_only_while_it_may_succeed() -> None:
    from kafka_ordered._gating import START_READ_RETRY_S, StartRead
    from kafka_ordered.errors import BrokerUnavailableError, KafkaOrderedError

    clock = [0.0]
    rule = StartRead(lambda: clock[0])
    delays = []
    while True:
        try:
            delays.append(rule.retry_after(BrokerUnavailableError("no coordinator")))
        except BrokerUnavailableError:
            break
        clock[0] += delays[-1]
    assert delays[:6] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0] and max(delays) == 1.0
    assert START_READ_RETRY_S - 1.0 <= sum(delays) <= START_READ_RETRY_S
    with pytest.raises(KafkaOrderedError, match="not allowed"):
        StartRead(lambda: 0.0).retry_after(KafkaOrderedError("not allowed"))


def test_a_sources_commit_is_read_without_waiting_and_taken_once_it_came() -> None:
    """The read of a source's commit (another member's) is sent and not
    waited for: polls go on with the gate closed, the read is not sent
    again while on its way, and the first poll that finds the answer opens
    the gate."""
    from kafka_ordered._gating import READ_CHECK_S

    clock = [1.0]
    core, port = _core()
    core._clock = lambda: clock[0]
    core.admit((TOPIC, 1), 5)
    port.commits[(TOPIC, 0)] = 10

    class Later:
        def __init__(self, tps: List[TP]) -> None:
            self.tps, self.came = tps, False

        def done(self) -> bool:
            return self.came

        def result(self) -> Dict[TP, int]:
            return port.committed(self.tps)

    sent: List[Later] = []

    def committed_later(tps: List[TP], timeout: float) -> Later:
        sent.append(Later(tps))
        return sent[-1]

    port.committed_later = committed_later  # type: ignore[assignment]
    core.begin_poll()
    assert [r.tps for r in sent] == [[(TOPIC, 0)]] and core.held() == {(TOPIC, 1)}
    assert core._commits_read.due == clock[0] + READ_CHECK_S  # when the calm ends to look again
    clock[0] += 0.05
    core.begin_poll()
    assert len(sent) == 1 and core.held() == {(TOPIC, 1)} and (TOPIC, 1) in port.paused
    sent[0].came = True
    clock[0] += 0.001
    core.begin_poll()
    assert core.held() == set() and (TOPIC, 1) not in port.paused
    assert len(sent) == 1


def test_a_poll_may_block_while_a_catch_up_is_owed_or_a_key_listener_is_set() -> None:
    """What the aiokafka adapter asks before running a poll's work on its
    event loop (else on its worker thread): a catch-up owed by an
    assignment or a seek, or a key listener to call, may block."""
    core, port = _core()
    assert core.poll_may_block(), "assigned at an offset: a catch-up to the end is owed"
    core.begin_poll()
    assert ("sync", None) in core.follower.calls and not core.poll_may_block()
    core.seeked((TOPIC, 1), 3)
    assert core.poll_may_block()
    core.begin_poll()
    assert not core.poll_may_block()

    class Keys(PartitionKeyRebalanceListener):
        def on_partition_key_maybe_revoked(self, partitions: List[Any]) -> None:
            pass

        def on_partition_key_assigned(self, partitions: List[Any]) -> None:
            pass

    core.listener = Keys()
    assert core.poll_may_block()


def _first_read_answered_later(port: FakePort) -> Tuple[Unanswered, List[List[TP]]]:
    """Make ``port``'s reads of the group's commits: the first answers when
    the test says so, later ones at once. Returns that first read and the
    partitions each read asked about."""
    first = Unanswered()
    asked: List[List[TP]] = []

    def later(tps: List[TP], timeout: float) -> Any:
        asked.append(list(tps))
        return first if len(asked) == 1 else Answered(port.committed(tps))

    port.committed_later = later  # type: ignore[assignment,method-assign]
    return first, asked


def _waits_on_0_then_1() -> List[bytes]:
    """A layout log's values: TOPIC grows from 1 to 4 partitions; partition
    2's gate waits on partition 0 at 12, then partition 3's on partition 1
    at 8 (its last two values)."""
    lay = Layout(TOPIC, 1, 1, 1, 4)
    return [
        encode_layout(lay, "create", "a")[1],
        encode_layout(lay.expanded(2), "expand", "a")[1],
        encode_layout(lay.expanded(2).expanded(3), "expand", "a")[1],
        encode_registration(TOPIC, "p", True, 3, 2, {2: (4, {0: 12})})[1],
        encode_layout(lay.expanded(2).expanded(3).expanded(4), "expand", "a")[1],
        encode_registration(TOPIC, "p", True, 4, 3, {3: (6, {1: 8})})[1],
    ]


def test_a_read_of_the_groups_commits_answers_only_for_the_partitions_it_asked_about() -> None:
    """Two sources assigned at explicit offsets one after the other, the read
    of the group's commit of the first still on its way when the second is
    assigned: its answer says nothing of the second, whose commit is read
    on its own. (It used to count as read: the second's crossing of a wait
    the group had passed long ago was announced and committed again.)"""
    history = LayoutHistory()
    for i, value in enumerate(_waits_on_0_then_1()):
        history.apply(i, TOPIC.encode(), value)
    port = FakePort()
    core = GatingCore(port, FakeView(history), FakeOffsets(), GatingOptions(OPTS, False, 5.0, "earliest"))
    core.listener = keys = Announced()
    first, asked = _first_read_answered_later(port)
    port.commits[(TOPIC, 1)] = 20  # an earlier member passed partition 1's wait (8)
    core.assigned_at({(TOPIC, 0): 0})
    core.begin_poll()
    assert asked == [[(TOPIC, 0)]]
    core.assigned_at({(TOPIC, 1): 0})
    port.position[(TOPIC, 1)] = 9  # this member delivers partition 1 past its wait before any answer
    core.begin_poll()
    first.value = {}  # the group had committed nothing on partition 0
    later = port.committed_later
    port.committed_later = lambda tps, timeout: (asked.append(list(tps)), Unanswered())[1]  # type: ignore
    core.begin_poll()
    assert keys.revoked == [], "partition 1's crossing waits for its own read"
    assert asked[1:] == [[(TOPIC, 1)]], "partition 1's commit is read on its own"
    assert core.parts.commit_unknown == {(TOPIC, 1)}
    port.committed_later = later  # type: ignore[assignment,method-assign]
    core._starts_read.drop()
    core._starts_read.due = float("-inf")  # (polls look for an answer every READ_CHECK_S)
    core.begin_poll()
    assert not core.parts.commit_unknown
    core.begin_poll()
    assert keys.revoked == [], "the group passed that wait long ago: nothing to announce"
    assert port.commits[(TOPIC, 1)] == 20, "nor a commit that moves the group's back"


@pytest.mark.parametrize("answered", ["at once", "after the delivery"])
def test_a_wait_that_arrives_after_the_assignment_is_judged_against_the_groups_commit_read_for_it(
        answered: str) -> None:
    """Partitions assigned at explicit offsets while the layout view lacks
    the registration that waits on one of them: the first poll finds no
    wait on that partition, yet its commit is not taken as read. When the
    registration arrives, the group's commit (past the wait long ago) is
    what its crossing is judged against, whether the read answers before
    or after this member delivers past the wait. (It used to count as
    read with no commit: the crossing was announced and committed again,
    moving the group's commit back.)"""
    history = LayoutHistory()
    values = _waits_on_0_then_1()
    for i, value in enumerate(values[:4]):
        history.apply(i, TOPIC.encode(), value)
    port = FakePort()
    core = GatingCore(port, FakeView(history), FakeOffsets(), GatingOptions(OPTS, True, 5.0, "earliest"))
    core.listener = keys = Announced()
    if answered != "at once":
        first, asked = _first_read_answered_later(port)
    port.commits[(TOPIC, 1)] = 20  # an earlier member passed partition 1's (future) wait, 8
    core.assigned_at({(TOPIC, 0): 0, (TOPIC, 1): 0})
    for i, value in enumerate(values[4:], 4):  # the view catches up after the assignment
        history.apply(i, TOPIC.encode(), value)
    core.begin_poll()
    port.position[(TOPIC, 1)] = 9  # this member delivers partition 1 past the wait
    core.begin_poll()
    if answered != "at once":
        assert asked == [[(TOPIC, 0), (TOPIC, 1)]], "one read asks about both partitions"
        first.value = port.committed([(TOPIC, 0), (TOPIC, 1)])
    core._starts_read.due = float("-inf")  # (polls look for an answer every READ_CHECK_S)
    core.begin_poll()
    core.begin_poll()
    assert not core.parts.commit_unknown
    assert keys.revoked == [], "the group passed that wait long ago: nothing to announce"
    assert port.commits[(TOPIC, 1)] == 20, "nor a commit that moves the group's back"


def test_an_answer_read_before_a_partition_was_revoked_and_assigned_again_does_not_count() -> None:
    """A read of the group's commit on its way while its partition is revoked
    and assigned again: the group's commit may have moved meanwhile (this
    member's own commit at the revocation, another member's), so the
    answer is not taken for the new assignment; its commit is read anew."""
    core, port = _in_hand_core()
    first, asked = _first_read_answered_later(port)
    core.begin_poll()
    assert asked == [[(TOPIC, 0), (TOPIC, 1)]]  # (partition 1, assigned at an explicit offset too)
    core.revoked([(TOPIC, 0)])
    port.commits[(TOPIC, 0)] = 10  # committed at the revocation, past the wait
    core.assigned_at({(TOPIC, 0): 0})
    first.value = {}  # read before that commit
    core.listener = keys = Announced()
    port.position[(TOPIC, 0)] = 10
    core._starts_read.due = float("-inf")  # (polls look for an answer every READ_CHECK_S)
    core.begin_poll()
    assert asked[1:] == [[(TOPIC, 0), (TOPIC, 1)]] and not core.parts.commit_unknown
    assert keys.revoked == [], "the group's commit passed the wait: nothing to announce"


def test_a_read_cancelled_before_it_answered_is_sent_again_not_raised_out_of_the_poll() -> None:
    """The read of the group's commits runs as a task of the client's own
    loop (aiokafka) or on a worker: a task cancelled before it answered
    (the loop cancelling its tasks, the client's coordinator reset) is a
    read that did not answer. The poll goes on and the read is sent again;
    it used to raise ``CancelledError`` out of the poll."""
    from concurrent.futures import Future

    from kafka_ordered._ports import Later

    core, port = _in_hand_core()
    asked: List[List[TP]] = []

    def later(tps: List[TP], timeout: float) -> Any:
        asked.append(list(tps))
        if len(asked) == 1:
            cancelled: Future = Future()
            cancelled.cancel()
            return Later(cancelled)
        return Answered(port.committed(tps))

    port.committed_later = later  # type: ignore[assignment,method-assign]
    core.begin_poll()
    assert asked == [[(TOPIC, 0), (TOPIC, 1)]] and core.parts.commit_unknown
    core._starts_read.due = float("-inf")  # the retry's backoff over
    core.begin_poll()
    assert asked[1:] == [[(TOPIC, 0), (TOPIC, 1)]] and not core.parts.commit_unknown
