"""Helpers both confluent-kafka adapters use: the process's shared layout-log
clients and the inner client's construction."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, Mapping, TypeVar

from confluent_kafka import KafkaException

from .. import _log
from ..config import client_config_error

_C = TypeVar("_C")


@contextlib.contextmanager
def _refused_settings(conf: Mapping[str, Any], component: str) -> Iterator[None]:
    """A ``KafkaException`` raised inside for a setting librdkafka refuses
    becomes a :class:`ConfigError` with librdkafka's words (and "did you
    mean" for a misspelt key); anything else passes unchanged."""
    try:
        yield
    except KafkaException as e:
        err = client_config_error(e, conf, component)
        if err is None:
            raise
        raise err from e


def _shared(opts: Mapping[str, Any], conf: Mapping[str, Any], component: str) -> _log.Shared:
    """The process's shared layout-log clients for ``conf``; a setting
    librdkafka refuses (when this call makes them) is a :class:`ConfigError`."""
    with _refused_settings(conf, component):
        return _log.acquire(
            conf,
            opts["ordered.layout.topic"],
            corrupt_policy=opts["ordered.layout.corrupt.policy"],
            timeout=opts["ordered.metadata.timeout.ms"] / 1000.0,
        )


def _new_client(cls: Callable[[Dict[str, Any]], _C], conf: Dict[str, Any], component: str) -> _C:
    """``cls(conf)``; a setting librdkafka refuses is a :class:`ConfigError`."""
    with _refused_settings(conf, component):
        return cls(conf)
