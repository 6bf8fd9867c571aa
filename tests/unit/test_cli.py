"""The ``kafka-ordered`` command line without a broker (issue 14 items 4-7):
``--version``, ``--bootstrap-server``, ``--command-config``, errors that are
one line (JSON with ``--json``, a traceback with ``--debug``), exit codes."""

from __future__ import annotations

import json
import platform
import re
from pathlib import Path
from typing import Any, List

import confluent_kafka
import pytest

import kafka_ordered
from kafka_ordered import cli
from kafka_ordered.cli import _properties
from kafka_ordered.errors import ConfigError

NOWHERE = ["--bootstrap-server", "127.0.0.1:1", "-X", "ordered.metadata.timeout.ms=1000"]


def _run(capsys: pytest.CaptureFixture[str], argv: List[str]) -> Any:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# -- item 4: --version, --bootstrap-server, --command-config


def test_version_names_package_python_librdkafka_and_speedups(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, ["--version"])
    assert code == 0 and err == ""
    line = out.strip()
    assert line.startswith(f"kafka-ordered {kafka_ordered.__version__} ")
    assert f"Python {platform.python_version()}" in line
    assert f"librdkafka {confluent_kafka.libversion()[0]}" in line
    assert f"confluent-kafka {confluent_kafka.__version__}" in line
    assert f"C speed-ups {'on' if kafka_ordered.speedups_enabled() else 'off'}" in line
    code, out, _ = _run(capsys, ["--version", "--json"])
    assert code == 0
    assert json.loads(out) == {
        "kafka_ordered": kafka_ordered.__version__, "python": platform.python_version(),
        "confluent_kafka": confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0],
        "speedups": kafka_ordered.speedups_enabled(),
    }


def test_bootstrap_server_is_an_alias_of_bootstrap() -> None:
    for flag in ("--bootstrap-server", "--bootstrap", "-b"):
        args = cli._parser().parse_args(["describe", "t", flag, "h1:9092,h2:9092"])
        assert cli._config(args)["bootstrap.servers"] == "h1:9092,h2:9092"


def test_command_config_is_read_and_dash_x_overrides_it(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text(
        "# Kafka tools' --command-config file\n"
        "! another comment\n"
        "\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism : SCRAM-SHA-512\n"
        "sasl.username = alice\n"
        "sasl.password=p=ss:word\\\n"
        "    continued\n"
        "client.id kafka-ordered-ops\n"
        "bootstrap.servers=from-file:9092\n"
    )
    args = cli._parser().parse_args(["describe", "t", "--command-config", str(props), "-X", "client.id=cli"])
    conf = cli._config(args)
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["sasl.username"] == "alice" and conf["sasl.password"] == "p=ss:wordcontinued"
    assert conf["client.id"] == "cli"  # -X comes later
    assert conf["bootstrap.servers"] == "from-file:9092"  # no --bootstrap-server given
    args = cli._parser().parse_args(["describe", "t", "--command-config", str(props), "--bootstrap-server", "flag:1"])
    assert cli._config(args)["bootstrap.servers"] == "flag:1"  # the flag wins, as in Kafka's tools


def test_properties_syntax() -> None:
    text = "a=1\n  b:2\nc 3\nd=\ne = x\\ty\\u0041\\\\\nf=g\\\n\n# x=y\n!z=w\na=last\n"
    assert _properties.parse_properties(text, "f") == {
        "a": "last", "b": "2", "c": "3", "d": "", "e": "x\tyA\\", "f": "g",
    }
    assert _properties.parse_properties("key\\=with\\:sep=v\n", "f") == {"key=with:sep": "v"}


@pytest.mark.parametrize("text, match", [
    ("ok=1\njustakey\n", "f line 2: 'justakey' has no value"),
    ("x=\\u12\n", "f line 1: malformed"),
    ("sasl.jaas.config=org.apache...PlainLoginModule required password=\"s3cret\";\n",
     "f line 1: sasl.jaas.config is a Java client setting .* use sasl.username"),
    ("ssl.truststore.location=/x.jks\n", "ssl.ca.location"),
])
def test_properties_errors_name_the_line_and_hide_values(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        _properties.parse_properties(text, "f")
    assert "s3cret" not in str(e.value)


# -- item 7: one line, no traceback; --debug shows it


def test_missing_command_config_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.properties"
    code, out, err = _run(capsys, ["describe", "t", "--command-config", str(missing), *NOWHERE])
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"error: cannot read --command-config {missing}: No such file or directory"]
    code, out, err = _run(capsys, ["describe", "t", "--command-config", str(missing), "--debug", *NOWHERE])
    assert code == 2 and "Traceback (most recent call last)" in err and "FileNotFoundError" in err
    assert err.strip().splitlines()[-1].startswith("error: cannot read --command-config")


@pytest.mark.parametrize("setting, words", [
    ("foo", ["-X expects KEY=VALUE", "'foo'"]),
    ("=x", ["-X expects KEY=VALUE"]),
    ("ordered.metadata.timeout.ms=abc", ["ordered.metadata.timeout.ms"]),
    ("sasl.password:hunter2", ["-X expects KEY=VALUE", "not shown"]),
])
def test_bad_dash_x_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], setting: str, words: List[str]) -> None:
    code, out, err = _run(capsys, ["describe", "t", "--bootstrap-server", "127.0.0.1:1", "-X", setting])
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err
    assert all(w in lines[0] for w in words)
    assert "hunter2" not in err, "a secret leaked into the error"


