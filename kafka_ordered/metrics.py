"""Typed snapshots of what the ordering protocol is doing (pure, no I/O).

Every wrapper's ``ordered_metrics()`` returns one of these frozen snapshots;
:mod:`kafka_ordered.prometheus` exports them. Times are seconds; wall-clock
times are Unix epoch seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple

__all__ = [
    "GATE_WAIT_BUCKETS",
    "LayoutViewMetrics",
    "GateMetrics",
    "WaitHistogram",
    "ConsumerMetrics",
    "ProducerMetrics",
    "AutoscalerMetrics",
]

#: Upper bounds (seconds) of the gate-wait histogram buckets.
GATE_WAIT_BUCKETS: Tuple[float, ...] = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(frozen=True)
class LayoutViewMetrics:
    """How current this process's view of the layout log is.

    ``next_offset``: the next layout-log offset the view will apply;
    ``end_offset``: the log end seen at the last catch-up (``None`` before
    one); ``lag``: records between them; ``age_s``: seconds since the last
    completed catch-up began.
    """

    topic: str
    next_offset: int
    end_offset: Optional[int]
    lag: int
    age_s: float


@dataclass(frozen=True)
class GateMetrics:
    """A closed gate on one partition this member owns.

    ``start``: first held offset; ``held``: whether the partition is stopped
    at it now; ``held_since``: wall-clock time the hold began (``None`` when
    not held); ``waiting_on``: source partition -> ``(wait, processed)``;
    ``held_records``: records at or past ``start`` waiting behind the gate
    (log end - start, as ``kafka-ordered describe`` counts them; ``None``
    when the end offset could not be read).
    """

    topic: str
    partition: int
    start: int
    held: bool
    held_since: Optional[float]
    held_s: float
    waiting_on: Mapping[int, Tuple[int, int]]
    held_records: Optional[int] = None

    @property
    def source_lag(self) -> Mapping[int, int]:
        """Per source partition: records the group must still process there
        before this gate opens (``wait - processed``)."""
        return {q: max(0, w - p) for q, (w, p) in self.waiting_on.items()}


@dataclass(frozen=True)
class WaitHistogram:
    """Completed gate waits: cumulative counts per bucket of :data:`GATE_WAIT_BUCKETS`
    (the last count is ``+Inf``), their number and total seconds."""

    buckets: Tuple[float, ...] = GATE_WAIT_BUCKETS
    counts: Tuple[int, ...] = (0,) * (len(GATE_WAIT_BUCKETS) + 1)
    count: int = 0
    sum_s: float = 0.0


@dataclass(frozen=True)
class ConsumerMetrics:
    """A gating consumer's state.

    ``records_held_back``: records fetched and held back at gates so far
    (they are fetched again when the gate opens; a counter of fetches, not
    what waits now: that is each gate's ``held_records``);
    ``last_gate_wait_s``: the duration of the most recent completed wait;
    ``client_id``: the client's ``client.id`` (or a generated one, see
    :func:`kafka_ordered.config.metrics_client_id`); ``records_lag``: per
    owned partition with a known position, log end - position (Kafka's
    ``records-lag``; ``None`` when the end offsets could not be read).
    """

    group_id: str
    owned_partitions: int
    closed_gates: Tuple[GateMetrics, ...]
    held_partitions: int
    records_held_back: int
    last_gate_wait_s: Optional[float]
    gate_waits: WaitHistogram
    layout_epochs: Mapping[str, int]
    layout_view: LayoutViewMetrics
    client_id: str = ""
    records_lag: Optional[Mapping[Tuple[str, int], int]] = None

    @property
    def records_lag_max(self) -> Optional[int]:
        """The largest per-partition lag (Kafka's ``records-lag-max``, over
        the partitions owned now); ``None`` when unknown or none owned."""
        return max(self.records_lag.values()) if self.records_lag else None


@dataclass(frozen=True)
class ProducerMetrics:
    """A registering producer's state.

    ``switches``: layout switches done; ``last_switch_pause_s`` /
    ``max_switch_pause_s``: how long sends were held back by the last /
    longest one; ``records_buffered``: records waiting behind a switch now;
    ``client_id``: the client's ``client.id``.
    """

    producer_id: str
    layout_epochs: Mapping[str, int]
    switches: int
    last_switch_pause_s: Optional[float]
    max_switch_pause_s: Optional[float]
    switch_pauses_s: Tuple[float, ...] = field(default=())
    records_buffered: int = 0
    layout_view: Optional[LayoutViewMetrics] = None
    client_id: str = ""


@dataclass(frozen=True)
class AutoscalerMetrics:
    """An autoscaler's state (:meth:`kafka_ordered.Autoscaler.ordered_metrics`).

    ``leader``: whether this instance is the one that acts (the others are
    standbys); ``rates``: the observed produce rate per undeleted partition
    in ``unit`` (``"records"`` or ``"bytes"``) per second; ``decisions``:
    decisions taken so far by kind (``grow``, ``shrink``, ``retire``,
    ``hold``); ``last_decision_time``: wall-clock time of the latest
    decision (``None`` before one); ``last_decision``: its kind.
    """

    topic: str
    autoscaler_id: str
    leader: bool
    unit: str
    rates: Mapping[int, float]
    decisions: Mapping[str, int]
    last_decision_time: Optional[float]
    last_decision: Optional[str]
