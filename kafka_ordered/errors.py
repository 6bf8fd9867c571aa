"""Errors raised by kafka-ordered, and the one table that maps broker and
client error codes to them.

Every error derives from :class:`KafkaOrderedError`, the Spark connector's
(``spark_connector``, ``pyspark_kafka_ordered``) included; those modules
re-export the ones they raise. Errors caused by a broker
response keep the broker's error code in :attr:`KafkaOrderedError.code` (the
librdkafka/Kafka numeric code, or ``None``) and chain the client exception as
``__cause__``. Errors about bad arguments also derive from ``ValueError`` or
``TypeError`` so that callers validating input can catch the builtin.

Translation, modelled on aiokafka's ``errors.py``: each class names the codes
that raise it in :attr:`KafkaOrderedError.codes` (by their
``confluent_kafka.KafkaError`` attribute names: Kafka protocol codes are
>= 0, librdkafka's client-side codes < 0) and says in
:attr:`KafkaOrderedError.retriable` whether the same call may succeed when
retried; :data:`CODES` (every code known) and :func:`for_code` are derived
from the classes, and :func:`translate` turns a confluent-kafka, kafka-python
or aiokafka failure into an instance (``raise translate(e, ...) from e``).
This module is pure: it imports no client (their errors are recognised by
duck typing).
"""

from __future__ import annotations

import concurrent.futures
from types import MappingProxyType
from typing import Any, ClassVar, Dict, Iterator, Mapping, Optional, Tuple, Type

__all__ = [
    "KafkaOrderedError",
    "ConfigError",
    "InvalidLayoutError",
    "InvalidKeyError",
    "UnknownTopicError",
    "TopicNotManagedError",
    "TopicAlreadyManagedError",
    "BrokerUnavailableError",
    "UnstableOffsetCommitError",
    "AuthenticationError",
    "UnsupportedBrokerApiError",
    "LayoutLogError",
    "LayoutLogUnwritableError",
    "UnsafeLayoutLogError",
    "CorruptLayoutRecordError",
    "UnsupportedLayoutVersionError",
    "ProtocolVersionError",
    "StaleLayoutViewError",
    "ConcurrentLayoutChangeError",
    "TopicInUseError",
    "HashDetectionError",
    "RegistrationError",
    "SwitchTimeoutError",
    "PartitionOverrideError",
    "PlacementError",
    "GuardRailsError",
    "LayoutTopicNotFoundError",
    "DataLossError",
    "DeliveryError",
    "NullTopicError",
    "SparkExtraMissingError",
    "WorkerEnvironmentError",
    "CODES",
    "for_code",
    "translate",
]


