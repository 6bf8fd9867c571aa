"""What went wrong in a newcomer's first hour and an operator's first
incident (issue 27), on a real broker."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest
from confluent_kafka import TopicPartition
from prometheus_client import CollectorRegistry, generate_latest

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer
from kafka_ordered.cli import main
from kafka_ordered.errors import BrokerUnavailableError, UnsupportedBrokerApiError
from kafka_ordered.prometheus import OrderedCollector

from .test_readme import ROOT, marked_blocks, substitute

KEYS = [f"key-{i:03d}".encode() for i in range(60)]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- kafka-ordered broker with the port taken


def test_broker_on_a_taken_port_says_so_before_claiming_to_run(
    bootstrap: str, embedded: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    listener = None
    if embedded:
        port = int(bootstrap.rsplit(":", 1)[1])  # a Kafka-compatible broker answers there
    else:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
    try:
        code = main(["broker", "--port", str(port)])
    finally:
        if listener is not None:
            listener.close()
    out, err = capsys.readouterr()
    assert code == 1
    assert f"port {port} is in use" in err, err
    assert out == "" and "running" not in err, (out, err)


# -- the producer without a broker


def test_producer_without_a_broker_fails_its_first_send_naming_the_address() -> None:
    port = _closed_port()
    producer = OrderedProducer({"bootstrap.servers": f"127.0.0.1:{port}", "ordered.metadata.timeout.ms": 1500})
    try:
        began = time.monotonic()
        with pytest.raises(BrokerUnavailableError) as info:
            producer.produce("orders", key=b"k", value=b"v")
        assert time.monotonic() - began < 10
        assert f"127.0.0.1:{port}" in str(info.value), str(info.value)
        assert producer.ordered_metrics().records_buffered == 0  # nothing kept without a layout
    finally:
        producer.close(1)


def test_producer_error_says_when_the_host_does_not_resolve() -> None:
    producer = OrderedProducer({"bootstrap.servers": "no-such-host.invalid:9092",
                                "ordered.metadata.timeout.ms": 1500})
    try:
        with pytest.raises(BrokerUnavailableError) as info:
            producer.produce("orders", key=b"k", value=b"v")
        msg = str(info.value)
        assert "no-such-host.invalid:9092" in msg and "does not resolve" in msg, msg
    finally:
        producer.close(1)


def test_producer_made_before_the_topic_is_managed_routes_by_its_layout(
    ordered_config: Dict[str, Any], admin: LayoutAdmin, topic: str, closing: Callable[[Any], Any],
) -> None:
    producer = closing(OrderedProducer({**ordered_config, "linger.ms": 5}))
    layout = admin.create_topic(topic, 2, physical_partitions=8)
    got: List[Any] = []
    for k in KEYS:
        producer.produce(topic, b"v", k, on_delivery=lambda err, msg: got.append((err, msg)))
    assert producer.flush(10) == 0
    assert len(got) == len(KEYS) and all(err is None for err, _ in got)
    assert {(m.key(), m.partition()) for _, m in got} == {(k, layout.partition_for(k)) for k in KEYS}


@pytest.mark.parametrize("value", [True, "true", "True", "t", "1", False, "false", "F", "0"])
def test_consumer_accepts_what_librdkafka_accepts_as_a_boolean(
    group_config: Dict[str, Any], closing: Callable[[Any], Any], value: Any
) -> None:
    closing(OrderedConsumer({**group_config, "enable.auto.commit": value}))


# -- expand beyond what the embedded broker has


def test_expand_beyond_the_physical_partitions_speaks_in_the_users_numbers(
    admin: LayoutAdmin, topic: str, embedded: bool
) -> None:
    if not embedded:
        pytest.skip("only the embedded broker lacks CreatePartitions")
    admin.create_topic(topic, 4, physical_partitions=8)
    admin.expand(topic, 6)
    admin.shrink(topic, 5)  # one draining partition: the physical count is no longer the target
    with pytest.raises(UnsupportedBrokerApiError) as info:
        admin.expand(topic, 40)
    msg = str(info.value)
    assert msg.startswith(f"cannot expand {topic} to 40 partitions"), msg
    assert "physical partitions" not in msg.split(":")[0], msg


# -- Prometheus


def _held_gate(admin: LayoutAdmin, producer: OrderedProducer, topic: str) -> None:
    """A topic 1 -> 2 with records of moved keys in p1 behind a gate on p0."""
    before = admin.create_topic(topic, 1, physical_partitions=2)
    for k in KEYS:
        producer.produce(topic, b"1", k)
    producer.flush(10)
    after = admin.expand(topic, 2)
    deadline = time.monotonic() + 10
    while producer.history.current(topic).epoch < 2:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for k in [k for k in KEYS if before.partition_for(k) != after.partition_for(k)]:
        producer.produce(topic, b"2", k)
    producer.flush(10)


def _sample(text: str, name: str, **labels: str) -> List[float]:
    out = []
    for line in text.splitlines():
        m = re.match(rf"{name}{{(.*)}} (\S+)$", line)
        if not m:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if all(have.get(k) == v for k, v in labels.items()):
            out.append(float(m.group(2)))
    return out


def test_prometheus_held_back_matches_describe_and_series_are_unique_per_client(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer],
    make_consumer: Callable[..., OrderedConsumer], topic: str, unique: Callable[[str], str],
) -> None:
    producer = make_producer()
    _held_gate(admin, producer, topic)
    group = unique("group")
    holder = make_consumer(group)
    holder.assign([TopicPartition(topic, 1)])  # nobody processes p0: p1 stays held
    other = make_consumer(group)
    other.assign([TopicPartition(topic, 0, 0)])
    other.pause([TopicPartition(topic, 0)])
    deadline = time.monotonic() + 10
    while not holder.ordered_metrics().held_partitions:
        assert time.monotonic() < deadline, "p1 was never held"
        holder.consume(100, 0.1)
    other.consume(10, 0.5)
    # The holder reads its sources' commits and log starts in the background
    # and takes the answers at a later poll, as a polling application does.
    holder.consume(100, 0.3)
    holder.consume(100, 0.3)

    desc = admin.describe(topic, group=group).to_dict()
    [gate] = [g for g in desc["gates"] if not g["open"]]
    assert gate["state"] == "holding" and gate["held_records"] > 0

    registry = CollectorRegistry()
    OrderedCollector.register(holder, other, producer, registry=registry)
    text = generate_latest(registry).decode()
    holder_id = holder.ordered_metrics().client_id
    other_id = other.ordered_metrics().client_id
    assert holder_id != other_id

    held = _sample(text, "kafka_ordered_records_held_back", group=group, topic=topic, partition="1")
    assert held == [float(gate["held_records"])], text
    # Every series is unique: one line per metric name and label set.
    samples = [line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert len(samples) == len(set(samples)), sorted(s for s in samples if samples.count(s) > 1)
    # Per-partition consumer lag, like Kafka's records-lag / records-lag-max.
    lag0 = _sample(text, "kafka_ordered_records_lag", client_id=other_id, topic=topic, partition="0")
    end0 = desc["partitions"][0]["log_end"]
    assert lag0 == [float(end0)], text  # paused at offset 0
    assert _sample(text, "kafka_ordered_records_lag_max", client_id=other_id) == [float(end0)]
    # Per-gate source lag: what the gate still waits for on its source.
    [src] = gate["sources"].values()
    src_lag = _sample(text, "kafka_ordered_gate_source_records_lag", client_id=holder_id, topic=topic,
                      partition="1", source_partition="0")
    assert src_lag == [float(src["lag"])] and src["lag"] > 0, text


# -- the kafka-python guide on the embedded broker


def test_getting_started_kafka_python_block_runs_with_the_fast_group_settings(
    bootstrap: str, embedded: bool, unique: Callable[[str], str], tmp_path: Path
) -> None:
    text = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    [code] = marked_blocks(text, "<!-- docs-test: kafka-python -->", "python")
    assert "**FAST_GROUP_CONFIG_KAFKA_PYTHON" in code
    replacements = {'"localhost:9092"': repr(bootstrap), '"payments"': repr(unique("gs-payments")),
                    '"ledger"': repr(unique("gs-ledger"))}
    if not embedded:
        replacements["FAST_GROUP_CONFIG_KAFKA_PYTHON"] = "SAFE_GROUP_CONFIG_KAFKA_PYTHON"
    script = tmp_path / "kafka_python_guide.py"
    script.write_text(substitute(code, replacements), encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    # The consumer gives up after 10 s without a record (consumer_timeout_ms): with
    # default group settings the embedded broker's first assignment takes ~23 s.
    assert proc.stdout.splitlines() == ["alice payment 0", "alice payment 1", "alice payment 2"], proc.stdout


def test_every_metric_name_in_the_docs_is_in_the_scrape(
    admin: LayoutAdmin, make_producer: Callable[..., OrderedProducer],
    make_consumer: Callable[..., OrderedConsumer], topic: str,
) -> None:
    producer = make_producer()
    _held_gate(admin, producer, topic)
    consumer = make_consumer()
    consumer.assign([TopicPartition(topic, 1)])
    consumer.consume(10, 0.5)
    registry = CollectorRegistry()
    OrderedCollector.register(consumer, producer, registry=registry)
    scraped = set(re.findall(r"^# TYPE (kafka_ordered_\w+) ", generate_latest(registry).decode(), re.M))
    import kafka_ordered.prometheus as prometheus_module

    texts = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
             for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]}
    texts["kafka_ordered/prometheus.py"] = prometheus_module.__doc__ or ""
    for where, text in texts.items():
        for name in set(re.findall(r"\bkafka_ordered_[a-z_]+[a-z]", text)):
            base = re.sub(r"_(bucket|count|sum)$", "", name)
            assert base in scraped, f"{where} names {name}, which the scrape does not have ({sorted(scraped)})"
