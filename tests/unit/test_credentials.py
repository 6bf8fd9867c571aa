"""Authentication failures reported through librdkafka's error_cb
(:mod:`kafka_ordered._credentials`): recorded per connection and credentials,
chained to the application's own error_cb, forgotten after a while."""

from __future__ import annotations

from typing import Any, List

import pytest
from confluent_kafka import KafkaError

from kafka_ordered import _credentials
from kafka_ordered.errors import AuthenticationError


def _conf(password: str) -> dict:
    return {"bootstrap.servers": "h:9093", "security.protocol": "SASL_SSL", "sasl.username": "u",
            "sasl.password": password}


def test_an_authentication_failure_is_recorded_for_its_own_credentials_only() -> None:
    seen: List[Any] = []
    wrong = _credentials.watch({**_conf("wrong-unit"), "error_cb": seen.append})
    assert _credentials.failure(wrong, "reading") is None
    wrong["error_cb"](KafkaError(KafkaError._TRANSPORT))  # not an authentication failure
    assert _credentials.failure(wrong, "reading") is None
    wrong["error_cb"](KafkaError(KafkaError._AUTHENTICATION, "Invalid username or password"))
    err = _credentials.failure(wrong, "reading metadata of t")
    assert isinstance(err, AuthenticationError) and err.code == KafkaError._AUTHENTICATION
    assert "Invalid username or password" in str(err) and "bootstrap.servers=h:9093" in str(err)
    assert "wrong-unit" not in str(err)  # never the secret
    assert [e.code() for e in seen] == [KafkaError._TRANSPORT, KafkaError._AUTHENTICATION]
    assert _credentials.failure(_conf("right-unit"), "reading") is None  # another password


def test_a_failure_is_forgotten_after_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = _credentials.watch(_conf("stale-unit"))
    conf["error_cb"](KafkaError(KafkaError._SSL, "certificate verify failed"))
    assert _credentials.failure(conf, "x") is not None
    now = _credentials.time.monotonic()
    monkeypatch.setattr(_credentials.time, "monotonic", lambda: now + _credentials.RECENT_S + 1)
    assert _credentials.failure(conf, "x") is None
