"""Every ``kafka-ordered`` command's ``--json`` output against the schemas of
``docs/cli-json.md`` (read from the document), on the broker (issue 14
item 5): one documented shape per command, errors included, snake_case keys."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Set, Union

import pytest
from confluent_kafka import Producer

from kafka_ordered import LayoutAdmin, OrderedProducer
from kafka_ordered.admin import ElectionResult
from kafka_ordered.cli import main
from kafka_ordered.testing import BOOTSTRAP_ENV

from .. import cli_json_schema as schema_doc
from ..conftest import create_plain_topic

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS, DEFS = schema_doc.load()


class Checker:
    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.validated: Set[str] = set()

    def check(self, name: str, data: Any) -> Any:
        which = "error" if isinstance(data, dict) and set(data) == {"error"} else name
        assert schema_doc.validate(data, SCHEMAS[which], DEFS) == [], f"{name}: {json.dumps(data)[:2000]}"
        assert schema_doc.json_keys(data) == []
        self.validated.add(which)
        return data

    def run(self, name: str, argv: List[str], code: Union[int, Set[int]] = 0) -> Any:
        got = main([*argv, "--json"])
        out, err = self.capsys.readouterr()
        assert got in (code if isinstance(code, set) else {code}), f"{argv} exited {got}, not {code}: {err}"
        return self.check(name, json.loads(out))


def test_every_command_output_matches_its_documented_schema(
    bootstrap: str, layout_topic: str, topic: str, unique: Callable[[str], str], embedded: bool,
    make_producer: Callable[..., OrderedProducer], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, group_settings: Dict[str, Any],
) -> None:
    c = Checker(capsys)
    base = ["--bootstrap-server", bootstrap, "--layout-topic", layout_topic]
    c.run("version", ["--version"])

    created = c.run("create", ["create", topic, "-p", "2", "--physical", "4", *base])
    assert created["placement"] is not None

    plain = unique("plain")
    create_plain_topic(bootstrap, plain, 2, 1)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        p.produce(plain, b"v", f"k{i}".encode())
    p.flush(10)
    assert c.run("adopt", ["adopt", plain, *base])["detected"] is True

    assert c.run("plan", ["plan", topic, "--to", "3", *base])["will_succeed"] is True
    beyond = c.run("plan", ["plan", topic, "--to", "6", *base], code=1 if embedded else 0)
    assert beyond["placement"] is not None and beyond["will_succeed"] is not embedded

    # a registration with a gate: a producer writes before and after the expansion
    producer = make_producer()
    keys = [f"key-{i}".encode() for i in range(40)]
    for k in keys:
        producer.produce(topic, b"before", k)
    producer.flush(10)
    expanded = c.run("expand", ["expand", topic, "3", "--elect-leaders", *base], code=3 if embedded else 0)
    assert (expanded["follow_up"] is not None) == embedded and list(expanded["elections"]) == ["2"]
    deadline = time.monotonic() + 10
    while producer.history.current(topic).epoch != 2:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for k in keys:
        producer.produce(topic, b"after", k)
    producer.flush(10)

    group = unique("g")
    described = c.run("describe", ["describe", topic, "--group", group, *base])
    assert described["gates"] and described["gates"][0]["sources"] and described["registrations"]
    assert described["membership"] is not None and len(described["partitions"]) == 4
    assert c.run("describe", ["describe", topic, *base])["gates"] == []

    # the everyday commands (issue 27)
    assert {t["topic"] for t in c.run("list", ["list", *base])["topics"]} == {topic, plain}
    monkeypatch.setattr(sys, "stdin", io.StringIO("a:1\nb:2\n"))
    assert c.run("produce", ["produce", plain, "-K", ":", *base])["produced"] == 2
    flags = [f for k, v in group_settings.items() for f in ("-X", f"{k}={v}")]
    assert main(["consume", plain, "-g", unique("g"), "--from-beginning", "-c", "2", "--json", *flags, *base]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    for line in lines:
        c.check("consume", json.loads(line))
    c.run("unmanage", ["unmanage", topic, *base], code=1)  # gates and a recent producer: the error shape
    assert c.run("unmanage", ["unmanage", plain, "--producers-idle", "0", *base])["topic"] == plain

    assert c.run("upgrade-protocol", ["upgrade-protocol", *base])["changed"] is False  # a new log speaks it
    c.run("shrink", ["shrink", topic, "2", *base])
    retired = c.run("retire", ["retire", topic, "-g", group, *base])
    assert retired["still_draining"], "partition 2 holds records the group did not consume"

    dry = c.run("heal", ["heal", topic, "--dry-run", *base])
    assert dry["dry_run"] is True
    c.run("heal", ["heal", topic, *base])

    if embedded:  # no ElectLeaders here: the error shape, then the result shape with the election stubbed
        c.run("elect-leaders", ["elect-leaders", topic, *base], code=1)
        monkeypatch.setattr(LayoutAdmin, "elect_leaders",
                            lambda self, t, ps=None: {0: ElectionResult(t, 0, "not_needed")})
    assert list(c.run("elect-leaders", ["elect-leaders", topic, "--partitions", "0", *base])["elections"]) == ["0"]
    monkeypatch.undo()

    c.run("describe", ["describe", unique("missing"), *base], code=1)  # the error shape
    c.run("describe", ["describe", topic, "-X", "no.such.setting=1", *base], code=2)

    # demo: a tiny ordered run on an embedded broker of its own (its fast group settings let the
    # consumer it kills be replaced at once); exit 1 would be a violation the shape still describes
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    demo = c.run("demo", ["demo", "--duration", "2", "--producers", "1", "--keys", "20", "--consumers", "2",
                          "--layouts", "2,3", "--only", "ordered", "--rate", "100"], code={0, 1})
    assert [r["clients"] for r in demo["results"]] == ["ordered"]

    # autoscale: JSON lines until SIGTERM (a dry run changes nothing)
    scaler = subprocess.Popen([sys.executable, "-m", "kafka_ordered.cli", "autoscale", topic, "--min", "2", "--max", "4",
                               "--target-records-per-partition", "100", "--dry-run", "--interval", "0.2", "--json",
                               *base], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert scaler.stdout is not None
        assert c.check("autoscale", json.loads(scaler.stdout.readline()))["event"] == "started"
    finally:
        scaler.send_signal(signal.SIGTERM)
        rest, err = scaler.communicate(timeout=30)
    assert scaler.returncode == 0, err
    assert c.check("autoscale", json.loads(rest.splitlines()[-1]))["event"] == "stopped"

    # broker: one JSON line once it is up
    proc = subprocess.Popen([sys.executable, "-m", "kafka_ordered.cli", "broker", "--json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        info = c.check("broker", json.loads(first))
        assert info["bootstrap_servers"].startswith("127.0.0.1:")
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0

    assert c.validated == set(SCHEMAS), f"not exercised: {set(SCHEMAS) - c.validated}"
