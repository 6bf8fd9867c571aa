"""Scale benchmarks (issue 12): a client's cost independent of fleet size and history.

    python benchmarks/scale.py [--only NAME[,NAME]] [--idle-seconds 30] [--switch-processes 64]
                               [--gates 10000] [--polls 20000] [--records 400000] [--rounds 7]

Each benchmark is a function below; ``main()`` runs them in turn and each
ends with one line::

    BENCH <name> value=<x> target=<op><y> PASS|MISS

- ``scale_idle_requests``: requests per second that reach the layout-log
  partition from one idle process holding 10 producers and 10 consumers.
  The process runs as a child; every connection it opens goes through a
  counting TCP proxy in front of a private embedded broker (whose advertised
  listener is the proxy), and a request counts when it names the layout log
  (its topic name or topic id). Target <= 1/s.
- ``scale_switch_64``: 64 producer processes (``--switch-processes``) each
  send a keyed record every 50 ms (1,280 records/s in all: the broker is not
  saturated) and one right when they see the new layout; one expand; each
  reports its switch pause from seeing the new layout (its follower applied
  it) to its first send under it. p50/p99; target p99 < 500 ms. The processes share this machine's cores: on a small
  machine the pause is mostly waiting for CPU (the result says how many
  cores there were).
- ``scale_gates_poll``: the per-poll gate work of one consumer (its core's
  ``begin_poll`` + ``settle``, through fake client ports, no broker) on a
  topic whose layout log holds ``--gates`` gates on the partitions it owns.
  Two histories: every gate still closed (waiting on partitions another
  member owns), and every gate long opened. Polls mostly change nothing;
  every 100th the other member's commits advance (opening some gates), every
  500th a new registration arrives. Reported: per-poll time p50/p99, and of
  the polls with a change. Target: < 0.2 ms (p50 of all polls, and p99 of the
  polls with a change), all gates closed.
- ``scale_start_100k``: a layout log with ``--registrations`` (100,000)
  registrations (1,000 stable producer ids registering again at every
  restart, 1 in 100 an anonymous producer's gated registration, written as
  producers write them, after four expansions); then, each in a fresh
  process, the time and RSS increase to construct an ``OrderedConsumer`` and
  deliver the first record. The first client replays the whole log and
  writes a snapshot (it replayed more than 10,000 records); the value is the
  median of the next two, which start from it. Targets < 1 s, < 20 MiB.
- ``consumer_after_changes``: OrderedConsumer's throughput ratio to the raw
  Consumer on a topic after 10 layout changes whose transitions are passed,
  over the same ratio on a topic that never changed, in the same run (four
  runs per round, order rotated; ``consume(500)``, configured alike as in
  benchmarks/consumer.py). Target: within 3%.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Tuple

from _common import bench, broker, machine, percentile
from _data import changed_topic, fill, keys
from consumer import COMMON, committed, drain_consume

from confluent_kafka import Consumer, Producer, TopicPartition

from kafka_ordered import LayoutAdmin, OrderedConsumer
from kafka_ordered._gating import GatingCore, GatingOptions
from kafka_ordered.history import LayoutHistory
from kafka_ordered.layout import Layout
from kafka_ordered.metrics import LayoutViewMetrics
from kafka_ordered.records import encode_layout, encode_registration

_HERE = os.path.dirname(os.path.abspath(__file__))
_API = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
        10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 14: "SyncGroup", 18: "ApiVersions",
        19: "CreateTopics", 32: "DescribeConfigs", 60: "DescribeCluster", 71: "GetTelemetrySubscriptions",
        72: "PushTelemetry"}


# -- a counting proxy ------------------------------------------------------------


class CountingProxy:
    """Forwards every connection to ``upstream`` and counts the Kafka requests
    (client -> broker frames) whose bytes contain one of ``needles``, by API."""

    def __init__(self, upstream: Tuple[str, int], port: int) -> None:
        self.upstream = upstream
        self.port = port
        self.needles: List[bytes] = []
        self.matched: Counter = Counter()
        self.total = 0
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", port))
        self._server.listen(256)
        self._stop = False
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def snapshot(self) -> Tuple[Counter, int]:
        with self._lock:
            return Counter(self.matched), self.total

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, up, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if requests:
                    buf += data
                    while len(buf) >= 4:
                        size = int.from_bytes(buf[:4], "big")
                        if len(buf) < 4 + size:
                            break
                        frame, buf = buf[4:4 + size], buf[4 + size:]
                        self._count(frame)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _count(self, frame: bytes) -> None:
        api = int.from_bytes(frame[:2], "big", signed=True)
        hit = any(n in frame for n in self.needles)
        with self._lock:
            self.total += 1
            if hit:
                self.matched[_API.get(api, str(api))] += 1

    def close(self) -> None:
        self._stop = True
        self._server.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _ProxiedBroker:
    """A private embedded Tansu whose advertised listener is a counting proxy."""

    def __init__(self) -> None:
        from kafka_ordered.testing import find_tansu
        from kafka_ordered.testing._broker import _die_with_parent

        inner, outer = _free_port(), _free_port()
        self.proc = subprocess.Popen(
            [find_tansu(), "broker", "--listener-url", f"tcp://127.0.0.1:{inner}",
             "--advertised-listener-url", f"tcp://127.0.0.1:{outer}", "--storage-engine", "memory://tansu/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent)
        self.proxy = CountingProxy(("127.0.0.1", inner), outer)
        self.bootstrap = f"127.0.0.1:{outer}"
        from confluent_kafka.admin import AdminClient

        a = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + 20
        while True:
            try:
                if a.list_topics(timeout=1).brokers:
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the proxied embedded broker did not start")
            time.sleep(0.1)

    def close(self) -> None:
        self.proxy.close()
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _topic_id_bytes(bootstrap: str, topic: str) -> bytes:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    a = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    tid = a.describe_topics(TopicCollection([topic]))[topic].result().topic_id
    hi, lo = tid.get_most_significant_bits(), tid.get_least_significant_bits()
    return hi.to_bytes(8, "big", signed=True) + lo.to_bytes(8, "big", signed=True)


def _child(args: List[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=os.path.join(_HERE, os.pardir))


# -- scale_idle_requests -----------------------------------------------------------


def _idle_child(a: argparse.Namespace) -> int:
    """10 producers and 10 consumers that did their first send and first
    delivery, then stay idle (the consumers keep polling) until stdin closes."""
    from kafka_ordered import OrderedConsumer, OrderedProducer
    from kafka_ordered.testing import group_config

    conf = {"bootstrap.servers": a.bootstrap, "ordered.layout.topic": a.layout_topic}
    producers = [OrderedProducer({**conf, "linger.ms": 5}) for _ in range(a.clients)]
    consumers = [OrderedConsumer({**conf, **group_config(True), "group.id": f"idle-{uuid.uuid4().hex[:8]}",
                                  "auto.offset.reset": "earliest"}) for _ in range(a.clients)]
    for i, p in enumerate(producers):
        p.produce(a.topic, b"v", f"key-{i}".encode())
        p.flush(10)
    for c in consumers:
        c.subscribe([a.topic])
    got = [0] * len(consumers)
    deadline = time.monotonic() + 60
    while min(got) < len(producers) and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            got[i] += len(c.consume(100, 0.05))
    print(json.dumps({"ready": min(got) >= len(producers), "threads": threading.active_count()}), flush=True)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    while not stop.is_set():
        for c in consumers:
            c.poll(0.05)
    for c in consumers:
        c.close()
    for p in producers:
        p.close(5)
    return 0


def scale_idle_requests(a: argparse.Namespace) -> str:
    from kafka_ordered import LayoutAdmin

    if os.environ.get("KAFKA_ORDERED_BOOTSTRAP"):
        print("scale_idle_requests counts through a proxy in front of a private embedded broker "
              "(KAFKA_ORDERED_BOOTSTRAP is not used for it)")
    pb = _ProxiedBroker()
    child: Optional[subprocess.Popen] = None
    try:
        layout_topic, topic = f"_kafka_ordered-{uuid.uuid4().hex[:8]}", f"idle-{uuid.uuid4().hex[:8]}"
        with LayoutAdmin({"bootstrap.servers": pb.bootstrap, "ordered.layout.topic": layout_topic}) as admin:
            admin.create_topic(topic, 4)
        pb.proxy.needles = [layout_topic.encode(), _topic_id_bytes(pb.bootstrap, layout_topic)]
        child = _child(["--child", "idle", "--bootstrap", pb.bootstrap, "--layout-topic", layout_topic,
                        "--topic", topic, "--clients", str(a.idle_clients)])
        assert child.stdout is not None
        line = child.stdout.readline()
        state = json.loads(line) if line else {}
        if not state.get("ready"):
            raise RuntimeError(f"the idle process did not start: {line!r}")
        time.sleep(3.0)  # start-up traffic done
        before, total_before = pb.proxy.snapshot()
        began = time.monotonic()
        time.sleep(a.idle_seconds)
        after, total_after = pb.proxy.snapshot()
        window = time.monotonic() - began
        delta = after - before
        rate = sum(delta.values()) / window
        print(f"idle process: {a.idle_clients} OrderedProducer + {a.idle_clients} OrderedConsumer (polling), "
              f"{window:.1f} s: {sum(delta.values())} requests naming the layout log "
              f"({dict(delta) or 'none'}), {(total_after - total_before) / window:.1f} requests/s to the broker "
              "in all (heartbeats, empty data fetches)")
        return bench("scale_idle_requests", rate, "<=", 1, "{:.2f}")
    finally:
        if child is not None:
            assert child.stdin is not None
            child.stdin.close()
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
        pb.close()


# -- scale_switch_64 ----------------------------------------------------------------


def _cpu_busy(since: Any = None) -> Any:
    """Without ``since``: a /proc/stat sample; with one: the machine's busy
    fraction since that sample."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle, total = fields[3] + fields[4], sum(fields)
    if since is None:
        return idle, total
    d_total = total - since[1]
    return 1.0 - (idle - since[0]) / d_total if d_total > 0 else float("nan")


