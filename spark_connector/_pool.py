"""Per-process pools of idle Kafka clients for Spark's Python workers.

Like the built-in Kafka connector's consumer and producer caches: a Python
worker that runs the tasks of several batches reuses one client per config
instead of connecting for every task. One task at a time holds a client
(Spark runs one task per worker process at a time; the pool hands a client
to one holder only). Idle clients are closed after ``idle_timeout_s`` (at
the next acquire/release, and by a daemon thread), so are the oldest beyond
``capacity``, and all of them at interpreter exit. A forked worker starts
with an empty pool (librdkafka threads do not survive fork).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, Tuple, TypeVar

__all__ = ["IdlePool", "PoolKey", "pool_key"]

C = TypeVar("C")

PoolKey = Tuple[Tuple[str, str], ...]


def pool_key(conf: Mapping[str, Any]) -> PoolKey:
    """A config's items as sorted ``(str, str)`` pairs: equal configs share
    idle clients."""
    return tuple(sorted((str(k), str(v)) for k, v in conf.items()))


class IdlePool(Generic[C]):
    """Idle clients of one process, keyed by :func:`pool_key`.

    ``close`` closes a client (best effort; its errors are swallowed);
    ``stats_env`` names an environment variable: when it names a directory,
    the counters (``created``, ``reused``, ``closed``, ``idle``) are written
    to ``<dir>/<pid>.json`` at every release (a test aid). Thread-safe."""

    def __init__(self, close: Callable[[C], Any], idle_timeout_s: float, capacity: int, name: str,
                 stats_env: Optional[str] = None) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.capacity = capacity
        self._close_client = close
        self._name = name
        self._stats_env = stats_env
        self._idle: Dict[PoolKey, List[Tuple[float, C]]] = {}
        self._lock = threading.Lock()
        self._evictor: Optional[threading.Thread] = None
        self._pid = os.getpid()
        self.created = 0
        self.reused = 0
        self.closed = 0

    def _check_fork(self) -> None:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._idle = {}
            self._evictor = None
            self.created = self.reused = self.closed = 0

    def take(self, key: PoolKey, make: Callable[[], C]) -> C:
        """An idle client pooled under ``key``, else ``make()`` (called
        outside the pool's lock; what it raises is raised)."""
        with self._lock:
            self._check_fork()
            self._expire(time.monotonic())
            idle = self._idle.get(key)
            if idle:
                _, c = idle.pop()
                if not idle:
                    del self._idle[key]
                self.reused += 1
                return c
            self.created += 1
        return make()

    def give(self, key: PoolKey, client: C, ok: bool) -> None:
        """Give ``client`` back: pooled under ``key`` when ``ok``, else closed."""
        if not ok:
            self._close(client)
            self._write_stats()
            return
        with self._lock:
            self._check_fork()
            now = time.monotonic()
            self._idle.setdefault(key, []).append((now, client))
            self._expire(now)
            over = sum(len(v) for v in self._idle.values()) - self.capacity
            while over > 0:
                k = min(self._idle, key=lambda k: self._idle[k][0][0])
                _, c = self._idle[k].pop(0)
                if not self._idle[k]:
                    del self._idle[k]
                self._close(c)
                over -= 1
            if self._evictor is None:
                self._evictor = threading.Thread(target=self._evict_loop, name=self._name, daemon=True)
                self._evictor.start()
        self._write_stats()

    def _expire(self, now: float) -> None:
        for k in list(self._idle):
            keep = []
            for t, c in self._idle[k]:
                if now - t >= self.idle_timeout_s:
                    self._close(c)
                else:
                    keep.append((t, c))
            if keep:
                self._idle[k] = keep
            else:
                del self._idle[k]

    def _evict_loop(self) -> None:
        while True:
            time.sleep(max(0.05, min(30.0, self.idle_timeout_s / 2)))
            with self._lock:
                if self._pid != os.getpid():
                    return
                self._expire(time.monotonic())

    def _close(self, c: C) -> None:
        self.closed += 1
        try:
            self._close_client(c)
        except Exception:  # pragma: no cover - best effort
            pass

    def idle(self) -> int:
        """How many idle clients are pooled now."""
        with self._lock:
            self._check_fork()
            return sum(len(v) for v in self._idle.values())

    def close_all(self) -> None:
        """Close every idle client (best effort; never raises)."""
        with self._lock:
            if self._pid != os.getpid():
                return
            idle, self._idle = self._idle, {}
            for lst in idle.values():
                for _, c in lst:
                    self._close(c)

    def stats(self) -> Dict[str, int]:
        """``pid``, ``created``, ``reused``, ``closed``, ``idle`` of this process."""
        return {"pid": os.getpid(), "created": self.created, "reused": self.reused, "closed": self.closed,
                "idle": sum(len(v) for v in self._idle.values())}

    def _write_stats(self) -> None:
        where = os.environ.get(self._stats_env) if self._stats_env else None
        if not where:
            return
        try:
            path = os.path.join(where, f"{self._name}-{os.getpid()}.json")
            with open(path + ".tmp", "w") as f:
                json.dump(self.stats(), f)
            os.replace(path + ".tmp", path)
        except OSError:  # pragma: no cover - test aid only
            pass
