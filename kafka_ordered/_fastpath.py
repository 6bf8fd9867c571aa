"""The per-record paths: C when the speed-ups are enabled, else the
pure-Python equivalents below (same decisions, tested to agree).

Producer
--------

A :data:`ProducerRoute` is one managed topic's state as the per-record path
reads it; the registering core (:mod:`kafka_ordered._registering`) owns it:

- ``ready``: keyed records may go straight out (registered for the current
  layout, no switch running, nothing buffered);
- ``fn``: the layout's ``key (bytes) -> partition`` function;
- ``stamp``: partitions whose keyed records must take the slow path (empty in
  the steady state: the hook for per-partition rules such as stamping the
  first records after a registration, so that the per-record path checks
  one thing). Add a partition to it and its keyed records go through
  :meth:`RegisteringCore.route <kafka_ordered._registering.RegisteringCore.route>`
  (both clients); remove it and they take the per-record path again;
- ``inflight``: senders between their ``ready`` check and the return of the
  inner client's call. A sender counts itself in (``enter()``, which returns
  ``ready``) *before* it checks ``ready`` and out (``leave()``) after the
  inner call returned; :func:`close_route` clears ``ready`` and then waits
  for ``inflight`` to reach 0. So once it returns, no record partitioned
  under the old layout can still be enqueued, and the hot path takes no lock.

:func:`fast_produce` builds the per-instance callable that
``OrderedProducer.produce`` dispatches to (see :func:`method`): called
exactly like ``confluent_kafka.Producer.produce``,
it sends the common case (managed topic, ready route, ``bytes``/``str`` key,
no explicit partition, the key's partition not in ``stamp``) with one
partition computation and one call ``produce(topic, value, key, partition[,
callback][, timestamp=, headers=])``, and passes every other call unchanged
to ``slow``.

Consumer
--------
A :data:`Calm` says whether a consumer may skip its gating core for a while
(see :class:`kafka_ordered._gating.GatingCore`): ``quiet``, a deadline
``until``, and for the causal-token rule the next offset ``expected`` per
partition (the consumer's :class:`~kafka_ordered._freshness.CausalFreshness`
dict), the ``managed`` topics, the partitions ``held`` at a gate (their
records never pass), ``limits`` (a closed gate's start per partition that
has not reached it: records from there on never pass) and
``until_offsets``: a fetch that moves a partition's
expected offset to its entry or past is returned and ends the calm (a
source reached a gate's wait). :func:`fast_fetch` builds a consumer's
``poll``/``consume``: while ``calm.quiet`` it calls the client's own fetch
with the arguments unchanged and, reading the clock once, before
``calm.until`` returns what it got untouched if it is empty or if
:func:`admits_py` (or its C twin) admits it (no stamp, no gap: the rule needs
no catch-up, nothing of a held partition), else passes it through ``after(result)``; past the deadline,
an empty result after ``idle()`` (the per-poll work, safe with nothing in
hand) and any other through ``after(result)``. Without the calm the call
goes to ``slow``. While ``calm.held`` is not empty the fetch's ``timeout``
is cut to the calm's end (when the held partitions' gates are looked at
again); if nothing came by then, the rest of the wait goes to ``slow``.

:func:`method` puts either path on the class, so that ``obj.produce(...)``
costs no Python frame.
"""

from __future__ import annotations

import functools
import operator
import time
from itertools import compress
from typing import AbstractSet, Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

from . import _hashing
from .tokens import HEADER as _STAMP_HEADER
from .tombstones import HEADER as _MOVED_HEADER

__all__ = ["ProducerRoute", "PyProducerRoute", "fast_produce", "fast_produce_py", "close_route", "method",
           "PyMethod", "Calm", "PyCalm", "admits_py", "admits_runs", "admits_runs_py", "replace_headers", "calm_wait",
           "calm_rest", "fast_fetch",
           "fast_fetch_py", "take_stamps", "take_stamps_py", "fetch_shape", "fetch_shape_py", "message_bytes",
           "message_bytes_py"]


