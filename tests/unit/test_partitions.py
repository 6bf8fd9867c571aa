"""The per-partition state of one member: named transitions and the sets
derived from them (kafka_ordered._partitions)."""

from __future__ import annotations

from kafka_ordered._partitions import Partitions

A, B, C = ("t", 0), ("t", 1), ("t", 2)


def test_own_start_and_disown_keep_the_derived_sets_in_step() -> None:
    parts = Partitions()
    st, new = parts.own(A)
    assert new and st.owned and set(parts.owned) == {A}
    assert parts.own(A) == (st, False)
    parts.start(A, 5, commit=True)
    assert (st.position, st.processed, st.revoke_mark) == (5, 5, 5)
    assert set(parts.init_commit) == {A} and st.init_commit
    assert parts.starts_committed() == [A] and not parts.init_commit and not st.init_commit
    parts.hold(A, 9, now=10.0, wall=1000.0)
    assert set(parts.held) == {A} and (st.held, st.position, st.held_wall) == (9, 9, 1000.0)
    parts.disown(A, keep_as_source=False)
    assert A not in parts and not parts.owned and not parts.held


def test_a_disowned_source_of_a_closed_gate_stays_foreign_until_forgotten() -> None:
    parts = Partitions()
    parts.own(A)
    parts[A].committed = 7
    parts.disown(A, keep_as_source=True)
    assert A in parts.foreign and parts.committed_of(A) == 7 and not parts[A].owned
    assert parts[A].position is None and parts[A].deps == []
    parts.forget_sources(keep={A})
    assert A in parts
    parts.forget_sources(keep=set())
    assert A not in parts and parts.committed_of(A) == -1
    # an unowned source is created foreign, and owning it makes it owned only
    parts.source(B).committed = 3
    assert set(parts.foreign) == {B}
    parts.own(B)
    assert not parts.foreign and set(parts.owned) == {B} and parts[B].committed == 3


def test_release_reports_how_long_the_partition_was_held_once() -> None:
    parts = Partitions()
    parts.own(A)
    parts.hold(A, 4, now=1.0, wall=0.0)
    parts.hold(A, 6, now=2.0, wall=0.0)  # held again further on: the wait counts from the first hold
    assert parts.release(A, now=3.5) == 2.5
    assert not parts.held and parts[A].held is None and parts[A].held_since is None
    assert parts.release(A, now=4.0) is None


def test_the_applications_pause_outlives_ownership_and_goes_with_its_resume() -> None:
    parts = Partitions()
    parts.user_pause(C)  # paused before it was assigned
    assert set(parts.user_paused) == {C} and not parts.owned
    parts.own(C)
    parts.disown(C, keep_as_source=False)
    assert C in parts and parts[C].user_paused  # a rebalance does not forget it
    parts.user_resume(C)
    assert C not in parts and not parts.user_paused


def test_unread_group_commits_are_taken_once() -> None:
    parts = Partitions()
    parts.own(A)
    parts.commits_unknown([A, B])  # B is not owned: ignored
    assert set(parts.commit_unknown) == {A} and parts[A].commit_unknown
    parts.commits_known([A])
    assert not parts.commit_unknown and not parts[A].commit_unknown
    parts.own(B)
    parts.commits_unknown([A, B])
    parts.commits_known([B, C])  # the read asked about B (C: not unread, ignored)
    assert set(parts.commit_unknown) == {A} and parts[A].commit_unknown and not parts[B].commit_unknown


def test_seek_to_a_logical_offset_forgets_the_position() -> None:
    parts = Partitions()
    parts.own(A)
    parts.seek(A, 12)
    assert (parts[A].position, parts[A].processed) == (12, 12)
    parts.seek(A, -2)
    assert parts[A].position is None and parts[A].processed == 12
    parts.refetch(A, 10)
    assert parts[A].position == 10


def test_a_hold_in_hand_is_a_kind_of_hold_every_transition_ends() -> None:
    parts = Partitions()
    for tp in (A, B, C):
        parts.own(tp)
    parts.hold(A, 5, 1.0, 1.0, in_hand=True)
    parts.hold(B, 6, 1.0, 1.0)
    parts.hold(C, 7, 1.0, 1.0, in_hand=True)
    assert parts.held == {A, B, C} and parts.in_hand == {A, C} and parts[A].in_hand and not parts[B].in_hand
    parts.pause_hold(A)  # in hand -> paused: still held
    assert parts.held == {A, B, C} and parts.in_hand == {C} and not parts[A].in_hand
    parts.release(C, 2.0)
    assert C not in parts.held and parts.in_hand == set() and not parts[C].in_hand
    parts.hold(C, 8, 3.0, 3.0, in_hand=True)
    parts.disown(C, keep_as_source=True)
    assert parts.in_hand == set() and not parts[C].in_hand
