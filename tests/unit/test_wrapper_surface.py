"""Every public method of a wrapped client is written out on its wrapper
(issue 10, item 5): no attribute pass-through that would let a method such
as ``produce_batch`` bypass the layout, or hide a typo from type checkers.

When a client release adds a public method, the test fails until the
wrapper implements it (keeping order) or a delegation is written out.
"""

from __future__ import annotations

import inspect
from typing import Any, List, Type

import aiokafka
import confluent_kafka
import kafka
import pytest

from kafka_ordered import OrderedConsumer, OrderedProducer
from kafka_ordered.aiokafka import OrderedAIOKafkaConsumer, OrderedAIOKafkaProducer
from kafka_ordered.kafka_python import OrderedKafkaConsumer, OrderedKafkaProducer

PAIRS = [
    (confluent_kafka.Producer, OrderedProducer),
    (confluent_kafka.Consumer, OrderedConsumer),
    (kafka.KafkaProducer, OrderedKafkaProducer),
    (kafka.KafkaConsumer, OrderedKafkaConsumer),
    (aiokafka.AIOKafkaProducer, OrderedAIOKafkaProducer),
    (aiokafka.AIOKafkaConsumer, OrderedAIOKafkaConsumer),
]


def _public_methods(cls: Type[Any]) -> List[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))
                  and not inspect.isclass(getattr(cls, n)))


@pytest.mark.parametrize("client, wrapper", PAIRS, ids=lambda c: c.__name__)
def test_every_public_method_is_written_out(client: Type[Any], wrapper: Type[Any]) -> None:
    defined = {n for klass in wrapper.__mro__ if klass is not object for n in vars(klass)}
    missing = [n for n in _public_methods(client) if n not in defined]
    assert missing == [], f"{wrapper.__name__} lacks {missing}"


@pytest.mark.parametrize("client, wrapper", PAIRS, ids=lambda c: c.__name__)
def test_no_attribute_pass_through(client: Type[Any], wrapper: Type[Any]) -> None:
    assert "__getattr__" not in {n for klass in wrapper.__mro__ for n in vars(klass)}
    assert not hasattr(wrapper, "comit")


def test_len_and_context_manager_kept() -> None:
    for cls in (OrderedProducer, OrderedConsumer, OrderedKafkaProducer, OrderedKafkaConsumer):
        assert hasattr(cls, "__enter__") and hasattr(cls, "__exit__")
    assert hasattr(OrderedProducer, "__len__")


@pytest.mark.parametrize("client, wrapper", [(aiokafka.AIOKafkaProducer, OrderedAIOKafkaProducer),
                                             (aiokafka.AIOKafkaConsumer, OrderedAIOKafkaConsumer)],
                         ids=lambda c: c.__name__)
def test_a_method_is_a_coroutine_exactly_where_aiokafkas_is(client: Type[Any], wrapper: Type[Any]) -> None:
    """Drop-in: ``c.assign(...)`` written for aiokafka, without ``await``,
    must not leave a coroutine that never runs (no assignment, a warning)."""
    differ = [n for n in _public_methods(client)
              if inspect.iscoroutinefunction(getattr(client, n)) != inspect.iscoroutinefunction(getattr(wrapper, n))]
    assert differ == [], f"{wrapper.__name__}: {differ} differ from {client.__name__} in being coroutines"