class PyProducerRoute:
    """Pure-Python :data:`ProducerRoute` (the C type's fallback).

    ``enter``/``leave`` count senders with ``list.append``/``list.pop``,
    which are atomic under the GIL."""

    __slots__ = ("ready", "fn", "stamp", "_inside")

    def __init__(self, fn: Optional[Callable[[Any], int]] = None) -> None:
        self.ready = False
        self.fn = fn
        self.stamp: Set[int] = set()
        self._inside: List[None] = []

    @property
    def inflight(self) -> int:
        return len(self._inside)

    def enter(self) -> bool:
        self._inside.append(None)
        return self.ready

    def leave(self) -> None:
        self._inside.pop()

    def __repr__(self) -> str:
        return f"ProducerRoute(ready={self.ready}, fn={self.fn!r}, stamp={self.stamp!r}, inflight={self.inflight})"


#: The route type in use: ``kafka_ordered._speedups.ProducerRoute`` or :class:`PyProducerRoute`.
ProducerRoute: Any = _hashing._C.ProducerRoute if _hashing._C is not None else PyProducerRoute


def fast_produce_py(produce: Callable[..., Any], slow: Callable[..., Any],
                    routes: Dict[str, Any]) -> Callable[..., Any]:
    """The pure-Python per-record path (see the module docstring)."""
    get = routes.get

    def produce_fast(topic: str, value: Any = None, key: Any = None, partition: int = -1,
                     on_delivery: Optional[Callable[..., None]] = None, timestamp: int = 0, headers: Any = None,
                     *, callback: Optional[Callable[..., None]] = None) -> Any:
        if partition == -1 and topic.__class__ is str:
            r = get(topic)
            if r is not None and r.ready:
                kc = key.__class__
                kb = key if kc is bytes else _utf8(key) if kc is str else None
                if kb is not None:
                    inside = r._inside
                    inside.append(None)
                    try:
                        if r.ready:
                            p = r.fn(kb)
                            if not r.stamp or p not in r.stamp:
                                cb = on_delivery if on_delivery is not None else callback
                                if timestamp or headers is not None:
                                    return produce(topic, value, key, p, cb, timestamp=timestamp, headers=headers)
                                if cb is None:
                                    return produce(topic, value, key, p)
                                return produce(topic, value, key, p, cb)
                    finally:
                        inside.pop()
        return slow(topic, value, key, partition, on_delivery, timestamp, headers, callback=callback)

    produce_fast.__wrapped__ = slow  # type: ignore[attr-defined]
    produce_fast.__doc__ = slow.__doc__
    return produce_fast


def _utf8(key: str) -> Optional[bytes]:
    try:
        return key.encode("utf-8")
    except UnicodeEncodeError:
        return None  # the slow path raises the client's own error


def fast_produce(produce: Callable[..., Any], slow: Callable[..., Any], routes: Dict[str, Any]) -> Callable[..., Any]:
    """The per-record path over ``routes`` (topic -> :data:`ProducerRoute`):
    the C ``FastProduce`` when the speed-ups are enabled, else :func:`fast_produce_py`."""
    if _hashing._C is not None:
        return _hashing._C.FastProduce(produce, slow, routes)  # type: ignore[no-any-return]
    return fast_produce_py(produce, slow, routes)


def close_route(route: Any) -> None:
    """Clear ``route.ready``, then wait until no sender is between its ready
    check and the return of its inner call. Afterwards nothing more is sent
    on the per-record path until ``ready`` is set again."""
    route.ready = False
    while route.inflight:
        # Another thread is inside the inner client's send; it returns
        # without needing anything the caller holds.
        time.sleep(0.0001)


