"""One set of layout-log resources per process and cluster.

Every producer, consumer and admin in a process that talks to the same
cluster and layout log shares one :class:`LayoutFollower` (one background
thread, one long-poll consumer), one AdminClient (metadata, offsets,
topic checks), one offset reader (a short-wait consumer, made on first use:
true end offsets, catch-up reads of the log) and one layout-log writer (made
on first append). They are reference-counted: :func:`acquire` hands out a
:class:`Shared` and :meth:`Shared.release` closes the resources with their
last user. :func:`client_count` counts the librdkafka client instances all
sets hold (for tests and benchmarks).
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ._kafka import OffsetReader, cleanup_policy, new_admin
from .config import connection_identity
from .errors import BrokerUnavailableError, ProtocolVersionError
from .history import CorruptPolicy, LayoutHistory
from .layout_log import IDLE_CLOSE_S, LayoutFollower, LayoutLog
from .tombstones import compacting

__all__ = ["Shared", "acquire", "active_count", "client_count", "unreachable"]

log = logging.getLogger("kafka_ordered.layout_log")

_Key = Tuple[str, str, Tuple[Tuple[str, str], ...]]


class Shared:
    """The layout-log follower, admin client, offset reader and writer of one
    (connection, layout topic, corrupt policy) in this process."""

    def __init__(self, key: _Key, conn: Mapping[str, Any], topic: str, follower: LayoutFollower,
                 timeout: float, admin: Any, offsets: OffsetReader) -> None:
        self.key = key
        self.topic = topic
        self.follower = follower
        self.timeout = timeout
        self._conn = dict(conn)
        self.admin = admin  # the one AdminClient of this set
        self._refs = 1
        self._writer: Optional[LayoutLog] = None
        self._offsets = offsets
        self._lock = threading.Lock()
        self._compacted: Dict[str, bool] = {}

    @property
    def history(self) -> LayoutHistory:
        """The shared follower's view of the layout log (read-only use)."""
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

    def compacted(self, topic: str, timeout: Optional[float] = None) -> bool:
        """Whether ``topic``'s ``cleanup.policy`` includes ``compact``; asked
        once per topic (a producer's first switch). When the broker does not
        say, a WARNING, and no move tombstones for that topic."""
        with self._lock:
            known = self._compacted.get(topic)
        if known is not None:
            return known
        policy = cleanup_policy(self.admin, topic, self.timeout if timeout is None else timeout)
        if policy is None:
            log.warning("cannot read cleanup.policy of %s: no move tombstones are written for it (if it is "
                        "compacted, values of keys that moved survive compaction in the partitions they left)", topic)
        result = compacting(policy)
        with self._lock:
            self._compacted[topic] = result
        return result

    @property
    def offsets(self) -> OffsetReader:
        """The offset reader (thread-safe; shared by every client of the process
        and by the follower's catch-up reads)."""
        return self._offsets

    def close_idle(self, idle_s: float = IDLE_CLOSE_S) -> None:
        """Close the offset reader's consumer and the writer when unused for
        ``idle_s`` (the follower thread calls this; they are made again on use)."""
        self._offsets.close_if_idle(idle_s)
        with self._lock:
            w = self._writer
        if w is not None:
            w.close_if_idle(idle_s)

    def clients(self) -> int:
        """librdkafka client instances this set holds now."""
        with self._lock:
            writer = 1 if self._writer is not None and self._writer.connected else 0
        return 1 + self.follower.clients + self._offsets.clients + writer  # 1: the admin client

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
        if w is not None:
            w.close()
        self._offsets.close()


_registry: Dict[_Key, Shared] = {}
_registry_lock = threading.Lock()


def _key(conn: Mapping[str, Any], topic: str, policy: str) -> _Key:
    return (topic, policy, connection_identity(conn))


