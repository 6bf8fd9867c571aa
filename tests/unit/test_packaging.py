"""The source distribution carries the license and the docs, and the metadata
names the license (issue 14, item 12).

Builds a real sdist (``setup.py sdist``, well under a second) from a copy of
the checkout, so the source tree gets no build leftovers.
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[2]
IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "_build", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".mypy_cache",
    ".hypothesis", "spark-warehouse", "metastore_db", "*.so", "*.pyd",
)


def _docs_sources() -> List[str]:
    """Every file under docs/ except a local build, relative to the root."""
    out = []
    for p in sorted((ROOT / "docs").rglob("*")):
        rel = p.relative_to(ROOT)
        if p.is_file() and "_build" not in rel.parts and "__pycache__" not in rel.parts:
            out.append(rel.as_posix())
    return out


def test_sdist_contains_license_and_docs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=IGNORED)
    (src / "docs" / "_build").mkdir(parents=True)  # a local docs build must stay out
    (src / "docs" / "_build" / "index.html").write_text("built")
    out = tmp_path / "dist"
    proc = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(out)], cwd=src,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (archive,) = out.glob("kafka-ordered-*.tar.gz")
    with tarfile.open(archive) as tar:
        base = tar.getnames()[0].split("/")[0]
        names = {n[len(base) + 1:] for n in tar.getnames()}
        pkg_info = tar.extractfile(f"{base}/PKG-INFO").read().decode()  # type: ignore[union-attr]
        license_text = tar.extractfile(f"{base}/LICENSE").read().decode()  # type: ignore[union-attr]

    docs = _docs_sources()
    assert "docs/conf.py" in docs and "docs/api/kafka_ordered.rst" in docs and "docs/howto/index.md" in docs
    missing = [d for d in docs if d not in names]
    assert not missing, f"docs missing from the sdist: {missing}"
    assert not [n for n in names if n.startswith("docs/_build")]
    assert {"LICENSE", "README.md", "kafka_ordered/_speedups.c"} <= names
    assert license_text == (ROOT / "LICENSE").read_text()
    assert "License: Apache-2.0" in pkg_info.splitlines()
    assert "License-File: LICENSE" in pkg_info.splitlines()
    assert "Provides-Extra: docs" in pkg_info.splitlines()


def test_license_is_the_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(text.splitlines()) > 190  # the full text, not a notice


def test_docs_extra_stays_out_of_the_test_extra() -> None:
    """``make docs`` installs Sphinx through the ``docs`` extra; CI installs
    the ``test`` extra, which must not pull Sphinx in."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    extras = cfg["options.extras_require"]
    docs = extras["docs"].split()
    assert any(r.startswith("sphinx") for r in docs) and any(r.startswith("myst-parser") for r in docs)
    assert not any(r.lower().startswith(("sphinx", "myst")) for r in extras["test"].split())
    assert cfg["metadata"]["license"] == "Apache-2.0"
    assert cfg["metadata"]["license_files"].split() == ["LICENSE"]
