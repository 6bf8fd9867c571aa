"""docs/configuration.md and docs/cli.md are generated from the code's own
tables (docs/_generate.py) and must match them (issue 27)."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType

from kafka_ordered import cli
from kafka_ordered.config import OPTIONS, REMOVED_OPTIONS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "_generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_reference_matches_the_code() -> None:
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert text == _generator().configuration_md(), "run python docs/_generate.py"
    from spark_connector.options import ORDERED_OPTIONS

    rows = dict(re.findall(r"^\| `(ordered\.[a-z.]+)` \| ([^|]+) \|", text, re.M))
    # every key any component accepts, each once, with the kind of value the code parses
    assert set(rows) == set(OPTIONS) | set(ORDERED_OPTIONS) | set(REMOVED_OPTIONS)
    for key, option in OPTIONS.items():
        assert rows[key].strip() == option.kind


def test_cli_reference_matches_the_parsers() -> None:
    gen = _generator()
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    written = re.search(r"<!-- argparse of Python (\d+\.\d+) -->", text)
    assert written is not None
    if written.group(1) == gen.PYTHON:
        assert text == gen.cli_md(), "run python docs/_generate.py"
    # On any Python: one section per command, holding every option of its parser.
    parser = cli._parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sections = dict(re.findall(r"^## (\S+)\n\n```text\n(.*?)^```", text, re.M | re.S))
    assert set(sections) == set(sub.choices) | {"kafka-ordered"}
    for name, sp in sub.choices.items():
        for action in sp._actions:
            for flag in action.option_strings:
                assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", sections[name]), (name, flag)


def test_every_page_is_in_the_navigation_and_the_readme_under_its_name() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    entries = set()
    for block in re.findall(r"```\{toctree\}\n(.*?)```", index, re.S):
        for line in block.splitlines():
            if line and not line.startswith(":"):
                entries.add(re.sub(r"^.*<(.+)>$", r"\1", line.strip()))
    pages = {p.stem for p in DOCS.glob("*.md")} - {"index"}
    assert pages <= entries, f"not in docs/index.md: {sorted(pages - entries)}"
    assert "README <readme>" in index
