"""The producer's per-record path (``kafka_ordered._fastpath``): the C
``FastProduce``/``ProducerRoute`` and the pure-Python fallback decide the same
way on every kind of call, and a route that is closed while senders are
inside the inner client waits for them (so nothing partitioned under an old
layout is enqueued after a switch started)."""

from __future__ import annotations

import inspect
import random
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

import kafka_ordered
from kafka_ordered.confluent import _message

from kafka_ordered import Layout, _fastpath, _hashing
from kafka_ordered.confluent import OrderedProducer

try:
    from kafka_ordered import _speedups as C  # type: ignore[attr-defined]
except ImportError:
    C = None

needs_c = pytest.mark.skipif(C is None, reason="C extension kafka_ordered._speedups not built")

LAYOUT = Layout("t", 1, 4, 6, 8)
PRODUCE_SIG = inspect.signature(lambda topic, value=None, key=None, partition=-1, on_delivery=None, timestamp=0,
                                headers=None: None)
SLOW_SIG = inspect.signature(OrderedProducer.produce)


class Recorder:
    """Fake inner produce and slow path; records normalised calls."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, Dict[str, Any]]] = []

    def produce(self, *args: Any, **kwargs: Any) -> str:
        bound = PRODUCE_SIG.bind(*args, **kwargs)
        bound.apply_defaults()
        self.calls.append(("produce", dict(bound.arguments)))
        return "sent"

    def slow(self, *args: Any, **kwargs: Any) -> str:
        bound = SLOW_SIG.bind(None, *args, **kwargs)
        bound.apply_defaults()
        args_ = dict(bound.arguments)
        del args_["self"]
        self.calls.append(("slow", args_))
        return "slow"


def _impls() -> List[Any]:
    out = [pytest.param("python", id="python")]
    if C is not None:
        out.append(pytest.param("c", id="c"))
    return out


def _build(impl: str, rec: Recorder, routes: Dict[str, Any]) -> Callable[..., Any]:
    if impl == "c":
        return C.FastProduce(rec.produce, rec.slow, routes)
    return _fastpath.fast_produce_py(rec.produce, rec.slow, routes)


def _route(impl: str, ready: bool = True, fn: Any = None, stamp: Tuple[int, ...] = ()) -> Any:
    """A route with ``fn`` (default LAYOUT's), C or pure Python. The C route
    gets the C partitioner (which the C path computes inline) even when the
    speed-ups are switched off for the rest of the package."""
    r = C.ProducerRoute() if impl == "c" else _fastpath.PyProducerRoute()
    if fn is None:
        fn = C.LinearPartitioner("murmur2", 4, 6) if impl == "c" else LAYOUT._fn
    elif impl == "c" and not isinstance(fn, C.LinearPartitioner):
        fn = C.LinearPartitioner("murmur2", fn.initial, fn.partitions)
    r.fn = fn
    r.ready = ready
    r.stamp.update(stamp)
    return r


class _Counts:
    """What _route needs to build a partitioner: counts (Python path: layout fn)."""

    def __init__(self, initial: int, partitions: int) -> None:
        self.initial, self.partitions = initial, partitions
        self.fn = Layout("t", 1, initial, partitions, 8)._fn

    def __call__(self, key: bytes) -> int:
        return self.fn(key)  # type: ignore[no-any-return]


def cb(err: Any, msg: Any) -> None:  # a delivery callback
    pass


def cb2(err: Any, msg: Any) -> None:
    pass


KEY = b"user-17"
P = LAYOUT.partition_for(KEY)

# (args, kwargs) of produce() calls, every shape the fast path must decide
CALLS: List[Tuple[Tuple[Any, ...], Dict[str, Any]]] = [
    (("t", b"v", KEY), {}),
    (("t", b"v"), {"key": KEY}),
    (("t",), {"value": b"v", "key": KEY}),
    (("t",), {"key": KEY}),
    (("t", None, KEY), {}),
    (("t", "str value", "user-17"), {}),
    (("t", b"v", "ключ"), {}),
    (("t", b"v", "\udc80"), {}),  # not UTF-8 encodable: the slow path judges
    (("t", b"v", bytearray(KEY)), {}),
    (("t", b"v", memoryview(KEY)), {}),
    (("t", b"v", 17), {}),
    (("t", b"v"), {}),
    (("t", b"v", None), {}),
    (("t", b"v", KEY), {"on_delivery": cb}),
    (("t", b"v", KEY), {"callback": cb}),
    (("t", b"v", KEY), {"on_delivery": cb, "callback": cb2}),
    (("t", b"v", KEY), {"on_delivery": None, "callback": cb2}),
    (("t", b"v", KEY), {"on_delivery": None}),
    (("t", b"v", KEY), {"timestamp": 1234}),
    (("t", b"v", KEY), {"timestamp": 0}),
    (("t", b"v", KEY), {"headers": [("h", b"1")]}),
    (("t", b"v", KEY), {"headers": None}),
    (("t", b"v", KEY), {"headers": {"h": b"1"}, "timestamp": 5, "on_delivery": cb}),
    (("t", b"v", KEY), {"partition": -1}),
    (("t", b"v", KEY), {"partition": 2}),
    (("t", b"v", KEY), {"partition": None}),
    (("t", b"v", KEY, -1), {}),
    (("t", b"v", KEY, 3), {}),
    (("t", b"v", KEY, -1, cb), {}),
    (("other", b"v", KEY), {}),
    ((b"t", b"v", KEY), {}),
    (("t", b"v", KEY), {"value": b"dup"}),
    (("t", b"v", KEY), {"key": b"dup"}),
    (("t", b"v", KEY), {"unknown": 1}),
    ((), {}),
    ((), {"topic": "t", "value": b"v", "key": KEY}),
]


def _outcome(fast: Callable[..., Any], rec: Recorder, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    rec.calls.clear()
    try:
        result: Any = fast(*args, **kwargs)
    except TypeError as e:
        result = ("TypeError", "multiple values" in str(e) or "missing" in str(e))
    return result, list(rec.calls)


@pytest.mark.parametrize("state", ["ready", "not ready", "stamped", "stamped elsewhere"])
def test_c_and_python_paths_decide_alike(state: str) -> None:
    outcomes: Dict[str, List[Any]] = {}
    for impl in [p.values[0] for p in _impls()]:
        rec = Recorder()
        stamp = (P,) if state == "stamped" else ((P + 1) % 6,) if state == "stamped elsewhere" else ()
        fast = _build(impl, rec, {"t": _route(impl, ready=state != "not ready", stamp=stamp)})
        outcomes[impl] = [_outcome(fast, rec, a, k) for a, k in CALLS]
    for impl, got in outcomes.items():
        kinds = [kind for _, calls in got for kind, _ in calls]
        if state == "not ready":
            assert set(kinds) == {"slow"}, impl
        else:
            assert {"slow", "produce"} <= set(kinds), impl
        if state == "stamped":
            assert got[0][1][0][0] == "slow", impl  # KEY's partition is stamped
        elif state != "not ready":
            assert got[0][1][0][0] == "produce", impl
    if "c" in outcomes:
        for (args, kwargs), py, c in zip(CALLS, outcomes["python"], outcomes["c"]):
            assert py == c, (args, kwargs)


@pytest.mark.parametrize("impl", _impls())
def test_common_calls_take_the_fast_path(impl: str) -> None:
    rec = Recorder()
    fast = _build(impl, rec, {"t": _route(impl)})
    assert fast("t", b"v", KEY) == "sent"
    assert rec.calls == [("produce", {"topic": "t", "value": b"v", "key": KEY, "partition": P, "on_delivery": None,
                                      "timestamp": 0, "headers": None})]
    rec.calls.clear()
    fast("t", b"v", "user-17", callback=cb, headers=[("h", b"x")])
    assert rec.calls == [("produce", {"topic": "t", "value": b"v", "key": "user-17", "partition": P,
                                      "on_delivery": cb, "timestamp": 0, "headers": [("h", b"x")]})]
    rec.calls.clear()
    assert fast("t", b"v", 17) == "slow"  # not a key the fast path hashes
    assert fast("other", b"v", KEY) == "slow"  # not managed (no route)
    assert [k for k, _ in rec.calls] == ["slow", "slow"]


@pytest.mark.parametrize("impl", _impls())
def test_signature_and_doc_are_the_slow_paths(impl: str) -> None:
    rec = Recorder()
    fast = _build(impl, rec, {})
    assert fast.__wrapped__ == rec.slow  # type: ignore[attr-defined]
    assert inspect.signature(fast) == inspect.signature(rec.slow)


@pytest.mark.parametrize("impl", _impls())
def test_errors_of_the_inner_call_propagate_and_leave_the_route_clean(impl: str) -> None:
    route = _route(impl)

    def full(*args: Any) -> None:
        raise BufferError("Local: Queue full")

    fast = C.FastProduce(full, Recorder().slow, {"t": route}) if impl == "c" else \
        _fastpath.fast_produce_py(full, Recorder().slow, {"t": route})
    with pytest.raises(BufferError, match="Queue full"):
        fast("t", b"v", KEY)
    assert route.inflight == 0


@needs_c
def test_c_route_contract() -> None:
    r = C.ProducerRoute()
    assert (r.ready, r.fn, r.stamp, r.inflight) == (False, None, set(), 0)
    r.ready = 1
    assert r.ready is True
    assert r.enter() is True and r.inflight == 1
    r.leave()
    assert r.inflight == 0
    with pytest.raises(RuntimeError, match="without enter"):
        r.leave()
    with pytest.raises(AttributeError):
        r.stamp = set()  # type: ignore[misc]
    with pytest.raises(TypeError):
        C.FastProduce(1, print, {})
    with pytest.raises(TypeError):
        C.FastProduce(print, print, [])
    assert "ready=True" in repr(r)


@needs_c
def test_c_fast_path_keeps_reference_counts() -> None:
    rec = Recorder()
    route = _route("c")
    topic, value, key = "t", b"value", b"key-refcount"
    fast = C.FastProduce(lambda *a: None, rec.slow, {"t": route})
    fast(topic, value, key)  # the topic and its route are cached from here on
    before = [sys.getrefcount(o) for o in (topic, value, key, route)]
    for _ in range(10_000):
        fast(topic, value, key)
        fast(topic, value, key, on_delivery=cb)
    assert [sys.getrefcount(o) for o in (topic, value, key, route)] == before


@pytest.mark.parametrize("impl", _impls())
def test_close_route_waits_for_senders_inside_the_inner_call(impl: str) -> None:
    """A sender past its ready check is inside the inner client (which here
    runs Python code, so the GIL changes hands): close_route returns only
    after it left, and later sends take the slow path."""
    route = _route(impl)
    inside, release = threading.Event(), threading.Event()
    rec = Recorder()

    def slow_inner(*args: Any) -> None:
        inside.set()
        release.wait(5)

    fast = C.FastProduce(slow_inner, rec.slow, {"t": route}) if impl == "c" else \
        _fastpath.fast_produce_py(slow_inner, rec.slow, {"t": route})
    t = threading.Thread(target=fast, args=("t", b"v", KEY))
    t.start()
    assert inside.wait(5)
    closed = threading.Event()
    closer = threading.Thread(target=lambda: (_fastpath.close_route(route), closed.set()))
    closer.start()
    time.sleep(0.05)
    assert not closed.is_set(), "close_route returned while a sender was inside the inner call"
    release.set()
    assert closed.wait(5)
    t.join(5)
    closer.join(5)
    assert fast("t", b"v", KEY) == "slow"


@pytest.mark.parametrize("impl", _impls())
def test_nothing_is_enqueued_under_an_old_layout_after_close(impl: str) -> None:
    """Senders on several threads against a switcher that closes the route,
    changes its layout and reopens it, over and over: every record the inner
    client accepts was partitioned by the layout current at that moment."""
    fns = [_route(impl, fn=_Counts(4, n)).fn for n in (4, 5, 6, 7, 8)]
    current: List[Any] = [fns[0]]
    switching = [False]
    bad: List[str] = []
    sent = [0]

    def inner(topic: str, value: Any, key: bytes, partition: int, *rest: Any) -> None:
        time.sleep(0)  # let the GIL change hands inside the inner call
        if switching[0]:
            bad.append("enqueued while the route was closed")
        elif partition != current[0](key):
            bad.append(f"{key!r} -> {partition}, layout says {current[0](key)}")
        sent[0] += 1

    route = _route(impl, fn=current[0])
    rec = Recorder()
    fast = C.FastProduce(inner, rec.slow, {"t": route}) if impl == "c" else \
        _fastpath.fast_produce_py(inner, rec.slow, {"t": route})
    stop = threading.Event()

    def sender(n: int) -> None:
        i = 0
        while not stop.is_set():
            fast("t", b"v", b"k-%d-%d" % (n, i % 500))
            i += 1

    threads = [threading.Thread(target=sender, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for i in range(200):
            _fastpath.close_route(route)
            switching[0] = True
            time.sleep(0)
            current[0] = fns[(i + 1) % len(fns)]
            route.fn = current[0]
            switching[0] = False
            route.ready = True
            time.sleep(0.0005)
    finally:
        sys.setswitchinterval(old)
        stop.set()
        for t in threads:
            t.join(10)
    assert bad == []
    assert sent[0] > 100 and rec.calls, "both paths were exercised"


def test_route_type_follows_the_speedups_switch() -> None:
    expected = C.ProducerRoute if _hashing._C is not None else _fastpath.PyProducerRoute
    assert _fastpath.ProducerRoute is expected


# -- the class attribute that dispatches to the per-instance path


def _method_impls() -> List[Any]:
    out = [pytest.param(_fastpath.PyMethod, id="python")]
    if C is not None:
        out.append(pytest.param(C.Method, id="c"))
    return out


@pytest.mark.parametrize("make", _method_impls())
def test_method_calls_each_instances_own_implementation(make: Any) -> None:
    class Thing:
        def __init__(self, name: str) -> None:
            self._impl = lambda *a, **k: (name, a, k)

        def act(self, x: int, y: int = 0) -> Any:
            """Act on x."""
            raise AssertionError("the per-instance implementation is called")

        act = make(act, "_impl")

    a, b = Thing("a"), Thing("b")
    for _ in range(3):  # alternating instances: the cache never answers for the wrong one
        assert a.act(1, y=2) == ("a", (1,), {"y": 2})
        assert b.act(3) == ("b", (3,), {})
    assert Thing.act(a, 5) == ("a", (5,), {})
    assert a.act is a._impl and callable(b.act)
    assert Thing.act.__doc__ == "Act on x." and Thing.act.__name__ == "act"
    assert list(inspect.signature(Thing.act).parameters) == ["self", "x", "y"]
    del a
    c = Thing("c")  # may reuse a's memory: a dead instance's entry must not match
    assert c.act(0) == ("c", (0,), {})


def test_ordered_producer_produce_is_documented_and_typed_as_written() -> None:
    sig = inspect.signature(OrderedProducer.produce)
    assert list(sig.parameters) == ["self", "topic", "value", "key", "partition", "on_delivery", "timestamp",
                                    "headers", "callback"]
    assert "confluent_kafka.Producer.produce" in (OrderedProducer.produce.__doc__ or "")


# -- the consumer's fetch path


class _Msg:
    """The parts of a confluent ``Message`` the calm path reads."""

    def __init__(self, topic: str = "u", partition: int = 0, offset: int = 0, headers: Any = None,
                 error: Any = None) -> None:
        self._t, self._p, self._o, self._h, self._e = topic, partition, offset, headers, error

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def headers(self) -> Any:
        return self._h

    def error(self) -> Any:
        return self._e

    def set_headers(self, headers: Any) -> None:
        self._h = headers

    def __repr__(self) -> str:
        return f"_Msg({self._t!r}, {self._p}, {self._o}, {self._h!r}, {self._e!r})"


class _Falsy(_Msg):
    """Like a confluent Message with an empty value: its truth is False."""

    def __len__(self) -> int:
        return 0


def _calm(impl: str) -> Any:
    return C.Calm() if impl == "c" else _fastpath.PyCalm()


def _admits_runs(impl: str, calm: Any, fetched: Any, replace: Any = _fastpath.replace_headers) -> bool:
    """The grouped calm check (kafka-python, aiokafka) of ``impl``, on a calm of ``impl``."""
    return (C.admits_runs if impl == "c" else _fastpath.admits_runs_py)(calm, fetched, replace)


#: How the calm check meets a fetched record: a fake with the methods it
#: calls, a real ``confluent_kafka.Message`` through its methods, or one
#: whose fields the C check reads in place (what a consumer gets).
MESSAGE_KINDS = ["fake", "real", "in place"]


@pytest.fixture
def messages(request: pytest.FixtureRequest, impl: str) -> Iterator[Callable[[Any], Any]]:
    """``messages(fetched)``: the fetch as the kind of records under test."""
    kind = request.param
    if kind == "in place" and (impl != "c" or not _message.message_layout_matches()):
        pytest.skip("fields are read in place only by the C check, on a client whose layout matches")
    _message.use_message_layout(kind == "in place")

    def convert(fetched: Any) -> Any:
        if kind == "fake":
            return fetched
        from confluent_kafka import KafkaError, Message

        def real(m: _Msg) -> Any:
            err = None if m._e is None else KafkaError(KafkaError._FAIL, str(m._e))
            try:
                return Message(topic=m._t, partition=m._p, offset=m._o, key=b"k", value=b"v", headers=m._h,
                               error=err)
            except (TypeError, ValueError):
                pytest.skip("the client's Message takes no such headers")

        return [real(m) for m in fetched] if isinstance(fetched, list) else real(fetched)

    yield convert
    _message.use_message_layout(True)


def _fetch_path(impl: str, calm: Any, result: Any, calls: List[Any]) -> Callable[..., Any]:
    def fetch(*a: Any, **k: Any) -> Any:
        calls.append(("fetch", a, k))
        return result

    def slow(*a: Any, **k: Any) -> Any:
        calls.append(("slow", a, k))
        return "slow"

    def after(got: Any) -> Any:
        calls.append(("after", got))
        return ("after", got)

    def idle() -> None:
        calls.append(("idle",))

    if impl == "c":
        return C.FastFetch(fetch, slow, after, idle, calm)
    return _fastpath.fast_fetch_py(fetch, slow, after, idle, calm)


@pytest.mark.parametrize("quiet", [False, True])
@pytest.mark.parametrize("until", ["past", "future"])
def test_c_and_python_fetch_paths_decide_alike(quiet: bool, until: str) -> None:
    falsy = _Falsy()
    results = [None, [], {}, [_Msg(), _Msg(offset=1)], falsy, _Msg(offset=7)]
    outcomes: Dict[str, List[Any]] = {}
    for impl in [p.values[0] for p in _impls()]:
        got = []
        for result in results:
            calm = _calm(impl)
            now = time.monotonic()
            calm.quiet = quiet
            calm.until = now + 60 if until == "future" else now - 1
            calls: List[Any] = []
            path = _fetch_path(impl, calm, result, calls)
            got.append((path(500, timeout=1.5), [(c[0],) + c[1:] for c in calls]))
        outcomes[impl] = got
    for impl, got in outcomes.items():
        for result, (value, calls) in zip(results, got):
            if not quiet:
                assert calls == [("slow", (500,), {"timeout": 1.5})] and value == "slow", impl
                continue
            assert calls[0] == ("fetch", (500,), {"timeout": 1.5}), impl
            empty = result is None or result == [] or result == {}
            if until == "future":
                assert value is result and len(calls) == 1, (impl, result)
            elif empty:  # nothing in hand: the per-poll work runs, the empty result is returned
                assert value is result and calls[1:] == [("idle",)], (impl, result)
            else:
                assert value == ("after", result) and calls[1:] == [("after", result)], (impl, result)
    if "c" in outcomes:
        assert outcomes["c"] == outcomes["python"]


@pytest.mark.parametrize("impl", _impls())
def test_fetch_path_sees_the_calm_end_during_the_fetch(impl: str) -> None:
    """An event during the fetch (a rebalance callback, new layout records)
    ends the calm: what was fetched goes to ``after``."""
    calm = _calm(impl)
    calm.quiet, calm.until = True, time.monotonic() + 60

    def fetch(*a: Any) -> List[str]:
        calm.quiet = False
        return ["m"]

    def after(got: Any) -> Any:
        return ("after", got)

    path = C.FastFetch(fetch, lambda *a: "slow", after, print, calm) if impl == "c" else \
        _fastpath.fast_fetch_py(fetch, lambda *a: "slow", after, print, calm)
    assert path(1) == ("after", ["m"])
    assert path(1) == "slow"


@pytest.mark.parametrize("impl", _impls())
def test_fetch_path_errors_propagate(impl: str) -> None:
    calm = _calm(impl)
    calm.quiet, calm.until = True, time.monotonic() + 60

    def fetch(*a: Any) -> Any:
        raise KeyError("client error")

    path = C.FastFetch(fetch, print, print, print, calm) if impl == "c" else \
        _fastpath.fast_fetch_py(fetch, print, print, print, calm)
    with pytest.raises(KeyError, match="client error"):
        path(1)


def test_calm_type_follows_the_speedups_switch() -> None:
    expected = C.Calm if _hashing._C is not None else _fastpath.PyCalm
    assert _fastpath.Calm is expected


@pytest.mark.parametrize("make", _method_impls())
def test_method_keeps_no_instance_alive(make: Any) -> None:
    """A closed and dropped producer must be freed (its client with it): the
    class-level method must not hold the last instance through its
    implementation (which refers back to the instance)."""
    import gc
    import weakref

    class Thing:
        def __init__(self) -> None:
            self._impl = self.slow  # like FastProduce's slow path: refers back to the instance

        def slow(self, x: int) -> int:
            return x

        def act(self, x: int) -> int:
            raise AssertionError

        act = make(act, "_impl")

    t = Thing()
    assert t.act(3) == 3
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None


# -- the causal-token check of calm fetches


STAMP = [("kafka-ordered.reg", b"log:7")]


@pytest.mark.parametrize("messages", MESSAGE_KINDS, indirect=True)
@pytest.mark.parametrize("impl", _impls())
@pytest.mark.parametrize("case, fetched, admitted, expected_after", [
    ("contiguous", [_Msg("t", 0, 5), _Msg("t", 0, 6)], True, {("t", 0): 7, ("t", 1): 3}),
    ("single poll", _Msg("t", 1, 3), True, {("t", 0): 5, ("t", 1): 4}),
    ("two runs", [_Msg("t", 0, 5), _Msg("t", 1, 3), _Msg("t", 1, 4)], True, {("t", 0): 6, ("t", 1): 5}),
    ("unmanaged topic", [_Msg("u", 0, 99)], True, {("t", 0): 5, ("t", 1): 3}),
    ("other headers", [_Msg("t", 0, 5, [("trace", b"x")])], True, {("t", 0): 6, ("t", 1): 3}),
    ("stamped", [_Msg("t", 0, 5), _Msg("t", 0, 6, STAMP)], False, None),
    ("stamped, unmanaged topic", [_Msg("u", 0, 1, STAMP)], False, None),
    ("gap at the start", [_Msg("t", 0, 9)], False, None),
    ("gap inside", [_Msg("t", 0, 5), _Msg("t", 0, 7)], False, None),
    ("partition not expected (after an assignment or seek)", [_Msg("t", 2, 0)], False, None),
    ("error", [_Msg("t", 0, 5), _Msg("t", 0, 6, error="boom")], False, None),
    ("odd headers", [_Msg("t", 0, 5, {"kafka-ordered.reg": b"x"})], False, None),
])
def test_calm_fetch_is_returned_untouched_only_when_the_token_rule_needs_nothing(
        impl: str, case: str, fetched: Any, admitted: bool, expected_after: Any,
        messages: Callable[[Any], Any]) -> None:
    """A calm consumer returns a fetch untouched only without a stamp, an
    error or a gap on a managed topic; then the expected offsets move past it.
    Otherwise the fetch goes through ``after`` (the full path: stamps
    removed, the view caught up) and the expected offsets are left alone."""
    calm = _calm(impl)
    calm.quiet, calm.until = True, time.monotonic() + 60
    calm.managed = frozenset({"t"})
    start = {("t", 0): 5, ("t", 1): 3}
    calm.expected.update(start)
    calls: List[Any] = []
    fetched = messages(fetched)
    got = _fetch_path(impl, calm, fetched, calls)(1.0)
    if admitted:
        assert got is fetched and [c[0] for c in calls] == ["fetch"], case
        assert calm.expected == expected_after, case
    else:
        assert got == ("after", fetched) and [c[0] for c in calls] == ["fetch", "after"], case
        assert calm.expected == start, case


# Names of one length that differ in one byte: short ones, and names as long
# as real topics' that differ at the start, in the middle or in the last byte.
TOPIC_PAIRS = [("topic-a", "topic-b"), ("topic-aa", "topic-ab"), ("Xench-changed-a1b2c3", "bench-changed-a1b2c3"),
               ("bench-chXnged-a1b2c3", "bench-changed-a1b2c3"), ("bench-changed-a1b2c3", "bench-changed-a1b2c4"),
               ("sixteen-bytes-0a", "sixteen-bytes-1a"), ("topic-abc", "topic-abd")]


@pytest.mark.parametrize("messages", MESSAGE_KINDS, indirect=True)
@pytest.mark.parametrize("impl", _impls())
@pytest.mark.parametrize("second, admitted", [(6, False), (40, True)])
@pytest.mark.parametrize("names", TOPIC_PAIRS, ids=lambda n: f"{n[0]}|{n[1]}")
def test_a_run_ends_where_the_topic_changes_even_at_the_next_offset_of_the_partition_number(
        impl: str, second: int, admitted: bool, names: Tuple[str, str], messages: Callable[[Any], Any]) -> None:
    """Two managed topics of names of one length: a record of the second
    right after one of the first, same partition number, next offset, starts
    a run of its own, checked against its own expected offset (each record
    holds its own topic string: the check compares them by value)."""
    a, b = names
    calm = _calm(impl)
    calm.quiet, calm.until = True, time.monotonic() + 60
    calm.managed = frozenset({a, b})
    start = {(a, 0): 5, (b, 0): 40}
    calm.expected.update(start)
    calls: List[Any] = []

    def fresh(name: str) -> str:  # each record holds a string object of its own, as a client's do
        return "".join([name[:3], name[3:]])

    fetched = messages([_Msg(fresh(a), 0, 5), _Msg(fresh(b), 0, second), _Msg(fresh(b), 0, second + 1)])
    got = _fetch_path(impl, calm, fetched, calls)(1.0)
    if admitted:
        assert got is fetched and calm.expected == {(a, 0): 6, (b, 0): 42}
    else:
        assert got == ("after", fetched) and calm.expected == start


@pytest.mark.parametrize("messages", MESSAGE_KINDS, indirect=True)
@pytest.mark.parametrize("impl", _impls())
@pytest.mark.parametrize("case, fetched, admitted", [
    ("other partitions", [_Msg("t", 0, 5), _Msg("t", 0, 6)], True),
    ("the held partition", [_Msg("t", 1, 3)], False),
    ("the held partition after another", [_Msg("t", 0, 5), _Msg("t", 1, 3), _Msg("t", 1, 4)], False),
])
def test_records_of_a_held_partition_never_pass_the_calm_check(
        impl: str, case: str, fetched: Any, admitted: bool, messages: Callable[[Any], Any]) -> None:
    """A calm beside a partition held by a pause (its gate waits on another
    member): a client that hands out records of it anyway (aiokafka forgets
    pauses) sends the fetch through the full path, which holds them again,
    even at the offset the causal-token rule expects."""
    calm = _calm(impl)
    calm.quiet, calm.until = True, time.monotonic() + 60
    calm.managed = frozenset({"t"})
    calm.held = frozenset({("t", 1)})
    start = {("t", 0): 5, ("t", 1): 3}
    calm.expected.update(start)
    calls: List[Any] = []
    fetched = messages(fetched)
    got = _fetch_path(impl, calm, fetched, calls)(1.0)
    assert (got is fetched) is admitted, case
    if not admitted:
        assert got == ("after", fetched) and calm.expected == start, case
    open_tp, held_tp = _KTP("t", 0), _KTP("t", 1)
    by_runs = _calm(impl)
    by_runs.managed, by_runs.held = frozenset({"t"}), frozenset({("t", 1)})
    by_runs.expected.update(start)
    assert not _admits_runs(impl, by_runs, {open_tp: [_Rec(5, [])], held_tp: [_Rec(3, [])]})
    assert by_runs.expected == start
    assert _admits_runs(impl, by_runs, {open_tp: [_Rec(5, [])]}) and by_runs.expected == {("t", 0): 6, ("t", 1): 3}


@pytest.mark.parametrize("impl", _impls())
@pytest.mark.parametrize("case, call, fetched, want_fetch, want_slow", [
    # (args, kwargs) of the call; what fetch returns; the timeout fetch gets
    # ("cut": the calm's end, "as given"); the timeout slow gets ("rest": the
    # call's timeout less the cut wait, "as given", None: slow not called)
    ("records before the calm's end", ((500, 1.0), {}), [_Msg("t", 0, 5)], "cut", None),
    ("nothing before the calm's end", ((500, 1.0), {}), [], "cut", "rest"),
    ("a keyword timeout", ((500,), {"timeout": 1.0}), [], "cut", "rest"),
    ("waiting forever", ((500, -1),), [], "cut", "as given"),
    ("a wait shorter than the calm", ((500, 0.001), {}), [], "as given", None),
    ("no timeout given", ((500,), {}), [], None, "as given"),
])
def test_a_calm_beside_held_partitions_never_waits_past_its_end(
        impl: str, case: str, call: Any, fetched: Any, want_fetch: Optional[str], want_slow: Optional[str]) -> None:
    """While partitions wait at gates other members open, a calm fetch may
    wait only until the calm's end (when those gates are looked at again):
    its timeout is cut there, and the rest of the call's wait goes through
    the full path (which re-reads the gates' sources), so a gate that opens
    is seen within the calm, not one application timeout later."""
    args, kwargs = call if len(call) == 2 else (call[0], {})
    calm = _calm(impl)
    calm.managed = frozenset({"t"})
    calm.held = frozenset({("t", 1)})
    calm.expected.update({("t", 0): 5})
    calm.quiet, calm.until = True, time.monotonic() + 0.05
    calls: List[Any] = []

    def fetch(*a: Any, **k: Any) -> Any:
        calls.append(("fetch", a[1] if len(a) > 1 else k.get("timeout")))
        return fetched

    def slow(*a: Any, **k: Any) -> Any:
        calls.append(("slow", a[1] if len(a) > 1 else k.get("timeout")))
        return "slow"

    make = C.FastFetch if impl == "c" else _fastpath.fast_fetch_py
    path = make(fetch, slow, lambda got: ("after", got), lambda: calls.append(("idle", None)), calm, 1)
    got = path(*args, **kwargs)
    given = args[1] if len(args) > 1 else kwargs.get("timeout")
    kinds = [c[0] for c in calls]
    assert kinds == [k for k, want in (("fetch", want_fetch), ("slow", want_slow)) if want is not None], case
    if want_fetch == "cut":
        assert 0 < calls[0][1] <= 0.05, case
    elif want_fetch == "as given":
        assert calls[0][1] == given, case
    if want_slow == "rest":
        assert 0.9 < calls[-1][1] < 1.0, case
    elif want_slow == "as given":
        assert calls[-1][1] == given, case
    assert got == ("slow" if want_slow else fetched), case
    calm.until = time.monotonic() - 1  # past the calm's end: the full path
    calls.clear()
    assert path(500, 1.0) == "slow" and [c[0] for c in calls] == ["slow"]


@pytest.mark.parametrize("impl", _impls())
def test_calm_expected_offsets_are_the_freshness_dict(impl: str) -> None:
    """The calm path and the full path keep one set of expected offsets (the
    core hands its CausalFreshness dict to the calm)."""
    calm = _calm(impl)
    shared: Dict[Any, int] = {("t", 0): 1}
    calm.expected = shared
    calm.managed = {"t"}
    calm.quiet, calm.until = True, time.monotonic() + 60
    _fetch_path(impl, calm, [_Msg("t", 0, 1)], [])(1.0)
    assert shared == {("t", 0): 2} and calm.expected is shared


@pytest.mark.parametrize("messages", MESSAGE_KINDS, indirect=True)
@pytest.mark.parametrize("impl", _impls())
@pytest.mark.parametrize("case, headers, admitted, left", [
    ("included", [("kafka-ordered.reg", b"log:6")], True, None),
    ("included, among others", [("a", b"1"), ("kafka-ordered.reg", b"log:0"), ("b", b"2")], True,
     [("a", b"1"), ("b", b"2")]),
    ("at the view's end", [("kafka-ordered.reg", b"log:7")], False, None),
    ("another log", [("kafka-ordered.reg", b"other:1")], False, None),
    ("a log whose id extends ours", [("kafka-ordered.reg", b"log:x:1")], False, None),
    ("malformed", [("kafka-ordered.reg", b"log:")], False, None),
    ("not bytes", [("kafka-ordered.reg", "log:1")], False, None),
    # A move tombstone (kafka_ordered.tombstones) is hidden by the full path only.
    ("a move tombstone's included stamp", [("kafka-ordered.reg", b"log:6"), ("kafka-ordered.moved", b"")],
     False, None),
    ("a move tombstone, header first", [("kafka-ordered.moved", b""), ("kafka-ordered.reg", b"log:6")],
     False, None),
])
@pytest.mark.parametrize("topic", ["t", "u"])
def test_a_stamp_the_view_includes_is_only_removed_on_the_calm_path(
        impl: str, case: str, headers: Any, admitted: bool, left: Any, topic: str,
        messages: Callable[[Any], Any]) -> None:
    """A stamp of this consumer's log at an offset below the view's next
    one needs no catch-up: the calm check removes the header and goes on
    (on a managed topic and on one the view calls unmanaged alike). Any
    other stamp takes the full path."""
    calm = _calm(impl)
    calm.quiet, calm.until = True, time.monotonic() + 60
    calm.managed = frozenset({"t"})
    calm.stamp_prefix, calm.view_next = b"log:", 7
    calm.expected.update({("t", 0): 5})
    fetched = messages([_Msg(topic, 0, 5, list(headers)), _Msg(topic, 0, 6)])
    calls: List[Any] = []
    got = _fetch_path(impl, calm, fetched, calls)(1.0)
    if admitted:
        assert got is fetched and [c[0] for c in calls] == ["fetch"], case
        assert fetched[0].headers() == left, case
        assert calm.expected == ({("t", 0): 7} if topic == "t" else {("t", 0): 5}), case
    else:
        assert got == ("after", fetched) and [c[0] for c in calls] == ["fetch", "after"], case
        assert fetched[0].headers() == headers and calm.expected == {("t", 0): 5}, case


class _Rec:
    """The parts of a kafka-python ``ConsumerRecord`` the calm check reads."""

    def __init__(self, offset: int, headers: Any = ()) -> None:
        self.offset, self.headers = offset, list(headers)

    def _replace(self, headers: Any) -> "_Rec":
        return _Rec(self.offset, headers)


class _KTP:
    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition


def _kafka_python_records(tp: Tuple[str, int], offset: int, headers: List[Tuple[str, bytes]]) -> Any:
    return _Rec(offset, headers)


def _aiokafka_records(tp: Tuple[str, int], offset: int, headers: List[Tuple[str, bytes]]) -> Any:
    """aiokafka's own record: its fetcher hands the headers over as a tuple."""
    aiokafka = pytest.importorskip("aiokafka.structs")
    return aiokafka.ConsumerRecord(tp[0], tp[1], offset, 0, 0, b"k", b"v", None, 1, 1, tuple(headers))


def _aiokafka_replace(record: Any, headers: List[Tuple[str, bytes]]) -> Any:
    record.headers = headers
    return record


@pytest.mark.parametrize("impl", _impls())
@pytest.mark.parametrize("record, replace", [(_kafka_python_records, _fastpath.replace_headers),
                                             (_aiokafka_records, _aiokafka_replace)],
                         ids=["kafka-python", "aiokafka"])
@pytest.mark.parametrize("case, runs", [
    ("contiguous", {("t", 0): [5, 6]}),
    ("two partitions", {("t", 0): [5], ("t", 1): [3, 4]}),
    ("unmanaged topic", {("u", 0): [99]}),
    ("gap at the start", {("t", 0): [9]}),
    ("gap inside", {("t", 0): [5, 7]}),
    ("partition not expected", {("t", 2): [0]}),
    ("included stamp", {("t", 0): [5, (6, b"log:3")]}),
    ("included stamp, unmanaged topic", {("u", 0): [(1, b"log:6")]}),
    ("stamp beyond the view", {("t", 0): [(5, b"log:7")]}),
    ("stamp of another log", {("u", 0): [(5, b"other:1")]}),
])
def test_the_calm_check_decides_alike_for_every_client(case: str, runs: Dict[Tuple[str, int], List[Any]],
                                                       record: Callable[..., Any], replace: Any, impl: str) -> None:
    """``admits_runs`` (kafka-python's and aiokafka's fetch, grouped by
    partition; aiokafka's records carry their headers as a tuple) is the
    predicate of ``admits_py`` (confluent-kafka's list of messages): same
    decision, same expected offsets after, included stamps removed."""
    def calm(impl: str = "python") -> Any:
        c = _calm(impl)
        c.managed, c.stamp_prefix, c.view_next = frozenset({"t"}), b"log:", 7
        c.expected.update({("t", 0): 5, ("t", 1): 3})
        return c

    def headers(item: Any) -> List[Tuple[str, bytes]]:
        return [("app", b"1"), ("kafka-ordered.reg", item[1])] if isinstance(item, tuple) else []

    def offset(item: Any) -> int:
        return item[0] if isinstance(item, tuple) else item

    msgs = [_Msg(t, p, offset(i), headers(i) or None) for (t, p), items in runs.items() for i in items]
    recs = {_KTP(t, p): [record((t, p), offset(i), headers(i)) for i in items] for (t, p), items in runs.items()}
    by_list, by_runs = calm(), calm(impl)
    decided = _fastpath.admits_py(by_list, msgs)
    assert _admits_runs(impl, by_runs, recs, replace) is decided, case
    assert by_runs.expected == by_list.expected, case
    if decided:
        assert all(m.headers() in (None, [("app", b"1")]) for m in msgs)
        assert all(list(r.headers) in ([], [("app", b"1")]) for rs in recs.values() for r in rs)


def test_fields_read_in_place_are_what_the_methods_return() -> None:
    """The layout check passes on the installed client (else the C check
    calls the methods, which the tests above also cover), and switching it
    off and on again is honoured; so is reading fetched headers through
    librdkafka's own functions (tests/integration/test_fetched_headers.py),
    found in the library the installed client links."""
    if not kafka_ordered.speedups_enabled():
        assert not _message.message_layout_matches() and not _message.use_message_layout(True)
        assert not _message.librdkafka_headers()
        return
    assert _message.message_layout_matches()
    assert _message.use_message_layout(False) is False and not _message.librdkafka_headers()
    assert _message.use_message_layout(True, through_librdkafka=False) is True and not _message.librdkafka_headers()
    assert _message.use_message_layout(True) is True and _message.librdkafka_headers()
    from confluent_kafka import Message

    assert C.use_message_layout(Message, "/no/such/library.so") is False, "a library not loaded is never loaded"
    assert _message.use_message_layout(True) is True


def _stamped_messages(seed: int) -> List[Any]:
    """Fetched messages of one topic with every shape of kafka-ordered.reg
    header the consumer meets (this log's, another's, encoded tokens, move
    tombstones, application headers), seeded."""
    import random

    from confluent_kafka import Message

    from kafka_ordered.tokens import encode

    rng = random.Random(seed)
    shapes = [
        lambda: None, lambda: [("app", b"1")], lambda: [("kafka-ordered.reg", b"L:%d" % rng.randrange(99))],
        lambda: [("app", b"2"), ("kafka-ordered.reg", b"L:%d" % rng.randrange(99)),
                 ("kafka-ordered.reg", b"L:%d" % rng.randrange(99))],
        lambda: [("kafka-ordered.reg", b"M:%d" % rng.randrange(99))], lambda: [("kafka-ordered.reg", b"L:x")],
        lambda: [("kafka-ordered.reg", encode("L", rng.randrange(99)))],
        lambda: [("kafka-ordered.reg", b"L:%d" % rng.randrange(99)), ("kafka-ordered.moved", b"")],
        lambda: [("kafka-ordered.reg", b"L:" + b"9" * 19)],
    ]
    out = []
    for i in range(300):
        h = rng.choice(shapes)()
        out.append(Message(topic="t", partition=rng.randrange(4), offset=i,
                           value=None if h and ("kafka-ordered.moved", b"") in h else b"v", headers=h))
    return out


@pytest.mark.skipif(_hashing._C is None, reason="C speed-ups not built")
@pytest.mark.parametrize("seed", range(5))
def test_c_and_python_stamp_passes_end_alike(seed: int, monkeypatch: Any) -> None:
    """The full path's stamp pass (confluent _take_stamps) with the C
    take_stamps and with its pure-Python twin: same stamps, same move
    tombstones, same headers left on every record."""
    from kafka_ordered.confluent import _consumer

    ends = []
    for impl in (_hashing._C.take_stamps, _fastpath.take_stamps_py):
        monkeypatch.setattr(_consumer, "take_stamps", impl)
        raw = _stamped_messages(seed)
        moved: List[Any] = []
        stamps = _consumer._take_stamps(raw, "L", moved)
        ends.append((stamps, [m.offset() for m in moved], [m.headers() for m in raw]))
    assert ends[0] == ends[1]
    assert ends[0][0] and ends[0][1]  # the seeds exercise stamps and tombstones


def _grouped_fetch(seed: int) -> Tuple[Dict[str, Any], Dict[Any, List[Any]]]:
    """A calm (its fields) and a grouped fetch (kafka-python's lists, or
    aiokafka's tuples of headers) with every shape the grouped check meets:
    runs that start where expected or not, holes, held partitions, gate
    limits, watched offsets, unmanaged topics, stamps of every kind."""
    from kafka_ordered.tokens import encode

    rng = random.Random(seed)
    shapes = [
        lambda: (), lambda: [("app", b"1")], lambda: [("kafka-ordered.reg", b"L:%d" % rng.randrange(12))],
        lambda: (("app", b"2"), ("kafka-ordered.reg", b"L:%d" % rng.randrange(9))),
        lambda: [("kafka-ordered.reg", b"M:1")], lambda: [("kafka-ordered.reg", b"L:x")],
        lambda: [("kafka-ordered.reg", encode("L", 3))], lambda: [("kafka-ordered.moved", b"")],
    ]
    tps = [("t", 0), ("t", 1), ("t", 2), ("u", 0)]
    fields: Dict[str, Any] = {
        "managed": frozenset({"t"}), "stamp_prefix": b"L:", "view_next": 10,
        "expected": {tp: rng.randrange(3) for tp in tps if rng.random() < 0.8},
        "held": frozenset(tp for tp in tps if rng.random() < 0.1),
        "limits": {tp: rng.randrange(2, 8) for tp in tps if rng.random() < 0.2},
        "until_offsets": {tp: rng.randrange(1, 8) for tp in tps if rng.random() < 0.3},
    }
    fetched: Dict[Any, List[Any]] = {}
    for tp in rng.sample(tps, rng.randint(1, 4)):
        first = rng.randrange(3)
        offsets = list(range(first, first + rng.randint(0, 5)))
        if len(offsets) > 2 and rng.random() < 0.15:
            del offsets[1]
        recs = []
        for o in offsets:
            h = rng.choice(shapes)() if rng.random() < 0.3 else ()
            recs.append(_Rec(o, []) if isinstance(h, list) and rng.random() < 0.5 else _TupleRec(o, h))
            if isinstance(h, list):
                recs[-1].headers = h
        fetched[_KTP(*tp)] = recs
    return fields, fetched


def _grouped_calm(impl: str, fields: Dict[str, Any]) -> Any:
    """A quiet calm of ``impl`` with the fields :func:`_grouped_fetch` drew
    (``expected`` is the calm's own dict, filled in place)."""
    calm = _calm(impl)
    for name, value in fields.items():
        if name == "expected":
            calm.expected.update(value)
        else:
            setattr(calm, name, value)
    calm.quiet = True
    return calm


class _TupleRec:
    """A record as aiokafka hands it out (headers as a tuple, replaced in place)."""

    def __init__(self, offset: int, headers: Any) -> None:
        self.offset, self.headers = offset, tuple(headers)


def _set_headers(record: Any, headers: List[Tuple[str, bytes]]) -> Any:
    if isinstance(record, _TupleRec):
        record.headers = headers
        return record
    return record._replace(headers)


@pytest.mark.skipif(_hashing._C is None, reason="C speed-ups not built")
@pytest.mark.parametrize("seed", range(300))
def test_c_and_python_grouped_calm_checks_decide_alike(seed: int) -> None:
    """The grouped calm check (kafka-python, aiokafka) in C and its
    pure-Python twin: same decision, same expected offsets and quiet flag
    after, same headers left on every record."""
    ends = []
    for impl in ("c", "python"):
        fields, fetched = _grouped_fetch(seed)
        calm = _grouped_calm(impl, fields)
        decided = _admits_runs(impl, calm, fetched, _set_headers)
        left = [[list(r.headers) for r in recs] for recs in fetched.values()]
        ends.append((decided, dict(calm.expected), calm.quiet, left))
    assert ends[0] == ends[1]


def test_the_seeds_of_the_grouped_twin_test_cover_both_decisions() -> None:
    got = set()
    for seed in range(300):
        fields, fetched = _grouped_fetch(seed)
        calm = _grouped_calm("python", fields)
        got.add((_fastpath.admits_runs_py(calm, fetched, _set_headers), calm.quiet))
    assert got == {(True, True), (True, False), (False, True)}


# -- the full path's first look at a fetch, and the size of kept records


def _shaped_messages(seed: int) -> List[Any]:
    from confluent_kafka import KafkaError, Message

    rng = random.Random(seed)
    out = []
    for i in range(rng.randint(1, 40)):
        r = rng.random()
        headers = [("app", b"1")] if r < 0.1 else [] if r < 0.15 else None
        error = KafkaError(KafkaError._PARTITION_EOF) if rng.random() < 0.05 else None
        out.append(Message(topic="t", partition=rng.choice([0, 1, 7, -1, 2**31 - 2]), offset=i,
                           key=rng.choice([None, b"", b"k" * rng.randint(1, 9), "text-key"]),
                           value=rng.choice([None, b"v" * rng.randint(0, 300)]), headers=headers, error=error))
    return out


@pytest.mark.skipif(C is None, reason="C speed-ups not built")
@pytest.mark.parametrize("in_place", [True, False], ids=["in place", "methods"])
@pytest.mark.parametrize("seed", range(40))
def test_c_and_python_fetch_shapes_and_sizes_agree(seed: int, in_place: bool) -> None:
    """``fetch_shape`` and ``message_bytes``: the C twins (reading fields in
    place, or calling the methods) give what the pure-Python ones give."""
    if in_place and not _message.message_layout_matches():
        pytest.skip("this client's Message layout is not the one read in place")
    _message.use_message_layout(in_place)
    try:
        batch = _shaped_messages(seed)
        assert C.fetch_shape(batch) == _fastpath.fetch_shape_py(batch)
        assert C.message_bytes(batch) == _fastpath.message_bytes_py(batch)
        assert C.fetch_shape([]) == ([], False, False) and C.message_bytes([]) == 0
    finally:
        _message.use_message_layout(True)


@pytest.mark.skipif(C is None, reason="C speed-ups not built")
def test_the_c_fetch_shape_refuses_what_is_not_a_list() -> None:
    with pytest.raises(TypeError, match="a list of confluent_kafka.Message"):
        C.fetch_shape((1, 2))
    with pytest.raises(TypeError, match="a list of confluent_kafka.Message"):
        C.message_bytes(None)
    with pytest.raises(AttributeError):
        C.fetch_shape([object()])


@pytest.mark.parametrize("messages", MESSAGE_KINDS, indirect=True)
@pytest.mark.parametrize("impl", _impls())
@pytest.mark.parametrize("case, fetched, ends", [
    ("below the watched offset", [_Msg("t", 0, 5), _Msg("t", 0, 6)], False),
    ("reaching it", [_Msg("t", 0, 5), _Msg("t", 0, 6), _Msg("t", 0, 7)], True),
    ("past it", [_Msg("t", 0, 5), _Msg("t", 0, 6), _Msg("t", 0, 7), _Msg("t", 0, 8)], True),
    ("reaching it in an earlier run", [_Msg("t", 0, 5), _Msg("t", 0, 6), _Msg("t", 0, 7), _Msg("t", 1, 3)], True),
    ("another partition", [_Msg("t", 1, 3), _Msg("t", 1, 4)], False),
])
def test_a_calm_fetch_that_reaches_a_watched_offset_is_returned_and_ends_the_calm(
        impl: str, case: str, fetched: Any, ends: bool, messages: Callable[[Any], Any]) -> None:
    """``calm.until_offsets``: a calm beside gates this member's own
    deliveries open (or hand-off waits it crosses). A fetch that moves a
    watched partition's next offset to its entry or past is still returned
    untouched (its records are free), and the calm ends: the next poll
    takes the full path, which opens the gate or announces the crossing."""
    calm, fetched, got, calls = _calm_fetch(impl, messages(fetched), until_offsets={("t", 0): 8})
    assert got is fetched and [c[0] for c in calls] == ["fetch"], case
    assert calm.quiet is (not ends), case
    by_runs = _calm_with(_calm(impl), until_offsets={("t", 0): 8})
    assert _admits_runs(impl, by_runs, _as_runs(fetched))
    assert by_runs.quiet is (not ends), case


#: The next offsets the calm-check tests below start from.
_START = {("t", 0): 5, ("t", 1): 3}


def _calm_with(calm: Any, **fields: Any) -> Any:
    """``calm`` quiet for a minute over topic t at :data:`_START`, with ``fields`` set."""
    calm.quiet, calm.until = True, time.monotonic() + 60
    calm.managed = frozenset({"t"})
    calm.expected.update(_START)
    for name, value in fields.items():
        setattr(calm, name, value)
    return calm


def _calm_fetch(impl: str, fetched: Any, **fields: Any) -> Tuple[Any, Any, Any, List[Any]]:
    """One call of ``impl``'s fetch path over a calm (see :func:`_calm_with`)
    whose client fetch returns ``fetched``: the calm, the fetch, the result and the calls."""
    calm = _calm_with(_calm(impl), **fields)
    calls: List[Any] = []
    got = _fetch_path(impl, calm, fetched, calls)(1.0)
    return calm, fetched, got, calls


def _as_runs(fetched: Any) -> Dict[Any, List[Any]]:
    """``fetched`` (Messages) as kafka-python's fetch gives it: records by partition."""
    grouped: Dict[Tuple[str, int], List[Any]] = {}
    for m in (fetched if isinstance(fetched, list) else [fetched]):
        grouped.setdefault((m.topic(), m.partition()), []).append(_Rec(m.offset(), []))
    return {_KTP(*k): recs for k, recs in grouped.items()}


@pytest.mark.parametrize("impl", _impls())
@pytest.mark.parametrize("field", ["until_offsets", "limits"])
def test_calm_offsets_by_partition_are_dicts(impl: str, field: str) -> None:
    calm = _calm(impl)
    assert getattr(calm, field) == {}
    setattr(calm, field, {("t", 0): 3})
    assert getattr(calm, field) == {("t", 0): 3}
    if impl == "c":
        with pytest.raises(TypeError):
            setattr(calm, field, [("t", 0)])


@pytest.mark.parametrize("messages", MESSAGE_KINDS, indirect=True)
@pytest.mark.parametrize("impl", _impls())
@pytest.mark.parametrize("case, fetched, admitted", [
    ("before the gate", [_Msg("t", 0, 5), _Msg("t", 0, 6)], True),
    ("reaching the gate", [_Msg("t", 0, 5), _Msg("t", 0, 6), _Msg("t", 0, 7)], False),
    ("starting at the gate", [_Msg("t", 0, 7)], False),
    ("reaching it after another partition", [_Msg("t", 1, 3), _Msg("t", 0, 5), _Msg("t", 0, 6), _Msg("t", 0, 7)],
     False),
    ("another partition", [_Msg("t", 1, 3), _Msg("t", 1, 4)], True),
])
def test_records_at_a_closed_gate_never_pass_the_calm_check(
        impl: str, case: str, fetched: Any, admitted: bool, messages: Callable[[Any], Any]) -> None:
    """``calm.limits``: a calm beside a closed gate that the partition's
    position has not reached. Records below the gate pass; a fetch that
    holds one at the gate's start or past it takes the full path, which
    holds the partition there, and the expected offsets are left alone."""
    calm, fetched, got, calls = _calm_fetch(impl, messages(fetched), limits={("t", 0): 7})
    assert (got is fetched) is admitted, case
    if not admitted:
        assert got == ("after", fetched) and calm.expected == _START, case
    by_runs = _calm_with(_calm(impl), limits={("t", 0): 7})
    assert _admits_runs(impl, by_runs, _as_runs(fetched)) is admitted, case
