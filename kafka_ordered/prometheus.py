"""Prometheus exporter for the ordering protocol (``pip install 'kafka-ordered[prometheus]'``).

::

    from prometheus_client import start_http_server
    from kafka_ordered.prometheus import OrderedCollector

    collector = OrderedCollector.register(consumer, producer, autoscaler)  # default registry
    start_http_server(8000)

The collector reads each client's ``ordered_metrics()`` at scrape time, so it
costs nothing between scrapes. Metric names follow Prometheus conventions:

=========================================  =========  ==============================================
metric                                     type       labels
=========================================  =========  ==============================================
``kafka_ordered_gates_closed``             gauge      ``group``, ``topic``, ``partition``
``kafka_ordered_gate_held_seconds``        gauge      ``group``, ``topic``, ``partition``
``kafka_ordered_gate_wait_seconds``        histogram  ``group``
``kafka_ordered_records_held_back``        counter    ``group``
``kafka_ordered_layout_epoch``             gauge      ``client``, ``topic``
``kafka_ordered_switch_pause_seconds``     summary    ``producer``
``kafka_ordered_records_buffered``         gauge      ``producer``
``kafka_ordered_layout_view_lag``          gauge      ``client`` (records)
``kafka_ordered_layout_view_age_seconds``  gauge      ``client``
``kafka_ordered_autoscaler_rate``          gauge      ``topic``, ``partition``, ``unit`` (per second)
``kafka_ordered_autoscaler_decisions``     counter    ``topic``, ``kind``
``kafka_ordered_autoscaler_last_decision`` gauge      ``topic`` (Unix seconds)
``kafka_ordered_autoscaler_leader``        gauge      ``topic``, ``autoscaler`` (1 leader, 0 standby)
=========================================  =========  ==============================================
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

        closed = GaugeMetricFamily("kafka_ordered_gates_closed", "Closed gates on a partition this member owns",
                                   labels=["group", "topic", "partition"])
        held = GaugeMetricFamily("kafka_ordered_gate_held_seconds",
                                 "How long the partition has been held at its gate", labels=["group", "topic", "partition"])
        waits = HistogramMetricFamily("kafka_ordered_gate_wait", "Completed gate waits", labels=["group"],
                                      unit="seconds")
        held_back = CounterMetricFamily("kafka_ordered_records_held_back",
                                        "Records fetched and held back at gates (fetched again when they open)",
                                        labels=["group"])
        for m in consumers:
            for g in m.closed_gates:
                labels = [m.group_id, g.topic, str(g.partition)]
                closed.add_metric(labels, 1)
                held.add_metric(labels, g.held_s)
            h = m.gate_waits
            buckets = [(str(b), c) for b, c in zip(h.buckets, h.counts)] + [("+Inf", h.counts[-1])]
            waits.add_metric([m.group_id], buckets, h.sum_s)
            held_back.add_metric([m.group_id], m.records_held_back)
        yield from (closed, held, waits, held_back)

        pauses = SummaryMetricFamily("kafka_ordered_switch_pause", "Producer layout switch pauses",
                                     labels=["producer"], unit="seconds")
        buffered = GaugeMetricFamily("kafka_ordered_records_buffered", "Records waiting behind a layout switch",
                                     labels=["producer"])
        for p in producers:
            pauses.add_metric([p.producer_id], p.switches, sum(p.switch_pauses_s))
            buffered.add_metric([p.producer_id], p.records_buffered)
        yield from (pauses, buffered)

        epoch = GaugeMetricFamily("kafka_ordered_layout_epoch", "Layout epoch in use", labels=["client", "topic"])
        lag = GaugeMetricFamily("kafka_ordered_layout_view_lag", "Layout-log records not yet in the view",
                                labels=["client"])
        age = GaugeMetricFamily("kafka_ordered_layout_view_age_seconds",
                                "Seconds since the layout view last caught up", labels=["client"])
        for s in snaps:
            name = s.group_id if isinstance(s, ConsumerMetrics) else s.producer_id
            for topic, e in sorted(s.layout_epochs.items()):
                epoch.add_metric([name, topic], e)
            view: Optional[LayoutViewMetrics] = s.layout_view
            if view is not None:
                lag.add_metric([name], view.lag)
                age.add_metric([name], view.age_s)
        yield from (epoch, lag, age)

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
