"""Prometheus exporter for the ordering protocol (``pip install 'kafka-ordered[prometheus]'``).

::

    from prometheus_client import start_http_server
    from kafka_ordered.prometheus import OrderedCollector

    collector = OrderedCollector.register(consumer, producer, autoscaler)  # default registry
    start_http_server(8000)

The collector reads each client's ``ordered_metrics()`` at scrape time, so it
costs nothing between scrapes (a consumer's snapshot reads the end offsets of
the partitions it owns: one request per scrape). Metric names follow
Prometheus conventions; every series carries ``client_id`` (the client's
``client.id``, or one generated per client as Kafka's Java clients do), so
two clients of one group in a process give two series (an autoscaler's
series carry no ``client_id``: they name its topic):

================================================  =========  =====================================================
metric                                            type       labels
================================================  =========  =====================================================
``kafka_ordered_gates_closed``                    gauge      ``client_id``, ``group``, ``topic``, ``partition``
``kafka_ordered_gate_held_seconds``               gauge      ``client_id``, ``group``, ``topic``, ``partition``
``kafka_ordered_records_held_back``               gauge      ``client_id``, ``group``, ``topic``, ``partition``
``kafka_ordered_gate_source_records_lag``         gauge      ``client_id``, ``group``, ``topic``, ``partition``,
                                                             ``source_partition``
``kafka_ordered_gate_source_records_lag_max``     gauge      ``client_id``, ``group``
``kafka_ordered_records_lag``                     gauge      ``client_id``, ``group``, ``topic``, ``partition``
``kafka_ordered_records_lag_max``                 gauge      ``client_id``, ``group``
``kafka_ordered_gate_wait_seconds``               histogram  ``client_id``, ``group``
``kafka_ordered_switch_pause_seconds``            summary    ``client_id``, ``producer``
``kafka_ordered_records_buffered``                gauge      ``client_id``, ``producer``
``kafka_ordered_layout_epoch``                    gauge      ``client_id``, ``topic``
``kafka_ordered_layout_view_lag``                 gauge      ``client_id`` (records)
``kafka_ordered_layout_view_age_seconds``         gauge      ``client_id``
``kafka_ordered_autoscaler_rate``                 gauge      ``topic``, ``partition``, ``unit`` (per second)
``kafka_ordered_autoscaler_decisions_total``      counter    ``topic``, ``kind``
``kafka_ordered_autoscaler_last_decision``        gauge      ``topic`` (Unix seconds)
``kafka_ordered_autoscaler_leader``               gauge      ``topic``, ``autoscaler`` (1 leader, 0 standby)
================================================  =========  =====================================================

``records_held_back``: records at or past a closed gate's start, waiting
behind it (what ``kafka-ordered describe --group`` shows as "holding N
record(s)"). ``gate_source_records_lag``: per source partition of a closed
gate, records the group must still process there before the gate opens
(wait offset - processed offset). ``records_lag`` / ``records_lag_max``:
Kafka's consumer ``records-lag`` / ``records-lag-max``, log end - position
of each owned partition and their maximum. ``autoscaler_rate``: the produce
rate the autoscaler observed per undeleted partition, in records or bytes
per second (``unit``).
"""

from __future__ import annotations

from typing import Any, Iterator, List, Optional

try:
    from prometheus_client import REGISTRY
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
        SummaryMetricFamily,
    )
    from prometheus_client.registry import Collector, CollectorRegistry
except ImportError as e:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "kafka_ordered.prometheus needs prometheus_client: pip install 'kafka-ordered[prometheus]'"
    ) from e

from .metrics import AutoscalerMetrics, ConsumerMetrics, LayoutViewMetrics, ProducerMetrics

__all__ = ["OrderedCollector"]


