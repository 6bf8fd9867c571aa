"""Per-partition state of one consumer-group member (pure, no I/O).

As kafka-python's ``TopicPartitionState`` and ``SubscriptionState``: one
:class:`PartitionState` per partition the member knows, and one
:class:`Partitions` that owns them, performs every transition by name
(own, disown, start, hold, pause a hold, release, seek, user pause and
resume) and keeps
the sets derived from them (owned, held, ...). Nothing else writes those
sets; readers get them read-only.

A state is kept for owned partitions, for the unowned sources of closed
gates on owned partitions (their committed and log-start offsets, called
*foreign*), and for partitions the application paused (the pause outlives
a rebalance); it is dropped otherwise.
"""

from __future__ import annotations

from typing import AbstractSet, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from ._ports import TP

__all__ = ["PartitionState", "Partitions"]


class PartitionState:
    """Everything the gating core knows about one partition. Read it
    freely; change its flags only through :class:`Partitions`."""

    __slots__ = (
        "owned",
        "position",
        "processed",
        "revoke_mark",
        "committed",
        "log_start",
        "held",
        "held_since",
        "held_wall",
        "in_hand",
        "stored",
        "deps",
        "init_commit",
        "commit_unknown",
        "user_paused",
    )

    def __init__(self) -> None:
        self.owned = False
        # Position the client cannot tell (it reports none after a seek until
        # the next record): starts, holds, seeks.
        self.position: Optional[int] = None
        self.processed: Optional[int] = None  # position as of the previous poll
        self.revoke_mark = -1  # processed offset at the last maybe_revoked check
        self.committed = -1  # the group's committed offset, as last known
        self.log_start: Optional[int] = None
        self.held: Optional[int] = None  # first offset held back at a closed gate
        self.held_since: Optional[float] = None  # monotonic
        self.held_wall: Optional[float] = None  # wall clock, for operators
        self.in_hand = False  # held without pausing the client: the adapter keeps its records
        self.stored: Optional[int] = None  # store_offsets()
        # Gates opened inside this member: (start, {source: wait}) whose source
        # commits must be durable before commits of this partition past start.
        self.deps: List[Tuple[int, Dict[TP, int]]] = []
        self.init_commit = False  # a resolved start to commit (no group commit existed)
        self.commit_unknown = False  # assigned at an explicit offset: the group's commit not read yet
        self.user_paused = False  # paused by the application (kept across rebalances)