def _check_protocol(shared: Shared, required: bool) -> None:
    if not required:
        return
    problem = shared.history.protocol_problem()
    if problem is not None:
        raise ProtocolVersionError(f"layout log {shared.topic}: {problem}", protocol=None)
    shared.follower.require_protocol = True


def acquire(conn: Mapping[str, Any], topic: str, *, corrupt_policy: CorruptPolicy = "skip",
            timeout: float = 10.0, create: bool = True, require_protocol: bool = True) -> Shared:
    """The process's shared resources for ``conn`` and ``topic``, started and
    caught up with the log. Call :meth:`Shared.release` when done.

    ``require_protocol`` (producers, consumers): raise
    :class:`ProtocolVersionError` for a log written by protocol 1 clients
    (the admin passes ``False``: it is how such a log gets upgraded). On
    failure (broker unreachable, unsafe or missing log, old protocol) nothing
    this call started is left running and the error is raised; a
    :class:`BrokerUnavailableError` names ``bootstrap.servers`` and says
    when a host name does not resolve.
    """
    key = _key(conn, topic, corrupt_policy)
    with _registry_lock:
        shared = _registry.get(key)
        joined = shared is not None
        if shared is not None:
            shared._refs += 1
        else:
            try:
                shared = _start(key, conn, topic, corrupt_policy, timeout, create)
            except BrokerUnavailableError as e:
                raise unreachable(e, conn) from e
            _registry[key] = shared
    try:
        if joined:
            shared.follower.sync()  # a new client starts from a view caught up now
        _check_protocol(shared, require_protocol)
    except BrokerUnavailableError as e:
        shared.release()
        raise unreachable(e, conn) from e
    except BaseException:
        shared.release()
        raise
    return shared


def _hosts(servers: str) -> List[str]:
    """The host names of a ``bootstrap.servers`` value (``host:port,...``,
    optionally ``PROTOCOL://`` and IPv6 ``[addr]:port``)."""
    out = []
    for entry in servers.split(","):
        entry = entry.strip().split("://", 1)[-1]
        host = entry.rsplit(":", 1)[0] if ":" in entry else entry
        host = host.strip("[]")
        if host:
            out.append(host)
    return out


def unreachable(e: BrokerUnavailableError, conn: Mapping[str, Any]) -> BrokerUnavailableError:
    """``e`` with the ``bootstrap.servers`` it tried to reach in the message,
    and which of their host names do not resolve (a DNS look-up each)."""
    servers = str(conn.get("bootstrap.servers") or "")
    if not servers or servers in str(e):
        return e
    unresolved = []
    for host in _hosts(servers):
        try:
            socket.getaddrinfo(host, None)
        except (OSError, UnicodeError):
            unresolved.append(host)
    why = f"; host {', '.join(unresolved)} does not resolve" if unresolved else ""
    return BrokerUnavailableError(f"{e} (bootstrap.servers={servers}{why})", code=e.code)


def _start(key: _Key, conn: Mapping[str, Any], topic: str, corrupt_policy: CorruptPolicy, timeout: float,
           create: bool) -> Shared:
    """A new, started :class:`Shared` with one reference; on failure nothing
    it started is left running."""
    admin = new_admin(conn)
    offsets = OffsetReader(conn, timeout, admin=admin)
    follower = LayoutFollower(conn, topic, corrupt_policy=corrupt_policy, timeout=timeout, create=create,
                              admin=admin, reader=offsets)
    try:
        follower.start()
    except BaseException:
        follower.close()
        offsets.close()
        raise
    shared = Shared(key, conn, topic, follower, timeout, admin, offsets)
    follower.housekeeping = shared.close_idle
    return shared


def active_count() -> int:
    """How many shared follower sets are open in this process (for tests)."""
    with _registry_lock:
        return len(_registry)


def client_count() -> int:
    """librdkafka client instances held by every shared set of this process."""
    with _registry_lock:
        sets = list(_registry.values())
    return sum(s.clients() for s in sets)
