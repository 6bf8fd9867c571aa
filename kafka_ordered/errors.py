"""Errors raised by kafka-ordered.

Every error derives from :class:`KafkaOrderedError`. Errors caused by a broker
response keep the broker's error code in :attr:`KafkaOrderedError.code` (the
librdkafka/Kafka numeric code, or ``None``) and chain the client exception as
``__cause__``. Errors about bad arguments also derive from ``ValueError`` or
``TypeError`` so that callers validating input can catch the builtin.
"""

from __future__ import annotations

from typing import Mapping, Optional

__all__ = [
    "KafkaOrderedError",
    "ConfigError",
    "InvalidLayoutError",
    "InvalidKeyError",
    "UnknownTopicError",
    "TopicNotManagedError",
    "TopicAlreadyManagedError",
    "BrokerUnavailableError",
    "UnsupportedBrokerApiError",
    "LayoutLogError",
    "LayoutLogUnwritableError",
    "UnsafeLayoutLogError",
    "CorruptLayoutRecordError",
    "UnsupportedLayoutVersionError",
    "ConcurrentLayoutChangeError",
    "RegistrationError",
    "SwitchTimeoutError",
    "PartitionOverrideError",
    "PlacementError",
    "GuardRailsError",
]


class KafkaOrderedError(Exception):
    """Root of every error raised by kafka-ordered.

    ``code`` is the broker/librdkafka error code when the error came from a
    broker response, else ``None``.
    """

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


class TopicNotManagedError(KafkaOrderedError):
    """The topic exists but has no layout in the layout log (use ``adopt``)."""


class TopicAlreadyManagedError(KafkaOrderedError):
    """The topic already has a layout (or already exists, for ``create_topic``)."""


class BrokerUnavailableError(KafkaOrderedError):
    """No broker answered within the timeout."""


class UnsupportedBrokerApiError(KafkaOrderedError):
    """The broker does not implement a Kafka API this operation needs.

    ``api`` names the missing Kafka API (e.g. ``"CreatePartitions"``).
    """

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


class ConcurrentLayoutChangeError(KafkaOrderedError):
    """Another admin appended a layout with the same epoch first; this change
    was not applied. Re-read the layout and retry if still wanted."""


class RegistrationError(KafkaOrderedError):
    """A producer could not register for a new layout. Records sent meanwhile
    are kept buffered in order and are retried by the next send or flush."""


class SwitchTimeoutError(RegistrationError):
    """A layout switch did not finish within ``ordered.switch.timeout.ms``."""


class PartitionOverrideError(KafkaOrderedError, ValueError):
    """An explicit ``partition=`` was given for a keyed record on a managed
    topic, which would break per-key ordering."""


class PlacementError(KafkaOrderedError, ValueError):
    """A replica placement request cannot be satisfied (bad arguments,
    unknown brokers, too few live brokers)."""


class GuardRailsError(PlacementError):
    """Placing the requested replicas would exceed a broker's partition limit.

    ``remaining`` maps broker id to the number of replicas it can still take.
    Nothing was created.
    """

    def __init__(self, message: str, *, remaining: Mapping[int, int]) -> None:
        super().__init__(message)
        self.remaining = dict(remaining)
