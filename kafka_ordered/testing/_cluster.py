"""A real Apache Kafka cluster (KRaft) from Maven Central jars, for tests and users.

:class:`KafkaCluster` formats KRaft storage and starts combined
broker+controller JVMs on free loopback ports. The jars come from the pinned
manifest ``apache_kafka/pom.xml`` beside this module: Maven fetches them into
its local cache on first use (``mvn dependency:build-classpath``), so a fresh
machine needs Java 17+, Maven and the network to Maven Central, nothing else.

Every node runs with a small heap. Nodes are managed by index
``0..nodes-1``: :meth:`~KafkaCluster.stop` (clean), :meth:`~KafkaCluster.kill`
(SIGKILL), :meth:`~KafkaCluster.pause` / :meth:`~KafkaCluster.resume`
(SIGSTOP / SIGCONT) and :meth:`~KafkaCluster.start_node`.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Type

from ..errors import BrokerUnavailableError, KafkaOrderedError

__all__ = [
    "KafkaCluster",
    "KafkaSetupError",
    "SaslUser",
    "KAFKA_VERSION",
    "MANIFEST",
    "kafka_classpath",
    "java_version",
]

#: The pinned manifest: Apache Kafka's broker and its logging binding.
MANIFEST = Path(__file__).with_name("apache_kafka") / "pom.xml"
#: The Apache Kafka version the manifest pins.
KAFKA_VERSION = re.search(r"<kafka.version>([^<]+)</kafka.version>", MANIFEST.read_text()).group(1)  # type: ignore[union-attr]
_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kafka-ordered"
_LOG4J = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = error
"""


class KafkaSetupError(KafkaOrderedError):
    """The cluster cannot be set up on this machine: no Java or Java < 17, no
    Maven, jars that cannot be fetched, a stale data directory. Not retriable."""


@dataclass(frozen=True)
class SaslUser:
    """A SASL/PLAIN user of the cluster's ``SASL_SSL`` listener."""

    username: str
    password: str


def java_version(java: str = "java") -> int:
    """The feature version of ``java`` (17 for ``17.0.15``). Raises
    :class:`KafkaSetupError` when there is no such program."""
    exe = shutil.which(java)
    if exe is None:
        raise KafkaSetupError(f"Apache Kafka needs Java 17 or newer: no {java!r} on PATH (install a JDK, "
                              "e.g. apt-get install openjdk-17-jre-headless)")
    out = subprocess.run([exe, "-version"], capture_output=True, text=True, timeout=30)
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if m is None:
        raise KafkaSetupError(f"cannot tell the version of {exe}: {(out.stderr or out.stdout).strip()[:200]}")
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 and m.group(2) else major


