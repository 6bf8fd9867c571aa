"""The error-code table of :mod:`kafka_ordered.errors` and :func:`translate`."""

from __future__ import annotations

import concurrent.futures
import inspect
import subprocess
import sys

import pytest
from confluent_kafka import KafkaError, KafkaException

import kafka_ordered.errors as errors
from kafka_ordered.errors import (
    CODES,
    BrokerUnavailableError,
    KafkaOrderedError,
    PlacementError,
    TopicAlreadyManagedError,
    UnknownTopicError,
    UnsupportedBrokerApiError,
    for_code,
    translate,
)


@pytest.mark.parametrize("name", sorted(CODES))
def test_table_constants_equal_confluent_kafkas(name: str) -> None:
    assert CODES[name] == getattr(KafkaError, name)


def test_errors_module_is_pure() -> None:
    """errors.py runs on its own (no package, no confluent-kafka)."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('errs', {errors.__file__!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "assert m.for_code(3) is m.UnknownTopicError\n"
        "assert not any(n.split('.')[0] in ('confluent_kafka', 'kafka_ordered') for n in sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "code, cls",
    [
        (KafkaError._TRANSPORT, BrokerUnavailableError),
        (KafkaError._ALL_BROKERS_DOWN, BrokerUnavailableError),
        (KafkaError._TIMED_OUT, BrokerUnavailableError),
        (KafkaError.REQUEST_TIMED_OUT, BrokerUnavailableError),
        (KafkaError.LEADER_NOT_AVAILABLE, BrokerUnavailableError),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, UnknownTopicError),
        (KafkaError._UNKNOWN_TOPIC, UnknownTopicError),
        (KafkaError._UNKNOWN_PARTITION, UnknownTopicError),
        (KafkaError._UNSUPPORTED_FEATURE, UnsupportedBrokerApiError),
        (KafkaError.UNSUPPORTED_VERSION, UnsupportedBrokerApiError),
        (KafkaError.INVALID_REQUEST, UnsupportedBrokerApiError),
        (KafkaError.TOPIC_ALREADY_EXISTS, TopicAlreadyManagedError),
        (KafkaError.INVALID_REPLICA_ASSIGNMENT, PlacementError),
        (KafkaError.INVALID_REPLICATION_FACTOR, PlacementError),
        (KafkaError.INVALID_PARTITIONS, PlacementError),
    ],
)
def test_for_code_maps_representative_codes(code: int, cls: type) -> None:
    assert for_code(code) is cls


@pytest.mark.parametrize("code", [KafkaError.POLICY_VIOLATION, KafkaError.CLUSTER_AUTHORIZATION_FAILED, 12345, -1, None])
def test_unknown_codes_map_to_the_root(code: object) -> None:
    assert for_code(code) is KafkaOrderedError  # type: ignore[arg-type]


def _kexc(code: int) -> KafkaException:
    return KafkaException(KafkaError(code, "canned"))


@pytest.mark.parametrize(
    "code, cls",
    [
        (KafkaError._TRANSPORT, BrokerUnavailableError),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, UnknownTopicError),
        (KafkaError._UNSUPPORTED_FEATURE, UnsupportedBrokerApiError),
        (KafkaError.TOPIC_ALREADY_EXISTS, TopicAlreadyManagedError),
        (KafkaError.INVALID_REPLICA_ASSIGNMENT, PlacementError),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaOrderedError),
    ],
)
def test_translate_keeps_the_code(code: int, cls: type) -> None:
    e = _kexc(code)
    got = translate(e, "doing it", api="CreateTopics")
    assert type(got) is cls and got.code == code
    assert str(got).startswith("doing it: ")
    with pytest.raises(cls) as raised:
        raise got from e
    assert raised.value.__cause__ is e


def test_translate_names_the_api() -> None:
    got = translate(_kexc(KafkaError._UNSUPPORTED_FEATURE), "electing", api="ElectLeaders")
    assert isinstance(got, UnsupportedBrokerApiError) and got.api == "ElectLeaders" and "ElectLeaders" in str(got)
    anon = translate(_kexc(KafkaError.UNSUPPORTED_VERSION), "reading")
    assert isinstance(anon, UnsupportedBrokerApiError) and anon.api == "unknown"


def test_translate_other_failures() -> None:
    unavailable = translate(_kexc(KafkaError._ALL_BROKERS_DOWN), "connecting")
    assert "bootstrap.servers" in str(unavailable)
    timeout = translate(concurrent.futures.TimeoutError(), "describe cluster")
    assert type(timeout) is BrokerUnavailableError and timeout.code is None
    other = translate(RuntimeError("boom"), "doing it")
    assert type(other) is KafkaOrderedError and other.code is None and "boom" in str(other)
    bare = translate(KafkaException(KafkaError(KafkaError._UNKNOWN_TOPIC)), "reading")  # type: ignore[arg-type]
    assert type(bare) is UnknownTopicError and bare.code == KafkaError._UNKNOWN_TOPIC


def test_every_public_error_accepts_and_keeps_code() -> None:
    required = {"api": "CreatePartitions", "offset": 7, "remaining": {1: 2}, "version": 2}
    for name in errors.__all__:
        cls = getattr(errors, name)
        if not (inspect.isclass(cls) and issubclass(cls, KafkaOrderedError)):
            continue
        params = inspect.signature(cls).parameters
        kw = {k: v for k, v in required.items() if k in params}
        e = cls("message", code=42, **kw)
        assert e.code == 42 and str(e) == "message", name
        assert cls("message", **kw).code is None, name


def test_the_code_table_is_derived_from_the_classes() -> None:
    """Each class names its own codes (not inherited) and says whether it is
    retriable; CODES and for_code are exactly what the classes say."""
    seen = {}
    for cls in [KafkaOrderedError, *(getattr(errors, n) for n in errors.__all__ if n.endswith("Error"))]:
        assert isinstance(cls.retriable, bool)
        for name, number in cls.__dict__.get("codes", {}).items():
            assert number not in seen, name
            seen[number] = cls
            assert CODES[name] == number and for_code(number) is cls
    assert sorted(seen) == sorted(CODES.values())
    assert errors.GuardRailsError.__dict__.get("codes") is None and for_code(KafkaError.INVALID_PARTITIONS) is PlacementError
    assert BrokerUnavailableError.retriable and not UnknownTopicError.retriable and not KafkaOrderedError.retriable
    assert translate(_kexc(KafkaError._TRANSPORT), "x").retriable


@pytest.mark.parametrize("code", [KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                  KafkaError.COORDINATOR_NOT_AVAILABLE])
def test_a_group_coordinator_failing_over_is_retriable(code: int) -> None:
    """Reading committed offsets while the group coordinator moves (chaos seed
    27 on Apache Kafka: NOT_COORDINATOR) is worth retrying, as Kafka says."""
    err = translate(KafkaException(KafkaError(code)), "reading committed offsets")
    assert isinstance(err, BrokerUnavailableError) and err.retriable and err.code == code


_SPARK_ERRORS = [
    ("spark_connector.source", "LayoutTopicNotFoundError"),
    ("spark_connector.reading", "DataLossError"),
    ("spark_connector.writing", "DeliveryError"),
    ("spark_connector.writing", "NullTopicError"),
    ("spark_connector", "SparkExtraMissingError"),
    ("pyspark_kafka_ordered", "WorkerEnvironmentError"),
]


@pytest.mark.parametrize("module, name", _SPARK_ERRORS)
def test_the_spark_connectors_errors_are_in_the_one_hierarchy(module: str, name: str) -> None:
    """Importable where the connector raises them, and the very classes of
    kafka_ordered.errors (in its __all__ and kafka_ordered's, with codes and
    retriable like every other)."""
    import importlib

    import kafka_ordered

    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    cls = getattr(importlib.import_module(module), name)
    assert cls is getattr(errors, name) and issubclass(cls, KafkaOrderedError)
    assert name in errors.__all__ and getattr(kafka_ordered, name) is cls and name in kafka_ordered.__all__
    assert isinstance(cls.codes, dict) and isinstance(cls.retriable, bool)


def test_every_error_class_of_the_errors_module_is_public() -> None:
    defined = {n for n, v in vars(errors).items()
               if inspect.isclass(v) and issubclass(v, BaseException) and v.__module__ == errors.__name__}
    assert defined <= set(errors.__all__)


def test_no_error_class_is_defined_outside_the_hierarchy() -> None:
    """spark_connector and pyspark_kafka_ordered define no error class but the
    stand-in for a worker that cannot import kafka_ordered."""
    import ast
    from pathlib import Path

    root = Path(errors.__file__).resolve().parents[1]
    found = []
    for path in [*sorted((root / "spark_connector").rglob("*.py")), root / "pyspark_kafka_ordered.py"]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                found.append(f"{path.relative_to(root)}:{node.name}")
    assert found == ["spark_connector/_discovery.py:_WorkerEnvironmentError"]


def test_the_environment_twins_are_one_import_error() -> None:
    from spark_connector import missing_extra

    assert errors.SparkExtraMissingError is errors.WorkerEnvironmentError
    err = missing_extra(ModuleNotFoundError("No module named 'pyarrow'", name="pyarrow"))
    assert type(err) is errors.SparkExtraMissingError and isinstance(err, ImportError)
    assert err.name == "pyarrow" and err.code is None and not err.retriable
    assert "needs pyarrow" in str(err) and "pip install 'kafka-ordered[spark]'" in str(err)


def test_a_worker_without_kafka_ordered_gets_the_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyspark")
    from spark_connector import _discovery

    missing = ModuleNotFoundError("No module named 'spark_connector'", name="spark_connector")
    assert type(_discovery.import_error(missing)) is errors.WorkerEnvironmentError
    monkeypatch.setitem(sys.modules, "kafka_ordered.errors", None)  # importing it raises ImportError
    err = _discovery.import_error(missing)
    assert type(err).__name__ == "_WorkerEnvironmentError" and isinstance(err, ImportError)
    assert err.name == "spark_connector" and "set PYSPARK_PYTHON" in str(err)


@pytest.mark.parametrize("client", ["kafka", "aiokafka"])
def test_translate_the_python_clients_errors(client: str) -> None:
    """kafka-python's and aiokafka's errors: a broker response keeps its code
    and class; a connection refused or a timeout of the client's own is a
    retriable BrokerUnavailableError (aiokafka calls its timeout not retriable,
    but the same call may well succeed later); anything else the root."""
    client_errors = pytest.importorskip(f"{client}.errors")
    coordinator = client_errors.for_code(KafkaError.NOT_COORDINATOR)("moving")
    got = translate(coordinator, "reading committed offsets")
    assert type(got) is BrokerUnavailableError and got.code == KafkaError.NOT_COORDINATOR and got.retriable
    assert str(got).startswith("reading committed offsets: ")
    topic = translate(client_errors.for_code(KafkaError.UNKNOWN_TOPIC_OR_PART)(), "reading")
    assert type(topic) is UnknownTopicError and topic.code == KafkaError.UNKNOWN_TOPIC_OR_PART
    for local in (client_errors.KafkaTimeoutError(), client_errors.KafkaConnectionError("111 ECONNREFUSED")):
        got = translate(local, "reading committed offsets")
        assert type(got) is BrokerUnavailableError and got.code is None and got.retriable, local
    other = translate(client_errors.IllegalStateError("no"), "reading")
    assert type(other) is KafkaOrderedError and "no" in str(other)


def test_a_commit_pending_in_an_open_transaction_is_retriable() -> None:
    """UNSTABLE_OFFSET_COMMIT (KIP-447): the group's commit waits on an open
    transaction; Kafka calls it retriable, and a read once the transaction
    ends succeeds. Its own class, from librdkafka's code and from
    kafka-python's error alike."""
    err = translate(KafkaException(KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT)), "reading the commits of group g")
    assert type(err) is errors.UnstableOffsetCommitError and err.retriable
    assert err.code == KafkaError.UNSTABLE_OFFSET_COMMIT and "check bootstrap.servers" not in str(err)
    kafka_errors = pytest.importorskip("kafka.errors")
    got = translate(kafka_errors.UnstableOffsetCommitError(), "reading the commits of group g")
    assert type(got) is errors.UnstableOffsetCommitError and got.retriable
