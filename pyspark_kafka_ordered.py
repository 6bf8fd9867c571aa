"""``format("kafka_ordered")`` without a registration call.

PySpark registers every top-level module whose name starts with ``pyspark_``
and that exposes ``DefaultSource`` (a ``DataSource`` subclass) by itself:
``pyspark/sql/worker/lookup_data_sources.py`` scans the Python path of
``PYSPARK_PYTHON`` once per Spark JVM, the first time any Python data source
is looked up. This module is that entry point for the ``kafka_ordered``
source and sink, so ``spark.readStream.format("kafka_ordered")`` (and
``df.write``/``df.writeStream.format("kafka_ordered")``) works as soon as
``kafka-ordered[spark]`` is installed in the interpreter Spark's Python
workers run. It re-exports ``spark_connector._discovery``, and nothing in
``spark_connector`` imports it back.

Contract:

- importing this module needs only PySpark (never ``kafka_ordered``,
  ``confluent_kafka`` or ``pyarrow``): PySpark imports every ``pyspark_*``
  module while it scans, and one that fails to import breaks the lookup of
  every Python data source of the session;
- :class:`DefaultSource` delegates to
  :class:`spark_connector.source.KafkaOrderedDataSource`, imported when Spark
  first calls it (in a Python worker); when that interpreter cannot import
  it, :class:`WorkerEnvironmentError` (:mod:`kafka_ordered.errors`, the same
  class as :class:`~kafka_ordered.errors.SparkExtraMissingError`) says which
  module is missing and how to fix it (``PYSPARK_PYTHON``, or
  ``pip install 'kafka-ordered[spark]'``) instead of a bare
  ``ModuleNotFoundError``; an interpreter that cannot import
  ``kafka_ordered`` at all gets the same message in a stand-in ``ImportError``
  subclass (``_WorkerEnvironmentError``);
- :func:`spark_connector.register` registers this same class, pickled by
  value, so that a worker interpreter without kafka-ordered at all still
  reaches that error.

``WorkerEnvironmentError`` is imported from :mod:`kafka_ordered.errors` on
first access, so that importing this module stays free of ``kafka_ordered``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_connector import INSTALL_HINT, NAME
from spark_connector._discovery import DefaultSource, import_error, reduce_by_import, restore

if TYPE_CHECKING:
    from kafka_ordered.errors import WorkerEnvironmentError

__all__ = [
    "DefaultSource",
    "NAME",
    "INSTALL_HINT",
    "WorkerEnvironmentError",
    "import_error",
    "restore",
    "reduce_by_import",
]


def __getattr__(name: str) -> Any:
    """``WorkerEnvironmentError``, from :mod:`kafka_ordered.errors`."""
    if name == "WorkerEnvironmentError":
        from kafka_ordered.errors import WorkerEnvironmentError

        return WorkerEnvironmentError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