class PyMethod:
    """Pure-Python :func:`method` (the C ``Method``'s fallback): a
    non-data descriptor that returns ``getattr(instance, attr)``."""

    def __init__(self, function: Callable[..., Any], attr: str) -> None:
        functools.update_wrapper(self, function)
        self.attr = attr

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        return self if obj is None else getattr(obj, self.attr)

    def __call__(self, obj: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(obj, self.attr)(*args, **kwargs)


def method(function: Callable[..., Any], attr: str) -> Any:
    """A class attribute standing for the method ``function`` that calls the
    instance's per-instance implementation ``getattr(self, attr)`` (for
    ``OrderedProducer.produce``: the instance's :func:`fast_produce`).

    With the C speed-ups it is a method descriptor (``obj.produce(...)``
    costs no Python frame and no instance-dictionary look-up); ``help()``
    and ``inspect.signature`` see ``function`` through ``__wrapped__``."""
    if _hashing._C is not None:
        return _hashing._C.Method(function, attr)
    return PyMethod(function, attr)


class PyCalm:
    """Pure-Python :data:`Calm`."""

    __slots__ = ("quiet", "until", "expected", "managed", "held", "stamp_prefix", "view_next", "until_offsets",
                 "limits")

    def __init__(self) -> None:
        self.quiet = False
        self.until = float("-inf")
        self.expected: Dict[Tuple[str, int], int] = {}
        self.managed: AbstractSet[str] = frozenset()
        #: Partitions held by a pause at a gate: their records take the full path.
        self.held: AbstractSet[Tuple[str, int]] = frozenset()
        #: ``b"<this consumer's layout-log id>:"`` (``None``: unknown) and the
        #: layout-log offset below which the view includes everything.
        self.stamp_prefix: Optional[bytes] = None
        self.view_next = 0
        #: Partitions whose next offset, once at or past this one, ends the
        #: calm (the fetch that got there is still returned).
        self.until_offsets: Dict[Tuple[str, int], int] = {}
        #: Partitions with a closed gate not reached yet: the gate's start,
        #: the first offset whose record takes the full path.
        self.limits: Dict[Tuple[str, int], int] = {}


def _moved(calm: Any, ends: List[Tuple[Tuple[str, int], int]]) -> None:
    """Move ``calm.expected`` to ``ends`` (partition, next offset); the calm
    ends when one reaches its entry in ``calm.until_offsets``."""
    calm.expected.update(ends)
    watched = calm.until_offsets
    if watched and any(nxt >= watched.get(k, nxt + 1) for k, nxt in ends):
        calm.quiet = False


def admits_py(calm: Any, got: Any) -> bool:
    """Whether a calm fetch's records (confluent-kafka Messages: ``got`` is
    one or a list) may be returned under the causal-token rule
    (:mod:`kafka_ordered.tokens`) without the full path: no error, no
    ``kafka-ordered.reg`` header but stamps of ``calm.stamp_prefix``'s log
    below ``calm.view_next`` (the view includes them: such a header is only
    removed, on the way), and every record of a topic in ``calm.managed`` at
    the next offset ``calm.expected`` holds for its partition, which is not
    in ``calm.held`` (held at a gate), and below its gate in
    ``calm.limits``. Then the
    expected offsets are moved past the fetch; otherwise they are unchanged
    and the caller takes the full path (which strips stamps and catches up)."""
    msgs = got if got.__class__ is list else (got,)
    managed, expected, held, limits = calm.managed, calm.expected, calm.held, calm.limits
    ends: List[Tuple[Tuple[str, int], int]] = []
    key: Optional[Tuple[str, int]] = None
    prev = -1
    limit = -1
    for m in msgs:
        if m.error() is not None:
            return False
        h = m.headers()
        if h is not None:
            stamps = _included_stamps(calm, h)
            if stamps == 2:
                return False
            if stamps:
                m.set_headers([t for t in h if t[0] != _STAMP_HEADER] or None)
        topic = m.topic()
        if topic not in managed:
            continue
        k = (topic, m.partition())
        off = m.offset()
        if k == key:
            if off != prev + 1 or off >= limit >= 0:
                return False
        else:
            if key is not None:
                ends.append((key, prev + 1))
            key = k
            limit = limits.get(k, -1) if limits else -1
            if expected.get(k) != off or k in held or off >= limit >= 0:
                return False
        prev = off
    if key is not None:
        ends.append((key, prev + 1))
        _moved(calm, ends)
    return True


_HEADERS = operator.attrgetter("headers")


def replace_headers(record: Any, headers: List[Tuple[str, bytes]]) -> Any:
    """A copy of the namedtuple ``record`` (kafka-python's ``ConsumerRecord``) with ``headers``."""
    return record._replace(headers=headers)


def admits_runs_py(calm: Any, fetched: Mapping[Any, List[Any]],
                   replace: Callable[[Any, List[Tuple[str, bytes]]], Any]) -> bool:
    """:func:`admits_py` for a fetch grouped by partition (kafka-python and
    aiokafka: ``{TopicPartition: [ConsumerRecord, ...]}``, each list in
    offset order): the same causal-token predicate per run (first offset as
    expected, no gap, not held, below its gate's limit, stamps only of the view), the same removal of included
    stamps (records are replaced in their list by ``replace(record,
    headers)``, a copy without the header: :func:`replace_headers` for
    namedtuples). The C twin (``_speedups.admits_runs``) decides alike."""
    managed, expected, held, limits = calm.managed, calm.expected, calm.held, calm.limits
    ends: List[Tuple[Tuple[str, int], int]] = []
    for tp, recs in fetched.items():
        if not recs:
            continue
        headers = list(map(_HEADERS, recs))
        if any(headers):
            for i in compress(range(len(recs)), headers):  # only the records with headers
                h = headers[i]
                stamps = _included_stamps(calm, h)
                if stamps == 2:
                    return False
                if stamps:
                    recs[i] = replace(recs[i], [t for t in h if t[0] != _STAMP_HEADER])
        if tp.topic not in managed:
            continue
        key = (tp.topic, tp.partition)
        first, last = recs[0].offset, recs[-1].offset
        if (expected.get(key) != first or last - first + 1 != len(recs) or key in held
                or (limits and last >= limits.get(key, last + 1))):
            return False
        ends.append((key, last + 1))
    _moved(calm, ends)
    return True


def _included_stamps(calm: Any, headers: Any) -> int:
    """0: no ``kafka-ordered.reg`` header; 1: only stamps of this consumer's
    log that its view includes; 2: another stamp, a move tombstone's header,
    or an unknown shape (kafka-python's list of pairs and aiokafka's tuple
    of them are known)."""
    if headers.__class__ is not list and headers.__class__ is not tuple:
        return 2
    found = 0
    prefix = calm.stamp_prefix
    for t in headers:
        if t.__class__ is not tuple or not t or t[0].__class__ is not str:
            return 2
        if t[0] == _MOVED_HEADER:  # a move tombstone: only the full path hides it
            return 2
        if t[0] != _STAMP_HEADER:
            continue
        v = t[1] if len(t) == 2 else None
        if (v.__class__ is not bytes or prefix is None or not prefix or not v.startswith(prefix)
                or not 0 < len(v) - len(prefix) <= 18):
            return 2
        digits = v[len(prefix):]
        if not digits.isdigit() or int(digits) >= calm.view_next:
            return 2
        found = 1
    return found


_CONTAINERS = (list, dict)

#: The calm type in use: ``kafka_ordered._speedups.Calm`` or :class:`PyCalm`.
Calm: Any = _hashing._C.Calm if _hashing._C is not None else PyCalm


def take_stamps_py(messages: List[Any], prefix: Optional[bytes]) -> Tuple[Dict[int, int], List[int]]:
    """The full path's stamp pass over confluent-kafka Messages without
    errors: ``({partition: newest stamp}, indices left to the caller's
    per-record pass)``. The C twin (``_speedups.take_stamps``) removes the
    stamps ``prefix + digits`` of this consumer's log from the records that
    carry only such ``kafka-ordered.reg`` headers and counts them (a
    replay of history is full of them); this one leaves every record that
    has headers to the caller, whose pass ends the same."""
    return {}, [i for i, m in enumerate(messages) if m.headers()]


def run_stamps_py(records: List[Any], prefix: Optional[bytes], replace: Optional[Callable[[Any, List[Any]], Any]]
                  ) -> Tuple[Optional[int], List[Any], List[int]]:
    """The full path's stamp pass over one partition's records of a grouped
    fetch (kafka-python, aiokafka): ``(newest stamp, records, indices left
    to the caller's per-record pass)``. The C twin (``_speedups.run_stamps``)
    takes the newest stamp ``prefix + digits`` of this consumer's log from
    the records that carry only such ``kafka-ordered.reg`` headers and,
    unless ``replace`` is ``None``, replaces them with
    ``replace(record, headers left)`` (a new list then); this one leaves
    every record that has headers to the caller, whose pass ends the same."""
    return None, records, [i for i, h in enumerate(map(_HEADERS, records)) if h]


#: The grouped calm check in use: ``kafka_ordered._speedups.admits_runs`` or :func:`admits_runs_py`.
admits_runs: Callable[[Any, Mapping[Any, List[Any]], Callable[[Any, List[Tuple[str, bytes]]], Any]], bool] = (
    _hashing._C.admits_runs if _hashing._C is not None else admits_runs_py)

#: The grouped stamp pass in use: ``kafka_ordered._speedups.run_stamps`` or :func:`run_stamps_py`.
run_stamps: Callable[[List[Any], Optional[bytes], Optional[Callable[[Any, List[Any]], Any]]],
                     Tuple[Optional[int], List[Any], List[int]]] = (
    _hashing._C.run_stamps if _hashing._C is not None else run_stamps_py)

#: The stamp pass in use: ``kafka_ordered._speedups.take_stamps`` or :func:`take_stamps_py`.
take_stamps: Callable[[List[Any], Optional[bytes]], Tuple[Dict[int, int], List[int]]] = (
    _hashing._C.take_stamps if _hashing._C is not None else take_stamps_py)




def fetch_shape_py(messages: List[Any]) -> Tuple[List[Optional[int]], bool, bool]:
    """The full path's first look at a fetch of confluent-kafka Messages:
    ``(partitions, any error, any headers)``, the partitions as
    ``Message.partition()`` gives them. The C twin (``_speedups.fetch_shape``)
    makes the one pass without method calls; it also answers "any headers"
    for headers librdkafka has not converted yet, even empty ones (the flag
    only sends the caller to its per-record header pass)."""
    return ([m.partition() for m in messages], any(m.error() is not None for m in messages),
            any(m.headers() for m in messages))


#: The fetch's first look in use: ``kafka_ordered._speedups.fetch_shape`` or :func:`fetch_shape_py`.
fetch_shape: Callable[[List[Any]], Tuple[List[Optional[int]], bool, bool]] = (
    _hashing._C.fetch_shape if _hashing._C is not None else fetch_shape_py)


def message_bytes_py(messages: List[Any]) -> int:
    """The key and value bytes of confluent-kafka Messages, for the bounds of
    what a partition keeps in hand (the C twin: ``_speedups.message_bytes``)."""
    return sum(len(m.value() or b"") + len(m.key() or b"") for m in messages)


#: The size of kept records in use: ``kafka_ordered._speedups.message_bytes`` or :func:`message_bytes_py`.
message_bytes: Callable[[List[Any]], int] = (
    _hashing._C.message_bytes if _hashing._C is not None else message_bytes_py)


def calm_wait(calm: Any, timeout: float, now: float) -> Optional[float]:
    """How long a fetch on the calm path may wait, for a call of ``timeout``
    seconds (negative: forever): the timeout itself, but while ``calm.held``
    is not empty no longer than the calm lasts (the held partitions' gates
    are looked at again then); ``None`` when the calm is over (the call
    takes the full path)."""
    if not calm.held:
        return timeout
    left: float = calm.until - now
    if left <= 0:
        return None
    return left if timeout < 0 or timeout > left else timeout


def calm_rest(timeout: float, cut: float, began: float, now: float) -> Optional[float]:
    """After a calm fetch that waited up to ``cut`` seconds (:func:`calm_wait`)
    of a call's ``timeout`` (negative: forever), begun at ``began``, came
    back empty at ``now``: what is left of the call's wait for the full path
    (negative: forever), or ``None`` when the call is over (its wait was not
    cut, or its time is up)."""
    if cut == timeout:
        return None
    if timeout < 0:
        return timeout
    rest = timeout - (now - began)
    return rest if rest > 0 else None


def fast_fetch_py(fetch: Callable[..., Any], slow: Callable[..., Any], after: Callable[[Any], Any],
                  idle: Callable[[], Any], calm: Any, timeout_at: int = 0) -> Callable[..., Any]:
    """The pure-Python fetch path (see the module docstring)."""
    monotonic = time.monotonic

    def held_fetch(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[bool, Any]:
        # A calm beside held partitions: the fetch may not wait past its end.
        began = monotonic()
        positional = timeout_at < len(args)
        given = args[timeout_at] if positional else kwargs.get("timeout")
        if given.__class__ not in (int, float):
            return True, slow(*args, **kwargs)
        t: float = given
        left = calm_wait(calm, t, began)
        if left is None:
            return True, slow(*args, **kwargs)
        if left == t:
            return False, fetch(*args, **kwargs)

        def with_timeout(value: float) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
            if positional:
                return args[:timeout_at] + (value,) + args[timeout_at + 1:], kwargs
            return args, {**kwargs, "timeout": value}

        a, k = with_timeout(left)
        got = fetch(*a, **k)
        if not (got is None or (got.__class__ in _CONTAINERS and not got)):
            return False, got
        # Nothing came before the calm's end: the rest of the wait goes through the full path.
        rest = calm_rest(t, left, began, monotonic())
        if rest is None:
            idle()
            return True, got
        a, k = with_timeout(rest)
        return True, slow(*a, **k)

    def fetch_fast(*args: Any, **kwargs: Any) -> Any:
        if not calm.quiet:
            return slow(*args, **kwargs)
        if calm.held:
            done, got = held_fetch(args, kwargs)
            if done:
                return got
        else:
            got = fetch(*args, **kwargs)
        if calm.quiet and monotonic() < calm.until:
            if got is None or (got.__class__ in _CONTAINERS and not got) or admits_py(calm, got):
                return got
            return after(got)
        # (a Message's truth is its value's length: test for None and empty containers only)
        if got is None or (got.__class__ in _CONTAINERS and not got):
            idle()
            return got
        return after(got)

    fetch_fast.__wrapped__ = slow  # type: ignore[attr-defined]
    fetch_fast.__doc__ = slow.__doc__
    return fetch_fast


def fast_fetch(fetch: Callable[..., Any], slow: Callable[..., Any], after: Callable[[Any], Any],
               idle: Callable[[], Any], calm: Any, timeout_at: int = 0) -> Callable[..., Any]:
    """A consumer's ``poll``/``consume`` over ``calm`` (a :data:`Calm`): the C
    ``FastFetch`` when the speed-ups are enabled, else :func:`fast_fetch_py`.
    ``timeout_at``: the position of the method's ``timeout`` argument."""
    if _hashing._C is not None:
        return _hashing._C.FastFetch(fetch, slow, after, idle, calm, timeout_at)  # type: ignore[no-any-return]
    return fast_fetch_py(fetch, slow, after, idle, calm, timeout_at)
