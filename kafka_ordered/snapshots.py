"""Snapshots of the layout log's live state (pure, no I/O).

A reader must not replay every registration ever written. A snapshot holds
the records of the log that still shape its state, with their offsets and
times, and the offset it covers (``next_offset``: every record below it was
taken into account); a reader applies them to an empty
:class:`~kafka_ordered.history.LayoutHistory` and then replays only the log
from ``next_offset``. What a snapshot keeps (:func:`live_records`):

- every accepted layout change (the layouts of every epoch);
- the protocol-version record;
- every registration carrying a gate, until every wait of all its gates lies
  below the log start of its source partition (the records waited for are
  gone: a group created later, reading from the earliest offset, cannot be
  short of them);
- the last registration of each stable producer id (where it continues from
  after a restart).

Dropped: stable ids' earlier registrations without gates, registrations whose
gates every group has passed, and layout records that lost their race
(``LayoutHistory.superseded`` only holds what the tail brought). Records the
writer skipped as corrupt are listed by offset and reason (``skipped``): a
restored history reports them as problems, and a reader whose policy is
``refuse`` does not use such a snapshot.

A snapshot is a deterministic function of the log prefix and of the log-start
offsets it was given, so duplicates are harmless. Its record value (see
:func:`encode`) is ``MAGIC``, a newline, the SHA-256 of the payload in hex, a
newline, and the payload: zlib-compressed UTF-8 JSON ``{"format": 1, "log":
<layout-log id>, "next": <offset>, "records": [[offset, timestamp_ms, key,
value], ...], "skipped": [[offset, reason], ...]}`` with key and value the records as the layout log holds them
(UTF-8 text). :func:`decode` checks all of it and raises
:class:`InvalidSnapshot` saying what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

from .errors import CorruptLayoutRecordError
from .history import CorruptPolicy, LayoutHistory
from .records import LogProblem, Registration, encode_layout, encode_protocol, encode_registration

__all__ = ["FORMAT", "MAGIC", "SNAPSHOT_SUFFIX", "Snapshot", "InvalidSnapshot", "snapshot_topic", "live_records",
           "take", "encode", "decode", "restore"]

#: The snapshot format this version writes and reads.
FORMAT = 1
#: The first bytes of every snapshot record.
MAGIC = b"kafka-ordered-snapshot"
#: The companion topic of layout log ``L`` is ``L + SNAPSHOT_SUFFIX``.
SNAPSHOT_SUFFIX = ".snapshots"

#: One record of the layout log: offset, timestamp (ms), key, value.
LogRecord = Tuple[int, int, bytes, bytes]
TP = Tuple[str, int]


class InvalidSnapshot(ValueError):
    """A snapshot record that must not be used (the reader replays the log instead)."""


@dataclass(frozen=True)
class Snapshot:
    """The live records of layout log ``log_id`` below ``next_offset``."""

    log_id: str
    next_offset: int
    records: Tuple[LogRecord, ...]
    #: Offsets of records the writer skipped as corrupt (policy ``skip``), with why.
    skipped: Tuple[Tuple[int, str], ...] = ()


def snapshot_topic(layout_topic: str) -> str:
    """The snapshots topic of ``layout_topic``."""
    return layout_topic + SNAPSHOT_SUFFIX


def _registration_record(r: Registration) -> LogRecord:
    gates = {g.partition: (g.start, dict(g.wait)) for g in r.gates}
    key, value = encode_registration(r.topic, r.producer_id, r.stable, r.epoch, r.from_epoch, gates)
    return r.offset, r.timestamp_ms, key, value


def live_records(history: LayoutHistory, log_start: Optional[Callable[[TP], int]] = None) -> List[LogRecord]:
    """The records of ``history`` that a snapshot keeps (see the module
    docstring), in log order. ``log_start((topic, partition))`` gives a data
    partition's log start (default: 0 everywhere, so every gate is kept)."""
    start = log_start or (lambda tp: 0)
    out: List[LogRecord] = []
    if history.protocol is not None and history.protocol_offset is not None:
        key, value = encode_protocol(history.protocol)
        out.append((history.protocol_offset, 0, key, value))
    for topic in history.topics():
        for c in history.changes(topic):
            key, value = encode_layout(c.layout, c.op, c.admin_id)
            out.append((c.offset, c.timestamp_ms, key, value))
        for r in history.registrations(topic):
            last = r.stable and history.last_registration(topic, r.producer_id) == r
            needed = any(w >= start((topic, q)) for g in r.gates for q, w in g.wait.items())
            if last or needed:
                out.append(_registration_record(r))
    out.sort(key=lambda rec: rec[0])
    return out


