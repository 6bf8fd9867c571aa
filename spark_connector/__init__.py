"""Spark Structured Streaming source and sink for kafka-ordered topics.

>>> df = (spark.readStream.format("kafka_ordered")
...       .option("kafka.bootstrap.servers", "localhost:9092")
...       .option("subscribe", "orders")
...       .load())
>>> q = (df.writeStream.format("kafka_ordered")   # the sink (spark_connector.sink)
...      .option("kafka.bootstrap.servers", "localhost:9092")
...      .option("topic", "orders-copy")
...      .option("checkpointLocation", "/tmp/ck")
...      .start())

PySpark finds the source by itself (the top-level module
``pyspark_kafka_ordered``) when kafka-ordered is installed in the interpreter
its Python workers run (``PYSPARK_PYTHON``). :func:`register` registers it
explicitly, which also gives a precise error when those workers cannot
import kafka-ordered.

PySpark is imported only when :func:`register` is called (``kafka_ordered``
itself never needs Spark). Importing this package imports nothing else
(PySpark's lookup imports it through ``pyspark_kafka_ordered``):
:class:`SparkExtraMissingError` lives in :mod:`kafka_ordered.errors`, with
every other error the connector raises, and is imported from there on first
access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kafka_ordered.errors import SparkExtraMissingError

__all__ = ["register", "NAME", "INSTALL_HINT", "SparkExtraMissingError", "missing_extra"]

#: The source's short name: ``format("kafka_ordered")``.
NAME = "kafka_ordered"

#: How to install what the Spark source needs.
INSTALL_HINT = "pip install 'kafka-ordered[spark]'"


def __getattr__(name: str) -> Any:
    """``SparkExtraMissingError``, from :mod:`kafka_ordered.errors`."""
    if name == "SparkExtraMissingError":
        from kafka_ordered.errors import SparkExtraMissingError

        return SparkExtraMissingError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def missing_extra(err: ImportError) -> "SparkExtraMissingError":
    """The :class:`~kafka_ordered.errors.SparkExtraMissingError` to raise
    instead of ``err`` (an import of ``pyspark`` or ``pyarrow`` that failed):
    it names the module and the install command."""
    from kafka_ordered.errors import SparkExtraMissingError

    missing = (err.name or "").split(".")[0] or str(err)
    return SparkExtraMissingError(
        f"the kafka_ordered Spark source needs {missing}, which is not installed: {INSTALL_HINT} ({err})",
        name=err.name,
    )


def register(spark: Any) -> None:
    """Register the ``kafka_ordered`` Python data source with ``spark`` (a
    ``SparkSession``). Not needed when PySpark discovers it (see the module
    docstring); harmless when it did.

    The class (``pyspark_kafka_ordered.DefaultSource``) is pickled by value,
    so a Spark worker whose interpreter lacks kafka-ordered raises
    :class:`~kafka_ordered.errors.WorkerEnvironmentError` (a stand-in,
    ``_WorkerEnvironmentError``, where ``kafka_ordered`` itself is missing)
    saying to set ``PYSPARK_PYTHON``, instead of a bare
    ``ModuleNotFoundError``. Raises
    :class:`~kafka_ordered.errors.SparkExtraMissingError` when
    ``pyspark``/``pyarrow`` are missing here."""
    try:
        import pyarrow  # noqa: F401  (needed by the executors' Arrow batches)
        from pyspark import cloudpickle

        from . import _discovery
    except ImportError as e:
        if (e.name or "").split(".")[0] in ("pyspark", "pyarrow"):
            raise missing_extra(e) from e
        raise
    cloudpickle.register_pickle_by_value(_discovery)
    spark.dataSource.register(_discovery.DefaultSource)
