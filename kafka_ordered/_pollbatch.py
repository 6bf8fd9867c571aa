"""The records one ``poll()`` fetched in a batch and has not returned yet.

confluent-kafka's ``poll()`` crosses into librdkafka once per record, which
costs more per record than everything the gates do; ``consume(n)`` crosses
once per ``n``. ``OrderedConsumer.poll`` therefore fetches (and gates) up to
:attr:`PollBatch.size` records with ``consume(n, 0)`` while the client has
them ready, returns the first and keeps the rest here, in fetch order, for
the next calls. The records were judged at their fetch exactly as one
``consume(n)`` call's are; what stays to keep is what a raw client would
show between two ``poll()`` calls:

- the position (and so every commit) of a partition with records here is
  the first of them (:meth:`PollBatch.first_offsets`): none is committed
  before it was returned;
- ``pause``, ``seek``, ``assign``, ``unassign``, a revocation or a loss take
  the records of those partitions out (:meth:`PollBatch.drop`; a pause gives
  them back to the client, which fetches them again on ``resume``);
- the batch is sized to what the application takes in about
  :data:`POLL_BATCH_SECONDS` at its recent pace (a slow application polls
  one record at a time, as with the raw client), and records kept longer
  than :data:`POLL_BATCH_HOLD_SECONDS` make the next ``poll()`` call into
  the client again (its ``max.poll.interval.ms`` and rebalance callbacks
  see a polling application).

Pure bookkeeping: no I/O; the record's partition and offset are read with
the functions given (so that any client's records fit).
"""

from __future__ import annotations

import time
from typing import Callable, Collection, Dict, Generic, List, Optional, Tuple, TypeVar

__all__ = ["PollBatch", "POLL_BATCH_RECORDS", "POLL_BATCH_SECONDS", "POLL_BATCH_HOLD_SECONDS"]

R = TypeVar("R")
TP = Tuple[str, int]

#: The default largest batch (``ordered.poll.batch.records``; 1: no batching).
POLL_BATCH_RECORDS = 500
#: A batch holds about what the application took in this long, at its last batch's pace.
POLL_BATCH_SECONDS = 0.01
#: Records held longer than this send the next ``poll()`` to the client first.
POLL_BATCH_HOLD_SECONDS = 0.1


class PollBatch(Generic[R]):
    """Fetched, gated records not yet returned by ``poll()`` (see the module
    docstring). ``records`` holds them in reverse order (the next one last),
    ``until`` is when the next ``poll()`` must call into the client again."""

    __slots__ = ("records", "until", "limit", "_tp", "_offset", "_clock", "_began", "_last")

    def __init__(self, tp: Callable[[R], TP], offset: Callable[[R], int], limit: int = POLL_BATCH_RECORDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``limit``: the largest batch (>= 1). Raises ``ValueError`` below 1."""
        if limit < 1:
            raise ValueError("a poll batch holds at least 1 record")
        self.records: List[R] = []
        self.until = float("-inf")
        self.limit = limit
        self._tp = tp
        self._offset = offset
        self._clock = clock
        self._began = float("-inf")
        self._last = 0

    def size(self) -> int:
        """How many records the next fetch may take: about what the
        application took in :data:`POLL_BATCH_SECONDS` at the pace it
        returned the last batch (1 at first and after a pause in polling)."""
        if self.limit == 1 or self._last == 0:
            return 1
        spent = self._clock() - self._began
        if spent <= 0:
            return self.limit
        return max(1, min(self.limit, int(self._last * POLL_BATCH_SECONDS / spent)))

    def fill(self, got: List[R]) -> Optional[R]:
        """Keep a fetch (in fetch order; nothing may be kept already) and
        return its first record (``None`` for an empty fetch)."""
        self._began = now = self._clock()
        self._last = len(got)
        if not got:
            return None
        if len(got) > 1:
            got.reverse()
            self.records = got
            self.until = now + POLL_BATCH_HOLD_SECONDS
            return got.pop()
        return got[0]

    def extend(self, got: List[R]) -> None:
        """Keep a later fetch after the records kept (the client fetched it after them)."""
        self.until = self._clock() + POLL_BATCH_HOLD_SECONDS
        if got:
            self.records[:0] = got[::-1]

    def take(self, num: int) -> List[R]:
        """Up to ``num`` records, next first (for a ``consume()``)."""
        recs = self.records
        if num <= 0:
            return []
        out = recs[:-num - 1:-1] if num < len(recs) else recs[::-1]
        del recs[len(recs) - len(out):]
        return out

    def first_offsets(self) -> Dict[TP, int]:
        """The offset of each partition's next record kept: its position."""
        out: Dict[TP, int] = {}
        for r in self.records:  # next last: the last seen per partition is its first
            out[self._tp(r)] = self._offset(r)
        return out

    def drop(self, tps: Optional[Collection[TP]] = None) -> Dict[TP, int]:
        """Take out the records of ``tps`` (``None``: all); returns the first
        offset taken of each partition."""
        if not self.records:
            return {}
        if tps is None:
            everything = self.first_offsets()
            self.records = []
            return everything
        if not tps:
            return {}
        keep: List[R] = []
        first: Dict[TP, int] = {}
        for r in self.records:
            tp = self._tp(r)
            if tp in tps:
                first[tp] = self._offset(r)
            else:
                keep.append(r)
        self.records = keep
        return first

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        return f"PollBatch({len(self.records)} records, limit={self.limit})"
