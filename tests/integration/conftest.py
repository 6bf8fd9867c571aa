"""Factories for kafka-ordered clients on the session broker; each test gets
its own layout-log topic so histories never mix."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Optional

import pytest

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer


@pytest.fixture
def ordered_config(bootstrap: str, layout_topic: str) -> Dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}


@pytest.fixture
def admin(ordered_config: Dict[str, Any]) -> Iterator[LayoutAdmin]:
    with LayoutAdmin(ordered_config) as a:
        yield a


@pytest.fixture
def make_producer(ordered_config: Dict[str, Any], closing: Callable[[Any], Any]) -> Callable[..., OrderedProducer]:
    def make(**extra: Any) -> OrderedProducer:
        return closing(OrderedProducer({**ordered_config, "linger.ms": 5, **extra}))

    return make


@pytest.fixture
def make_consumer(
    ordered_config: Dict[str, Any], unique: Callable[[str], str], closing: Callable[[Any], Any],
    group_settings: Dict[str, Any],
) -> Callable[..., OrderedConsumer]:
    def make(group: Optional[str] = None, **extra: Any) -> OrderedConsumer:
        conf = {**ordered_config, **group_settings, "group.id": group or unique("group"),
                "auto.offset.reset": "earliest", **extra}
        return closing(OrderedConsumer(conf))

    return make


