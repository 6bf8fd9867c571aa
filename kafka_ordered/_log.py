"""One set of layout-log resources per process and cluster.

Every producer, consumer, admin and Spark driver in a process that talks to
the same cluster and layout log shares one :class:`LayoutFollower` (one
background thread), one layout-log writer and one offset reader. They are
reference-counted: :func:`acquire` hands out a :class:`Shared` and
:meth:`Shared.release` closes the resources with their last user.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, Mapping, Optional, Tuple

from ._kafka import OffsetReader, new_admin
from .config import connection_identity
from .history import CorruptPolicy, LayoutHistory
from .layout_log import LayoutFollower, LayoutLog

__all__ = ["Shared", "acquire", "active_count"]

log = logging.getLogger("kafka_ordered.layout_log")

_Key = Tuple[str, str, Tuple[Tuple[str, str], ...]]


class Shared:
    """The layout-log follower, writer and offset reader of one
    (connection, layout topic, corrupt policy) in this process."""

    def __init__(self, key: _Key, conn: Mapping[str, Any], topic: str, follower: LayoutFollower,
                 timeout: float, admin: Any) -> None:
        self.key = key
        self.topic = topic
        self.follower = follower
        self.timeout = timeout
        self._conn = dict(conn)
        self.admin = admin  # the one AdminClient of this set
        self._refs = 1
        self._writer: Optional[LayoutLog] = None
        self._offsets: Optional[OffsetReader] = None
        self._lock = threading.Lock()

    @property
    def history(self) -> LayoutHistory:
        return self.follower.history

    @property
    def writer(self) -> LayoutLog:
        """The layout-log writer (created and connected on first use)."""
        with self._lock:
            if self._writer is None:
                w = LayoutLog(self._conn, self.topic, timeout=self.timeout, admin=self.admin)
                try:
                    w.warm_up()
                except BaseException:
                    w.close()
                    raise
                self._writer = w
            return self._writer

    @property
    def offsets(self) -> OffsetReader:
        """The offset reader (thread-safe; shared by every client of the process)."""
        with self._lock:
            if self._offsets is None:
                self._offsets = OffsetReader(self._conn, self.timeout, admin=self.admin)
            return self._offsets

    def release(self) -> None:
        """Give back one reference; the last one closes everything."""
        with _registry_lock:
            self._refs -= 1
            if self._refs > 0:
                return
            if _registry.get(self.key) is self:
                del _registry[self.key]
        self.follower.close()
        with self._lock:
            w, self._writer = self._writer, None
            o, self._offsets = self._offsets, None
        if w is not None:
            w.close()
        if o is not None:
            o.close()


_registry: Dict[_Key, Shared] = {}
_registry_lock = threading.Lock()


def _key(conn: Mapping[str, Any], topic: str, policy: str) -> _Key:
    return (topic, policy, connection_identity(conn))


def acquire(conn: Mapping[str, Any], topic: str, *, corrupt_policy: CorruptPolicy = "skip",
            poll_interval_ms: int = 50, timeout: float = 10.0, create: bool = True) -> Shared:
    """The process's shared resources for ``conn`` and ``topic``, started and
    caught up with the log. Call :meth:`Shared.release` when done.

    On failure (broker unreachable, unsafe or missing log) nothing is left
    running and the error is raised.
    """
    key = _key(conn, topic, corrupt_policy)
    with _registry_lock:
        shared = _registry.get(key)
        if shared is not None:
            shared._refs += 1
    if shared is not None:
        try:
            shared.follower.sync()  # a new client starts from a view caught up now
        except BaseException:
            shared.release()
            raise
        return shared
    with _registry_lock:
        shared = _registry.get(key)
        if shared is not None:  # another thread made it meanwhile
            shared._refs += 1
            return shared
        admin = new_admin(conn)
        follower = LayoutFollower(conn, topic, poll_interval_ms=poll_interval_ms, corrupt_policy=corrupt_policy,
                                  timeout=timeout, create=create, admin=admin)
        try:
            follower.start()
        except BaseException:
            follower.close()
            raise
        shared = _registry[key] = Shared(key, conn, topic, follower, timeout, admin)
        return shared


def active_count() -> int:
    """How many shared follower sets are open in this process (for tests)."""
    with _registry_lock:
        return len(_registry)