def _switch_child(a: argparse.Namespace) -> int:
    """One producer writing continuously; reports its pause from seeing the
    new layout to its first send under it."""
    from kafka_ordered import OrderedProducer

    p = OrderedProducer({"bootstrap.servers": a.bootstrap, "ordered.layout.topic": a.layout_topic, "linger.ms": 5})
    p.history  # construction reads no layout log: start it here, before the measurement
    assert p._shared is not None
    follower = p._shared.follower
    seen: Dict[str, float] = {}
    woken = threading.Event()

    def on_change() -> None:
        lay = follower.history.current(a.topic)
        if lay is not None and lay.epoch >= 2 and "t" not in seen:
            seen["t"] = time.monotonic()
            woken.set()

    follower.add_listener(on_change)
    keys = [f"key-{i}".encode() for i in range(256)]
    p.produce(a.topic, b"v", keys[0])
    p.flush(10)
    print(json.dumps({"ready": True}), flush=True)
    i = 0
    done: Optional[float] = None
    deadline = time.monotonic() + a.deadline
    while done is None and time.monotonic() < deadline:
        p.produce(a.topic, b"v", keys[i % len(keys)])
        i += 1
        if any(r.epoch >= 2 for r in p.registrations):
            done = time.monotonic()
            break
        p.poll(0)
        woken.wait(a.interval)  # a send every interval, and one right when the new layout is seen
    reg = next((r for r in p.registrations if r.epoch >= 2), None)
    out = {"seen": "t" in seen, "done": done is not None,
           "pause_ms": (done - seen["t"]) * 1000 if done is not None and "t" in seen else None,
           "switch_ms": reg.pause_s * 1000 if reg is not None else None,
           "phases_ms": {k: v * 1000 for k, v in reg.phases.items()} if reg is not None else None,
           "gates": len(reg.gates) if reg is not None else 0}
    print(json.dumps(out), flush=True)
    sys.stdin.read()
    p.close(10)
    return 0


