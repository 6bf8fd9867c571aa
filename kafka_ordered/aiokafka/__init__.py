"""aiokafka (asyncio) counterparts of :class:`~kafka_ordered.OrderedProducer`
and :class:`~kafka_ordered.OrderedConsumer`.

:class:`OrderedAIOKafkaProducer` wraps ``aiokafka.AIOKafkaProducer`` and
:class:`OrderedAIOKafkaConsumer` wraps ``aiokafka.AIOKafkaConsumer`` (by
composition), with the same method names and signatures. They run the same
protocol cores as the other wrappers, on one worker thread per client (the
cores block; the event loop never does); the layout log and offset reads
stay on confluent-kafka internally.

Our options are the ``ordered.*`` keys, passed as ``**{"ordered.producer.id":
"billing"}`` or with underscores, ``ordered_producer_id="billing"``.
"""

from __future__ import annotations

try:
    import aiokafka  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "kafka_ordered.aiokafka needs aiokafka: pip install 'kafka-ordered[aiokafka]'"
    ) from e

from ._consumer import OrderedAIOKafkaConsumer
from ._producer import OrderedAIOKafkaProducer

__all__ = ["OrderedAIOKafkaProducer", "OrderedAIOKafkaConsumer"]
