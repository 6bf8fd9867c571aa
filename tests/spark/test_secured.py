"""The Spark source and sink on a secured cluster (issue 22, part 2): the
session's Apache Kafka cluster has a SASL_SSL listener; the ``kafka.*``
options carry the user's own librdkafka security settings to every client
the connector makes, the layout log included. A wrong password is a clear
error, not a hang. Apache Kafka only (``KAFKA_ORDERED_BROKER=kafka``)."""

from __future__ import annotations

import time
from typing import Any, Dict

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafka_ordered import LayoutAdmin
from kafka_ordered.testing import KafkaCluster, SaslUser

from ..conftest import SASL_USER


def _spark_options(conf: Dict[str, str]) -> Dict[str, str]:
    return {f"kafka.{k}": v for k, v in conf.items()}


def test_spark_source_and_sink_flow_through_sasl_ssl(spark: Any, cluster_or_skip: KafkaCluster, topic: str,
                                                     layout_topic: str) -> None:
    cluster = cluster_or_skip
    sasl = cluster.sasl_config(SASL_USER)
    with LayoutAdmin({**sasl, "ordered.layout.topic": layout_topic}) as admin:
        admin.create_topic(topic, 2)
        admin.expand(topic, 3)
        layout = admin.layout(topic)
    opts = {**_spark_options(sasl), "ordered.layout.topic": layout_topic}
    rows = [(f"k{i % 7}".encode(), f"v{i}".encode()) for i in range(40)]
    spark.createDataFrame(rows, "key binary, value binary").write.format("kafka_ordered") \
        .options(**opts, topic=topic).mode("append").save()
    got = spark.read.format("kafka_ordered").options(**opts, subscribe=topic, startingOffsets="earliest") \
        .load().collect()
    assert sorted(bytes(r.value) for r in got) == sorted(v for _, v in rows)
    assert all(r.partition == layout.partition_for(bytes(r.key)) for r in got)
    # An independent witness on the PLAINTEXT listener: the records are there.
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "kafka-ordered-tests-witness"})
    try:
        assert sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)) == len(rows)
    finally:
        c.close()


def test_a_wrong_password_fails_the_spark_query_clearly(spark: Any, cluster_or_skip: KafkaCluster, topic: str,
                                                       layout_topic: str) -> None:
    cluster = cluster_or_skip
    with LayoutAdmin({**cluster.sasl_config(SASL_USER), "ordered.layout.topic": layout_topic}) as admin:
        admin.create_topic(topic, 2)
    wrong = cluster.sasl_config(SaslUser(SASL_USER.username, "not-the-password"))
    started = time.monotonic()
    with pytest.raises(Exception, match="(?i)authenticat"):
        spark.read.format("kafka_ordered").options(**_spark_options(wrong), subscribe=topic,
                                                   **{"ordered.layout.topic": layout_topic}).load().collect()
    assert time.monotonic() - started < 60
