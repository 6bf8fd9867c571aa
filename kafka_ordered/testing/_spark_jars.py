"""Spark's own Kafka connector (``spark-sql-kafka-0-10``) for tests and
benchmarks that compare the ``kafka_ordered`` source and sink with it.

PySpark ships without it. :func:`builtin_kafka_jars` finds its jars in the
local Maven repository (``~/.m2/repository``, where ``mvn dependency:get``
puts them; ``make spark-kafka-jars`` runs :func:`fetch_builtin_kafka_jars`)
or takes them from :data:`SPARK_KAFKA_JARS_ENV`; they are then loaded with
``spark.jars`` (local files: nothing is resolved when a session starts).

Version: PySpark 4.3.0 is installed, but ``spark-sql-kafka-0-10_2.13:4.3.0``
does not resolve on Maven Central (checked 2026-11-24); 4.2.0, the nearest
that does, is used and works with PySpark 4.3.0 (read and write).
"""

from __future__ import annotations

import os
import subprocess
from typing import List, Optional, Tuple

__all__ = ["SPARK_KAFKA_ARTIFACTS", "SPARK_KAFKA_JARS_ENV", "builtin_kafka_jars", "fetch_builtin_kafka_jars"]

#: Comma-separated jar paths to use instead of the local Maven repository.
SPARK_KAFKA_JARS_ENV = "KAFKA_ORDERED_SPARK_KAFKA_JARS"

#: (group, artifact, version) of the connector and what PySpark's own jars
#: lack of its runtime dependencies (zstd, lz4, snappy, jsr305 and
#: scala-parallel-collections come with PySpark).
SPARK_KAFKA_ARTIFACTS: Tuple[Tuple[str, str, str], ...] = (
    ("org.apache.spark", "spark-sql-kafka-0-10_2.13", "4.2.0"),
    ("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", "4.2.0"),
    ("org.apache.kafka", "kafka-clients", "3.9.2"),
    ("org.apache.commons", "commons-pool2", "2.13.1"),
)


def _m2() -> str:
    return os.path.join(os.path.expanduser("~"), ".m2", "repository")


def _path(group: str, artifact: str, version: str) -> str:
    return os.path.join(_m2(), *group.split("."), artifact, version, f"{artifact}-{version}.jar")


def builtin_kafka_jars() -> Optional[List[str]]:
    """The jar paths of Spark's Kafka connector, or ``None`` when one is
    missing (from :data:`SPARK_KAFKA_JARS_ENV` when set, else the local
    Maven repository)."""
    given = os.environ.get(SPARK_KAFKA_JARS_ENV)
    paths = [p for p in given.split(",") if p] if given else [_path(*a) for a in SPARK_KAFKA_ARTIFACTS]
    return paths if paths and all(os.path.isfile(p) for p in paths) else None


def fetch_builtin_kafka_jars(timeout: float = 600.0) -> List[str]:
    """Download the jars into the local Maven repository with
    ``mvn dependency:get`` (one artifact at a time, not transitive) and
    return their paths. Raises ``RuntimeError`` naming the artifact that
    did not resolve."""
    for group, artifact, version in SPARK_KAFKA_ARTIFACTS:
        if os.path.isfile(_path(group, artifact, version)):
            continue
        spec = f"{group}:{artifact}:{version}"
        done = subprocess.run(["mvn", "-q", "dependency:get", "-Dtransitive=false", f"-Dartifact={spec}"],
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"mvn dependency:get {spec} failed: {(done.stdout + done.stderr)[-2000:]}")
    return [_path(*a) for a in SPARK_KAFKA_ARTIFACTS]
