"""Move tombstones for compacted topics (pure, no I/O; KIP-253 §9).

When a key moves to another partition, its last value before the move stays
in the partition it left, and compaction can never remove it: no later
record with that key is written there. On a managed topic whose
``cleanup.policy`` includes ``compact``, the producer therefore writes, once
the first record of a key under a new layout is acknowledged (inside a
transaction: right after it), a tombstone (the key, a ``None`` value) into
every other partition the key mapped to under the topic's earlier layouts
(:class:`MoveTombstones`). Compaction then removes the stale copy, and later
the tombstone (``delete.retention.ms``). Sent before the acknowledgement, a
tombstone could be written while the new record fails, and compaction would
delete the key's last written value.

Each move tombstone carries two headers:

- :data:`HEADER` (``kafka-ordered.moved``) = the epoch of the layout the key
  moved to. Ordered consumers and the Spark source never deliver such a
  record: it says "this key lives elsewhere now", not "delete this key". Its
  offset still counts as processed (it is consumed, not delivered).
- the ``kafka-ordered.reg`` stamp of the producer's registration, so that the
  consumers' per-record paths (which look for that header only) hand the
  record to the path that hides it.

Why hiding, not ordering: a gate on the key's new partition waits for the
old partition up to the offsets read at registration; the tombstone is
written later (a key is tombstoned only once its new value exists, else a
key that is never written again would be deleted), so no gate orders it
before the new value, and a consumer that applied it could delete the new
value. The stale value itself lies below the gate's wait and is delivered
before the new one. Plain consumers do see the tombstones (see
docs/protocol.md).

Memory is bounded: per topic, the set of keys already tombstoned under the
current layout holds at most ``capacity`` keys and is emptied when full (and
at every layout switch). A key forgotten that way gets its tombstones again
at its next write: a duplicate tombstone in a partition the key no longer
maps to is harmless (it lies below any record written there after the key
moves back, because moving back takes a registration, which flushes first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, List, Optional, Sequence, Set, Tuple

from .layout import Layout

if TYPE_CHECKING:
    from .history import LayoutHistory

__all__ = ["HEADER", "HEADER_BYTES", "DEFAULT_CAPACITY", "MoveTombstones", "is_move_tombstone", "compacting"]

HEADER = "kafka-ordered.moved"
HEADER_BYTES = HEADER.encode("ascii")
#: Keys remembered per topic before the set is emptied.
DEFAULT_CAPACITY = 100_000


def compacting(cleanup_policy: Optional[str]) -> bool:
    """Whether a topic's ``cleanup.policy`` value includes ``compact``."""
    return cleanup_policy is not None and "compact" in {p.strip() for p in cleanup_policy.split(",")}


def is_move_tombstone(value: object, headers: object) -> bool:
    """Whether a fetched record (``value``, ``headers`` as the client shows
    them: a list of pairs, a dict or ``None``) is a move tombstone."""
    if value is not None or not headers:
        return False
    names = headers.keys() if isinstance(headers, dict) else (h[0] for h in headers)  # type: ignore[attr-defined]
    return any(n == HEADER or n == HEADER_BYTES for n in names)


class MoveTombstones:
    """Which partitions each key written under ``current`` must be tombstoned in.

    ``earlier``: the topic's earlier layouts. A key whose first record under
    ``current`` goes to ``p`` gets a tombstone in every partition it mapped to
    under any of them, except ``p``; once per key while it is remembered (see
    the module docstring for the bound)."""

    __slots__ = ("epoch", "partitions", "stamp_offset", "_fns", "_done", "capacity")

    def __init__(self, earlier: Sequence[Layout], current: Layout, capacity: int = DEFAULT_CAPACITY,
                 stamp_offset: int = -1) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.epoch = current.epoch
        self.partitions = current.partitions
        #: The layout log offset of ``current``'s change: the stamp each tombstone carries.
        self.stamp_offset = stamp_offset
        self.capacity = capacity
        seen: Set[Tuple[int, int, str, str]] = {_mapping(current)}
        fns: List[Callable[[object], int]] = []
        for lay in earlier:
            m = _mapping(lay)
            if m not in seen:
                seen.add(m)
                fns.append(lay._fn)
        self._fns = fns
        self._done: Set[bytes] = set()

    @classmethod
    def after_switch(cls, history: "LayoutHistory", topic: str, target: Layout,
                     capacity: int = DEFAULT_CAPACITY) -> Optional["MoveTombstones"]:
        """The tombstones due once a producer switched ``topic`` to ``target``
        (a layout ``history`` knows): against every earlier layout of the
        topic, stamped with ``target``'s change offset. ``None`` when no
        earlier layout maps a key elsewhere."""
        changes = history.changes(topic)
        earlier = [c.layout for c in changes if c.layout.epoch < target.epoch]
        at = next((c.offset for c in reversed(changes) if c.layout.epoch == target.epoch), changes[-1].offset)
        moves = cls(earlier, target, capacity, at)
        return moves if moves.active else None

    @property
    def active(self) -> bool:
        """Whether any key can have moved (some earlier layout maps keys differently)."""
        return bool(self._fns)

    def __len__(self) -> int:
        """Keys remembered now."""
        return len(self._done)

    def forget(self) -> None:
        """Forget every key (their tombstones were aborted with a transaction:
        the next write of each key sends them again)."""
        self._done.clear()

    def retry(self, key: bytes) -> None:
        """``key``'s record that made its tombstones due was not written: they
        are due again at its next record."""
        self._done.discard(key)

    def due(self, key: bytes, partition: int) -> List[int]:
        """The partitions to tombstone ``key`` in, now that a record with it goes
        to ``partition`` (empty when already done or nothing moved)."""
        done = self._done
        if key in done or not self._fns:
            return []
        if len(done) >= self.capacity:
            done.clear()
        done.add(key)
        return sorted({fn(key) for fn in self._fns} - {partition})


def _mapping(layout: Layout) -> Tuple[int, int, str, str]:
    return (layout.initial_partitions, layout.partitions, layout.hash, layout.strategy)