class Partitions:
    """The states of one member's partitions, their named transitions, and
    the sets derived from them (maintained by the transitions; the views
    returned are read-only by contract)."""

    __slots__ = ("_states", "_owned", "_held", "_in_hand", "_init_commit", "_commit_unknown", "_user_paused",
                 "_foreign")

    def __init__(self) -> None:
        self._states: Dict[TP, PartitionState] = {}
        self._owned: Set[TP] = set()
        self._held: Set[TP] = set()
        self._in_hand: Set[TP] = set()
        self._init_commit: Set[TP] = set()
        self._commit_unknown: Set[TP] = set()
        self._user_paused: Set[TP] = set()
        self._foreign: Set[TP] = set()

    # -- reading

    def get(self, tp: TP) -> Optional[PartitionState]:
        return self._states.get(tp)

    def __getitem__(self, tp: TP) -> PartitionState:
        return self._states[tp]

    def __contains__(self, tp: object) -> bool:
        return tp in self._states

    def __iter__(self) -> Iterator[TP]:
        return iter(self._states)

    def __len__(self) -> int:
        return len(self._states)

    @property
    def owned(self) -> AbstractSet[TP]:
        """Owned partitions."""
        return self._owned

    @property
    def held(self) -> AbstractSet[TP]:
        """Owned partitions stopped at a closed gate."""
        return self._held

    @property
    def in_hand(self) -> AbstractSet[TP]:
        """Held partitions whose client is not paused (their records are kept in hand)."""
        return self._in_hand

    @property
    def init_commit(self) -> AbstractSet[TP]:
        """Owned partitions whose resolved start is still to be committed."""
        return self._init_commit

    @property
    def commit_unknown(self) -> AbstractSet[TP]:
        """Owned partitions assigned at explicit offsets whose group commit is unread."""
        return self._commit_unknown

    @property
    def user_paused(self) -> AbstractSet[TP]:
        """Partitions the application paused."""
        return self._user_paused

    @property
    def foreign(self) -> AbstractSet[TP]:
        """Unowned partitions kept as sources of closed gates."""
        return self._foreign

    def committed_of(self, tp: TP) -> int:
        """The group's commit of ``tp`` as last known (-1: none known)."""
        st = self._states.get(tp)
        return st.committed if st is not None else -1

    # -- ownership

    def own(self, tp: TP) -> Tuple[PartitionState, bool]:
        """Make ``tp`` owned; returns its state and whether it was not owned before."""
        st = self._states.get(tp)
        if st is None:
            st = self._states[tp] = PartitionState()
        self._foreign.discard(tp)
        new = not st.owned
        st.owned = True
        self._owned.add(tp)
        return st, new

    def disown(self, tp: TP, keep_as_source: bool) -> None:
        """``tp`` is no longer owned: its ownership state goes (hold, start to
        commit, stored offset, dependencies); the state stays as a foreign
        source when ``keep_as_source``, or while the application pauses it."""
        st = self._states.get(tp)
        if st is None or not st.owned:
            return
        self._owned.discard(tp)
        self._held.discard(tp)
        self._in_hand.discard(tp)
        self._init_commit.discard(tp)
        self._commit_unknown.discard(tp)
        st.owned = False
        st.position = st.processed = st.held = st.held_since = st.held_wall = st.stored = None
        st.revoke_mark = -1
        st.in_hand = False
        st.deps = []
        st.init_commit = st.commit_unknown = False
        if keep_as_source:
            self._foreign.add(tp)
        elif not st.user_paused:
            del self._states[tp]

    def source(self, tp: TP) -> PartitionState:
        """The state of ``tp`` as a source of a closed gate (a foreign one when not owned)."""
        st = self._states.get(tp)
        if st is None:
            st = self._states[tp] = PartitionState()
        if not st.owned:
            self._foreign.add(tp)
        return st

    def forget_sources(self, keep: AbstractSet[TP]) -> None:
        """Foreign states no longer sources of a closed gate (not in ``keep``) go."""
        for tp in [tp for tp in self._foreign if tp not in keep]:
            self._foreign.discard(tp)
            if not self._states[tp].user_paused:
                del self._states[tp]

    # -- positions

    def start(self, tp: TP, offset: int, commit: bool = False) -> None:
        """Owned ``tp`` starts at ``offset`` (processed as far as gates
        know); ``commit``: a resolved start the group has not committed."""
        st = self._states[tp]
        st.position = st.processed = st.revoke_mark = offset
        if commit:
            st.init_commit = True
            self._init_commit.add(tp)

    def starts_committed(self) -> List[TP]:
        """Clear every start still to commit; returns those partitions."""
        tps = list(self._init_commit)
        for tp in tps:
            self._states[tp].init_commit = False
        self._init_commit.clear()
        return tps

    def commits_unknown(self, tps: Iterable[TP]) -> None:
        """Owned ``tps`` were assigned at explicit offsets: their group commit is unread."""
        for tp in tps:
            st = self._states.get(tp)
            if st is not None and st.owned:
                st.commit_unknown = True
                self._commit_unknown.add(tp)

    def commits_known(self, tps: Iterable[TP]) -> None:
        """The group commits of ``tps`` were read (partitions whose commit
        was not unread are ignored)."""
        for tp in [tp for tp in tps if tp in self._commit_unknown]:
            self._states[tp].commit_unknown = False
            self._commit_unknown.discard(tp)

    def seek(self, tp: TP, offset: int) -> None:
        """The application sought owned ``tp`` (``< 0``: a logical offset,
        whose position the client tells once it resolved it)."""
        st = self._states[tp]
        if offset >= 0:
            st.position = st.processed = offset
        else:
            st.position = None

    def refetch(self, tp: TP, offset: int) -> None:
        """Owned ``tp`` fetches from ``offset`` again (what was fetched from
        there never reached the application)."""
        self._states[tp].position = offset

    # -- holds

    def hold(self, tp: TP, offset: int, now: float, wall: float, in_hand: bool = False) -> None:
        """Owned ``tp`` stops at ``offset`` (the first held-back record);
        ``in_hand``: without pausing the client (its records are kept)."""
        st = self._states[tp]
        st.held = st.position = offset
        if st.held_since is None:
            st.held_since = now
            st.held_wall = wall
        self._held.add(tp)
        st.in_hand = in_hand
        if in_hand:
            self._in_hand.add(tp)
        else:
            self._in_hand.discard(tp)

    def pause_hold(self, tp: TP) -> None:
        """A hold in hand of ``tp`` becomes a pause of the client."""
        self._states[tp].in_hand = False
        self._in_hand.discard(tp)

    def release(self, tp: TP, now: float) -> Optional[float]:
        """Undo :meth:`hold`; returns how long ``tp`` was held (``None``: it was not)."""
        st = self._states[tp]
        self._held.discard(tp)
        self._in_hand.discard(tp)
        st.held = None
        st.in_hand = False
        if st.held_since is None:
            return None
        held_s = now - st.held_since
        st.held_since = st.held_wall = None
        return held_s

    # -- the application's own pauses

    def user_pause(self, tp: TP) -> None:
        st = self._states.get(tp)
        if st is None:
            st = self._states[tp] = PartitionState()
        st.user_paused = True
        self._user_paused.add(tp)

    def user_resume(self, tp: TP) -> None:
        st = self._states.get(tp)
        if st is None:
            return
        st.user_paused = False
        self._user_paused.discard(tp)
        if not st.owned and tp not in self._foreign:
            del self._states[tp]