def test_unexpected_errors_are_one_line_with_a_hint(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(args: Any) -> int:
        raise RuntimeError("something broke")

    monkeypatch.setattr(cli, "cmd_describe", boom)
    code, out, err = _run(capsys, ["describe", "t", *NOWHERE])
    assert code == 1
    assert err.strip().splitlines() == ["error: unexpected RuntimeError: something broke (run with --debug for the traceback)"]
    code, out, err = _run(capsys, ["describe", "t", "--debug", *NOWHERE])
    assert code == 1 and "Traceback (most recent call last)" in err and "RuntimeError: something broke" in err


# -- item 5: errors are JSON with --json


def test_json_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = _run(capsys, ["describe", "t", "--json", "-X", "foo", *NOWHERE])
    assert code == 2
    assert json.loads(out) == {"error": {"type": "ConfigError", "message": "-X expects KEY=VALUE, got 'foo'",
                                         "code": None}}
    code, out, err = _run(capsys, ["describe", "--json"])  # missing topic: a usage error
    assert code == 2
    e = json.loads(out)["error"]
    assert e["type"] == "UsageError" and "topic" in e["message"] and e["code"] is None
    code, out, err = _run(capsys, ["--json", "describe", "t", "--command-config", str(tmp_path / "x"), *NOWHERE])
    assert code == 2 and json.loads(out)["error"]["type"] == "ConfigError"


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, [])
    assert code == 2 and "a command is required" in err
    code, out, err = _run(capsys, ["expand", "t", "many"])
    assert code == 2 and "invalid int value" in err


# -- item 6: exit codes are documented


def test_help_documents_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for code in ("0", "1", "2", "3"):
        assert re.search(rf"^\s+{code}\s+\S", out, re.M), f"exit code {code} is not explained in --help"
    assert "docs/cli-json.md" in out
    with pytest.raises(SystemExit):
        cli.main(["expand", "--help"])
    assert "exit codes" in capsys.readouterr().out


# -- autoscale: a bad policy or size fails before any connection


@pytest.mark.parametrize("extra, words", [
    (["--min", "8", "--max", "2", "--target-records-per-partition", "100"], "min_partitions (8) is above max_partitions (2)"),
    (["--min", "2", "--max", "8", "--target-records-per-partition", "0"], "target_records_per_s must be > 0"),
    (["--min", "2", "--max", "8", "--target-records-per-partition", "100", "--cooldown", "-1"], "cooldown must be >= 0"),
])
def test_autoscale_bad_policy_is_one_config_error(capsys: pytest.CaptureFixture[str], extra: List[str],
                                                  words: str) -> None:
    code, out, err = _run(capsys, ["autoscale", "t", *extra, "--json", *NOWHERE])
    assert code == 2, err
    e = json.loads(out)["error"]
    assert e["type"] == "ConfigError" and words in e["message"]


def test_autoscale_sizes_and_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert [cli._size_arg(t) for t in ("5000000", "5MB", "4MiB", "512k", "1.5 GB")] == [5e6, 5e6, 4 * 2**20,
                                                                                       512e3, 1.5e9]
    code, out, err = _run(capsys, ["autoscale", "t", "--min", "2", "--max", "8", "--target-bytes-per-partition",
                                   "5XB", *NOWHERE])
    assert code == 2 and "expected a size such as 5MB" in err
    code, out, err = _run(capsys, ["autoscale", "t", "--min", "2", "--max", "8", *NOWHERE])
    assert code == 2 and "one of the arguments --target-records-per-partition --target-bytes-per-partition" in err
    code, out, err = _run(capsys, ["autoscale", "t", "--min", "2", "--max", "8", "--target-records-per-partition",
                                   "1", "--target-bytes-per-partition", "1MB", *NOWHERE])
    assert code == 2 and "not allowed with argument" in err


def test_autoscale_text_lines_and_describe_status() -> None:
    from kafka_ordered.cli import _render

    d = {"kind": "grow", "reason": "hot", "time": 0.0, "epoch": 3, "partitions": 2, "partitions_to": 4, "retire": [],
         "hottest": 1.0, "predicted_hottest": 0.5, "total": 2.0, "target": 1.0, "unit": "records"}
    assert _render.autoscaler_lines(None) == ["autoscaler: none has written a status"]
    assert _render.autoscaler_lines({"topic": "t", "autoscaler_id": "a-1", "host": "h", "pid": 3, "time": 0.0,
                                     "decision": d}) == [
        "autoscaler: a-1 (host h, pid 3), status at 1970-01-01T00:00:00Z",
        "  last decision at 1970-01-01T00:00:00Z: grow 2 -> 4 (epoch 3): hot"]
    line = {"event": "decision", "time": 0.0, "topic": "t", "autoscaler_id": "a", "leader": True, "dry_run": False,
            "decision": {**d, "kind": "retire", "retire": [4, 5]}}
    assert _render.autoscale_event_text(line) == "1970-01-01T00:00:00Z t [leader] retire 4,5 (epoch 3): hot"
    assert _render.autoscale_event_text({**line, "event": "standby", "leader": False, "decision": None}).endswith(
        "[standby] another autoscaler acts; this one stands by")
    assert "[dry run] hold at 2" in _render.autoscale_event_text(
        {**line, "dry_run": True, "decision": {**d, "kind": "hold"}})
