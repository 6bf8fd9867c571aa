"""Causal freshness of a consumer's layout view (the I/O side of
:mod:`kafka_ordered.tokens`; no client import).

:class:`CausalFreshness` keeps, for every partition a member owns, the next
offset it expects to fetch (none after an assignment, a seek or an offset
reset), and before any record of a fetch is delivered performs the catch-up
:func:`kafka_ordered.tokens.catch_up` asks for: the layout log to its end
(:meth:`LayoutView.sync`) or past a stamp's offset
(:meth:`LayoutView.catch_up_past`). Both requests are sent after the records
were fetched.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, FrozenSet, List, Literal, Mapping, Optional, Sequence, Tuple

from ._ports import TP, LayoutView
from .tokens import Run, catch_up

__all__ = ["CausalFreshness", "SkippableStep"]

#: A step of the causal-token rule the simulation's controls may leave out.
SkippableStep = Literal["jump", "gap", "stamp"]


class CausalFreshness:
    """Expected fetch offsets and catch-ups of one group member."""

    __slots__ = ("follower", "expected", "sought", "syncs", "catch_ups", "skip")

    def __init__(self, follower: LayoutView) -> None:
        self.follower = follower
        self.expected: Dict[TP, int] = {}
        #: Partitions sought to a known offset since the last catch-up to the
        #: end: the next one covers them all (see :meth:`jumped`).
        self.sought: Dict[TP, int] = {}
        #: Catch-ups to the log's end (first fetch after a jump) and past a stamp.
        self.syncs = 0
        self.catch_ups = 0
        #: Test-only: steps of the rule to leave out ("jump": the first fetch
        #: after an assignment or seek, "gap": a fetch that does not follow on,
        #: "stamp": a stamp the view lacks). The simulation's controls show
        #: what each step prevents; never set by the product.
        self.skip: FrozenSet[SkippableStep] = frozenset()

    @property
    def log_id(self) -> str:
        return self.follower.log_id

    def jumped(self, tp: TP, at: Optional[int] = None) -> None:
        """``tp`` was assigned, sought or reset: the next fetch of it needs a
        catch-up to the end. ``at``: the offset it was sought to, when known;
        then any catch-up to the end made after this call covers it, as
        :meth:`cover` does (the first of several partitions sought at once
        catches up for all of them)."""
        self.expected.pop(tp, None)
        if at is None:
            self.sought.pop(tp, None)
        else:
            self.sought[tp] = at

    def cover(self, positions: Mapping[TP, int]) -> None:
        """The view was just caught up to the log's end after these positions
        were fixed (offsets, not ones the client resolves later): the first
        fetch of each partition needs no catch-up when it starts there, and
        one as after a gap when it does not (see docs/protocol.md, "one
        catch-up per assignment")."""
        self.expected.update(positions)

    def moved(self, tp: TP, offset: int) -> None:
        """The core sought ``tp`` back to ``offset``, to records it has already
        checked (a partition still owed a catch-up keeps owing it)."""
        if tp in self.expected:
            self.expected[tp] = offset
        elif self.sought.get(tp, offset) != offset:
            del self.sought[tp]  # (not where it was sought to: owed a catch-up of its own)

    def forget(self, tp: TP) -> None:
        self.expected.pop(tp, None)
        self.sought.pop(tp, None)

    def pay_sought(self) -> None:
        """Make now the catch-up to the end owed by partitions sought (or
        assigned) to known offsets: it covers all of them (their positions
        were fixed before this call), so their first fetches need none. Made
        before those fetches, it overlaps the client's own fetching. Raises
        what the catch-up raised (it is then still owed)."""
        fatal = self.follower.fatal
        if fatal is not None:
            raise fatal
        if self.sought and "jump" not in self.skip:
            self._to_end()

    def _to_end(self) -> None:
        sought, self.sought = self.sought, {}
        try:
            self.follower.sync()
        except BaseException:
            self.sought.update(sought)
            raise
        self.syncs += 1
        self.expected.update(sought)  # positions fixed before the catch-up

    def past(self, stamp: int) -> None:
        """Make the view include layout-log offset ``stamp`` (a stamp found
        outside the runs :meth:`admit` checks). Raises what the catch-up raised."""
        fatal = self.follower.fatal
        if fatal is not None:
            raise fatal
        if stamp >= self.follower.history.next_offset:
            self.follower.catch_up_past(stamp)
            self.catch_ups += 1

    def admit(self, runs: Sequence[Run]) -> None:
        """Catch the view up as the fetch described by ``runs`` requires,
        then expect the offsets after it. Raises what the catch-up raised
        (nothing of the fetch may then be delivered)."""
        fatal = self.follower.fatal
        if fatal is not None:
            raise fatal
        expected: Mapping[TP, int] = self.expected
        if self.skip:
            runs, expected = self._without_skipped(runs, expected)
        need = catch_up(self.follower.history.next_offset, runs, expected)
        try:
            if need.to_end:
                self._to_end()
            elif need.past is not None:
                self.follower.catch_up_past(need.past)
                self.catch_ups += 1
        except BaseException:
            for r in runs:  # fetched again later: the catch-up is still owed
                self.expected.pop(r.tp, None)
            raise
        for r in runs:
            self.expected[r.tp] = r.last + 1

    def _without_skipped(self, runs: Sequence[Run], given: Mapping[TP, int]) -> Tuple[Sequence[Run], Mapping[TP, int]]:
        """``runs`` and the expected offsets as :func:`catch_up` sees them
        with the steps in :attr:`skip` masked out (test-only)."""
        expected = dict(given)
        out: List[Run] = []
        for r in runs:
            exp = expected.get(r.tp)
            if exp is None and "jump" in self.skip:
                expected[r.tp] = r.first
            elif exp is not None and "gap" in self.skip:
                expected[r.tp] = r.first
                r = replace(r, count=r.last - r.first + 1)
            if "stamp" in self.skip:
                r = replace(r, stamp=None)
            out.append(r)
        return out, expected
