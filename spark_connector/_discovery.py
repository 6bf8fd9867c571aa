"""The ``kafka_ordered`` data source as PySpark discovers it, and the
pickling of the source's objects that gives a worker without kafka-ordered a
precise error.

:mod:`pyspark_kafka_ordered` (the top-level module PySpark's lookup imports)
re-exports this module, and :func:`spark_connector.register` registers its
:class:`DefaultSource` with this module pickled by value; nothing in
``spark_connector`` imports ``pyspark_kafka_ordered``.

Contract: importing this module needs only PySpark (never ``kafka_ordered``,
``confluent_kafka`` or ``pyarrow``), and every function and class here runs
when shipped by value to an interpreter that has only PySpark: they refer to
no other module of the project at module level (imports happen inside the
calls that need them) and to plain values of this one.
"""

from __future__ import annotations

import pickle
import sys
from importlib import import_module
from typing import Any, Dict, Tuple, Type

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from . import INSTALL_HINT, NAME

__all__ = ["DefaultSource", "import_error", "restore", "reduce_by_import"]

# Top-level modules that only the Spark extra brings.
_SPARK_EXTRA = ("pyspark", "pyarrow")


class _WorkerEnvironmentError(ImportError):
    """What :func:`import_error` returns where ``kafka_ordered.errors`` cannot
    be imported (kafka-ordered or a dependency of it is missing): the contract
    of :class:`kafka_ordered.errors.WorkerEnvironmentError` outside the
    hierarchy, which is out of reach there."""


def _error_class() -> Type[ImportError]:
    """:class:`kafka_ordered.errors.WorkerEnvironmentError` when this
    interpreter can import it, else :class:`_WorkerEnvironmentError`."""
    try:
        from kafka_ordered.errors import WorkerEnvironmentError
    except ImportError:
        return _WorkerEnvironmentError
    return WorkerEnvironmentError


def import_error(err: ImportError, where: str = "Spark's Python worker") -> ImportError:
    """A :class:`kafka_ordered.errors.WorkerEnvironmentError` explaining
    ``err`` (raised while importing the source in ``where``): a missing
    ``pyspark``/``pyarrow`` gets the install hint, anything else
    (``kafka_ordered``, ``spark_connector``, ``confluent_kafka``...) says to
    point ``PYSPARK_PYTHON`` at an interpreter that has kafka-ordered
    installed. Where ``kafka_ordered.errors`` itself cannot be imported, the
    same message in a stand-in ``ImportError`` subclass named
    ``_WorkerEnvironmentError``."""
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
    return _error_class()(msg, name=err.name)


def _implementation() -> Any:
    """``spark_connector.source.KafkaOrderedDataSource``; raises
    :func:`import_error`'s error when this interpreter cannot import it."""
    try:
        from spark_connector.source import KafkaOrderedDataSource
    except ImportError as e:
        raise import_error(e) from e
    return KafkaOrderedDataSource


def restore(module: str, qualname: str, state: bytes) -> Any:
    """Rebuild an object of the source pickled through ``__reduce__`` (its
    class ``module.qualname``, its ``__dict__`` pickled in ``state``).

    The class is imported before the state is unpickled, so a worker without
    kafka-ordered gets :func:`import_error`'s error rather than a bare
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
    (:func:`import_error` says what is missing when it cannot be imported)."""

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
