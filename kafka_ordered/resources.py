"""The process's shared layout-log resources (public face of ``_log``).

Every producer, consumer, admin and Spark driver of a process that reaches
the same cluster and layout log shares one follower (one background thread,
one long-poll consumer), one AdminClient, one offset reader and one
layout-log writer, reference-counted: :func:`acquire` returns a
:class:`Shared` (``follower``, ``admin``, ``offsets``, ``writer``,
``history``) that the caller gives back with :meth:`Shared.release`; the
last release closes them. :func:`client_count` counts the librdkafka client
instances all sets of the process hold.
"""

from __future__ import annotations

from ._log import Shared, acquire, active_count, client_count

__all__ = ["Shared", "acquire", "active_count", "client_count"]
