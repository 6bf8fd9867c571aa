"""The ``kafka-ordered`` command line against a broker (issue 14 items 4-8):
``--command-config``, one-line errors for an unreachable broker, exit 3 when
a follow-up fails, ``plan`` predicting ``expand``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List

import pytest

from kafka_ordered.cli import main

UNREACHABLE = ["--bootstrap-server", "127.0.0.1:1", "-X", "ordered.metadata.timeout.ms=1500"]


def _run(capsys: pytest.CaptureFixture[str], argv: List[str]) -> Any:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_unreachable_broker_is_one_line_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, ["describe", "orders", *UNREACHABLE])
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "127.0.0.1:1" in lines[0]
    assert "broker unavailable" in lines[0]
    code, out, err = _run(capsys, ["describe", "orders", "--debug", *UNREACHABLE])
    assert code == 1 and "Traceback (most recent call last)" in err and "BrokerUnavailableError" in err
    code, out, err = _run(capsys, ["describe", "orders", "--json", *UNREACHABLE])
    e = json.loads(out)["error"]
    assert code == 1 and e["type"] == "BrokerUnavailableError" and isinstance(e["code"], int)
    assert "127.0.0.1:1" in e["message"]


def test_command_config_file_reaches_the_broker(bootstrap: str, layout_topic: str, topic: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    props = tmp_path / "admin.properties"
    props.write_text(f"# as for kafka-topics.sh --command-config\nbootstrap.servers={bootstrap}\n"
                     f"client.id=kafka-ordered-ops\nsocket.timeout.ms : 10000\n")
    base = ["--command-config", str(props), "--layout-topic", layout_topic]
    assert _run(capsys, ["create", topic, "-p", "2", *base])[0] == 0
    code, out, _ = _run(capsys, ["describe", topic, "--json", *base])
    assert code == 0 and json.loads(out)["layout"]["partitions"] == 2
    # a bad librdkafka value in the file is a configuration error: exit 2, one line
    props.write_text(f"bootstrap.servers={bootstrap}\nsocket.timeout.ms=soon\n")
    code, out, err = _run(capsys, ["describe", topic, *base])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "socket.timeout.ms" in err


def test_plan_says_what_expand_then_does(bootstrap: str, layout_topic: str, topic: str, embedded: bool,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--bootstrap-server", bootstrap, "--layout-topic", layout_topic]
    assert _run(capsys, ["create", topic, "-p", "2", "--physical", "4", *base])[0] == 0
    for target in (3, 6, 7):
        code, out, err = _run(capsys, ["plan", topic, "--to", str(target), *base])
        predicted = code == 0
        assert ("expand would succeed" in out) == predicted
        if not predicted:
            assert "expand would FAIL" in out and err.startswith("error: expand would fail") and "CreatePartitions" in err
            assert "spare partitions now: 1 (3)" in out
        code, out, err = _run(capsys, ["expand", topic, str(target), *base])
        assert (code == 0) == predicted, f"plan predicted {predicted} for {target}; expand exited {code}: {err}"
        if embedded and target == 6:
            assert not predicted and "CreatePartitions" in err
        if not embedded:  # Apache Kafka creates partitions: every expansion goes through
            assert predicted, err
    if not embedded:
        # ... unless the brokers' capacity (KIP-578) forbids it: predicted, refused, nothing changed.
        limit = ["--max-partitions", "1"]
        code, out, err = _run(capsys, ["plan", topic, "--to", "8", *limit, *base])
        assert code == 1 and "guard rails" in err and "Remaining partition capacity per broker" in err
        code, out, err = _run(capsys, ["expand", topic, "8", *limit, *base])
        assert code == 1 and "guard rails" in err
        code, out, _ = _run(capsys, ["describe", topic, "--json", *base])
        assert json.loads(out)["layout"]["partitions"] == 7


def test_follow_up_failure_exits_3_and_says_what_to_run(bootstrap: str, layout_topic: str, topic: str,
                                                        embedded: bool, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--bootstrap-server", bootstrap, "--layout-topic", layout_topic]
    assert _run(capsys, ["create", topic, "-p", "2", "--physical", "4", *base])[0] == 0
    code, out, err = _run(capsys, ["expand", topic, "3", "--elect-leaders", "--json", *base])
    data = json.loads(out)
    assert data["partitions"] == 3  # the expansion was applied either way
    if embedded:  # no ElectLeaders on the embedded broker
        assert code == 3
        follow = data["follow_up"]
        assert follow["run"] == (f"kafka-ordered elect-leaders {topic} --partitions 2 --bootstrap-server {bootstrap}"
                                 f" --layout-topic {layout_topic}")
        assert "ElectLeaders" in follow["failed"]
        assert err.strip().splitlines() == [
            f"error: {follow['done']}, but {follow['failed']}; once that is fixed run: {follow['run']}"]
    else:
        assert code == 0 and data["follow_up"] is None


def test_broker_port_0_picks_a_free_port_and_a_bad_port_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """``kafka-ordered broker --port 0`` means "any free port", as it does for
    most servers; the address printed is the real one and answers Metadata."""
    import subprocess
    import sys

    from confluent_kafka.admin import AdminClient

    proc = subprocess.Popen([sys.executable, "-m", "kafka_ordered.cli", "broker", "--port", "0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, proc.stderr.read() if proc.stderr else ""
        address = json.loads(first)["bootstrap_servers"]
        assert address.startswith("127.0.0.1:") and int(address.rsplit(":", 1)[1]) > 0
        md = AdminClient({"bootstrap.servers": address}).list_topics(timeout=10)
        assert md.brokers
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0
    for bad in ("-1", "65536"):
        code, out, err = _run(capsys, ["broker", "--port", bad])
        assert code == 2 and out == "" and "--port" in err and "0-65535" in err
