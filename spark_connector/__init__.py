"""Spark Structured Streaming source for kafka-ordered topics.

>>> import spark_connector
>>> spark_connector.register(spark)
>>> df = (spark.readStream.format("kafka_ordered")
...       .option("kafka.bootstrap.servers", "localhost:9092")
...       .option("subscribe", "orders")
...       .load())

PySpark is imported only when :func:`register` is called (``kafka_ordered``
itself never needs Spark).
"""

from __future__ import annotations

from typing import Any

__all__ = ["register", "NAME"]

NAME = "kafka_ordered"


def register(spark: Any) -> None:
    """Register the ``kafka_ordered`` Python data source with ``spark``
    (a ``SparkSession``); needs ``pip install 'kafka-ordered[spark]'``."""
    from .source import KafkaOrderedDataSource

    spark.dataSource.register(KafkaOrderedDataSource)
