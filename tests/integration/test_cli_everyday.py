"""Everyday CLI commands (issue 27): ``list``, ``produce``, ``consume``,
``unmanage``, on the session broker, with JSON output checked against
docs/cli-json.md."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

from kafka_ordered import LayoutAdmin, OrderedConsumer, OrderedProducer
from kafka_ordered.cli import main

from .. import cli_json_schema as schema_doc

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS, DEFS = schema_doc.load()


def _run(capsys: pytest.CaptureFixture[str], argv: List[str], stdin: str = "",
         monkeypatch: Any = None) -> Any:
    if monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _valid(name: str, value: Any) -> None:
    assert schema_doc.validate(value, SCHEMAS[name], DEFS) == [], value


@pytest.fixture
def base(bootstrap: str, layout_topic: str) -> List[str]:
    return ["--bootstrap-server", bootstrap, "--layout-topic", layout_topic]


@pytest.fixture
def group_flags(group_settings: Dict[str, Any]) -> List[str]:
    """The broker's group settings as -X flags (fast joins on the embedded broker only)."""
    return [f for k, v in group_settings.items() for f in ("-X", f"{k}={v}")]


def test_list_shows_managed_topics_with_their_layouts(
    admin: LayoutAdmin, base: List[str], unique: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, ["list", *base])
    assert code == 0 and out.startswith("no managed topics"), out
    a, b = unique("a"), unique("b")
    admin.create_topic(b, 2, physical_partitions=4)
    admin.create_topic(a, 3)
    admin.expand(b, 3)
    code, out, _ = _run(capsys, ["list", *base])
    lines = out.strip().splitlines()
    assert code == 0 and [line.split(":")[0] for line in lines] == sorted([a, b])
    assert "epoch 2, 3 undeleted of 4 physical" in lines[sorted([a, b]).index(b)], out
    code, out, _ = _run(capsys, ["list", "--json", *base])
    data = json.loads(out)
    _valid("list", data)
    assert [(t["topic"], t["epoch"], t["partitions"]) for t in data["topics"]] == sorted([(a, 1, 3), (b, 2, 3)])


