"""What the protocol cores need from a Kafka client (no client import here).

The gating consumer core (:mod:`kafka_ordered._gating`) and the registering
producer core (:mod:`kafka_ordered._registering`) are written against these
small :class:`typing.Protocol` ports. Each client adapter (confluent-kafka in
:mod:`kafka_ordered.confluent`, kafka-python in
:mod:`kafka_ordered.kafka_python`) implements them over its own client, and
the simulation in :mod:`kafka_ordered.testing` implements them over fakes, so
every caller runs the same shipped rules.

Partitions are ``(topic, partition)`` tuples throughout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Generic, Iterable, List, Optional, Protocol, Tuple, TypeVar

from .errors import BrokerUnavailableError

if TYPE_CHECKING:
    from concurrent.futures import Future

    from .history import LayoutHistory
    from .metrics import LayoutViewMetrics

__all__ = ["TP", "Stamp", "Pending", "Answered", "Later", "ConsumerPort", "ProducerPort", "OffsetsPort", "LayoutView",
           "LayoutWriter", "LogResources"]

TP = Tuple[str, int]
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Pending(Protocol[T_co]):
    """An answer on its way (a request sent, not waited for)."""

    def done(self) -> bool:
        """Whether the answer came (never blocks)."""

    def result(self) -> T_co:
        """The answer, once :meth:`done`; raises
        :class:`~kafka_ordered.errors.KafkaOrderedError` (retriable when the
        cluster may answer later) when the request failed."""


class Answered(Generic[T]):
    """A :class:`Pending` answered already (for ports whose reads do not wait)."""

    __slots__ = ("_value",)

    def __init__(self, value: T) -> None:
        self._value = value

    def done(self) -> bool:
        return True

    def result(self) -> T:
        return self._value


class Later(Generic[T]):
    """A :class:`Pending` over a ``concurrent.futures.Future`` whose work
    raises :class:`~kafka_ordered.errors.KafkaOrderedError` (passed on as
    is). Work cancelled before it answered (aiokafka's read of the group's
    commits, a task of the client's loop, cancelled) raises a retriable
    :class:`~kafka_ordered.errors.BrokerUnavailableError`: it is a read that
    did not answer, to be sent again, never a cancellation of the caller."""

    __slots__ = ("_future",)

    def __init__(self, future: "Future[T]") -> None:
        self._future = future

    def done(self) -> bool:
        return self._future.done()

    def result(self) -> T:
        if self._future.cancelled():
            raise BrokerUnavailableError("the read was cancelled before it answered")
        return self._future.result()


@dataclass(frozen=True)
class Stamp:
    """The ``kafka-ordered.reg`` stamp of one record: the header ``value``,
    and ``acked`` to call (from any thread) once the client reports the
    record acknowledged without error."""

    value: bytes
    acked: Callable[[], None]


class ConsumerPort(Protocol):
    """The consumer operations the gating core drives.

    Implementations must not call back into the core. ``positions`` must not
    block on the network (it also runs inside rebalance callbacks).
    """

    def pause(self, tps: List[TP]) -> None:
        """Stop fetching ``tps`` (they stay assigned)."""

    def resume(self, tps: List[TP]) -> None:
        """Fetch ``tps`` again. Partitions no longer assigned are ignored."""

    def seek(self, tp: TP, offset: int) -> None:
        """Make ``offset`` the next record fetched from ``tp``."""

    def committed_later(self, tps: List[TP], timeout: float) -> Pending[Dict[TP, int]]:
        """The group's committed offsets (partitions without one left out),
        without waiting for the answer: never blocks on the network (the
        gating core reads other members' commits this way between fetches);
        the request gives up after ``timeout`` seconds. The answer raises a
        :class:`~kafka_ordered.errors.KafkaOrderedError` (retriable when the
        cluster may answer later), also when the commit of one partition
        could not be given: a partition left out is one without a commit
        (waits above none are this member's to announce and commit)."""

    def commit(self, offsets: Dict[TP, int], asynchronous: bool) -> Any:
        """Commit ``offsets`` for the group; returns the client's own result."""

    def positions(self, tps: List[TP]) -> Dict[TP, int]:
        """The client's fetch positions; partitions without one are left out."""

    def partitions(self, tps: List[TP]) -> List[Any]:
        """``tps`` as the client's own partition objects (for listeners)."""

    def learn_partitions(self, topic: str) -> None:
        """Refresh the client's metadata of the subscribed ``topic`` now: an
        expansion created partitions, and the group should rebalance onto
        them without waiting for the periodic refresh (five minutes by
        default). A failure is not an error (the periodic refresh remains)."""


class ProducerPort(Protocol):
    """The producer operations the registering core drives."""

    def send(self, topic: str, partition: Optional[int], item: Any, stamp: Optional[Stamp] = None,
             on_done: Optional[Callable[[bool], None]] = None) -> Any:
        """Enqueue one record (``item`` is whatever the adapter buffered) with
        an explicit partition (``None``: the client chooses); with ``stamp``,
        add its header (replacing one of the same name) and call its
        ``acked`` when the record is acknowledged; call ``on_done(True)`` then,
        or ``on_done(False)`` when its delivery failed (from any thread).
        Raises what the client raises when it refuses the record locally."""

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for records in flight; returns how
        many are still in flight."""

    def learn_partitions(self, topic: str, count: int, timeout: float) -> None:
        """Make the client's metadata know at least ``count`` partitions of
        ``topic`` (refreshing it): after an expansion that created partitions
        the client refuses records to the ones it has not seen yet. Raises
        :class:`~kafka_ordered.errors.BrokerUnavailableError` when it does not
        within ``timeout`` seconds."""

    def failed(self, item: Any, error: BaseException) -> None:
        """The client refused a buffered record: report ``error`` for it alone
        (delivery callback or future), never to the records around it."""

    def send_tombstone(self, topic: str, partition: int, key: bytes, headers: List[Tuple[str, bytes]]) -> None:
        """Enqueue a tombstone (``key``, no value, ``headers``) for ``partition``,
        in the transaction if one is open. A failure to deliver it is logged:
        it costs a stale copy after compaction, never order."""


class OffsetsPort(Protocol):
    """True log-end and log-start offsets of data partitions."""

    def end_offsets(self, tps: Iterable[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        """The log-end offset of each partition, at least as late as the call."""

    def group_commits(self, group: str, tps: Iterable[TP], timeout: Optional[float] = None
                      ) -> Pending[Dict[TP, int]]:
        """The commits of ``group`` on ``tps`` (partitions without one left
        out), read without waiting: the request is sent now."""

    def start_offsets_later(self, tps: Iterable[TP], timeout: Optional[float] = None) -> Pending[Dict[TP, int]]:
        """:meth:`start_offsets` without waiting: the read is started now."""

    def start_offsets(self, tps: Iterable[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        """The log-start offset of each partition."""

    def open_transactions(self, tps: Iterable[TP], timeout: Optional[float] = None) -> Dict[TP, int]:
        """The partitions whose last stable offset an open transaction holds
        below the log end, with that offset."""


class LayoutView(Protocol):
    """A process's view of the layout log (the shared follower).

    ``fatal`` is the error that stopped it for good (a refused or unreadable
    record), else ``None``; :meth:`sync` raises it. ``log_id`` names the log
    in ``kafka-ordered.reg`` stamps.
    """

    @property
    def fatal(self) -> Optional[BaseException]:
        """The error that stopped the view for good, else ``None``."""

    @property
    def log_id(self) -> str:
        """The log's identity in stamps (its topic id)."""

    @property
    def history(self) -> "LayoutHistory":
        """The current view; replaced, never rewound."""

    def sync(self, timeout: Optional[float] = None) -> "LayoutHistory":
        """Catch up with every record appended before the call."""

    def catch_up_past(self, offset: int, timeout: Optional[float] = None) -> "LayoutHistory":
        """Make the view include ``offset`` (reading what is missing now)."""

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after new records were applied."""

    def remove_listener(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener``."""

    def view_metrics(self) -> "LayoutViewMetrics":
        """How current the view is."""


class LayoutWriter(Protocol):
    """Appends to the layout log."""

    def append(self, key: bytes, value: bytes) -> int:
        """Append one record, wait for its acknowledgement; returns its offset."""


class LogResources(Protocol):
    """What the registering core uses of the process's shared layout-log resources."""

    @property
    def follower(self) -> LayoutView: ...

    @property
    def offsets(self) -> OffsetsPort: ...

    @property
    def writer(self) -> LayoutWriter: ...

    def compacted(self, topic: str, timeout: Optional[float] = None) -> bool:
        """Whether ``topic``'s ``cleanup.policy`` includes ``compact`` (asked once per topic)."""
