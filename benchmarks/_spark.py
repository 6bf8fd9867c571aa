"""Shared pieces of the Spark benchmarks: one ``local[cores]`` session with
the ``kafka_ordered`` source/sink registered and Spark's own Kafka connector
(``spark-sql-kafka-0-10``, from ``make spark-kafka-jars``) on its classpath,
and the producer settings that let the built-in source read a topic on the
embedded broker."""

from __future__ import annotations

import os
import sys
from typing import Any, Dict

from kafka_ordered.testing import BOOTSTRAP_ENV, builtin_kafka_jars


def session(app: str, cores: int) -> Any:
    """The benchmark's SparkSession. Exits with a message when Spark's Kafka
    connector is not in the local Maven repository."""
    jars = builtin_kafka_jars()
    if not jars:
        raise SystemExit("Spark's Kafka connector (spark-sql-kafka-0-10) is missing: run `make spark-kafka-jars`")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_connector

    spark = (SparkSession.builder.master(f"local[{cores}]").appName(app)
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.memory", "1g")
             .config("spark.jars", ",".join(jars))
             .config("spark.sql.shuffle.partitions", str(cores)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)
    return spark


def readable_by_builtin() -> Dict[str, Any]:
    """Producer settings for data the built-in source must read: on the
    embedded broker one record per batch (its ListOffsets is wrong after
    multi-record batches and the built-in source trusts it); nothing on a
    real broker."""
    return {} if os.environ.get(BOOTSTRAP_ENV) else {"batch.num.messages": 1}
