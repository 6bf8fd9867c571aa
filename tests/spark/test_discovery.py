"""``format("kafka_ordered")`` without ``spark_connector.register``, and the
errors of an installation that lacks something.

PySpark looks Python data sources up once per Spark JVM (the first time any
is used): ``lookup_data_sources.py`` imports every top-level ``pyspark_*``
module of ``PYSPARK_PYTHON``'s path and registers their ``DefaultSource``.
The shared test session calls ``register`` anyway, so these tests start their
own SparkSession (a fresh JVM) in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
from confluent_kafka import Producer

from kafka_ordered.admin import LayoutAdmin

ROOT = Path(__file__).resolve().parents[2]

_SESSION = """
import json, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
opts = json.loads(sys.argv[1])
out = {}
"""

_BLOCKER = """
import sys

class _Block:
    BLOCKED = set(%r)

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, _Block())
"""


def _blocker(where: Path, modules: List[str]) -> Path:
    """A directory whose ``sitecustomize`` makes ``modules`` unimportable."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "sitecustomize.py").write_text(_BLOCKER % (modules,))
    return where


def _run(code: str, args: List[str], env: Optional[Dict[str, str]] = None, timeout: float = 60) -> Dict[str, Any]:
    """Run ``code`` in a fresh interpreter; it prints one JSON line last."""
    base = {k: v for k, v in os.environ.items() if k != "KAFKA_ORDERED_SPARK_POOL_STATS"}
    base.update({"SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable,
                 "PYSPARK_DRIVER_PYTHON": sys.executable})
    base.update(env or {})
    proc = subprocess.run([sys.executable, "-c", code, *args], env=base, capture_output=True, text=True,
                          timeout=timeout, cwd=str(ROOT))
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    result: Dict[str, Any] = json.loads(lines[-1])
    return result


@pytest.fixture
def filled(bootstrap: str, unique: Callable[[str], str], layout_topic: str) -> Iterator[Dict[str, str]]:
    """Options of a managed topic holding 30 records."""
    topic = unique("discover")
    conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
    with LayoutAdmin(conf) as admin:
        admin.create_topic(topic, 1, physical_partitions=1)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        p.produce(topic, value=b"v", key=b"k", partition=0)
    assert p.flush(30) == 0
    yield {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "ordered.layout.topic": layout_topic,
           "startingOffsets": "earliest"}


def test_format_works_without_register(filled: Dict[str, str]) -> None:
    code = _SESSION + textwrap.dedent("""
        out["count"] = spark.read.format("kafka_ordered").options(**opts).load().count()
        out["stream_columns"] = spark.readStream.format("kafka_ordered").options(**opts).load().columns
        # Nothing in the driver imported (let alone registered) the connector.
        out["driver_imported"] = sorted(m for m in sys.modules if m.split(".")[0] in
                                        ("spark_connector", "pyspark_kafka_ordered", "kafka_ordered"))
        spark.stop()
        print(json.dumps(out))
    """)
    out = _run(code, [json.dumps(filled)])
    assert out["count"] == 30
    assert out["stream_columns"] == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert out["driver_imported"] == []


def test_worker_without_kafka_ordered_says_to_set_pyspark_python(filled: Dict[str, str], tmp_path: Path) -> None:
    # Workers run an interpreter that has pyspark and pyarrow but not kafka-ordered
    # (the venv's python with the project blocked and off its path); the driver has it.
    block = _blocker(tmp_path / "block", ["kafka_ordered", "spark_connector", "pyspark_kafka_ordered",
                                          "confluent_kafka"])
    wrapper = tmp_path / "worker-python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{block}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    code = _SESSION + textwrap.dedent("""
        import spark_connector
        spark_connector.register(spark)
        try:
            spark.read.format("kafka_ordered").options(**opts).load()
            out["error"] = None
        except Exception as e:
            out["error"] = str(e)
        spark.stop()
        print(json.dumps(out))
    """)
    out = _run(code, [json.dumps(filled)], env={"PYSPARK_PYTHON": str(wrapper)})
    err = out["error"]
    assert err is not None
    assert "WorkerEnvironmentError" in err and "cannot import 'spark_connector'" in err, err[:3000]
    assert "set PYSPARK_PYTHON" in err and "pip install 'kafka-ordered[spark]'" in err


@pytest.mark.parametrize("missing", ["pyarrow", "pyspark"])
def test_missing_spark_extra_gives_the_install_hint(missing: str, tmp_path: Path) -> None:
    block = _blocker(tmp_path / "block", [missing])
    code = textwrap.dedent("""
        import json
        out = {}
        import spark_connector
        try:
            spark_connector.register(object())
        except ImportError as e:
            out["register"] = [type(e).__name__, str(e)]
        try:
            import spark_connector.source
        except ImportError as e:
            out["import"] = [type(e).__name__, str(e)]
        print(json.dumps(out))
    """)
    out = _run(code, [], env={"PYTHONPATH": f"{block}{os.pathsep}{ROOT}"})
    for where in ("register", "import"):
        kind, msg = out[where]
        assert kind == "SparkExtraMissingError", out
        assert f"needs {missing}" in msg and "pip install 'kafka-ordered[spark]'" in msg, msg
