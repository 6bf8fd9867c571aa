"""Reading a ``confluent_kafka.Message``'s fields in place in the C calm
check (:mod:`kafka_ordered._fastpath`): allowed only once this module
checked, on real instances, that what ``_speedups.message_fields`` reads
from memory is what the methods return. Done at import; tests switch it
with :func:`use_message_layout` to check both ways."""

from __future__ import annotations

from confluent_kafka import KafkaError, Message, cimpl

from .. import _hashing

__all__ = ["librdkafka_headers", "message_layout_matches", "use_message_layout", "MESSAGE_LAYOUT"]


def message_layout_matches() -> bool:
    """Whether the C calm check may read a ``confluent_kafka.Message``'s
    fields in place: on real instances (an ordinary record, and one with
    headers and an error) the fields read from memory are what the methods
    return. ``False`` without the speed-ups or on any mismatch: the check
    then calls the methods."""
    if _hashing._C is None:
        return False
    try:
        error = KafkaError(KafkaError._PARTITION_EOF)
        samples = [
            Message(topic="kafka-ordered-layout-check", partition=7, offset=123456789012, key=b"k", value=b"v"),
            Message(topic="t", partition=2**31 - 2, offset=42, key=None, value=b"x",
                    headers=[("h", b"1")], error=error),
        ]
        for m in samples:
            topic, value, key, headers, c_headers, err, partition, offset = _hashing._C.message_fields(m)
            if (topic is not m.topic() or value is not m.value() or key is not m.key()
                    or headers != m.headers() or c_headers or err is not m.error()
                    or partition != m.partition() or offset != m.offset()):
                return False
    except Exception:  # another client version, or no such constructor: the methods it is
        return False
    return True


def use_message_layout(enabled: bool, through_librdkafka: bool = True) -> bool:
    """Let the C calm check read ``confluent_kafka.Message`` fields in place
    (``enabled``, when :func:`message_layout_matches`) or call the methods;
    returns whether it reads them in place now. With
    ``through_librdkafka``, it also reads the headers of a fetched message
    where librdkafka keeps them until ``headers()`` converts them, through
    librdkafka's own header functions (looked up in the library the client's
    extension links; see :func:`librdkafka_headers`). Done once at import;
    tests switch it to check every way."""
    global _LIBRDKAFKA_HEADERS
    _LIBRDKAFKA_HEADERS = False
    if _hashing._C is None:
        return False
    on = enabled and message_layout_matches()
    if on:
        library = cimpl.__file__ if through_librdkafka else None
        _LIBRDKAFKA_HEADERS = bool(_hashing._C.use_message_layout(Message, library))
    else:
        _hashing._C.use_message_layout(None)
    return on


def librdkafka_headers() -> bool:
    """Whether the C calm check reads fetched headers through librdkafka."""
    return _LIBRDKAFKA_HEADERS


_LIBRDKAFKA_HEADERS = False
#: Whether the calm check reads ``confluent_kafka.Message`` fields in place.
MESSAGE_LAYOUT = use_message_layout(True)