def kafka_classpath(mvn: str = "mvn", *, manifest: Path = MANIFEST, timeout: float = 600.0) -> str:
    """The broker's classpath, resolved from ``manifest`` (default
    :data:`MANIFEST`) into Maven's local cache on first use and remembered
    (keyed by the manifest's hash) under ``~/.cache/kafka-ordered``. Raises
    :class:`KafkaSetupError` when Maven is missing or an artifact cannot be
    fetched (the message names it)."""
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()[:16]
    cached = _CACHE / f"classpath-{digest}.txt"
    if cached.is_file():
        cp = cached.read_text().strip()
        if cp and all(os.path.isfile(j) for j in cp.split(os.pathsep)):
            return cp
    exe = shutil.which(mvn)
    if exe is None:
        raise KafkaSetupError(f"fetching Apache Kafka {KAFKA_VERSION} needs Maven: no {mvn!r} on PATH "
                              "(e.g. apt-get install maven)")
    _CACHE.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
    try:
        proc = subprocess.run(
            [exe, "-B", "-q", "-Dstyle.color=never", "-f", str(manifest), "dependency:build-classpath",
             f"-Dmdep.outputFile={tmp}"],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise KafkaSetupError(f"Maven did not fetch the jars of {manifest} within {timeout:.0f} s")
    if proc.returncode != 0 or not tmp.is_file():
        text = proc.stdout + proc.stderr
        missing = re.findall(r"(?:Could not (?:resolve|find|transfer) artifact|Failure to find|"
                             r"Could not resolve dependencies for project)\s*:?\s*([\w.\-]+:[\w.\-]+(?::[\w.\-]+)+)",
                             text)
        what = f"artifact {missing[0]}" if missing else "its artifacts"
        tail = "\n".join(line for line in text.splitlines() if "ERROR" in line)[-1500:] or text[-1500:]
        raise KafkaSetupError(f"Maven could not fetch {what} (manifest {manifest}):\n{tail}")
    cp = tmp.read_text().strip()
    tmp.replace(cached)
    return cp


def _free_ports(host: str, n: int) -> List[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class _Node:
    index: int
    port: int
    controller_port: int
    sasl_port: Optional[int]
    dir: Path
    proc: Optional["subprocess.Popen[bytes]"] = None
    paused: bool = False

    @property
    def node_id(self) -> int:
        return self.index + 1

    @property
    def log(self) -> Path:
        return self.dir / "server.log"

    @property
    def stdout(self) -> Path:
        return self.dir / "stdout.log"


class KafkaCluster:
    """A KRaft cluster of ``nodes`` combined broker+controller JVMs on
    loopback, as a context manager::

        with KafkaCluster(nodes=3) as cluster:
            ... cluster.bootstrap_servers ...

    Promises: :meth:`start` returns once every node answers Metadata and the
    cluster reports all of them; exit (also on Ctrl-C, a failing test, at
    interpreter exit, and when the parent process dies) leaves no JVM, port or
    data directory behind. Node ``i`` has broker id ``i + 1`` and, with
    ``racks``, ``broker.rack = racks[i]``.

    Defaults are those of a production cluster scaled to ``nodes``: replication
    factor ``min(3, nodes)``, ``min.insync.replicas`` ``min(2, nodes)``,
    Apache Kafka's default group settings except
    ``group.initial.rebalance.delay.ms=0``. ``overrides`` adds or replaces
    broker properties on every node.

    With ``sasl_users`` every node also gets a ``SASL_SSL`` listener (SASL/PLAIN
    over TLS, certificates from a CA made for this cluster:
    :attr:`ca_location`); :meth:`sasl_config` gives a user's client settings.

    Raises :class:`KafkaSetupError` (no Java 17+, no Maven, jars that cannot be
    fetched, a non-empty ``data_dir``) and :class:`BrokerUnavailableError` (a
    node that does not come up within ``startup_timeout``, with its log tail).
    """

    def __init__(
        self,
        nodes: int = 3,
        racks: Optional[Sequence[Optional[str]]] = None,
        *,
        host: str = "127.0.0.1",
        heap_mb: int = 768,
        overrides: Optional[Mapping[str, object]] = None,
        sasl_users: Optional[Sequence[SaslUser]] = None,
        data_dir: Optional[str] = None,
        startup_timeout: float = 90.0,
        java: str = "java",
        mvn: str = "mvn",
        manifest: Path = MANIFEST,
        log_level: str = "WARN",
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {nodes}")
        if racks is not None and len(racks) != nodes:
            raise ValueError(f"racks must name one rack per node ({nodes}), got {len(racks)}")
        self.nodes = nodes
        self.racks = list(racks) if racks is not None else None
        self.host = host
        self.heap_mb = heap_mb
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}
        self.sasl_users = list(sasl_users or [])
        self.startup_timeout = startup_timeout
        self.java = java
        self.mvn = mvn
        self.manifest = Path(manifest)
        self.log_level = log_level
        self._data_dir = data_dir
        self._root: Optional[Path] = None
        self._owns_root = False
        self._nodes: List[_Node] = []
        self._spawner: Optional[ThreadPoolExecutor] = None
        self._classpath = ""
        self.cluster_id = ""

    # ---------------------------------------------------------------- addresses
    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of the PLAINTEXT listeners of every node."""
        self._require_started()
        return ",".join(f"{self.host}:{n.port}" for n in self._nodes)

    @property
    def sasl_bootstrap_servers(self) -> str:
        """``host:port,...`` of the ``SASL_SSL`` listeners (``sasl_users`` given)."""
        self._require_started()
        if not self.sasl_users:
            raise KafkaOrderedError("the cluster has no SASL_SSL listener: pass sasl_users=[SaslUser(...)]")
        return ",".join(f"{self.host}:{n.sasl_port}" for n in self._nodes)

    @property
    def ca_location(self) -> str:
        """PEM file of the CA that signed the nodes' certificates."""
        self._require_started()
        assert self._root is not None
        return str(self._root / "tls" / "ca.pem")

    def sasl_config(self, user: SaslUser) -> Dict[str, str]:
        """confluent-kafka settings for ``user`` on the ``SASL_SSL`` listener."""
        return {
            "bootstrap.servers": self.sasl_bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": user.username,
            "sasl.password": user.password,
            "ssl.ca.location": self.ca_location,
        }

    def address(self, i: int) -> str:
        """``host:port`` of node ``i``'s PLAINTEXT listener."""
        return f"{self.host}:{self._node(i).port}"

    def node_id(self, i: int) -> int:
        """Broker id of node ``i`` (``i + 1``)."""
        return self._node(i).node_id

    def pid(self, i: int) -> Optional[int]:
        """Process id of node ``i``'s JVM, ``None`` when it is not running."""
        proc = self._node(i).proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def running(self, i: int) -> bool:
        """Whether node ``i``'s JVM is alive (a paused one counts)."""
        proc = self._node(i).proc
        return proc is not None and proc.poll() is None

    def log_tail(self, i: int, chars: int = 3000) -> str:
        """The end of node ``i``'s log (its server log, else its stdout)."""
        node = self._node(i)
        parts = []
        for f in (node.stdout, node.log):
            try:
                parts.append(f.read_bytes()[-chars:].decode("utf-8", "replace"))
            except OSError:
                pass
        return "\n".join(p for p in parts if p.strip())[-chars:]

    def _first_log_tail(self, i: int, grace: float = 5.0) -> str:
        """Node ``i``'s log tail for an error about its start-up; a node still
        starting may not have written a line yet (a JVM's first lines can
        take over a second on a loaded machine): up to ``grace`` seconds are
        given to it, then the log's paths are named instead."""
        deadline = time.monotonic() + grace
        tail = self.log_tail(i)
        while not tail and time.monotonic() < deadline:
            time.sleep(0.1)
            tail = self.log_tail(i)
        n = self._node(i)
        return tail or f"(no log output yet in {n.stdout} or {n.log})"

    # ---------------------------------------------------------------- life cycle
    def start(self) -> "KafkaCluster":
        """Fetch the jars if needed, format storage, start every node and wait
        until the cluster answers Metadata with all of them; returns ``self``.
        Does nothing when already started. Raises as the class says."""
        if self._nodes:
            return self
        version = java_version(self.java)
        if version < 17:
            raise KafkaSetupError(f"Apache Kafka {KAFKA_VERSION} needs Java 17 or newer; "
                                  f"{shutil.which(self.java)} is Java {version}")
        self._classpath = kafka_classpath(self.mvn, manifest=self.manifest)
        self._prepare_root()
        try:
            self._configure()
            self._format()
            for n in self._nodes:
                self._spawn(n)
            atexit.register(self.close)
            self.wait_ready(range(self.nodes), timeout=self.startup_timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _prepare_root(self) -> None:
        if self._data_dir is not None:
            root = Path(self._data_dir)
            if root.exists() and any(root.iterdir()):
                raise KafkaSetupError(
                    f"stale data directory {root}: it is not empty (a previous cluster's storage?); "
                    "remove it or pass another data_dir")
            root.mkdir(parents=True, exist_ok=True)
            self._owns_root = False
        else:
            root = Path(tempfile.mkdtemp(prefix="kafka-ordered-cluster-"))
            self._owns_root = True
        self._root = root

    def _configure(self) -> None:
        assert self._root is not None
        ports = _free_ports(self.host, self.nodes * (3 if self.sasl_users else 2))
        it = iter(ports)
        self._nodes = [
            _Node(i, next(it), next(it), next(it) if self.sasl_users else None, self._root / f"node-{i}")
            for i in range(self.nodes)
        ]
        if self.sasl_users:
            self._make_tls()
        voters = ",".join(f"{n.node_id}@{self.host}:{n.controller_port}" for n in self._nodes)
        rf, isr = min(3, self.nodes), min(2, self.nodes)
        for n in self._nodes:
            n.dir.mkdir(parents=True)
            listeners = [f"PLAINTEXT://{self.host}:{n.port}", f"CONTROLLER://{self.host}:{n.controller_port}"]
            advertised = [f"PLAINTEXT://{self.host}:{n.port}"]
            protocols = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
            if n.sasl_port is not None:
                listeners.append(f"SASL_SSL://{self.host}:{n.sasl_port}")
                advertised.append(f"SASL_SSL://{self.host}:{n.sasl_port}")
                protocols.append("SASL_SSL:SASL_SSL")
            props: Dict[str, str] = {
                "process.roles": "broker,controller",
                "node.id": str(n.node_id),
                "controller.quorum.voters": voters,
                "listeners": ",".join(listeners),
                "advertised.listeners": ",".join(advertised),
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": ",".join(protocols),
                "log.dirs": str(n.dir / "data"),
                "default.replication.factor": str(rf),
                "min.insync.replicas": str(isr),
                "offsets.topic.replication.factor": str(rf),
                "transaction.state.log.replication.factor": str(rf),
                "transaction.state.log.min.isr": str(isr),
                "share.coordinator.state.topic.replication.factor": str(rf),
                "share.coordinator.state.topic.min.isr": str(isr),
                "group.initial.rebalance.delay.ms": "0",
                "num.network.threads": "2",
                "num.io.threads": "4",
                "num.recovery.threads.per.data.dir": "1",
                "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
            }
            if self.racks is not None and self.racks[n.index] is not None:
                props["broker.rack"] = str(self.racks[n.index])
            if n.sasl_port is not None:
                tls = self._root / "tls"
                jaas_users = " ".join(f'user_{u.username}="{u.password}"' for u in self.sasl_users)
                props.update({
                    "sasl.enabled.mechanisms": "PLAIN",
                    "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN",
                    "listener.name.sasl_ssl.plain.sasl.jaas.config":
                        "org.apache.kafka.common.security.plain.PlainLoginModule required " + jaas_users + ";",
                    "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
                    "listener.name.sasl_ssl.ssl.keystore.location": str(tls / "server.pem"),
                    "listener.name.sasl_ssl.ssl.truststore.type": "PEM",
                    "listener.name.sasl_ssl.ssl.truststore.location": str(tls / "ca.pem"),
                })
            props.update(self.overrides)
            (n.dir / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            (n.dir / "log4j2.properties").write_text(_LOG4J.format(log=n.log, level=self.log_level))

    def _make_tls(self) -> None:
        assert self._root is not None
        tls = self._root / "tls"
        tls.mkdir()
        openssl = shutil.which("openssl")
        if openssl is None:
            raise KafkaSetupError("a SASL_SSL listener needs openssl to make its certificates: no 'openssl' on PATH")

        def run(*args: str) -> None:
            p = subprocess.run([openssl, *args], cwd=tls, capture_output=True, text=True, timeout=60)
            if p.returncode != 0:
                raise KafkaSetupError(f"openssl {args[0]} failed: {p.stderr.strip()[-500:]}")

        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=kafka-ordered test CA")
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", f"/CN={self.host}")
        (tls / "san.ext").write_text(f"subjectAltName=IP:{self.host},DNS:localhost\n")
        run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "2", "-extfile", "san.ext")
        run("pkcs8", "-topk8", "-nocrypt", "-in", "server.key", "-out", "server.pk8")
        (tls / "server.pem").write_text((tls / "server.pk8").read_text() + (tls / "server.crt").read_text()
                                        + (tls / "ca.pem").read_text())

    def _java(self, main: str, *args: str, node: Optional[_Node] = None) -> List[str]:
        cmd = [shutil.which(self.java) or self.java, f"-Xmx{self.heap_mb}m", f"-Xms{min(self.heap_mb, 128)}m",
               "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError",
               "-Djava.awt.headless=true", "-XX:-UsePerfData"]
        if node is not None:
            cmd.append(f"-Dlog4j2.configurationFile={node.dir / 'log4j2.properties'}")
        else:
            cmd.append("-Dlog4j2.level=ERROR")
        return [*cmd, "-cp", self._classpath, main, *args]

    def _format(self) -> None:
        self.cluster_id = _random_cluster_id()
        for n in self._nodes:
            p = subprocess.run(
                self._java("kafka.tools.StorageTool", "format", f"--cluster-id={self.cluster_id}",
                           "-c", str(n.dir / "server.properties"), "--ignore-formatted"),
                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
            )
            if p.returncode != 0:
                raise KafkaSetupError(f"formatting node {n.index}'s storage failed (exit {p.returncode}):\n"
                                      f"{(p.stdout + p.stderr).strip()[-2000:]}")

    def _spawn(self, n: _Node) -> None:
        # PR_SET_PDEATHSIG fires when the thread that forked the child exits, not the
        # process: every JVM is forked by one thread that lives as long as the cluster,
        # so a node started from a short-lived thread (a timer) is not killed with it.
        if self._spawner is None:
            self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-cluster-spawn")
        self._spawner.submit(self._popen, n).result()

    def _popen(self, n: _Node) -> None:
        with open(n.stdout, "ab") as out:
            n.proc = subprocess.Popen(
                self._java("kafka.Kafka", str(n.dir / "server.properties"), node=n),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        n.paused = False

    def wait_ready(self, indexes: Iterable[int], timeout: float = 60.0) -> None:
        """Wait until each node in ``indexes`` is in the cluster's Metadata
        (asked through that node). Raises :class:`BrokerUnavailableError` with
        the node's log tail when it exits or does not appear in time."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        for i in indexes:
            n = self._node(i)
            admin = AdminClient({"bootstrap.servers": f"{self.host}:{n.port}", "log_level": 0})
            while True:
                if n.proc is None or n.proc.poll() is not None:
                    code = None if n.proc is None else n.proc.returncode
                    raise BrokerUnavailableError(
                        f"Apache Kafka node {i} exited with code {code} during start-up:\n{self.log_tail(i)}")
                left = deadline - time.monotonic()
                try:
                    md = admin.list_topics(timeout=max(0.05, min(1.0, left)))
                    if n.node_id in md.brokers:
                        break
                except Exception:  # not listening yet
                    pass
                if time.monotonic() >= deadline:
                    raise BrokerUnavailableError(
                        f"Apache Kafka node {i} ({self.host}:{n.port}) did not answer Metadata within "
                        f"{timeout:.0f} s:\n{self._first_log_tail(i)}")
                time.sleep(0.2)

    def wait_healthy(self, timeout: float = 120.0) -> None:
        """Wait until every node is in Metadata and every partition of every
        topic has all its replicas in sync (what a test that stopped or
        killed nodes leaves behind for the next one). Raises
        :class:`BrokerUnavailableError` naming the partitions still behind."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        self.wait_ready(range(self.nodes), timeout=timeout)
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        behind: List[str] = []
        while time.monotonic() < deadline:
            try:
                md = admin.list_topics(timeout=5)
            except Exception:
                time.sleep(0.5)
                continue
            behind = [f"{t}-{p}" for t, tm in md.topics.items() for p, pm in tm.partitions.items()
                      if set(pm.isrs) != set(pm.replicas) or pm.leader < 0]
            if not behind:
                return
            time.sleep(0.5)
        raise BrokerUnavailableError(f"partitions not fully in sync after {timeout:.0f} s: {sorted(behind)[:10]}")

    def stop(self, i: int, timeout: float = 30.0) -> None:
        """Stop node ``i`` cleanly (SIGTERM: controlled shutdown; SIGKILL after
        ``timeout``). Its storage stays for :meth:`start_node`."""
        n = self._node(i)
        if n.proc is None or n.proc.poll() is not None:
            return
        if n.paused:
            self.resume(i)
        n.proc.terminate()
        try:
            n.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            n.proc.kill()
            n.proc.wait(timeout=10)

    def kill(self, i: int) -> None:
        """SIGKILL node ``i`` (no controlled shutdown); its storage stays."""
        n = self._node(i)
        if n.proc is not None and n.proc.poll() is None:
            n.proc.kill()
            n.proc.wait(timeout=10)
        n.paused = False

    def pause(self, i: int) -> None:
        """SIGSTOP node ``i``: it keeps its sockets but answers nothing."""
        n = self._node(i)
        if n.proc is None or n.proc.poll() is not None:
            raise KafkaOrderedError(f"node {i} is not running")
        n.proc.send_signal(signal.SIGSTOP)
        n.paused = True

    def resume(self, i: int) -> None:
        """SIGCONT node ``i`` after :meth:`pause`."""
        n = self._node(i)
        if n.proc is not None and n.proc.poll() is None:
            n.proc.send_signal(signal.SIGCONT)
        n.paused = False

    def start_node(self, i: int, *, wait: bool = True, timeout: float = 90.0) -> None:
        """Start node ``i`` again (after :meth:`stop` or :meth:`kill`) on its
        old ports and storage; with ``wait``, until it is back in Metadata."""
        n = self._node(i)
        if n.proc is not None and n.proc.poll() is None:
            return
        self._spawn(n)
        if wait:
            self.wait_ready([i], timeout=timeout)

    def close(self) -> None:
        """Kill every node and delete the data directory this cluster made;
        idempotent."""
        for n in self._nodes:
            if n.proc is not None and n.proc.poll() is None:
                if n.paused:
                    n.proc.send_signal(signal.SIGCONT)
                n.proc.kill()
                try:
                    n.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        self._nodes = []
        if self._spawner is not None:
            self._spawner.shutdown(wait=False)
            self._spawner = None
        if self._root is not None:
            if self._owns_root:
                shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        atexit.unregister(self.close)

    def _node(self, i: int) -> _Node:
        self._require_started()
        if not 0 <= i < len(self._nodes):
            raise IndexError(f"node index {i} is out of range 0..{len(self._nodes) - 1}")
        return self._nodes[i]

    def _require_started(self) -> None:
        if not self._nodes:
            raise KafkaOrderedError("the Apache Kafka cluster is not running")

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def __repr__(self) -> str:
        if not self._nodes:
            return f"<KafkaCluster {KAFKA_VERSION} nodes={self.nodes} stopped>"
        return f"<KafkaCluster {KAFKA_VERSION} on {self.bootstrap_servers}>"


def _random_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