def test_produce_then_consume_keeps_per_key_order_across_an_expansion(
    admin: LayoutAdmin, base: List[str], group_flags: List[str], topic: str, unique: Callable[[str], str],
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = admin.create_topic(topic, 2, physical_partitions=8)
    keys = [f"k{i}" for i in range(40)]
    code, out, err = _run(capsys, ["produce", topic, "-K", ":", "--json", *base],
                          "".join(f"{k}:{k}-1\n" for k in keys), monkeypatch)
    assert code == 0, err
    data = json.loads(out)
    _valid("produce", data)
    assert data == {"topic": topic, "produced": len(keys), "failed": 0}
    after = admin.expand(topic, 4)
    moved = [k for k in keys if before.partition_for(k.encode()) != after.partition_for(k.encode())]
    assert moved
    code, _, err = _run(capsys, ["produce", topic, "-K", ":", *base], "".join(f"{k}:{k}-2\n" for k in keys),
                        monkeypatch)
    assert code == 0 and f"produced {len(keys)} record(s)" in err, err

    group = unique("g")
    code, out, err = _run(capsys, ["consume", topic, "-g", group, "--from-beginning", "-c", str(2 * len(keys)),
                                   "--json", *group_flags, *base])
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    for r in records:
        _valid("consume", r)
    assert len(records) == 2 * len(keys)
    for k in keys:
        assert [r["value"] for r in records if r["key"] == k] == [f"{k}-1", f"{k}-2"], k
    assert {r["partition"] for r in records if r["key"] in moved and r["value"].endswith("-2")} <= {2, 3}
    assert "Processed a total of 80 messages" in err
    # -c commits what was printed: the same group gets nothing more
    committed = admin.committed(group, [(topic, p) for p in range(4)])
    assert sum(committed.values()) == 2 * len(keys)

    code, out, _ = _run(capsys, ["consume", topic, "-g", unique("g"), "--from-beginning", "-c", "3", "--print-key",
                                 *group_flags, *base])
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3 and all(line.split("\t")[1].startswith(line.split("\t")[0] + "-")
                                                 for line in lines), out


def test_produce_stops_at_a_line_without_the_key_separator(
    admin: LayoutAdmin, base: List[str], topic: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admin.create_topic(topic, 2)
    code, out, err = _run(capsys, ["produce", topic, "-K", ":", "--json", *base], "a:1\nb:2\nno separator\nc:3\n",
                          monkeypatch)
    assert code == 1
    assert json.loads(out) == {"topic": topic, "produced": 2, "failed": 0}
    assert "line 3 has no key separator ':'" in err and "2 line(s) before it were sent" in err, err


def test_consume_ctrl_c_commits_and_leaves_the_group(
    admin: LayoutAdmin, bootstrap: str, layout_topic: str, group_flags: List[str], topic: str,
    unique: Callable[[str], str], closing: Callable[[Any], Any],
) -> None:
    admin.create_topic(topic, 2)
    producer = closing(OrderedProducer({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}))
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), f"k{i}".encode())
    assert producer.flush(10) == 0
    group = unique("g")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafka_ordered.cli", "consume", topic, "-g", group, "--from-beginning",
         "--bootstrap-server", bootstrap, "--layout-topic", layout_topic, *group_flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        got = [proc.stdout.readline() for _ in range(10)]  # type: ignore[union-attr]
        assert sorted(line.strip() for line in got) == sorted(f"v{i}" for i in range(10))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Processed a total of 10 messages" in err
    assert sum(admin.committed(group, [(topic, 0), (topic, 1)]).values()) == 10
    # It left the group: a new member gets every partition at once, with nothing left to read.
    began = time.monotonic()
    code = subprocess.run(
        [sys.executable, "-m", "kafka_ordered.cli", "consume", topic, "-g", group, "--timeout-ms", "3000",
         "--bootstrap-server", bootstrap, "--layout-topic", layout_topic, *group_flags],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert code.returncode == 0 and code.stdout == "", code.stderr
    assert time.monotonic() - began < 30


def test_unmanage_is_refused_while_something_depends_on_the_layout(
    admin: LayoutAdmin, base: List[str], make_producer: Callable[..., OrderedProducer],
    make_consumer: Callable[..., OrderedConsumer], topic: str, unique: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    admin.create_topic(topic, 2, physical_partitions=8)
    producer = make_producer()
    for round_ in (1, 2):
        for i in range(20):
            producer.produce(topic, b"v", f"k{i}".encode())
        assert producer.flush(10) == 0
        if round_ == 1:
            admin.expand(topic, 3)
            deadline = time.monotonic() + 10
            while producer.history.current(topic).epoch < 2:  # type: ignore[union-attr]
                assert time.monotonic() < deadline
                time.sleep(0.01)
    assert any(r.gates for r in admin.sync().registrations(topic))
    admin.shrink(topic, 2)  # partition 2 drains

    code, out, err = _run(capsys, ["unmanage", topic, *base])
    assert code == 1 and out == "" and err.startswith(f"error: cannot unmanage {topic}: "), err
    assert "partition(s) 2 still draining" in err and "retire" in err, err
    assert "name the consumer groups" in err, err
    assert "registered for it less than 600 s ago" in err, err
    group = unique("g")
    code, _, err = _run(capsys, ["unmanage", topic, "-g", group, "--producers-idle", "0", *base])
    assert code == 1 and f"group {group} has not passed the gate(s)" in err and "registered" not in err, err
    assert admin.layout(topic).epoch == 3  # nothing changed

    consumer = make_consumer(group)
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    got = 0
    while got < 40:
        assert time.monotonic() < deadline, f"consumed {got} of 40"
        got += len([m for m in consumer.consume(100, 0.2) if m.error() is None])
    consumer.commit(asynchronous=False)
    assert admin.retire(topic, group).retired == frozenset({2})
    code, out, err = _run(capsys, ["unmanage", topic, "-g", group, "--producers-idle", "0", "--json", *base])
    assert code == 0, err
    data = json.loads(out)
    _valid("unmanage", data)
    assert data["last_layout"]["epoch"] == 4
    assert topic not in admin.topics()
    assert admin.adopt(topic, hash="murmur2").epoch == 1  # it can be managed again, from epoch 1
