"""The import rules that keep the layers apart (docs/architecture.md).

- Pure protocol modules and the cores import no Kafka client, directly or
  through another module (they are driven through ports).
- Nothing outside ``kafka_ordered/testing/`` imports it at module level (the
  CLI's ``broker`` and ``demo`` verbs import it inside the command).
- ``spark_connector`` uses only public ``kafka_ordered`` modules, and never
  imports ``pyspark_kafka_ordered`` (which imports it: no import circle).
- ``import pyspark_kafka_ordered`` loads neither ``kafka_ordered`` nor a
  Kafka client nor ``pyarrow``.
- ``import kafka_ordered`` loads neither the testing helpers nor PySpark.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kafka_ordered"

PURE = [
    "layout",
    "records",
    "history",
    "gates",
    "registration",
    "assignment",
    "placement",
    "errors",
    "config",
    "listener",
    "_ports",
    "_gating",
    "_registering",
    "_hashing",
    "tokens",
    "tombstones",
    "snapshots",
    "_freshness",
    "_fastpath",
    "autoscale",
]
CLIENTS = ("confluent_kafka", "kafka", "pyspark")


def _imports(path: Path, module_level_only: bool = False) -> Iterator[Tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(ROOT).with_suffix("").parts
    package = rel[:-1] if rel[-1] != "__init__" else rel[:-1]
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            yield node.lineno, name
            for a in node.names:  # "from . import _log" names a module too
                yield node.lineno, f"{name}.{a.name}"


def _module_path(name: str) -> Path:
    parts = name.split(".")
    p = ROOT.joinpath(*parts)
    return p / "__init__.py" if p.is_dir() else p.with_suffix(".py")


def _closure(start: str) -> List[Tuple[str, str]]:
    """Every (module, imported name) reachable from ``start`` inside the repository."""
    seen = set()
    todo = [start]
    out: List[Tuple[str, str]] = []
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        path = _module_path(mod)
        if not path.exists():
            continue
        for _, name in _imports(path):
            out.append((mod, name))
            # The package's own __init__ is the public face, not a dependency.
            if name.startswith("kafka_ordered.") and name != "kafka_ordered.__init__":
                todo.append(name)
    return out


@pytest.mark.parametrize("module", [m for m in PURE if (PACKAGE / f"{m}.py").exists()])
def test_pure_modules_and_cores_import_no_client(module: str) -> None:
    bad = [(m, n) for m, n in _closure(f"kafka_ordered.{module}")
           if n.split(".")[0] in CLIENTS or n.startswith("kafka_ordered.testing")]
    assert bad == [], f"kafka_ordered.{module} reaches client or testing imports: {bad}"


def test_nothing_outside_testing_imports_it_at_module_level() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "testing" in path.relative_to(PACKAGE).parts:
            continue
        module_level_only = "cli" in path.relative_to(PACKAGE).parts or path.name == "cli.py"
        for line, name in _imports(path, module_level_only=module_level_only):
            if name.startswith("kafka_ordered.testing"):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert bad == []


def test_spark_connector_uses_only_public_modules() -> None:
    bad = []
    for path in sorted((ROOT / "spark_connector").rglob("*.py")):
        for line, name in _imports(path):
            parts = name.split(".")
            if parts[0] == "kafka_ordered" and any(p.startswith("_") for p in parts[1:]):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert bad == []


def test_spark_connector_never_imports_its_entry_point() -> None:
    """``pyspark_kafka_ordered`` re-exports ``spark_connector._discovery``;
    an import back, even inside a function, would close a circle again."""
    bad = [f"{path.relative_to(ROOT)}:{line}"
           for path in sorted((ROOT / "spark_connector").rglob("*.py"))
           for line, name in _imports(path) if name.split(".")[0] == "pyspark_kafka_ordered"]
    assert bad == []


def test_the_spark_entry_point_imports_only_pyspark() -> None:
    """PySpark's lookup imports every ``pyspark_*`` module; ours must not
    need kafka-ordered's dependencies for that."""
    pytest.importorskip("pyspark")
    code = (
        "import sys, pyspark_kafka_ordered; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('kafka_ordered', 'confluent_kafka', 'pyarrow')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_import_loads_no_testing_helpers_and_no_spark() -> None:
    code = (
        "import sys, kafka_ordered; "
        "bad = sorted(m for m in sys.modules if m.startswith(('kafka_ordered.testing', 'pyspark', 'spark_connector'))); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_checker_sees_a_violation() -> None:
    """The closure walk finds a client import when one exists (so the rules can fail)."""
    assert any(n.split(".")[0] == "confluent_kafka" for _, n in _closure("kafka_ordered.confluent"))


def test_every_subpackage_is_packaged() -> None:
    """setup.cfg lists every package directory (a missing one installs a
    broken distribution that only an editable checkout hides)."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = {p.strip() for p in cfg["options"]["packages"].split(",")}
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for top in ("kafka_ordered", "spark_connector") for p in (ROOT / top).rglob("__init__.py")}
    assert found - listed == set()


def test_group_settings_for_real_brokers_are_accepted_by_apache_kafka() -> None:
    """Tansu-only fast group settings never reach a real broker (Apache
    Kafka's default group.min.session.timeout.ms is 6000)."""
    from kafka_ordered.testing import group_config

    assert group_config(False)["session.timeout.ms"] >= 6000
    assert group_config(False, kafka_python=True)["session_timeout_ms"] >= 6000
    assert group_config(True)["session.timeout.ms"] < 6000  # the embedded broker's fast joins


def test_only_the_cli_renderer_prints() -> None:
    """``cli/_render.py`` is the one module that writes to stdout/stderr
    (the testing helpers aside): no ``print`` and no ``sys.stdout`` /
    ``sys.stderr`` anywhere else in the package."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if "testing" in rel.parts or rel.as_posix() == "cli/_render.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                bad.append(f"{rel}:{node.lineno} print()")
            if (isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr")
                    and isinstance(node.value, ast.Name) and node.value.id == "sys"):
                bad.append(f"{rel}:{node.lineno} sys.{node.attr}")
    assert bad == []
