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


# -- kafka-python keywords for the internal librdkafka clients


def test_kafka_python_security_keywords_reach_the_internal_clients() -> None:
    from kafka_ordered.config import kafka_python_connection_config

    conn = kafka_python_connection_config({
        "bootstrap_servers": ["a:9093", "b:9093"], "security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI",
        "sasl_kerberos_service_name": "kfk", "ssl_cafile": "/ca.pem", "ssl_certfile": "/c.pem",
        "ssl_keyfile": "/k.pem", "ssl_password": "pw", "ssl_crlfile": "/crl.pem", "ssl_ciphers": "ECDHE+AESGCM",
        "ssl_check_hostname": False, "client_id": "me", "retries": 3,
    })
    assert conn == {
        "bootstrap.servers": "a:9093,b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI",
        "sasl.kerberos.service.name": "kfk", "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/c.pem",
        "ssl.key.location": "/k.pem", "ssl.key.password": "pw", "ssl.crl.location": "/crl.pem",
        "ssl.cipher.suites": "ECDHE+AESGCM", "ssl.endpoint.identification.algorithm": "none", "client.id": "me",
    }
    assert kafka_python_connection_config({"ssl_check_hostname": True})["ssl.endpoint.identification.algorithm"] \
        == "https"


@pytest.mark.parametrize("keyword", ["ssl_context", "sasl_oauth_token_provider", "sasl_kerberos_domain_name",
                                     "socks5_proxy"])
def test_a_kafka_python_keyword_without_librdkafka_equivalent_is_an_error_unless_given_for_librdkafka(
        keyword: str) -> None:
    """An SSL context or a token provider cannot reach the internal librdkafka
    clients: the layout log would be read without them. That is a clear
    error naming the keyword, unless ``ordered.librdkafka.config`` gives the
    internal clients their own settings."""
    from kafka_ordered.config import kafka_python_connection_config

    secret = object()
    with pytest.raises(ConfigError, match=f"{keyword}.*ordered.librdkafka.config") as e:
        kafka_python_connection_config({"bootstrap_servers": "a:1", "sasl_plain_password": "s3cret",
                                        keyword: secret})
    assert "s3cret" not in str(e.value) and repr(secret) not in str(e.value)
    conn = kafka_python_connection_config({"bootstrap_servers": "a:1", keyword: secret},
                                          {"sasl.oauthbearer.method": "oidc", "ssl.ca.location": "/ca.pem"})
    assert conn == {"bootstrap.servers": "a:1", "sasl.oauthbearer.method": "oidc", "ssl.ca.location": "/ca.pem"}
    assert kafka_python_connection_config({"bootstrap_servers": "a:1", keyword: None}) == {"bootstrap.servers": "a:1"}


def test_ordered_librdkafka_config_is_a_kafka_python_option_only() -> None:
    from kafka_ordered.config import CONSUMER_OPTIONS, KAFKA_PYTHON_OPTIONS, PRODUCER_OPTIONS, split_config

    opts, rest = split_config({"ordered.librdkafka.config": {"ssl.ca.location": "/ca.pem"}, "acks": 1},
                              PRODUCER_OPTIONS + KAFKA_PYTHON_OPTIONS, "OrderedKafkaProducer")
    assert opts["ordered.librdkafka.config"] == {"ssl.ca.location": "/ca.pem"} and rest == {"acks": 1}
    with pytest.raises(ConfigError, match="not a OrderedConsumer option"):
        split_config({"ordered.librdkafka.config": {}}, CONSUMER_OPTIONS, "OrderedConsumer")
    with pytest.raises(ConfigError, match="ordered.librdkafka.config") as e:
        split_config({"ordered.librdkafka.config": {"sasl.password": "s3cret", 1: 2}},
                     CONSUMER_OPTIONS + KAFKA_PYTHON_OPTIONS, "OrderedKafkaConsumer")
    assert "s3cret" not in str(e.value)
