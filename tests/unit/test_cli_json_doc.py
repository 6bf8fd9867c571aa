"""``docs/cli-json.md`` documents one schema per command, in snake_case, and
the validator the CLI tests use can fail (issue 14 item 5). The broker-side
check of every command's output is ``tests/integration/test_cli_json.py``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from kafka_ordered import cli

from .. import cli_json_schema as schema_doc

SCHEMAS, DEFS = schema_doc.load()


def _commands() -> List[str]:
    sub = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


def test_every_command_has_a_schema() -> None:
    assert sorted(set(SCHEMAS) - {"error", "version"}) == _commands()
    assert "error" in SCHEMAS and "version" in SCHEMAS and DEFS


@pytest.mark.parametrize("name", sorted(SCHEMAS) + ["$defs"])
def test_schemas_follow_the_conventions(name: str) -> None:
    schema = {"$defs": DEFS} if name == "$defs" else SCHEMAS[name]
    assert schema_doc.conventions(schema) == []
    # every $ref resolves (validating null runs into each one at least on the first branch)
    text = json.dumps(schema)
    for ref in set(part.split('"')[0] for part in text.split('"$ref": "')[1:]):
        assert ref.startswith("#/$defs/") and ref[len("#/$defs/"):] in DEFS, ref


def test_the_validator_can_fail() -> None:
    layout = {"topic": "t", "epoch": 1, "initial_partitions": 2, "partitions": 2, "physical_partitions": 4,
              "hash": "murmur2", "strategy": "linear", "draining": []}
    shrink = SCHEMAS["shrink"]
    assert schema_doc.validate(layout, shrink, DEFS) == []
    bad: List[Dict[str, Any]] = [
        {k: v for k, v in layout.items() if k != "epoch"},  # missing key
        {**layout, "extra": 1},  # undocumented key
        {**layout, "epoch": "1"},  # wrong type
        {**layout, "epoch": True},  # a bool is not an integer
        {**layout, "hash": "md5"},  # not in the enum
        {**layout, "draining": [1, "2"]},  # wrong item type
    ]
    for doc in bad:
        assert schema_doc.validate(doc, shrink, DEFS), f"accepted {doc}"
    capacity = {"$ref": "#/$defs/capacity"}
    assert schema_doc.validate({"1": None, "2": 5}, capacity, DEFS) == []
    assert schema_doc.validate({"one": 5}, capacity, DEFS)
    assert schema_doc.validate(None, {"$ref": "#/$defs/follow_up"}, DEFS) == []
    assert schema_doc.validate({"done": "x"}, {"$ref": "#/$defs/follow_up"}, DEFS)
    assert schema_doc.validate(1, {"$ref": "#/$defs/nope"}, DEFS)
    assert schema_doc.validate(1, {"minimum": 0}, DEFS)  # unsupported keywords are refused
    assert schema_doc.conventions({"type": "object", "properties": {"a b": {"type": "string"}},
                                   "required": ["a b"], "additionalProperties": False})
    assert schema_doc.json_keys({"ok_key": {"0": {"gate stall s": 1}}}) == ["$.ok_key.0: 'gate stall s'"]


def test_errors_and_version_match_their_schemas(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["--version", "--json"]) == 0
    assert schema_doc.validate(json.loads(capsys.readouterr().out), SCHEMAS["version"], DEFS) == []
    for argv in (["describe", "--json"], ["describe", "t", "--json", "-X", "nope"],
                 ["describe", "t", "--json", "--command-config", str(tmp_path / "missing")]):
        assert cli.main(argv) == 2
        assert schema_doc.validate(json.loads(capsys.readouterr().out), SCHEMAS["error"], DEFS) == []