def take(history: LayoutHistory, log_id: str, log_start: Optional[Callable[[TP], int]] = None) -> Snapshot:
    """The snapshot of ``history`` as read so far (it covers ``history.next_offset``)."""
    return Snapshot(log_id, history.next_offset, tuple(live_records(history, log_start)),
                    tuple((p.offset, p.reason) for p in history.problems))


def encode(snapshot: Snapshot) -> bytes:
    """The snapshot as one record value (deterministic)."""
    body = {
        "format": FORMAT,
        "log": snapshot.log_id,
        "next": snapshot.next_offset,
        "records": [[o, t, k.decode("utf-8"), v.decode("utf-8")] for o, t, k, v in snapshot.records],
        "skipped": [[o, why] for o, why in snapshot.skipped],
    }
    payload = zlib.compress(json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8"), 6)
    return MAGIC + b"\n" + hashlib.sha256(payload).hexdigest().encode("ascii") + b"\n" + payload


def decode(value: Optional[bytes]) -> Snapshot:
    """The snapshot in a record value; :class:`InvalidSnapshot` when it is
    not one, its checksum does not match, or its format is newer or malformed."""
    if not value or not value.startswith(MAGIC + b"\n"):
        raise InvalidSnapshot("not a kafka-ordered snapshot record")
    rest = value[len(MAGIC) + 1:]
    digest, sep, payload = rest.partition(b"\n")
    if not sep or hashlib.sha256(payload).hexdigest().encode("ascii") != digest:
        raise InvalidSnapshot("checksum mismatch (a damaged or truncated snapshot)")
    try:
        body: Any = json.loads(zlib.decompress(payload).decode("utf-8"))
    except (zlib.error, UnicodeDecodeError, ValueError) as e:
        raise InvalidSnapshot(f"payload does not decode: {e}") from None
    if not isinstance(body, dict):
        raise InvalidSnapshot("payload is not a JSON object")
    fmt = body.get("format")
    if not isinstance(fmt, int) or fmt > FORMAT:
        raise InvalidSnapshot(f"snapshot format {fmt!r} is newer than this kafka-ordered reads ({FORMAT})")
    log_id, nxt, records = body.get("log"), body.get("next"), body.get("records")
    if not isinstance(log_id, str) or not isinstance(nxt, int) or nxt < 0 or not isinstance(records, list):
        raise InvalidSnapshot("snapshot fields log, next or records are missing or malformed")
    out: List[LogRecord] = []
    last = -1
    for rec in records:
        if (not isinstance(rec, list) or len(rec) != 4 or not isinstance(rec[0], int) or not isinstance(rec[1], int)
                or not isinstance(rec[2], str) or not isinstance(rec[3], str) or not last < rec[0] < nxt):
            raise InvalidSnapshot(f"snapshot record {rec!r:.80} is malformed or out of order")
        last = rec[0]
        out.append((rec[0], rec[1], rec[2].encode("utf-8"), rec[3].encode("utf-8")))
    skipped = body.get("skipped", [])
    if not isinstance(skipped, list) or not all(
            isinstance(x, list) and len(x) == 2 and isinstance(x[0], int) and isinstance(x[1], str) for x in skipped):
        raise InvalidSnapshot("snapshot field skipped is malformed")
    return Snapshot(log_id, nxt, tuple(out), tuple((o, why) for o, why in skipped))


def restore(snapshot: Snapshot, corrupt_policy: CorruptPolicy = "skip") -> LayoutHistory:
    """A history holding exactly what ``snapshot`` kept, ready to apply the
    log from ``snapshot.next_offset``. Raises :class:`InvalidSnapshot` when a
    kept record does not apply cleanly (a snapshot written by a faulty
    writer), and what :meth:`LayoutHistory.apply` raises for a newer record
    version. A reader whose policy is ``refuse`` gets :class:`InvalidSnapshot`
    for a snapshot that skipped corrupt records (it must see and refuse them)."""
    if corrupt_policy == "refuse" and snapshot.skipped:
        raise InvalidSnapshot(f"its writer skipped corrupt records (first at offset {snapshot.skipped[0][0]}) "
                              "that this reader's policy 'refuse' refuses")
    history = LayoutHistory("refuse")
    for offset, ts, key, value in snapshot.records:
        history.skip_to(offset)
        try:
            history.apply(offset, key, value, ts)
        except (CorruptLayoutRecordError, ValueError) as e:
            raise InvalidSnapshot(f"snapshot record at offset {offset} does not apply: {e}") from None
    history.skip_to(snapshot.next_offset)
    history.corrupt_policy = corrupt_policy
    history.problems.extend(LogProblem(o, why) for o, why in snapshot.skipped)
    return history