def scale_switch_64(a: argparse.Namespace) -> str:
    from kafka_ordered import LayoutAdmin

    n = a.switch_processes
    name = "scale_switch_64"
    with broker() as bootstrap:
        layout_topic, topic = f"_kafka_ordered-{uuid.uuid4().hex[:8]}", f"switch-{uuid.uuid4().hex[:8]}"
        admin = LayoutAdmin({"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic})
        admin.create_topic(topic, 4, physical_partitions=8)
        children: List[subprocess.Popen] = []
        try:
            began = time.monotonic()
            for _ in range(n):
                children.append(_child(["--child", "switch", "--bootstrap", bootstrap, "--layout-topic",
                                        layout_topic, "--topic", topic, "--deadline", "180"]))
            for c in children:
                assert c.stdout is not None
                line = c.stdout.readline()
                if not line or not json.loads(line).get("ready"):
                    raise RuntimeError(f"a producer process did not start: {line!r}")
            print(f"{n} producer processes running after {time.monotonic() - began:.1f} s "
                  f"({os.cpu_count()} cores); expanding 4 -> 8")
            time.sleep(1.0)
            idle_busy = _cpu_busy()
            time.sleep(2.0)
            idle_busy = _cpu_busy(idle_busy)
            busy = _cpu_busy()
            admin.expand(topic, 8)
            results = []
            for c in children:
                assert c.stdout is not None
                line = c.stdout.readline()
                results.append(json.loads(line) if line else {})
            busy = _cpu_busy(busy)
            print(f"machine CPU busy: {idle_busy:.0%} before the expand (producers sending), {busy:.0%} from the "
                  f"expand until the last producer switched ({os.cpu_count()} cores, shared with the broker)")
            pauses = [r["pause_ms"] for r in results if r.get("pause_ms") is not None]
            switches = [r["switch_ms"] for r in results if r.get("switch_ms") is not None]
            missing = n - len(pauses)
            phases: Dict[str, List[float]] = {}
            for r in results:
                for k, v in (r.get("phases_ms") or {}).items():
                    phases.setdefault(k, []).append(v)
            print(f"pause from seeing the layout to the first send under it: p50 {percentile(pauses, 0.5):.0f} ms, "
                  f"p99 {percentile(pauses, 0.99):.0f} ms, max {max(pauses, default=float('nan')):.0f} ms "
                  f"({len(pauses)} of {n} producers{'; ' + str(missing) + ' did not report' if missing else ''})")
            print(f"of which the switch (flush, 2 offset reads, append): p50 {percentile(switches, 0.5):.0f} ms, "
                  f"p99 {percentile(switches, 0.99):.0f} ms; phases p50: "
                  + ", ".join(f"{k} {percentile(v, 0.5):.0f} ms" for k, v in phases.items()))
            value = percentile(pauses, 0.99) if not missing else float("inf")
            return bench(name, value, "<", 500, "{:.0f}")
        finally:
            for c in children:
                try:
                    assert c.stdin is not None
                    c.stdin.close()
                except OSError:
                    pass
            for c in children:
                try:
                    c.wait(30)
                except subprocess.TimeoutExpired:
                    c.kill()
            admin.close()


# -- scale_start_100k -------------------------------------------------------------


def _start_child(a: argparse.Namespace) -> int:
    """Construct an OrderedConsumer and deliver the first record; print time and RSS increase."""
    from confluent_kafka import OFFSET_BEGINNING

    from kafka_ordered import OrderedConsumer

    def rss() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))

    before = rss()
    began = time.perf_counter()
    c = OrderedConsumer({"bootstrap.servers": a.bootstrap, "ordered.layout.topic": a.layout_topic,
                         "group.id": f"bench-start-{uuid.uuid4().hex[:6]}"})
    c.assign([TopicPartition(a.topic, 0, OFFSET_BEGINNING)])
    while True:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            break
    took = time.perf_counter() - began
    grew = rss() - before
    follower = c._shared.follower
    print(json.dumps({"s": took, "rss": grew, "snapshot": follower.snapshot_offset, "replayed": follower.replayed,
                      "next": c.history.next_offset}), flush=True)
    c.close()
    return 0


