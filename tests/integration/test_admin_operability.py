"""Admin API behaviour an operator relies on (issue 14): argument types are
checked, ``describe(group=...)`` shows owners and lag, ``plan`` predicts
``expand``."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_ordered import LayoutAdmin, OrderedProducer, UnsupportedBrokerApiError


def _draining_partition_with_records(admin: LayoutAdmin, bootstrap: str, topic: str) -> None:
    """``topic``: 2 undeleted of 4 physical, partition 2 draining with 5 records."""
    admin.create_topic(topic, 2, physical_partitions=4)
    admin.expand(topic, 3)
    p = Producer({"bootstrap.servers": bootstrap})
    for _ in range(5):
        p.produce(topic, b"x", partition=2)
    p.flush(10)
    admin.shrink(topic, 2)


# -- item 9: argument types


def test_retire_takes_one_group_id_as_a_string(admin: LayoutAdmin, bootstrap: str, topic: str,
                                                unique: Callable[[str], str]) -> None:
    _draining_partition_with_records(admin, bootstrap, topic)
    group = unique("billing")
    res = admin.retire(topic, group)
    assert res.retired == frozenset()
    assert res.still_draining[2] == f"not fully consumed: {group} at no commit of 5"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 2, 5)], asynchronous=False)
    c.close()
    assert admin.retire(topic, (group,)).retired == {2}


@pytest.mark.parametrize("groups", [42, b"billing", {"billing": 1}, ["billing", 7], [b"billing"], None])
def test_retire_rejects_anything_but_group_ids(admin: LayoutAdmin, topic: str, groups: Any) -> None:
    admin.create_topic(topic, 2)
    with pytest.raises(TypeError, match="groups"):
        admin.retire(topic, groups)


def test_admin_calls_check_topics_groups_and_partitions(admin: LayoutAdmin, topic: str) -> None:
    admin.create_topic(topic, 2)
    with pytest.raises(TypeError, match="group"):
        admin.describe(topic, group=["a", "b"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="partitions"):
        admin.elect_leaders(topic, "0,1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="topic"):
        admin.layout([topic])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="topic"):
        admin.expand((topic,), 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="group"):
        admin.committed(["a"], [(topic, 0)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tps"):
        admin.committed("a", [topic])  # type: ignore[list-item]
    assert admin.layout(topic).partitions == 2
