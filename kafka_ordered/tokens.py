"""Causal freshness tokens (pure, no I/O): the ``kafka-ordered.reg`` stamp.

A consumer may deliver a record only when its view of the layout log includes
every registration whose gates apply to that record. Causality, not time,
makes sure of it (design section 4, "Freshness"):

* **Stamps** (producer side, :class:`StampBook`, :func:`partitions_to_stamp`).
  After its registration ``R`` is acknowledged at layout-log offset ``L_R``,
  a producer adds the header :data:`HEADER` = ``<layout-log topic id>:<L_R>``
  to every keyed record it sends to a partition ``R`` gates, until one
  stamped record on that partition is acknowledged (and, in a transaction,
  committed). Stamps accumulate across registrations; every record carries
  the producer's newest ``L_R`` of the topic; a restarting stable id stamps
  the partitions its earlier registrations gated.
* **Catch-up** (consumer side, :func:`catch_up`). Before delivering a record,
  or anything after it in its partition, a consumer whose view does not
  include ``L_R`` reads the log past ``L_R``; after an assignment, a seek or
  an offset reset, or whenever a fetched offset is not the next expected one,
  it reads the log to its end (taken after the records were fetched).
  A stamp naming another log (a mirrored topic, a recreated log) is ignored.

The header's value is ASCII: the log's topic id (as the client prints it),
``:``, the decimal offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

__all__ = [
    "HEADER",
    "HEADER_BYTES",
    "encode",
    "decode",
    "stamp_of",
    "stamp_prefix",
    "has_header",
    "strip",
    "take_stamp",
    "with_stamp",
    "StampBook",
    "partitions_to_stamp",
    "Run",
    "CatchUp",
    "NO_CATCH_UP",
    "catch_up",
]

#: The record header that carries a stamp.
HEADER = "kafka-ordered.reg"
HEADER_BYTES = HEADER.encode("ascii")

TP = Tuple[str, int]


def encode(log_id: str, offset: int) -> bytes:
    """The header value for a registration at ``offset`` of the log ``log_id``."""
    if not log_id or ":" in log_id:
        raise ValueError(f"layout-log id {log_id!r} must be non-empty and contain no ':'")
    if offset < 0:
        raise ValueError(f"layout-log offset must be >= 0, got {offset}")
    return f"{log_id}:{int(offset)}".encode("ascii")


def decode(value: Any) -> Optional[Tuple[str, int]]:
    """``(log id, offset)`` of a header value, or ``None`` when it is not a stamp."""
    if isinstance(value, str):
        value = value.encode("utf-8", "replace")
    if not isinstance(value, (bytes, bytearray, memoryview)):
        return None
    log_id, sep, off = bytes(value).rpartition(b":")
    if not sep or not log_id or not off.isdigit():
        return None
    try:
        return log_id.decode("ascii"), int(off)
    except UnicodeDecodeError:
        return None


def _pairs(headers: Any) -> Iterable[Tuple[Any, Any]]:
    if not headers:
        return ()
    if headers.__class__ is list or headers.__class__ is tuple:  # the clients' own shapes, before a slow ABC check
        return headers  # type: ignore[no-any-return]
    if isinstance(headers, Mapping):
        return headers.items()
    return headers  # type: ignore[no-any-return]


def _is_ours(name: Any) -> bool:
    return name == HEADER or name == HEADER_BYTES


def _offset_in(value: Any, log_id: str, prefix: Optional[bytes]) -> Optional[int]:
    """The layout-log offset of stamp header ``value`` when it is of the log
    ``log_id`` (``prefix``: ``b"<log_id>:"``, the common shape read without
    decoding), else ``None``."""
    if prefix is not None and value.__class__ is bytes and value.startswith(prefix) and value[len(prefix):].isdigit():
        return int(value[len(prefix):])
    got = decode(value)
    return got[1] if got is not None and got[0] == log_id else None


def stamp_prefix(log_id: str) -> Optional[bytes]:
    """``b"<log_id>:"``, how every stamp of the log ``log_id`` begins
    (``None`` without a log id): the fast paths read stamps by it without
    decoding."""
    return f"{log_id}:".encode("ascii", "replace") if log_id else None


def stamp_of(headers: Any, log_id: str) -> Optional[int]:
    """The newest ``L_R`` stamped on a record for the log ``log_id``, or ``None``
    (no stamp, a malformed one, or one from another log)."""
    best: Optional[int] = None
    prefix = stamp_prefix(log_id)
    for name, value in _pairs(headers):
        if _is_ours(name):
            off = _offset_in(value, log_id, prefix)
            if off is not None and (best is None or off > best):
                best = off
    return best


def has_header(headers: Any) -> bool:
    """Whether any ``kafka-ordered.reg`` header is present (of any log)."""
    return any(_is_ours(name) for name, _ in _pairs(headers))


def strip(headers: Any) -> Optional[List[Tuple[Any, Any]]]:
    """``headers`` as a list without the stamp; ``None`` when nothing is left
    (as a record without headers shows them)."""
    left = [(k, v) for k, v in _pairs(headers) if not _is_ours(k)]
    return left or None


def take_stamp(headers: Any, log_id: str) -> Optional[Tuple[Optional[int], Optional[List[Any]]]]:
    """What a consumer does with a fetched record's headers, in one pass:
    ``None`` when no ``kafka-ordered.reg`` header is present (the headers
    stay as they are), else ``(stamp, left)``: the newest stamp of the log
    ``log_id`` (``None``: only malformed ones or another log's) and the
    headers without any ``kafka-ordered.reg`` header (``None`` when nothing
    is left, as a record without headers shows them). The one place where
    adapters read stamps."""
    pairs = headers if headers.__class__ is list or headers.__class__ is tuple else list(_pairs(headers))
    found = False
    best: Optional[int] = None
    left: List[Any] = []
    prefix = stamp_prefix(log_id)
    for pair in pairs:
        name = pair[0]
        if name != HEADER and name != HEADER_BYTES:
            left.append(pair)
            continue
        found = True
        off = _offset_in(pair[1], log_id, prefix)
        if off is not None and (best is None or off > best):
            best = off
    if not found:
        return None
    return best, left or None


def with_stamp(headers: Any, value: bytes) -> List[Tuple[str, Any]]:
    """``headers`` (a list of pairs, a dict or ``None``) as a list that ends
    with the stamp ``value`` (an application header of the same name is replaced)."""
    out: List[Tuple[str, Any]] = [(k, v) for k, v in _pairs(headers) if not _is_ours(k)]
    out.append((HEADER, value))
    return out


# -- producer side ------------------------------------------------------------


def partitions_to_stamp(gated: Iterable[int], offset: Optional[int], first_switch: bool, stable: bool,
                        own_gated: Iterable[int], own_newest: Optional[int]) -> Tuple[FrozenSet[int], Optional[int]]:
    """Which partitions a switch adds to the producer's stamps, and the offset
    that adds them.

    ``gated``/``offset``: the partitions the registration just appended gates
    and its layout-log offset (``None``: nothing appended). ``first_switch``:
    the producer instance's first switch for the topic. A stable id's first
    switch also stamps every partition its earlier registrations gated
    (``own_gated``, newest registration at ``own_newest``): a previous
    incarnation may have died before one of its stamped records was
    acknowledged there, and the new one may write there without registering
    anything new.
    """
    parts: Set[int] = set()
    newest: Optional[int] = None
    if offset is not None:
        parts |= set(gated)
        newest = offset if parts else None
    if first_switch and stable and own_newest is not None:
        own = set(own_gated)
        if own:
            parts |= own
            newest = own_newest if newest is None else max(newest, own_newest)
    if not parts:
        return frozenset(), None
    return frozenset(parts), newest


class StampBook:
    """The partitions one producer must still stamp (pure, not thread-safe).

    :meth:`add` makes partitions pending with the registration offset that
    added them; a partition stays pending until :meth:`acked` reports a
    record on it stamped with at least that offset (inside a transaction the
    acknowledgement counts only at :meth:`committed`; :meth:`aborted` drops
    it). Every stamp carries the newest offset added for the topic.
    """

    __slots__ = ("_pending", "_newest", "_tentative")

    def __init__(self) -> None:
        self._pending: Dict[TP, int] = {}
        self._newest: Dict[str, int] = {}
        self._tentative: Dict[TP, int] = {}

    def add(self, topic: str, partitions: Iterable[int], offset: int) -> None:
        """Stamp ``partitions`` of ``topic`` from now on with (at least) the
        registration at layout-log ``offset``; stamps only grow."""
        for p in partitions:
            tp = (topic, int(p))
            if self._pending.get(tp, -1) < offset:
                self._pending[tp] = offset
        if self._newest.get(topic, -1) < offset:
            self._newest[topic] = offset

    def stamp(self, topic: str, partition: int) -> Optional[int]:
        """The offset to stamp a keyed record for ``topic``/``partition`` with, or ``None``."""
        if (topic, partition) in self._pending:
            return self._newest[topic]
        return None

    def pending(self, topic: str) -> FrozenSet[int]:
        """Partitions of ``topic`` still to stamp."""
        return frozenset(p for t, p in self._pending if t == topic)

    def acked(self, topic: str, partition: int, stamped: int, in_transaction: bool = False) -> bool:
        """A record on ``partition`` stamped with ``stamped`` was acknowledged;
        returns whether the partition left the pending set."""
        tp = (topic, partition)
        added = self._pending.get(tp)
        if added is None or stamped < added:
            return False
        if in_transaction:
            if self._tentative.get(tp, -1) < stamped:
                self._tentative[tp] = stamped
            return False
        del self._pending[tp]
        return True

    def committed(self) -> Set[str]:
        """The transaction whose stamped records were acknowledged committed;
        returns the topics whose pending set shrank."""
        changed: Set[str] = set()
        for tp, stamped in self._tentative.items():
            if tp in self._pending and stamped >= self._pending[tp]:
                del self._pending[tp]
                changed.add(tp[0])
        self._tentative.clear()
        return changed

    def aborted(self) -> None:
        """The transaction aborted: its acknowledgements do not count."""
        self._tentative.clear()


# -- consumer side ------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """What one fetch returned for one managed partition: the first and last
    offsets, how many records, and the newest stamp of this layout log among
    them (``None``: none)."""

    tp: TP
    first: int
    last: int
    count: int
    stamp: Optional[int] = None


@dataclass(frozen=True)
class CatchUp:
    """What a consumer must read of the layout log before delivering a fetch:
    ``to_end`` (to the log's end, read now), else past ``past`` (so that the
    view includes that offset), else nothing."""

    to_end: bool = False
    past: Optional[int] = None

    @property
    def needed(self) -> bool:
        """Whether the view must be caught up before delivery."""
        return self.to_end or self.past is not None


NO_CATCH_UP = CatchUp()


def catch_up(view_next: int, runs: Sequence[Run], expected: Mapping[TP, Optional[int]]) -> CatchUp:
    """The catch-up a fetch needs before any of it is delivered.

    ``view_next``: the next layout-log offset the consumer's view will apply
    (it includes every offset below). ``expected[tp]``: the next offset the
    consumer expects to fetch from ``tp``, ``None`` (or absent) after an
    assignment, a seek or an offset reset. A run that starts elsewhere or has
    a hole (a stamped record may be gone: retention, compaction, aborted
    transactions) needs the log's end; a stamp at or beyond ``view_next``
    needs the log past it.
    """
    past: Optional[int] = None
    for r in runs:
        exp = expected.get(r.tp)
        if exp is None or r.first != exp or r.last - r.first + 1 != r.count:
            return CatchUp(to_end=True)
        if r.stamp is not None and r.stamp >= view_next and (past is None or r.stamp > past):
            past = r.stamp
    return CatchUp(past=past) if past is not None else NO_CATCH_UP
