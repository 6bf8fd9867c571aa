"""Admin API behaviour an operator relies on (issue 14): argument types are
checked, ``describe(group=...)`` shows owners and lag, ``plan`` predicts
``expand``."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict

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


# -- item 3: describe(group=...)

KEYS = [f"key-{i:03d}".encode() for i in range(60)]


def _split(admin: LayoutAdmin, producer: OrderedProducer, topic: str) -> Dict[str, Any]:
    """1 undeleted of 2 physical partitions, records, expand to 2, more
    records: one gate on partition 1 waiting on partition 0."""
    admin.create_topic(topic, 1, physical_partitions=2)
    for k in KEYS:
        producer.produce(topic, b"before", k)
    producer.flush(10)
    before = time.time()
    admin.expand(topic, 2)
    deadline = time.monotonic() + 10
    while producer.history.current(topic).epoch != 2:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for k in KEYS:
        producer.produce(topic, b"after", k)
    producer.flush(10)
    (gate,) = [g for g in admin.sync().gates(topic) if g.partition == 1]
    return {"start": gate.start, "wait": gate.wait[0], "before": before}


def _commit(bootstrap: str, group: str, topic: str, partition: int, offset: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    c.close()


def test_describe_group_shows_gates_owners_and_lag(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], bootstrap: str, topic: str,
    unique: Callable[[str], str], embedded: bool, group_settings: Dict[str, Any], closing: Callable[[Any], Any],
) -> None:
    split = _split(admin, make_producer(), topic)
    start, wait = split["start"], split["wait"]
    group = unique("billing")
    _commit(bootstrap, group, topic, 0, wait - 1)

    desc = admin.describe(topic, group)
    ends = {p.partition: p.log_end for p in desc.partitions}
    assert [(p.partition, p.role, p.committed, p.lag, p.owner) for p in desc.partitions] == [
        (0, "undeleted", wait - 1, ends[0] - (wait - 1), None),
        (1, "undeleted", -1, None, None),  # no commit: no lag, as kafka-consumer-groups shows "-"
    ]
    assert ends[1] > start
    (g,) = desc.gates
    assert (g.partition, g.start, g.open, g.state) == (1, start, False, "holding")
    assert g.held_records == ends[1] - start
    assert g.held_since is not None and split["before"] - 1 <= g.held_since <= time.time()
    src = g.sources[0]
    assert (src.wait, src.committed, src.processed, src.lag, src.owner) == (wait, wait - 1, wait - 1, 1, None)
    assert desc.membership is not None and desc.membership.group == group
    assert desc.membership.members == () and desc.membership.owners_known  # nobody is consuming

    # a subscribed member: the broker names it as the owner (or says it cannot)
    member = closing(Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "ops-billing-1",
                               "enable.auto.commit": False, "auto.offset.reset": "earliest", **group_settings}))
    member.subscribe([topic])
    deadline = time.monotonic() + 30
    while not member.assignment():
        assert time.monotonic() < deadline, "no assignment"
        member.poll(0.1)
    desc = admin.describe(topic, group)
    m = desc.membership
    assert m is not None
    if m.owners_known:
        owners = [p.owner.client_id if p.owner else None for p in desc.partitions]
        assert owners == ["ops-billing-1", "ops-billing-1"]
        assert desc.gates[0].sources[0].owner is not None and desc.gates[0].sources[0].owner.client_id == "ops-billing-1"
        assert [mm.client_id for mm in m.members] == ["ops-billing-1"]
    else:
        assert embedded, "a real broker reports group members"
        assert m.members == () and "no members" in (m.note or "")
        assert all(p.owner is None for p in desc.partitions)
    data = desc.to_dict()
    assert data["gates"][0]["state"] == "holding" and data["gates"][0]["sources"]["0"]["lag"] == 1
    assert data["partitions"][0]["lag"] == ends[0] - (wait - 1) and data["membership"]["owners_known"] == m.owners_known
    member.close()

    _commit(bootstrap, group, topic, 0, wait)
    (g,) = admin.describe(topic, group).gates
    assert (g.open, g.state, g.held_since, g.held_records, g.sources[0].lag) == (True, "open", None, 0, 0)


def test_cli_describe_group_text(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer], bootstrap: str, layout_topic: str,
    topic: str, unique: Callable[[str], str], capsys: pytest.CaptureFixture[str],
) -> None:
    from kafka_ordered.cli import main as cli_main

    split = _split(admin, make_producer(), topic)
    group = unique("billing")
    _commit(bootstrap, group, topic, 0, split["wait"] - 2)
    assert cli_main(["describe", topic, "--group", group, "--bootstrap-server", bootstrap,
                     "--layout-topic", layout_topic]) == 0
    out = capsys.readouterr().out
    assert f"partition 1 from offset {split['start']}: holding" in out
    assert "held since 20" in out  # an ISO wall-clock time
    assert f"partition 0 >= {split['wait']}: committed {split['wait'] - 2}, lag 2, owner -" in out
    assert "PARTITION" in out and "LOG-END-OFFSET" in out and "CONSUMER-ID" in out


# -- item 8: plan predicts expand


def test_plan_predicts_what_expand_does(admin: LayoutAdmin, topic: str, embedded: bool) -> None:
    admin.create_topic(topic, 2, physical_partitions=4)
    outcomes = []
    for extra in (1, 3, 1, 1):
        cur = admin.layout(topic)
        target = cur.partitions + extra
        physical = max(cur.physical_partitions, 4)
        plan = admin.plan(topic, target)
        assert plan.spares == frozenset(range(cur.partitions, physical)) - cur.draining
        needs_new = target > physical
        assert plan.create_partitions == ("not_needed" if not needs_new else "unsupported" if embedded else "supported")
        try:
            admin.expand(topic, target)
            expanded = True
        except UnsupportedBrokerApiError as e:
            expanded = False
            assert e.api == "CreatePartitions"
        outcomes.append((target, plan.will_succeed, expanded))
        assert plan.will_succeed == expanded, f"plan said {plan.will_succeed} for {target}, expand did {expanded}"
        if not plan.will_succeed:
            assert plan.problem is not None and "CreatePartitions" in plan.problem
            assert f"{len(plan.spares)} spare" in plan.problem and f"up to {physical}" in plan.problem
        else:
            assert plan.problem is None
    if embedded:
        assert [o[2] for o in outcomes] == [True, False, True, False]

