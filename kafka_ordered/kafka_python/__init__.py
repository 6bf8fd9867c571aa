"""kafka-python counterparts of :class:`~kafka_ordered.OrderedProducer` and
:class:`~kafka_ordered.OrderedConsumer`.

:class:`OrderedKafkaProducer` wraps ``kafka.KafkaProducer`` and
:class:`OrderedKafkaConsumer` wraps ``kafka.KafkaConsumer`` (by composition),
with the same call signatures. They run the same protocol cores as the
confluent-kafka wrappers; the layout log and offset reads stay on
confluent-kafka internally.

Our options are the ``ordered.*`` keys, passed as ``**{"ordered.producer.id":
"billing"}`` or with underscores, ``ordered_producer_id="billing"``.
"""

from __future__ import annotations

try:
    import kafka  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "kafka_ordered.kafka_python needs kafka-python: pip install 'kafka-ordered[kafka-python]'"
    ) from e

from ._assignor import OrderedAssignor
from ._consumer import OrderedKafkaConsumer
from ._producer import BufferedRecordFuture, OrderedKafkaProducer

__all__ = ["OrderedKafkaProducer", "OrderedKafkaConsumer", "BufferedRecordFuture", "OrderedAssignor"]
