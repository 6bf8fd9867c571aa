"""``format("kafka_ordered")`` without a registration call.

PySpark registers every top-level module whose name starts with ``pyspark_``
and that exposes ``DefaultSource`` (a ``DataSource`` subclass) by itself:
``pyspark/sql/worker/lookup_data_sources.py`` scans the Python path of
``PYSPARK_PYTHON`` once per Spark JVM, the first time any Python data source
is looked up. This module is that entry point for the ``kafka_ordered``
source and sink, so ``spark.readStream.format("kafka_ordered")`` (and
``df.write``/``df.writeStream.format("kafka_ordered")``) works as soon as
``kafka-ordered[spark]`` is installed in the interpreter Spark's Python
workers run.

Contract:

- importing this module needs only PySpark (never ``kafka_ordered``,
  ``confluent_kafka`` or ``pyarrow``): PySpark imports every ``pyspark_*``
  module while it scans, and one that fails to import breaks the lookup of
  every Python data source of the session;
- :class:`DefaultSource` delegates to
  :class:`spark_connector.source.KafkaOrderedDataSource`, imported when Spark
  first calls it (in a Python worker); when that interpreter cannot import
  it, :class:`WorkerEnvironmentError` says which module is missing and how to
  fix it (``PYSPARK_PYTHON``, or ``pip install 'kafka-ordered[spark]'``)
  instead of a bare ``ModuleNotFoundError``;
- :func:`spark_connector.register` registers this same class, pickled by
  value, so that a worker interpreter without kafka-ordered at all still
  reaches that error.
"""

from __future__ import annotations

import pickle
import sys
from importlib import import_module
from typing import Any, Dict, Tuple

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

__all__ = [
    "DefaultSource",
    "NAME",
    "INSTALL_HINT",
    "WorkerEnvironmentError",
    "import_error",
    "restore",
    "reduce_by_import",
]

#: The short name of the source (``format("kafka_ordered")``).
NAME = "kafka_ordered"

#: How to install what the source needs at run time.
INSTALL_HINT = "pip install 'kafka-ordered[spark]'"

# Top-level modules that only the Spark extra brings.
_SPARK_EXTRA = ("pyspark", "pyarrow")


class WorkerEnvironmentError(ImportError):
    """The interpreter running the ``kafka_ordered`` source cannot import what
    it needs (kafka-ordered itself, or the ``spark`` extra)."""


def import_error(err: ImportError, where: str = "Spark's Python worker") -> WorkerEnvironmentError:
    """A :class:`WorkerEnvironmentError` explaining ``err`` (raised while
    importing the source in ``where``): a missing ``pyspark``/``pyarrow`` gets
    the install hint, anything else (``kafka_ordered``, ``spark_connector``,
    ``confluent_kafka``...) says to point ``PYSPARK_PYTHON`` at an interpreter
    that has kafka-ordered installed."""
    missing = (err.name or "").split(".")[0] or str(err)
    exe = sys.executable or "python"
    if missing in _SPARK_EXTRA:
        msg = (
            f"the kafka_ordered Spark source needs {missing}, which {where} ({exe}) cannot import: "
            f"install the spark extra there: {INSTALL_HINT} ({err})"
        )
    else:
        msg = (
            f"{where} ({exe}) cannot import {missing!r}, which the kafka_ordered Spark source needs ({err}). "
            "Spark runs Python data sources in worker processes started with PYSPARK_PYTHON (default: `python3` "
            "on PATH), not in the driver's interpreter: set PYSPARK_PYTHON (or spark.pyspark.python) to an "
            f"interpreter that has kafka-ordered installed ({INSTALL_HINT}), e.g. your virtualenv's python, "
            "before the SparkSession starts."
        )
    return WorkerEnvironmentError(msg, name=err.name)


def _implementation() -> Any:
    """``spark_connector.source.KafkaOrderedDataSource``; raises
    :class:`WorkerEnvironmentError` when this interpreter cannot import it."""
    try:
        from spark_connector.source import KafkaOrderedDataSource
    except ImportError as e:
        raise import_error(e) from e
    return KafkaOrderedDataSource


def restore(module: str, qualname: str, state: bytes) -> Any:
    """Rebuild an object of the source pickled through ``__reduce__`` (its
    class ``module.qualname``, its ``__dict__`` pickled in ``state``).

    The class is imported before the state is unpickled, so a worker without
    kafka-ordered gets :class:`WorkerEnvironmentError` rather than a bare
    ``ModuleNotFoundError``."""
    try:
        cls = getattr(import_module(module), qualname)
    except ImportError as e:
        raise import_error(e) from e
    obj = cls.__new__(cls)
    obj.__dict__.update(pickle.loads(state))
    return obj


def reduce_by_import(obj: Any, state: Dict[str, Any]) -> Tuple[Any, Tuple[str, str, bytes]]:
    """``__reduce__`` value that pickles ``obj`` as its class name plus
    ``state`` (see :func:`restore`)."""
    cls = type(obj)
    return restore, (cls.__module__, cls.__qualname__, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))


class DefaultSource(DataSource):
    """The ``kafka_ordered`` data source as PySpark discovers it: every call
    is delegated to :class:`spark_connector.source.KafkaOrderedDataSource`
    (see the module docstring for the error when it cannot be imported)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def _impl(self) -> DataSource:
        impl: DataSource = _implementation()(self.options)
        return impl

    def schema(self) -> StructType:
        """The built-in Kafka source's row schema (runs at ``load()``)."""
        schema: StructType = self._impl().schema()  # type: ignore[assignment]
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader (``spark.read``)."""
        return self._impl().reader(schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The micro-batch reader (``spark.readStream``)."""
        return self._impl().streamReader(schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """The batch writer (``df.write``)."""
        return self._impl().writer(schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The micro-batch writer (``df.writeStream``)."""
        return self._impl().streamWriter(schema, overwrite)
