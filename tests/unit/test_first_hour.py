"""What went wrong in a newcomer's first hour (issue 27): clear errors for
bad client settings and human output of the CLI. The wrappers are built
against a closed port: none of these needs a broker."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict

import pytest

from kafka_ordered import OrderedConsumer, OrderedProducer
from kafka_ordered.cli import _render
from kafka_ordered.errors import ConfigError

# Nothing listens on port 1; construction must not need a broker anyway.
NOWHERE: Dict[str, Any] = {"bootstrap.servers": "127.0.0.1:1", "ordered.metadata.timeout.ms": 1000}


@pytest.mark.parametrize("value", ["maybe", "yes please", 2])
def test_consumer_rejects_a_non_boolean_enable_auto_commit_as_the_client_would(value: Any) -> None:
    with pytest.raises(ConfigError, match=r'Expected bool value for "enable.auto.commit": true or false'):
        OrderedConsumer({**NOWHERE, "group.id": "g", "enable.auto.commit": value})


def test_consumer_rejects_a_bad_auto_commit_interval_as_a_config_error() -> None:
    with pytest.raises(ConfigError, match="auto.commit.interval.ms"):
        OrderedConsumer({**NOWHERE, "group.id": "g", "auto.commit.interval.ms": "soon"})


def test_producer_names_a_misspelt_client_key_and_suggests_the_right_one() -> None:
    with pytest.raises(ConfigError) as info:
        OrderedProducer({"bootstrap.server": "127.0.0.1:1"})
    msg = str(info.value)
    assert "'bootstrap.server'" in msg and "did you mean bootstrap.servers" in msg, msg


def test_consumer_names_a_misspelt_client_key_and_suggests_the_right_one() -> None:
    with pytest.raises(ConfigError) as info:
        OrderedConsumer({**NOWHERE, "group.id": "g", "sesion.timeout.ms": 6000})
    msg = str(info.value)
    assert "'sesion.timeout.ms'" in msg and "did you mean session.timeout.ms" in msg, msg


def test_a_bad_client_value_is_a_config_error_with_the_clients_words() -> None:
    with pytest.raises(ConfigError, match="Invalid value for configuration property"):
        OrderedProducer({**NOWHERE, "linger.ms": "later"})


def test_producer_construction_needs_no_broker() -> None:
    began = time.monotonic()
    producer = OrderedProducer({"bootstrap.servers": "127.0.0.1:1"})  # default 10 s metadata timeout
    took = time.monotonic() - began
    try:
        assert took < 2.0, f"the constructor waited {took:.1f} s for a broker"
        assert producer.producer_id.startswith("anon-")
        assert producer.ordered_metrics().switches == 0
    finally:
        producer.close(1)


def test_describe_shows_registration_gates_as_text() -> None:
    data = {
        "layout": {"topic": "payments", "epoch": 2, "partitions": 5, "physical_partitions": 8, "draining": [],
                   "hash": "murmur2", "initial_partitions": 4},
        "history": [], "lineage": {}, "problems": [],
        "registrations": [{"producer": "billing-1", "from_epoch": 1, "epoch": 2,
                           "gates": {"4": {"start": 0, "wait": {"0": 1}}}}],
    }
    text = _render.description_text(data, None)
    assert "{" not in text and "'" not in text, text
    assert "p4 from offset 0 waits for p0 to reach offset 1" in text, text


def test_demo_table_explains_its_rows() -> None:
    row = {"clients": "ordered", "produced_acked": 10, "consumed": 14, "unique": 10, "duplicates": 4,
           "keys": 2, "layout_changes": 1, "violations": 0, "missing": 0, "gate_stall_s": 18.8}
    text = _render.demo_table([row, {**row, "clients": "plain"}])
    assert "at-least-once" in text and "redeliver" in text, text
    assert "gate stall s" in text and "summed over" in text, text


def test_docs_say_when_spark_needs_register() -> None:
    """An editable install hides ``pyspark_kafka_ordered`` from PySpark's
    module scan: the docs say so and what to do, where they promise discovery."""
    root = Path(__file__).resolve().parents[2]
    for doc in ("README.md", "docs/howto/spark.md", "docs/spark.md"):
        text = " ".join((root / doc).read_text(encoding="utf-8").split())
        assert "editable" in text and "register(spark)" in text and "editable_mode=compat" in text, doc


def test_guides_show_the_fast_group_settings_for_kafka_python() -> None:
    root = Path(__file__).resolve().parents[2]
    for doc in ("README.md", "docs/getting-started.md"):
        assert "FAST_GROUP_CONFIG_KAFKA_PYTHON" in (root / doc).read_text(encoding="utf-8"), doc


def test_unmanage_record_ends_a_topic_and_a_stale_one_is_superseded() -> None:
    from kafka_ordered.history import LayoutHistory, encode_layout
    from kafka_ordered.layout import Layout
    from kafka_ordered.records import encode_registration

    h = LayoutHistory()
    first = Layout("t", epoch=1, initial_partitions=2, partitions=2, physical_partitions=4)
    second = first.expanded(3)
    records = [encode_layout(first, "create", "a"), encode_layout(second, "expand", "a"),
               encode_registration("t", "p", True, 2, 1, {2: (0, {0: 5})}),
               encode_layout(first, "unmanage", "a")]  # names epoch 1: lost a race with the expansion
    for offset, (key, value) in enumerate(records):
        h.apply(offset, key, value)
    assert h.current("t") == second and [c.op for c in h.superseded] == ["unmanage"]
    key, value = encode_layout(second, "unmanage", "a")
    h.apply(len(records), key, value)
    assert h.topics() == [] and h.current("t") is None
    assert h.registrations("t") == [] and h.gates_on("t", 2) == [] and h.changes("t") == []
    key, value = encode_layout(first, "adopt", "b")  # managed again, from epoch 1
    h.apply(len(records) + 1, key, value)
    assert h.current("t") == first