class OrderedCollector(Collector):
    """A Prometheus collector over kafka-ordered clients (anything with
    ``ordered_metrics()``: both clients' producers and consumers, and
    :class:`~kafka_ordered.Autoscaler`)."""

    def __init__(self, *clients: Any) -> None:
        self.clients: List[Any] = list(clients)

    @classmethod
    def register(cls, *clients: Any, registry: Optional[CollectorRegistry] = None) -> "OrderedCollector":
        """Create a collector for ``clients`` and register it (default: the
        global registry); returns it, so more clients can be added."""
        collector = cls(*clients)
        (registry if registry is not None else REGISTRY).register(collector)
        return collector

    def add(self, client: Any) -> None:
        """Export ``client`` too."""
        self.clients.append(client)

    def collect(self) -> Iterator[Metric]:
        snaps = [c.ordered_metrics() for c in self.clients]
        scalers = [s for s in snaps if isinstance(s, AutoscalerMetrics)]
        snaps = [s for s in snaps if not isinstance(s, AutoscalerMetrics)]
        consumers = [s for s in snaps if isinstance(s, ConsumerMetrics)]
        producers = [s for s in snaps if isinstance(s, ProducerMetrics)]

        per_partition = ["client_id", "group", "topic", "partition"]
        closed = GaugeMetricFamily("kafka_ordered_gates_closed", "Closed gates on a partition this member owns",
                                   labels=per_partition)
        held = GaugeMetricFamily("kafka_ordered_gate_held_seconds",
                                 "How long the partition has been held at its gate", labels=per_partition)
        held_back = GaugeMetricFamily("kafka_ordered_records_held_back",
                                      "Records at or past a closed gate's start, waiting behind it",
                                      labels=per_partition)
        source_lag = GaugeMetricFamily("kafka_ordered_gate_source_records_lag",
                                       "Records the group must still process on a source partition before the "
                                       "gate opens (wait - processed)", labels=per_partition + ["source_partition"])
        source_lag_max = GaugeMetricFamily("kafka_ordered_gate_source_records_lag_max",
                                           "The largest gate source lag of this member", labels=["client_id", "group"])
        lag = GaugeMetricFamily("kafka_ordered_records_lag", "Log end - position of an owned partition "
                                "(Kafka's records-lag)", labels=per_partition)
        lag_max = GaugeMetricFamily("kafka_ordered_records_lag_max", "The largest records_lag of this member "
                                    "(Kafka's records-lag-max)", labels=["client_id", "group"])
        waits = HistogramMetricFamily("kafka_ordered_gate_wait", "Completed gate waits", labels=["client_id", "group"],
                                      unit="seconds")
        for m in consumers:
            member = [m.client_id, m.group_id]
            source_lags = []
            for g in m.closed_gates:
                labels = member + [g.topic, str(g.partition)]
                closed.add_metric(labels, 1)
                held.add_metric(labels, g.held_s)
                if g.held_records is not None:
                    held_back.add_metric(labels, g.held_records)
                for q, n in sorted(g.source_lag.items()):
                    source_lag.add_metric(labels + [str(q)], n)
                    source_lags.append(n)
            if source_lags:
                source_lag_max.add_metric(member, max(source_lags))
            for (topic, partition), n in sorted((m.records_lag or {}).items()):
                lag.add_metric(member + [topic, str(partition)], n)
            if m.records_lag_max is not None:
                lag_max.add_metric(member, m.records_lag_max)
            h = m.gate_waits
            buckets = [(str(b), c) for b, c in zip(h.buckets, h.counts)] + [("+Inf", h.counts[-1])]
            waits.add_metric(member, buckets, h.sum_s)
        yield from (closed, held, held_back, source_lag, source_lag_max, lag, lag_max, waits)

        pauses = SummaryMetricFamily("kafka_ordered_switch_pause", "Producer layout switch pauses",
                                     labels=["client_id", "producer"], unit="seconds")
        buffered = GaugeMetricFamily("kafka_ordered_records_buffered", "Records waiting behind a layout switch",
                                     labels=["client_id", "producer"])
        for p in producers:
            pauses.add_metric([p.client_id, p.producer_id], p.switches, sum(p.switch_pauses_s))
            buffered.add_metric([p.client_id, p.producer_id], p.records_buffered)
        yield from (pauses, buffered)

        epoch = GaugeMetricFamily("kafka_ordered_layout_epoch", "Layout epoch in use", labels=["client_id", "topic"])
        view_lag = GaugeMetricFamily("kafka_ordered_layout_view_lag", "Layout-log records not yet in the view",
                                     labels=["client_id"])
        age = GaugeMetricFamily("kafka_ordered_layout_view_age_seconds",
                                "Seconds since the layout view last caught up", labels=["client_id"])
        for s in snaps:
            for topic, e in sorted(s.layout_epochs.items()):
                epoch.add_metric([s.client_id, topic], e)
            view: Optional[LayoutViewMetrics] = s.layout_view
            if view is not None:
                view_lag.add_metric([s.client_id], view.lag)
                age.add_metric([s.client_id], view.age_s)
        yield from (epoch, view_lag, age)

        rate = GaugeMetricFamily("kafka_ordered_autoscaler_rate", "Observed produce rate per undeleted partition "
                                 "(per second, in records or bytes)", labels=["topic", "partition", "unit"])
        kinds = CounterMetricFamily("kafka_ordered_autoscaler_decisions", "Autoscaler decisions by kind",
                                    labels=["topic", "kind"])
        last = GaugeMetricFamily("kafka_ordered_autoscaler_last_decision",
                                 "Unix time of the autoscaler's latest decision", labels=["topic"])
        leader = GaugeMetricFamily("kafka_ordered_autoscaler_leader",
                                   "1 when this autoscaler acts for the topic, 0 on a standby",
                                   labels=["topic", "autoscaler"])
        for a in scalers:
            for partition, r in sorted(a.rates.items()):
                rate.add_metric([a.topic, str(partition), a.unit], r)
            for kind in ("grow", "shrink", "retire", "hold"):
                kinds.add_metric([a.topic, kind], a.decisions.get(kind, 0))
            if a.last_decision_time is not None:
                last.add_metric([a.topic], a.last_decision_time)
            leader.add_metric([a.topic, a.autoscaler_id], 1 if a.leader else 0)
        yield from (rate, kinds, last, leader)
