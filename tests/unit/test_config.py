"""``ordered.*`` configuration: removed keys are reported, never silently ignored."""

from __future__ import annotations

import logging

import pytest

from kafka_ordered.config import CONSUMER_OPTIONS, OPTIONS, PRODUCER_OPTIONS, REMOVED_OPTIONS, split_config
from kafka_ordered.errors import ConfigError


@pytest.mark.parametrize("key", ["ordered.registration.settle.ms", "ordered.follower.poll.interval.ms"])
@pytest.mark.parametrize("allowed,component", [(PRODUCER_OPTIONS, "OrderedProducer"),
                                               (CONSUMER_OPTIONS, "OrderedConsumer")])
def test_a_removed_key_warns_and_is_dropped(key: str, allowed: tuple, component: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kafka_ordered.config"):
        ours, rest = split_config({key: 100, "bootstrap.servers": "x"}, allowed, component)
    assert key not in ours and key not in rest and rest == {"bootstrap.servers": "x"}
    [rec] = [r for r in caplog.records if key in r.getMessage()]
    assert rec.levelno == logging.WARNING and "no longer" in rec.getMessage() and component in rec.getMessage()


def test_removed_keys_are_no_options_any_more() -> None:
    assert set(REMOVED_OPTIONS) == {"ordered.registration.settle.ms", "ordered.follower.poll.interval.ms"}
    assert not set(REMOVED_OPTIONS) & set(OPTIONS)
    assert not set(REMOVED_OPTIONS) & (set(PRODUCER_OPTIONS) | set(CONSUMER_OPTIONS))


def test_unknown_keys_still_fail() -> None:
    with pytest.raises(ConfigError, match="unknown configuration key 'ordered.registration.settle'"):
        split_config({"ordered.registration.settle": 1}, PRODUCER_OPTIONS, "OrderedProducer")


def test_internal_clients_never_take_the_applications_transactional_id() -> None:
    from kafka_ordered.config import connection_identity, internal_config

    conf = {"bootstrap.servers": "x", "transactional.id": "app-tx", "transaction.timeout.ms": 60000}
    for role in ("producer", "consumer"):
        out = internal_config(conf, role)  # type: ignore[arg-type]
        assert "transactional.id" not in out and "transaction.timeout.ms" not in out
    assert connection_identity(conf) == connection_identity({"bootstrap.servers": "x"})
