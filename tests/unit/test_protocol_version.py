"""The layout log's protocol-version record: old (time-based) and new (causal
token) clients never share a log silently."""

from __future__ import annotations

import json

import pytest

from kafka_ordered.errors import ProtocolVersionError, UnsupportedLayoutVersionError
from kafka_ordered.history import LayoutHistory
from kafka_ordered.layout import Layout
from kafka_ordered.records import (
    PROTOCOL_VERSION,
    RECORD_VERSION,
    ProtocolRecord,
    decode,
    encode_layout,
    encode_protocol,
    encode_registration,
)

T = "orders"


def _v1(value: bytes) -> bytes:
    """The same record as a protocol-1 (time-based) client wrote it."""
    d = json.loads(value)
    d["v"] = 1
    if d["type"] == "layout":
        d["layout"]["settle_ms"] = 100
    return json.dumps(d).encode()


def test_the_marker_is_unreadable_for_protocol_1_clients() -> None:
    key, value = encode_protocol()
    rec = decode(value)
    assert isinstance(rec, ProtocolRecord) and rec.protocol == PROTOCOL_VERSION == 2
    # Protocol-1 clients read only records with "v": 1 and raise on any newer
    # version (their UnsupportedLayoutVersionError): they stop at the marker.
    assert json.loads(value)["v"] == RECORD_VERSION > 1


def test_records_written_now_carry_the_new_version_and_no_settle_pause() -> None:
    lay = Layout(T, 1, 2, 2, 4)
    d = json.loads(encode_layout(lay, "create", "a")[1])
    assert d["v"] == RECORD_VERSION and "settle_ms" not in d["layout"]
    assert json.loads(encode_registration(T, "p", True, 1, 1, {})[1])["v"] == RECORD_VERSION


def test_history_of_an_upgraded_log() -> None:
    lay = Layout(T, 1, 2, 2, 4)
    h = LayoutHistory()
    h.apply(0, T.encode(), _v1(encode_layout(lay, "create", "a")[1]))  # old settle_ms is read and ignored
    assert h.protocol is None and h.protocol_problem() is not None
    h.apply(1, *encode_protocol())
    assert h.protocol == 2 and h.protocol_offset == 1 and h.protocol_problem() is None
    h.apply(2, T.encode(), encode_layout(lay.expanded(3), "expand", "a")[1])
    assert h.current(T).epoch == 2 and h.legacy_after_marker == []  # type: ignore[union-attr]
    # An old client that had not seen the marker yet appends after it: applied, and reported.
    h.apply(3, T.encode(), _v1(encode_registration(T, "old", False, 2, 1, {2: (0, {0: 5})})[1]))
    assert h.legacy_after_marker == [3] and len(h.gates(T)) == 1
    h.apply(4, *encode_protocol())  # a duplicate marker (two admins raced) is harmless
    assert h.protocol == 2 and h.protocol_offset == 1


def test_empty_log_has_no_problem_and_a_marker_first_log_is_fine() -> None:
    h = LayoutHistory()
    assert h.protocol_problem() is None
    h.apply(0, *encode_protocol())
    h.apply(1, T.encode(), encode_layout(Layout(T, 1, 2, 2, 2), "create", "a")[1])
    assert h.protocol == 2 and h.protocol_problem() is None


def test_protocol_problem_explains_the_upgrade() -> None:
    h = LayoutHistory()
    h.apply(0, T.encode(), _v1(encode_layout(Layout(T, 1, 2, 2, 2), "create", "a")[1]))
    problem = h.protocol_problem()
    assert problem is not None and "upgrade-protocol" in problem and "protocol 1" in problem
    err = ProtocolVersionError(problem, protocol=None)
    assert err.protocol is None and "upgrade" in str(err)


def test_a_newer_protocol_is_refused_like_any_newer_record() -> None:
    value = json.dumps({"v": RECORD_VERSION + 1, "type": "protocol", "protocol": PROTOCOL_VERSION + 1}).encode()
    with pytest.raises(UnsupportedLayoutVersionError, match="upgrade"):
        LayoutHistory().apply(0, b"k", value)


def test_bad_protocol_record_is_corrupt() -> None:
    h = LayoutHistory()
    h.apply(0, b"k", json.dumps({"v": RECORD_VERSION, "type": "protocol", "protocol": "x"}).encode())
    assert h.problems and h.protocol is None
    # A v1 record cannot be a marker (protocol-1 clients would read past it).
    h.apply(1, b"k", json.dumps({"v": 1, "type": "protocol", "protocol": 2}).encode())
    assert len(h.problems) == 2 and h.protocol is None