class KafkaOrderedError(Exception):
    """Root of every error raised by kafka-ordered.

    ``code`` is the broker/librdkafka error code when the error came from a
    broker response, else ``None``. Class attributes: ``codes``, the codes
    (name: number) that :func:`for_code` maps to this very class (not
    inherited), and ``retriable``, whether retrying the call may succeed.
    """

    codes: ClassVar[Mapping[str, int]] = {}
    retriable: ClassVar[bool] = False

    def __init__(self, message: str, *, code: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code


class ConfigError(KafkaOrderedError, ValueError):
    """An ``ordered.*`` configuration key is unknown, misspelt or has a bad value."""


class InvalidLayoutError(KafkaOrderedError, ValueError):
    """A layout or layout change is invalid (counts out of range, shrink below
    the initial count, expand to fewer partitions, unknown hash, ...)."""


class InvalidKeyError(KafkaOrderedError, TypeError):
    """A record key has a type that cannot be hashed (keys are ``bytes``)."""


class UnknownTopicError(KafkaOrderedError):
    """The topic does not exist on the cluster."""

    codes = {"UNKNOWN_TOPIC_OR_PART": 3, "_UNKNOWN_TOPIC": -188, "_UNKNOWN_PARTITION": -190}


class TopicNotManagedError(KafkaOrderedError):
    """The topic exists but has no layout in the layout log (use ``adopt``)."""


class TopicAlreadyManagedError(KafkaOrderedError):
    """The topic already has a layout (or already exists, for ``create_topic``)."""

    codes = {"TOPIC_ALREADY_EXISTS": 36}


class BrokerUnavailableError(KafkaOrderedError):
    """No broker answered within the timeout."""

    codes = {
        "_TRANSPORT": -195, "_ALL_BROKERS_DOWN": -187, "_TIMED_OUT": -185, "_RESOLVE": -193,
        "_DESTROY_BROKER": -137, "_TIMED_OUT_QUEUE": -166, "_MSG_TIMED_OUT": -192, "_WAIT_COORD": -180,
        "_NOENT": -156,  # "no leaders found": no broker answered metadata
        "REQUEST_TIMED_OUT": 7, "LEADER_NOT_AVAILABLE": 5, "NOT_LEADER_FOR_PARTITION": 6,
        "BROKER_NOT_AVAILABLE": 8, "COORDINATOR_NOT_AVAILABLE": 15,
        "COORDINATOR_LOAD_IN_PROGRESS": 14, "NOT_COORDINATOR": 16,  # the group coordinator moving
    }
    retriable = True


class UnstableOffsetCommitError(KafkaOrderedError):
    """A group's commit of the partition waits on an open transaction
    (``send_offsets_to_transaction``, KIP-447): it is not stable yet. Retriable:
    a read after the transaction commits or aborts succeeds."""

    codes = {"UNSTABLE_OFFSET_COMMIT": 88}
    retriable = True


class AuthenticationError(KafkaOrderedError):
    """The cluster refused the client's credentials or TLS handshake (wrong
    SASL password or mechanism, untrusted certificate). Not retriable: fix
    the ``sasl.*`` / ``ssl.*`` settings."""

    codes = {"_AUTHENTICATION": -169, "_SSL": -181, "SASL_AUTHENTICATION_FAILED": 58}


class UnsupportedBrokerApiError(KafkaOrderedError):
    """The broker does not implement a Kafka API this operation needs.

    ``api`` names the missing Kafka API (e.g. ``"CreatePartitions"``).
    """

    # INVALID_REQUEST: how brokers without an API (Tansu) answer it.
    codes = {"_UNSUPPORTED_FEATURE": -165, "UNSUPPORTED_VERSION": 35, "INVALID_REQUEST": 42}

    def __init__(self, message: str, *, api: str, code: Optional[int] = None) -> None:
        super().__init__(message, code=code)
        self.api = api


class LayoutLogError(KafkaOrderedError):
    """The layout log cannot be read, created or trusted."""


class LayoutLogUnwritableError(LayoutLogError):
    """An append to the layout log was not acknowledged."""


class UnsafeLayoutLogError(LayoutLogError):
    """The layout log topic is configured so that it can lose records
    (finite retention, compaction, more than one partition)."""


class CorruptLayoutRecordError(LayoutLogError):
    """A layout-log record does not parse or fails validation.

    ``offset`` is its offset in the layout log (partition 0 of the layout
    topic), ``reason`` what is wrong with it.
    """

    def __init__(self, message: str, *, offset: int, reason: str = "", code: Optional[int] = None) -> None:
        super().__init__(message, code=code)
        self.offset = offset
        self.reason = reason


class UnsupportedLayoutVersionError(LayoutLogError):
    """The layout log holds a record written by a newer kafka-ordered, in a
    format this version cannot read: upgrade this client. ``offset`` is the
    record's offset, ``version`` its format version."""

    def __init__(self, message: str, *, offset: int, version: int, code: Optional[int] = None) -> None:
        super().__init__(message, code=code)
        self.offset = offset
        self.version = version


class ProtocolVersionError(LayoutLogError):
    """The layout log speaks another version of the ordering protocol than
    this client, so using it could break ordering without any error.

    Raised for a log written by kafka-ordered clients of protocol 1 (the
    time-based settle pause; ``protocol`` is ``None``: the log has no
    protocol-version record) until an operator has stopped those clients and
    run ``kafka-ordered upgrade-protocol`` (:meth:`LayoutAdmin.upgrade_protocol`),
    and when a protocol-1 client writes into a log this client started on.
    Logs of a newer protocol raise :class:`UnsupportedLayoutVersionError`.
    """

    def __init__(self, message: str, *, protocol: Optional[int] = None, code: Optional[int] = None) -> None:
        super().__init__(message, code=code)
        self.protocol = protocol


class StaleLayoutViewError(LayoutLogError):
    """A record about to be delivered is stamped (``kafka-ordered.reg``) with
    a registration that the layout view it was planned with did not include.
    Raised by the Spark source's readers instead of delivering the record out
    of order; with protocol 2 producers it means a bug, never a race (a
    batch's data end offsets are read before the layout log)."""


class HashDetectionError(KafkaOrderedError, ValueError):
    """``adopt`` cannot tell which hash placed the topic's keys (too few keyed
    records, several hashes fit, or none does). ``candidates`` are the hashes
    that fit the ``records`` sampled. Pass ``hash=`` to adopt anyway."""

    def __init__(self, message: str, *, candidates: Tuple[str, ...] = (), records: int = 0,
                 code: Optional[int] = None) -> None:
        super().__init__(message, code=code)
        self.candidates = tuple(candidates)
        self.records = records


class ConcurrentLayoutChangeError(KafkaOrderedError):
    """Another admin appended a layout with the same epoch first; this change
    was not applied. Re-read the layout and retry if still wanted."""


class TopicInUseError(KafkaOrderedError):
    """``unmanage`` was refused: producers or consumer groups still depend on
    the topic's layout; the message says which and what to do first."""


class RegistrationError(KafkaOrderedError):
    """A producer could not register for a new layout. Records sent meanwhile
    (the one whose send raised this included) are kept buffered in order and
    are retried by the next send or flush: retriable, sending on is the retry."""

    retriable = True


class SwitchTimeoutError(RegistrationError):
    """A layout switch did not finish within ``ordered.switch.timeout.ms``."""


class PartitionOverrideError(KafkaOrderedError, ValueError):
    """An explicit ``partition=`` was given for a keyed record on a managed
    topic, which would break per-key ordering."""


class PlacementError(KafkaOrderedError, ValueError):
    """A replica placement request cannot be satisfied (bad arguments,
    unknown brokers, too few live brokers)."""

    codes = {"INVALID_PARTITIONS": 37, "INVALID_REPLICATION_FACTOR": 38, "INVALID_REPLICA_ASSIGNMENT": 39}


class GuardRailsError(PlacementError):
    """Placing the requested replicas would exceed a broker's partition limit.

    ``remaining`` maps broker id to the number of replicas it can still take.
    Nothing was created.
    """

    def __init__(self, message: str, *, remaining: Mapping[int, int], code: Optional[int] = None) -> None:
        super().__init__(message, code=code)
        self.remaining = dict(remaining)


# -- the Spark connector's (spark_connector re-exports them where it raises them)


class LayoutTopicNotFoundError(ConfigError, LayoutLogError):
    """The layout log named by the Spark source's or sink's
    ``ordered.layout.topic`` option does not exist (the connector never
    creates it: a misspelt name must not read or write ungated)."""


class DataLossError(KafkaOrderedError):
    """Records the Spark query has not read yet are gone (retention, topic
    recreated); raised when ``failOnDataLoss`` is true (the default)."""


class DeliveryError(KafkaOrderedError):
    """Rows a Spark sink task wrote were not acknowledged (the task fails;
    Spark retries it, so rows may be written twice: at least once, like the
    built-in sink)."""


class NullTopicError(ConfigError):
    """A row given to the Spark sink has no topic: no ``topic`` option and a
    null ``topic`` column."""


class SparkExtraMissingError(KafkaOrderedError, ImportError):
    """The interpreter running the Spark connector (the driver, or a Spark
    Python worker started with ``PYSPARK_PYTHON``) cannot import a module the
    connector needs: ``pyspark`` or ``pyarrow`` (the ``spark`` extra), or a
    dependency of kafka-ordered. The message names the module and the fix;
    ``name`` is the module that failed to import (as for ``ImportError``).

    :data:`WorkerEnvironmentError` is the same class. A worker whose
    interpreter cannot import ``kafka_ordered`` at all gets a stand-in outside
    this hierarchy (an ``ImportError`` whose class name ends in
    ``WorkerEnvironmentError``, same message), as this module is out of its reach.
    """

    def __init__(self, message: str, *, name: Optional[str] = None, code: Optional[int] = None) -> None:
        super().__init__(message, code=code)
        self.name = name


#: :class:`SparkExtraMissingError` under the name ``pyspark_kafka_ordered``
#: has always raised in Spark's Python workers.
WorkerEnvironmentError = SparkExtraMissingError


# -- the code table


def _classes(root: Type[KafkaOrderedError]) -> Iterator[Type[KafkaOrderedError]]:
    yield root
    for sub in root.__subclasses__():
        yield from _classes(sub)


def _by_code() -> Dict[int, Type[KafkaOrderedError]]:
    out: Dict[int, Type[KafkaOrderedError]] = {}
    for cls in _classes(KafkaOrderedError):
        for name, number in cls.__dict__.get("codes", {}).items():
            if number in out and out[number] is not cls:
                raise AssertionError(f"code {name} ({number}) is claimed by {out[number].__name__} and {cls.__name__}")
            out[number] = cls
    return out


#: Every error code :func:`for_code` knows, by its ``confluent_kafka.KafkaError``
#: attribute name (a unit test checks each value against confluent-kafka);
#: derived from the classes' ``codes``.
CODES: Mapping[str, int] = MappingProxyType(
    {name: number for cls in _classes(KafkaOrderedError) for name, number in cls.__dict__.get("codes", {}).items()}
)

_BY_CODE: Mapping[int, Type[KafkaOrderedError]] = MappingProxyType(_by_code())


def for_code(code: Optional[int]) -> Type[KafkaOrderedError]:
    """The :class:`KafkaOrderedError` subclass for a broker or librdkafka
    error ``code``: :class:`BrokerUnavailableError`, :class:`UnknownTopicError`,
    :class:`AuthenticationError`, :class:`UnsupportedBrokerApiError`, :class:`TopicAlreadyManagedError`,
    :class:`PlacementError`, :class:`UnstableOffsetCommitError`, or :class:`KafkaOrderedError` itself for any
    other code (and for ``None``)."""
    if code is None:
        return KafkaOrderedError
    return _BY_CODE.get(code, KafkaOrderedError)


def _client_error(exc: BaseException) -> Optional[Any]:
    """The confluent-kafka ``KafkaError`` carried by ``exc`` (a
    ``KafkaException`` holds it in ``args[0]``), recognised by its ``code()``
    method returning an int; else ``None``."""
    for candidate in (exc.args[0] if exc.args else None, exc):
        code = getattr(candidate, "code", None)
        if callable(code):
            try:
                value = code()
            except Exception:  # not a KafkaError after all
                continue
            if isinstance(value, int) and not isinstance(value, bool):
                return candidate
    return None


def _python_client_error(exc: BaseException) -> bool:
    """Whether ``exc`` is one of kafka-python's or aiokafka's own errors
    (their ``KafkaError`` classes say ``retriable``; a broker response's
    class also carries its code in ``errno``)."""
    return (type(exc).__module__.partition(".")[0] in ("kafka", "aiokafka")
            and isinstance(getattr(exc, "retriable", None), bool))


def translate(exc: BaseException, what: str, *, api: Optional[str] = None) -> KafkaOrderedError:
    """The :class:`KafkaOrderedError` for a failed client call doing ``what``
    (a phrase such as ``"reading metadata of t"``); raise it ``from exc``.

    ``exc`` is a confluent-kafka ``KafkaException`` (or ``KafkaError``), or
    a kafka-python or aiokafka error: for a code the broker or librdkafka
    gave, the class comes from :func:`for_code` and the result keeps the code
    in ``.code``. ``api`` names the Kafka API the call used; it goes into
    :class:`UnsupportedBrokerApiError`'s ``api`` (``"unknown"`` when not
    given). A ``concurrent.futures`` or builtin timeout, and a connection
    failure or timeout of kafka-python's or aiokafka's own (an error without
    a broker code that is retriable or a timeout), become
    :class:`BrokerUnavailableError` with ``code=None``; any other exception a
    :class:`KafkaOrderedError` with ``code=None``. Never raises.
    """
    if isinstance(exc, (concurrent.futures.TimeoutError, TimeoutError)):
        return BrokerUnavailableError(f"{what}: no answer from the cluster in time; check bootstrap.servers")
    if _python_client_error(exc):
        errno = getattr(exc, "errno", None)
        if not isinstance(errno, int) or errno < 0:
            if getattr(exc, "retriable", False) or type(exc).__name__.endswith("TimeoutError"):
                return BrokerUnavailableError(f"{what}: broker unavailable ({exc}); check bootstrap.servers")
            return KafkaOrderedError(f"{what}: {exc}")
        code, text = errno, str(exc)
    else:
        err = _client_error(exc)
        if err is None:
            return KafkaOrderedError(f"{what}: {exc}")
        code, text = err.code(), _text(err)
    cls = for_code(code)
    if cls is BrokerUnavailableError:
        return BrokerUnavailableError(f"{what}: broker unavailable ({text}); check bootstrap.servers", code=code)
    if cls is UnsupportedBrokerApiError:
        return UnsupportedBrokerApiError(
            f"{what}: the broker does not support the {api or 'required'} API ({text})", api=api or "unknown", code=code
        )
    if cls is PlacementError:
        return PlacementError(f"{what}: the broker rejected the replica assignment ({text})", code=code)
    return cls(f"{what}: {text}", code=code)


def _text(err: Any) -> str:
    """``NAME: description`` of a confluent-kafka ``KafkaError``."""
    name = err.name() if callable(getattr(err, "name", None)) else ""
    desc = err.str() if callable(getattr(err, "str", None)) else str(err)
    return f"{name}: {desc}" if name else str(desc)
