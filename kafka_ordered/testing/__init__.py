"""Testing machinery: an embedded broker, an ordering oracle, a broker-free
simulation and the ordered-vs-plain demo.

Not part of the client API: nothing else in :mod:`kafka_ordered` imports this
package at import time (the CLI's ``broker`` and ``demo`` commands import it
when they run). The broker-free simulation is
:mod:`kafka_ordered.testing.simulation`, the demo scenarios
:mod:`kafka_ordered.testing.demo`.

- :class:`EmbeddedBroker` runs a Tansu broker (``pip install
  'kafka-ordered[broker]'``) on a free loopback port; :data:`BOOTSTRAP_ENV`
  names an external broker to use instead.
- :class:`KafkaCluster` runs a real Apache Kafka KRaft cluster (combined
  broker+controller JVMs from Maven Central jars) on loopback ports, with
  nodes to stop, kill, pause and restart.
- :data:`FAST_GROUP_CONFIG` (confluent-kafka) and
  :data:`FAST_GROUP_CONFIG_KAFKA_PYTHON` make consumer-group joins fast on it
  (embedded broker only: Apache Kafka refuses ``session.timeout.ms`` below
  6000); :func:`group_config` picks them or :data:`SAFE_GROUP_CONFIG`.
- :class:`OrderingOracle` checks per-key delivery order of values made by
  :func:`encode_value`.
- :func:`builtin_kafka_jars` finds Spark's own Kafka connector
  (``spark-sql-kafka-0-10``) for the tests and benchmarks that compare with
  it; :func:`fetch_builtin_kafka_jars` downloads it with Maven.
"""

from ._broker import (
    BOOTSTRAP_ENV,
    FAST_GROUP_CONFIG,
    FAST_GROUP_CONFIG_KAFKA_PYTHON,
    SAFE_GROUP_CONFIG,
    SAFE_GROUP_CONFIG_KAFKA_PYTHON,
    TANSU_ENV,
    EmbeddedBroker,
    find_tansu,
    group_config,
)
from ._cluster import KAFKA_VERSION, KafkaCluster, KafkaSetupError, SaslUser
from ._oracle import OracleReport, OrderingOracle, Violation, decode_value, encode_value
from ._spark_jars import SPARK_KAFKA_ARTIFACTS, SPARK_KAFKA_JARS_ENV, builtin_kafka_jars, fetch_builtin_kafka_jars

__all__ = [
    "EmbeddedBroker",
    "find_tansu",
    "KafkaCluster",
    "KafkaSetupError",
    "SaslUser",
    "KAFKA_VERSION",
    "BOOTSTRAP_ENV",
    "TANSU_ENV",
    "FAST_GROUP_CONFIG",
    "FAST_GROUP_CONFIG_KAFKA_PYTHON",
    "SAFE_GROUP_CONFIG",
    "SAFE_GROUP_CONFIG_KAFKA_PYTHON",
    "group_config",
    "OrderingOracle",
    "OracleReport",
    "Violation",
    "encode_value",
    "decode_value",
    "SPARK_KAFKA_ARTIFACTS",
    "SPARK_KAFKA_JARS_ENV",
    "builtin_kafka_jars",
    "fetch_builtin_kafka_jars",
]
