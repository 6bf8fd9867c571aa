"""confluent-kafka adapters: :class:`OrderedProducer` and :class:`OrderedConsumer`.

Thin adapters of confluent-kafka's ``Producer`` and ``Consumer`` onto the
protocol cores (:mod:`kafka_ordered._registering`, :mod:`kafka_ordered._gating`).
Every public method of the wrapped client is written out here: it either
keeps the ordering guarantee or is a plain delegation that cannot affect
order. There is no attribute pass-through.

Offsets (consumer): the wrapper owns offset storage. The client's own
auto-commit and automatic offset store are turned off; with
``enable.auto.commit=true`` (the default) the wrapper commits, every
``auto.commit.interval.ms``, the positions of records returned by earlier
polls, and commits promptly (``ordered.commit.interval.ms``) when another
member's gate waits on a partition it owns. Records fetched but held at a
gate are never committed. With manual commits, the application's commits
carry the gates: a member that commits rarely delays other partitions.

Inside: ``_producer`` (:class:`OrderedProducer` over the registering core),
``_consumer`` (:class:`OrderedConsumer` over the gating core), ``_common``
(the shared layout-log clients and the inner client's construction).
"""

from ._consumer import METADATA_REFRESH_MS, OrderedConsumer
from ._producer import OrderedProducer

__all__ = ["OrderedProducer", "OrderedConsumer", "METADATA_REFRESH_MS"]