def _history_of(bootstrap: str, layout_topic: str, topic: str, n: int) -> None:
    """``n`` registrations as a fleet leaves them: stable producer ids (1,000 of
    them) registering again at every restart, and 1 in 100 an anonymous
    producer's registration with a gate after the last expansion.

    Encoded by the public record codec (:func:`encode_registration`) and
    written in batches. Appending them one acknowledged record at a time
    through :meth:`LayoutLog.append`, as producers do, takes 28 s, but the
    embedded broker cannot serve what results: with 20,000 single-record
    batches a partition reads whole in 0.55 s, with 30,000 in 17.6 s, with
    40,000 a fetch no longer answers within 30 s (docs/testing.md). Against
    Apache Kafka (``KAFKA_ORDERED_BOOTSTRAP``) the batching changes nothing
    a reader sees: the same records at the same offsets."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "queue.buffering.max.messages": 200000})
    for i in range(n):
        if i % 100 == 99:
            key, value = encode_registration(topic, f"anon-{i}", False, 5, 4, {7: (i, {3: i})})
        else:
            key, value = encode_registration(topic, f"svc-{i % 1000}", True, 5, 5, {})
        while True:
            try:
                p.produce(layout_topic, value, key, partition=0)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0


def scale_start_100k(a: argparse.Namespace) -> str:
    n = a.registrations
    with broker() as bootstrap:
        layout_topic = f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"
        conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": layout_topic}
        admin = LayoutAdmin(conf)
        topic = f"bench-start-{uuid.uuid4().hex[:6]}"
        admin.create_topic(topic, 4, physical_partitions=16)
        for parts in (5, 6, 7, 8):
            admin.expand(topic, parts)
        admin.close()
        began = time.perf_counter()
        _history_of(bootstrap, layout_topic, topic, n)
        print(f"  {n:,} registrations appended in {time.perf_counter() - began:.1f} s "
              f"(1,000 stable ids restarting; 1 in 100 carries a gate)", flush=True)
        data = Producer({"bootstrap.servers": bootstrap})
        data.produce(topic, b"first", b"k", partition=0)
        assert data.flush(10) == 0
        runs = []
        for label in ("first client (replays the log, then writes a snapshot)", "next client (from the snapshot)",
                      "another client (from the snapshot)"):
            child = _child(["--child", "start", "--bootstrap", bootstrap, "--layout-topic", layout_topic,
                            "--topic", topic])
            out, _ = child.communicate(timeout=300)
            r = json.loads(out.strip().splitlines()[-1])
            runs.append(r)
            print(f"  {label}: {r['s']:.2f} s, RSS +{r['rss'] / 2**20:.1f} MiB, snapshot covering "
                  f"{r['snapshot']}, {r['replayed']:,} records replayed after it", flush=True)
    steady = runs[1:]
    s = statistics.median(r["s"] for r in steady)
    mib = statistics.median(r["rss"] for r in steady) / 2**20
    return "\n".join([bench("scale_start_100k_s", s, "<", 1, "{:.2f}"),
                      bench("scale_start_100k_rss_mib", mib, "<", 20, "{:.1f}")])


# -- scale_gates_poll and consumer_after_changes ----------------------------------

TP = Tuple[str, int]
TOPIC = "t"
OPTS = {"ordered.metadata.timeout.ms": 1000, "ordered.gating": True, "ordered.commit.interval.ms": 200,
}


class _Port:
    """The client operations the core drives, in memory."""

    def __init__(self) -> None:
        self.commits: Dict[TP, int] = {}
        self.position: Dict[TP, int] = {}

    def pause(self, tps: List[TP]) -> None:
        pass

    def resume(self, tps: List[TP]) -> None:
        pass

    def seek(self, tp: TP, offset: int) -> None:
        self.position[tp] = offset

    def committed(self, tps: List[TP]) -> Dict[TP, int]:
        return {tp: self.commits[tp] for tp in tps if tp in self.commits}

    def commit(self, offsets: Dict[TP, int], asynchronous: bool) -> None:
        self.commits.update(offsets)

    def positions(self, tps: List[TP]) -> Dict[TP, int]:
        return {tp: self.position[tp] for tp in tps if tp in self.position}

    def partitions(self, tps: List[TP]) -> List[TP]:
        return list(tps)


class _View:
    fatal: Optional[BaseException] = None

    def __init__(self, history: LayoutHistory) -> None:
        self.history = history
        self.listeners: List[Callable[[], None]] = []

    log_id = "bench-log"

    def sync(self, timeout: Optional[float] = None) -> LayoutHistory:
        return self.history

    def catch_up_past(self, offset: int, timeout: Optional[float] = None) -> LayoutHistory:
        return self.history

    def add_listener(self, listener: Callable[[], None]) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        self.listeners.remove(listener)

    def view_metrics(self) -> LayoutViewMetrics:
        return LayoutViewMetrics("_log", self.history.next_offset, self.history.next_offset, 0, 0.0)

    def append(self, value: bytes) -> None:
        self.history.apply(self.history.next_offset, TOPIC.encode(), value)
        for listener in self.listeners:
            listener()


class _Offsets:
    def end_offsets(self, tps: Any, timeout: Optional[float] = None) -> Dict[TP, int]:
        return {tp: 0 for tp in tps}

    def start_offsets(self, tps: Any, timeout: Optional[float] = None) -> Dict[TP, int]:
        return {tp: 0 for tp in tps}


def _registration(i: int, per: int) -> bytes:
    """Registration ``i``: gates on partitions 8..15 (``per`` of them), each
    waiting on its parent (p - 8) at offset 1000 * i + p."""
    gates = {8 + j: (100 * i, {j: 1000 * i + j}) for j in range(per)}
    return encode_registration(TOPIC, f"producer-{i}", True, 2, 1, gates)[1]


def gates_poll(n_gates: int, polls: int, closed: bool) -> Tuple[List[float], List[float]]:
    """Per-poll times (seconds) of polls without and with a change."""
    history = LayoutHistory()
    lay = Layout(TOPIC, 1, 8, 8, 16)
    history.apply(0, TOPIC.encode(), encode_layout(lay, "create", "a")[1])
    history.apply(1, TOPIC.encode(), encode_layout(lay.expanded(16), "expand", "a")[1])
    view = _View(history)
    per = 8
    regs = n_gates // per
    for i in range(regs):
        view.append(_registration(i, per))
    port = _Port()
    if not closed:  # the other member committed past every wait long ago
        port.commits = {(TOPIC, q): 1000 * regs + 10 for q in range(8)}
    core = GatingCore(port, view, _Offsets(), GatingOptions(OPTS, False, 5.0, "earliest"))
    core.subscribed = {TOPIC}
    core.assigned_at({(TOPIC, p): 100 * regs for p in range(8, 16)})
    core.begin_poll()
    core.settle()
    tracked = len(core.keeper._gates)
    quiet: List[float] = []
    changed: List[float] = []
    clock = time.perf_counter
    commit_at = 0
    for n in range(1, polls + 1):
        change = False
        if n % 100 == 0:  # the other member's commits move on: a few gates open (if any are closed)
            commit_at += 1
            for q in range(8):
                port.commits[(TOPIC, q)] = max(port.commits.get((TOPIC, q), -1), 1000 * commit_at + q)
            core._committed_at = float("-inf")  # its next read is due now
            change = True
        if n % 500 == 0:  # a new registration arrives
            view.append(_registration(regs + n, per))
            change = True
        began = clock()
        core.begin_poll()
        core.settle()
        (changed if change else quiet).append(clock() - began)
    print(f"  {'closed' if closed else 'opened'} history: {regs * per} gates in the log, {tracked} tracked closed "
          f"after the first poll; {len(quiet)} polls without a change: p50 {percentile(quiet, 0.5) * 1e3:.4f} ms, "
          f"p99 {percentile(quiet, 0.99) * 1e3:.4f} ms; {len(changed)} with one: p50 "
          f"{percentile(changed, 0.5) * 1e3:.4f} ms, p99 {percentile(changed, 0.99) * 1e3:.4f} ms", flush=True)
    return quiet, changed


def after_changes(a: argparse.Namespace) -> List[float]:
    with broker() as bootstrap:
        conf = {"bootstrap.servers": bootstrap, "ordered.layout.topic": f"_kafka_ordered-bench-{uuid.uuid4().hex[:6]}"}
        admin = LayoutAdmin(conf)
        changed, group, final = changed_topic(bootstrap, conf, admin, 10, per_change=1000)
        changed_start = committed(bootstrap, group, changed, 16)
        fresh = f"bench-fresh-{uuid.uuid4().hex[:6]}"
        fresh_layout = admin.create_topic(fresh, final.partitions, physical_partitions=16)
        fresh_start = [TopicPartition(fresh, p, 0) for p in range(16)]
        ks = keys()
        n = a.records
        fill(bootstrap, changed, final, n, ks)
        fill(bootstrap, fresh, fresh_layout, n, ks)
        print(f"fresh topic {fresh}: {fresh_layout.partitions} of 16 partitions, never changed; {n} records on each")

        def run(ordered: bool, start: List[TopicPartition], grp: str) -> float:
            if ordered:
                c: Any = OrderedConsumer({**conf, "group.id": grp, **COMMON})
            else:
                c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex[:6]}", **COMMON})
            try:
                began = time.perf_counter()
                c.assign([TopicPartition(tp.topic, tp.partition, tp.offset) for tp in start])
                return drain_consume(c, n, began)
            finally:
                c.close()

        fresh_group = f"bench-fresh-{uuid.uuid4().hex[:6]}"
        arms = [("raw fresh", False, fresh_start, ""), ("ordered fresh", True, fresh_start, fresh_group),
                ("raw changed", False, changed_start, ""), ("ordered changed", True, changed_start, group)]
        run(False, fresh_start, "")  # warm-up, not counted
        rel: List[float] = []
        for r in range(a.rounds):
            order = arms[r % 4:] + arms[:r % 4]
            rates = {name: run(ordered, start, grp) for name, ordered, start, grp in order}
            fresh_ratio = rates["ordered fresh"] / rates["raw fresh"]
            changed_ratio = rates["ordered changed"] / rates["raw changed"]
            rel.append(changed_ratio / fresh_ratio)
            print(f"  round {r + 1}: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in rates.items())
                  + f"; ratio to raw: fresh {fresh_ratio:.3f}, after changes {changed_ratio:.3f}, "
                    f"relative {rel[-1]:.3f}", flush=True)
        admin.close()
    print(f"  after changes relative to fresh: median {statistics.median(rel):.3f} "
          f"(min {min(rel):.3f}, max {max(rel):.3f}) over {a.rounds} rounds")
    return rel


def scale_gates_poll(a: argparse.Namespace) -> str:
    print(f"per-poll gate work with {a.gates} gates in the layout log (fake client ports, no broker):")
    closed_quiet, closed_changed = gates_poll(a.gates, a.polls, closed=True)
    gates_poll(a.gates, a.polls, closed=False)
    every = closed_quiet + closed_changed
    return "\n".join([bench("scale_gates_poll", percentile(every, 0.5) * 1e3, "<", 0.2, "{:.4f}"),
                      bench("scale_gates_poll_with_change_p99", percentile(closed_changed, 0.99) * 1e3, "<", 0.2,
                            "{:.4f}")])


def consumer_after_changes(a: argparse.Namespace) -> str:
    print("consumer throughput after 10 passed layout changes vs a fresh topic:")
    rel = after_changes(a)
    return bench("consumer_after_changes", statistics.median(rel), ">=", 0.97, "{:.3f}")


# -- driver -----------------------------------------------------------------------------

#: Every benchmark of this file, run in this order by main() (others are added here).
BENCHMARKS: List[Tuple[str, Callable[[argparse.Namespace], str]]] = [
    ("scale_idle_requests", scale_idle_requests),
    ("scale_switch_64", scale_switch_64),
    ("scale_gates_poll", scale_gates_poll),
    ("consumer_after_changes", consumer_after_changes),
    ("scale_start_100k", scale_start_100k),
]


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated benchmark names (default: all)")
    ap.add_argument("--idle-seconds", type=float, default=30.0, help="scale_idle_requests: measuring window")
    ap.add_argument("--idle-clients", type=int, default=10, help="scale_idle_requests: producers and consumers each")
    ap.add_argument("--switch-processes", type=int, default=64, help="scale_switch_64: producer processes")
    ap.add_argument("--gates", type=int, default=10_000, help="scale_gates_poll: gates in the layout log")
    ap.add_argument("--polls", type=int, default=20_000, help="scale_gates_poll: polls timed")
    ap.add_argument("--records", type=int, default=400_000, help="consumer_after_changes: records per topic")
    ap.add_argument("--rounds", type=int, default=7, help="consumer_after_changes: paired rounds")
    ap.add_argument("--registrations", type=int, default=100_000, help="scale_start_100k: registrations in the log")
    ap.add_argument("--child", choices=["idle", "switch", "start"], help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--layout-topic", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--clients", type=int, default=10, help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=180.0, help=argparse.SUPPRESS)
    ap.add_argument("--interval", type=float, default=0.05, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child == "idle":
        return _idle_child(a)
    if a.child == "switch":
        return _switch_child(a)
    if a.child == "start":
        return _start_child(a)
    print(machine())
    wanted = set(a.only.split(",")) if a.only else None
    lines = []
    for name, fn in BENCHMARKS:
        if wanted is not None and name not in wanted:
            continue
        print(f"== {name}", flush=True)
        lines.append(fn(a))
        print(lines[-1], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
