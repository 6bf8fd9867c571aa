"""Cluster I/O for replica placement, over confluent-kafka's ``AdminClient``
(raw admin calls; no planning, no printing).


Reads brokers, racks and per-broker replica counts; creates topics and
partitions with an explicit replica assignment (checking the broker honoured
it); elects preferred leaders. Every function takes an ``AdminClient`` or a
config dict and translates client errors into :mod:`kafka_ordered.errors`
classes (:func:`kafka_ordered.errors.translate`), keeping the broker error
code and chaining the client exception.

confluent-kafka (2.16) has no AlterPartitionReassignments call:
:func:`alter_partition_reassignments` sends it through kafka-python's
``KafkaAdminClient`` when given a config dict and kafka-python is installed,
and otherwise raises :class:`~kafka_ordered.errors.UnsupportedBrokerApiError`
with the reassignment JSON to apply by hand.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, ResourceType

from .._kafka import to_controller
from ..config import KAFKA_PYTHON_TO_LIBRDKAFKA
from ..errors import (
    BrokerUnavailableError,
    ConfigError,
    KafkaOrderedError,
    PlacementError,
    UnknownTopicError,
    UnsupportedBrokerApiError,
    translate,
)
from ..placement import PlacementPlan
from ._results import ClusterState, ElectionResult, ElectionStatus, GroupMember, ReassignmentResult

__all__ = [
    "AdminLike",
    "ClusterState",
    "ElectionResult",
    "describe_brokers",
    "replica_counts",
    "read_cluster",
    "topic_assignment",
    "create_topic",
    "create_partitions",
    "apply_plan",
    "alter_partition_reassignments",
    "ReassignmentResult",
    "reassignment_json",
    "kafka_python_admin_config",
    "broker_config",
    "topic_config",
    "elect_preferred_leaders",
    "describe_group",
    "list_groups",
    "log_dir_admin",
    "log_sizes",
]

AdminLike = Union[AdminClient, Mapping[str, Any]]


def _client(admin: AdminLike) -> AdminClient:
    return AdminClient(dict(admin)) if isinstance(admin, Mapping) else admin


# -- reading


def describe_brokers(admin: AdminLike, *, timeout: float = 10.0) -> Dict[int, Optional[str]]:
    """Live broker id -> rack (``None`` without ``broker.rack``), from DescribeCluster.

    Raises ``BrokerUnavailableError`` when the cluster does not answer.
    """
    return dict(sorted(_describe(_client(admin), timeout)[2].items()))


def _describe(client: AdminClient, timeout: float) -> Tuple[Optional[str], Optional[int], Dict[int, Optional[str]]]:
    try:
        d = to_controller(client, timeout, lambda t: client.describe_cluster(request_timeout=t).result(t + 1))
    except Exception as e:
        raise translate(e, "describe cluster", api="DescribeCluster") from e
    controller = d.controller.id if d.controller is not None and d.controller.id >= 0 else None
    return d.cluster_id, controller, {n.id: n.rack or None for n in d.nodes}


def _metadata(client: AdminClient, timeout: float) -> Any:
    # All topics: a Metadata request naming one topic may auto-create it.
    try:
        return client.list_topics(timeout=timeout)
    except Exception as e:
        raise translate(e, "read metadata", api="Metadata") from e


def replica_counts(admin: AdminLike, *, timeout: float = 10.0) -> Dict[int, int]:
    """Broker id -> replicas it hosts over all topics (internal ones included),
    from Metadata. Live brokers hosting nothing map to 0."""
    md = _metadata(_client(admin), timeout)
    return _count(md)


def _count(md: Any) -> Dict[int, int]:
    counts: Dict[int, int] = {b: 0 for b in md.brokers}
    for t in md.topics.values():
        for p in t.partitions.values():
            for b in p.replicas:
                counts[b] = counts.get(b, 0) + 1
    return dict(sorted(counts.items()))


def read_cluster(admin: AdminLike, *, timeout: float = 10.0) -> ClusterState:
    """Brokers, racks and replica counts in one :class:`ClusterState`."""
    client = _client(admin)
    cluster_id, controller, racks = _describe(client, timeout)
    counts = _count(_metadata(client, timeout))
    return ClusterState(
        cluster_id=cluster_id,
        controller=controller,
        racks=dict(sorted(racks.items())),
        replica_counts=counts,
        offline=frozenset(b for b in counts if b not in racks),
    )


def topic_assignment(admin: AdminLike, topic: str, *, timeout: float = 10.0) -> Dict[int, List[int]]:
    """Partition -> replicas (preferred leader first) of ``topic``.

    Raises ``UnknownTopicError`` when the topic does not exist.
    """
    md = _metadata(_client(admin), timeout)
    t = md.topics.get(topic)
    if t is None or (t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART) or not t.partitions:
        raise UnknownTopicError(f"topic {topic!r} does not exist", code=KafkaError.UNKNOWN_TOPIC_OR_PART)
    if t.error is not None:
        raise translate(KafkaException(t.error), f"read metadata of {topic!r}", api="Metadata")
    return {p: list(pm.replicas) for p, pm in sorted(t.partitions.items())}


def in_sync_replicas(admin: AdminLike, topic: str, *, timeout: float = 10.0) -> Dict[int, Tuple[List[int], List[int]]]:
    """Partition -> (replicas, in-sync replicas) of ``topic``, from Metadata.
    Raises like :func:`topic_assignment`."""
    md = _metadata(_client(admin), timeout)
    t = md.topics.get(topic)
    if t is None or not t.partitions:
        raise UnknownTopicError(f"topic {topic!r} does not exist", code=KafkaError.UNKNOWN_TOPIC_OR_PART)
    return {p: (list(pm.replicas), list(pm.isrs)) for p, pm in sorted(t.partitions.items())}


def describe_group(
    admin: AdminLike, group: str, *, timeout: float = 10.0
) -> Tuple[str, List[Tuple[GroupMember, List[Tuple[str, int]]]]]:
    """The state of consumer group ``group`` (lower case: ``"stable"``,
    ``"empty"``, ...) and its members, each with the partitions assigned to
    it, from DescribeGroups. A group that does not exist is ``"empty"`` or
    ``"dead"`` with no members (as the broker reports it).

    Raises ``UnsupportedBrokerApiError`` (api ``"DescribeGroups"``) on
    brokers without the API, ``BrokerUnavailableError`` on timeouts, another
    :class:`KafkaOrderedError` for other broker errors (e.g. authorization).
    """
    client = _client(admin)
    try:
        d = client.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout + 1)
    except Exception as e:
        raise translate(e, f"describe consumer group {group!r}", api="DescribeGroups") from e
    state = getattr(d.state, "name", None) or "unknown"
    members = []
    for m in d.members or ():
        tps = m.assignment.topic_partitions if m.assignment is not None else []
        members.append((GroupMember(str(m.member_id), str(m.client_id or ""), str(m.host or ""),
                                    m.group_instance_id or None),
                        [(str(tp.topic), int(tp.partition)) for tp in tps]))
    return state.lower(), members


# -- creating


def _ordered(assignment: Mapping[int, Sequence[int]], first: int, what: str) -> List[List[int]]:
    ids = sorted(assignment)
    if not ids or ids != list(range(first, first + len(ids))):
        raise PlacementError(f"{what}: partition ids must be {first}..{first + len(ids) - 1}, got {ids}")
    return [list(assignment[p]) for p in ids]


def _verify(client: AdminClient, topic: str, wanted: Mapping[int, Sequence[int]], timeout: float, api: str) -> Dict[int, List[int]]:
    """Wait until ``topic`` shows every wanted partition, then check the broker
    used the requested replicas."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            actual = topic_assignment(client, topic, timeout=max(0.1, deadline - time.monotonic()))
        except UnknownTopicError:
            actual = {}
        if set(wanted) <= set(actual) or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    got = {p: actual.get(p) for p in wanted}
    if any(got[p] != list(reps) for p, reps in wanted.items()) or (
        api == "CreateTopics" and len(actual) != len(wanted)
    ):
        raise UnsupportedBrokerApiError(
            f"{api} for {topic!r} succeeded but the broker did not apply the explicit replica assignment: "
            f"asked for {dict(wanted)}, the topic now has {actual}. The topic exists with the broker's layout; "
            f"delete it if that layout is not acceptable",
            api=f"{api} replica_assignment",
        )
    return actual


def create_topic(
    admin: AdminLike,
    topic: str,
    assignment: Mapping[int, Sequence[int]],
    *,
    config: Optional[Mapping[str, str]] = None,
    timeout: float = 30.0,
    verify: bool = True,
) -> Dict[int, List[int]]:
    """Create ``topic`` with the explicit replica ``assignment`` (partitions
    ``0..n-1`` -> replicas, leader first). Returns the assignment the cluster
    reports afterwards.

    Raises ``TopicAlreadyManagedError`` when the topic exists,
    ``PlacementError`` when the broker rejects the assignment,
    ``UnsupportedBrokerApiError`` (api ``"CreateTopics replica_assignment"``)
    when ``verify`` finds the broker ignored it, ``BrokerUnavailableError``
    on timeouts.
    """
    lists = _ordered(assignment, 0, f"create {topic!r}")
    client = _client(admin)
    new = NewTopic(topic, len(lists), replica_assignment=lists, config=dict(config or {}))
    try:
        to_controller(client, timeout, lambda t: client.create_topics(
            [new], operation_timeout=t, request_timeout=t)[topic].result(t + 1))
    except Exception as e:
        raise translate(e, f"create topic {topic!r}", api="CreateTopics") from e
    wanted = {p: lists[p] for p in range(len(lists))}
    return _verify(client, topic, wanted, timeout, "CreateTopics") if verify else {p: list(r) for p, r in wanted.items()}


def create_partitions(
    admin: AdminLike,
    topic: str,
    assignment: Mapping[int, Sequence[int]],
    *,
    timeout: float = 30.0,
    verify: bool = True,
    validate_only: bool = False,
) -> Dict[int, List[int]]:
    """Add the partitions of ``assignment`` (new ids, consecutive from the
    topic's current count) to ``topic`` with those replicas. Returns the
    topic's assignment afterwards. With ``validate_only`` the broker only
    validates the request (nothing is created; returns ``{}``).

    Raises ``UnsupportedBrokerApiError`` (api ``"CreatePartitions"``) on
    brokers without it, ``UnknownTopicError``, ``PlacementError`` when the
    broker rejects the assignment, ``BrokerUnavailableError`` on timeouts.
    """
    first = min(assignment) if assignment else 0
    lists = _ordered(assignment, first, f"add partitions to {topic!r}")
    client = _client(admin)
    new = NewPartitions(topic, first + len(lists), replica_assignment=lists)
    try:
        to_controller(client, timeout, lambda t: client.create_partitions(
            [new], operation_timeout=t, request_timeout=t, validate_only=validate_only)[topic].result(t + 1))
    except Exception as e:
        raise translate(e, f"add partitions to {topic!r}", api="CreatePartitions") from e
    if validate_only:
        return {}
    wanted = {first + i: reps for i, reps in enumerate(lists)}
    return _verify(client, topic, wanted, timeout, "CreatePartitions") if verify else topic_assignment(client, topic)


def apply_plan(
    admin: AdminLike,
    plan: PlacementPlan,
    *,
    config: Optional[Mapping[str, str]] = None,
    timeout: float = 30.0,
) -> Dict[int, List[int]]:
    """Create the plan's topic (no existing partitions) or add its partitions.

    Raises ``PlacementError`` when the plan has no topic, else as
    :func:`create_topic` / :func:`create_partitions`.
    """
    if plan.topic is None:
        raise PlacementError("the plan has no topic: pass topic= to plan_partitions")
    if plan.existing_partitions == 0:
        return create_topic(admin, plan.topic, plan.assignment, config=config, timeout=timeout)
    return create_partitions(admin, plan.topic, plan.assignment, timeout=timeout)


_REASSIGN_API = "AlterPartitionReassignments"

# librdkafka key -> kafka-python KafkaAdminClient keyword.
_LIBRDKAFKA_TO_KAFKA_PYTHON = {v: k for k, v in KAFKA_PYTHON_TO_LIBRDKAFKA.items()}
_LIBRDKAFKA_TO_KAFKA_PYTHON["sasl.mechanisms"] = "sasl_mechanism"  # librdkafka's alias


def kafka_python_admin_config(config: Mapping[str, Any], *, timeout: float = 30.0) -> Dict[str, Any]:
    """``KafkaAdminClient`` keywords reaching the same cluster as the
    librdkafka ``config`` (addresses, security protocol, SASL PLAIN/SCRAM/GSSAPI,
    SSL files, client id).

    Raises :class:`~kafka_ordered.errors.ConfigError` for security settings
    kafka-python cannot take (e.g. ``sasl.oauthbearer.*``, PEM strings,
    keystores), naming them.
    """
    servers = config.get("bootstrap.servers") or config.get("metadata.broker.list")
    if not servers:
        raise ConfigError("bootstrap.servers is required")
    out: Dict[str, Any] = {
        "bootstrap_servers": [s.strip() for s in str(servers).split(",") if s.strip()],
        "request_timeout_ms": max(1000, int(timeout * 1000)),
        "bootstrap_timeout_ms": max(1000, int(timeout * 1000)),
    }
    unmapped: List[str] = []
    for key, value in config.items():
        if key in _LIBRDKAFKA_TO_KAFKA_PYTHON:
            if value is not None:
                kw = _LIBRDKAFKA_TO_KAFKA_PYTHON[key]
                out[kw] = str(value).upper() if kw in ("security_protocol", "sasl_mechanism") else value
        elif key == "ssl.endpoint.identification.algorithm":
            out["ssl_check_hostname"] = str(value).lower() != "none"
        elif key.startswith(("ssl.", "sasl.")):
            unmapped.append(key)
        # Anything else (sockets, address family, logging, client tuning) does not decide whether
        # kafka-python reaches the cluster.
    if unmapped:
        raise ConfigError(
            f"cannot reach the cluster through kafka-python: it has no equivalent of {', '.join(sorted(unmapped))}"
        )
    return out


def _kafka_python_admin() -> Optional[Any]:
    """kafka-python's ``KafkaAdminClient`` when it is importable and has
    ``alter_partition_reassignments`` (kafka-python >= 2.1), else None."""
    try:
        from kafka.admin import KafkaAdminClient
    except Exception:
        return None
    return KafkaAdminClient if hasattr(KafkaAdminClient, "alter_partition_reassignments") else None


def reassignment_json(topic: str, targets: Mapping[int, Sequence[int]]) -> str:
    """``targets`` in ``kafka-reassign-partitions.sh --reassignment-json-file`` format."""
    return json.dumps(
        {"version": 1, "partitions": [{"topic": topic, "partition": p, "replicas": list(r)} for p, r in sorted(targets.items())]}
    )


def _how_to_reassign(topic: str, targets: Mapping[int, Sequence[int]]) -> str:
    return (
        f"Apply this reassignment with kafka-reassign-partitions.sh --bootstrap-server ... "
        f"--reassignment-json-file FILE --execute, FILE holding: {reassignment_json(topic, targets)}"
    )


def alter_partition_reassignments(
    admin: AdminLike, topic: str, targets: Mapping[int, Sequence[int]], *, timeout: float = 30.0
) -> Dict[int, ReassignmentResult]:
    """Start moving ``topic``'s partitions to the ``targets`` replica lists
    (KIP-455 AlterPartitionReassignments; what a heal plan needs). Returns one
    :class:`ReassignmentResult` per partition; per-partition rejections are
    results, not exceptions.

    confluent-kafka has no such call, so ``admin`` must be a librdkafka config
    dict and kafka-python (``pip install 'kafka-ordered[kafka-python]'``,
    >= 2.1) importable: the request goes through its ``KafkaAdminClient``
    (config mapped by :func:`kafka_python_admin_config`). Otherwise, and when
    the broker lacks the API, raises ``UnsupportedBrokerApiError`` (api
    ``"AlterPartitionReassignments"``) whose message holds the reassignment
    JSON to apply with ``kafka-reassign-partitions.sh --execute``.
    ``BrokerUnavailableError`` when the cluster does not answer.
    """
    wanted = {int(p): tuple(int(b) for b in reps) for p, reps in sorted(targets.items())}
    if not wanted:
        return {}
    client_cls = _kafka_python_admin() if isinstance(admin, Mapping) else None
    if client_cls is None:
        why = (
            "confluent-kafka has no AlterPartitionReassignments call and kafka-python (>= 2.1, which has "
            "one) is not installed: pip install 'kafka-ordered[kafka-python]'"
            if isinstance(admin, Mapping)
            else "confluent-kafka has no AlterPartitionReassignments call (pass the client config dict instead "
            "of an AdminClient to send it through kafka-python's KafkaAdminClient.alter_partition_reassignments)"
        )
        raise UnsupportedBrokerApiError(
            f"cannot reassign partitions {sorted(wanted)} of {topic!r}: {why}. {_how_to_reassign(topic, wanted)}",
            api=_REASSIGN_API,
        )
    import kafka.errors as kerr
    from kafka import TopicPartition as KTopicPartition

    assert isinstance(admin, Mapping)
    kw = kafka_python_admin_config(admin, timeout=timeout)
    what = f"reassign partitions {sorted(wanted)} of {topic!r}"
    try:
        client = client_cls(**kw)
    except kerr.KafkaError as e:
        raise BrokerUnavailableError(f"{what}: kafka-python could not reach {','.join(kw['bootstrap_servers'])} ({e})") from e
    try:
        try:
            answer = client.alter_partition_reassignments(
                {KTopicPartition(topic, p): list(reps) for p, reps in wanted.items()}, timeout_ms=int(timeout * 1000)
            )
        except (kerr.IncompatibleBrokerVersion, kerr.UnsupportedVersionError) as e:
            raise UnsupportedBrokerApiError(
                f"{what}: the broker does not support the {_REASSIGN_API} API (KIP-455, Apache Kafka >= 2.4): "
                f"{e}. {_how_to_reassign(topic, wanted)}",
                api=_REASSIGN_API,
                code=getattr(e, "errno", None),
            ) from e
        except kerr.KafkaTimeoutError as e:
            raise BrokerUnavailableError(f"{what}: no answer from the cluster in time ({e})") from e
        except kerr.KafkaError as e:
            raise KafkaOrderedError(f"{what}: {e}", code=getattr(e, "errno", None)) from e
    finally:
        try:
            client.close()
        except Exception:  # pragma: no cover - closing is best effort
            pass
    out: Dict[int, ReassignmentResult] = {}
    for tp, err in answer.items():
        if tp.topic != topic or tp.partition not in wanted:
            continue
        reps = wanted[tp.partition]
        if err is None:
            out[tp.partition] = ReassignmentResult(topic, tp.partition, reps, True)
        else:
            out[tp.partition] = ReassignmentResult(
                topic, tp.partition, reps, False, int(getattr(err, "errno", -1) or -1), getattr(err, "__name__", str(err)),
                getattr(err, "description", None),
            )
    for p, reps in wanted.items():
        if p not in out:
            out[p] = ReassignmentResult(topic, p, reps, False, -1, "NO_RESPONSE", "the broker did not report on this partition")
    return dict(sorted(out.items()))


# -- configuration


def _describe_configs(client: AdminClient, resource: Any, timeout: float) -> Dict[str, str]:
    try:
        fs = client.describe_configs([resource], request_timeout=timeout)
        entries = next(iter(fs.values())).result(timeout + 1)
    except Exception as e:
        raise translate(e, f"describe configs of {resource}", api="DescribeConfigs") from e
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


def broker_config(admin: AdminLike, broker: int, *, timeout: float = 10.0) -> Dict[str, str]:
    """Broker ``broker``'s configuration (name -> value; unset values left out),
    from DescribeConfigs. Empty on brokers that report none (Tansu)."""
    return _describe_configs(_client(admin), ConfigResource(ResourceType.BROKER, str(broker)), timeout)


def topic_config(admin: AdminLike, topic: str, *, timeout: float = 10.0) -> Dict[str, str]:
    """``topic``'s configuration (name -> value), from DescribeConfigs."""
    return _describe_configs(_client(admin), ConfigResource(ResourceType.TOPIC, topic), timeout)


# -- preferred leader election (KIP-183)


def _election(tp: TopicPartition, exc: Optional[object]) -> ElectionResult:
    # confluent-kafka hands a partition's error over as a bare KafkaError.
    err = exc if isinstance(exc, KafkaError) else exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if exc is None:
        return ElectionResult(tp.topic, tp.partition, "elected")
    if not isinstance(err, KafkaError):
        return ElectionResult(tp.topic, tp.partition, "failed", -1, type(exc).__name__, str(exc))
    status: ElectionStatus = "not_needed" if err.code() == KafkaError.ELECTION_NOT_NEEDED else "failed"
    return ElectionResult(tp.topic, tp.partition, status, err.code(), err.name(), err.str())


def elect_preferred_leaders(
    admin: AdminLike,
    partitions: Optional[Iterable[Tuple[str, int]]] = None,
    *,
    timeout: float = 60.0,
) -> Dict[Tuple[str, int], ElectionResult]:
    """Elect the preferred (first) replica as leader of each ``(topic,
    partition)``, or of every partition when ``partitions`` is None.

    Returns one :class:`ElectionResult` per partition the cluster reported
    on; per-partition failures (unknown partition, preferred leader not
    available) are results, not exceptions. Raises
    ``UnsupportedBrokerApiError`` (api ``"ElectLeaders"``) on brokers without
    the API, ``BrokerUnavailableError`` when no answer comes within
    ``timeout`` seconds, ``KafkaOrderedError`` (with ``code``) for other
    request-level errors such as missing authorization.
    """
    client = _client(admin)
    tps = None if partitions is None else [TopicPartition(t, p) for t, p in sorted(set(partitions))]
    if tps is not None and not tps:
        return {}
    try:
        # confluent-kafka 2.16.1 raises SystemError for request_timeout/operation_timeout here.
        result = client.elect_leaders(ElectionType.PREFERRED, tps).result(timeout)
    except Exception as e:
        raise translate(e, "elect preferred leaders", api="ElectLeaders") from e
    out = {(tp.topic, tp.partition): _election(tp, exc) for tp, exc in result.items()}
    return dict(sorted(out.items()))


def sample_keys(conf: Mapping[str, Any], topic: str, partitions: int, per_partition: int,
                timeout: float) -> List[Tuple[int, bytes]]:
    """Up to ``per_partition`` keyed records' ``(partition, key)`` from the
    start of each partition of ``topic`` (unkeyed records are skipped)."""
    import uuid

    from confluent_kafka import Consumer

    from ..config import internal_config

    c = Consumer({**internal_config(conf, "consumer"), "group.id": f"kafka-ordered-adopt-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    out: List[Tuple[int, bytes]] = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seen = {p: 0 for p in range(partitions)}
        open_ = set(range(partitions))
        deadline = time.monotonic() + timeout
        while open_ and time.monotonic() < deadline:
            for m in c.consume(500, 0.2):
                p = int(m.partition() or 0)
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        open_.discard(p)
                        continue
                    raise translate(KafkaException(err), f"sampling keys of {topic}")
                if p not in open_:
                    continue
                key = m.key()
                if key is not None:
                    out.append((p, key))
                    seen[p] += 1
                    if seen[p] >= per_partition:
                        open_.discard(p)
                        c.pause([TopicPartition(topic, p)])
    finally:
        c.close()
    return out


# -- groups and log sizes (the autoscaler's signals)


def list_groups(admin: AdminLike, *, timeout: float = 10.0) -> set:
    """The ids of every consumer group the cluster lists (ListGroups)."""
    client = _client(admin)
    try:
        res = client.list_consumer_groups(request_timeout=timeout).result(timeout + 1)
    except Exception as e:
        raise translate(e, "listing consumer groups", api="ListGroups") from e
    return {str(g.group_id) for g in res.valid}


_LOG_DIRS_API = "DescribeLogDirs"


def log_dir_admin(config: Mapping[str, Any], timeout: float) -> Any:
    """A kafka-python ``KafkaAdminClient`` for DescribeLogDirs (confluent-kafka
    has no such call). Raises :class:`UnsupportedBrokerApiError` (api
    ``"DescribeLogDirs"``) without kafka-python, ``BrokerUnavailableError``
    when it cannot reach the cluster."""
    try:
        import kafka.errors as kerr
        from kafka.admin import KafkaAdminClient
    except Exception as e:
        raise UnsupportedBrokerApiError(
            "per-partition log sizes (DescribeLogDirs) are read through kafka-python, which is not installed: "
            "pip install 'kafka-ordered[kafka-python]', or target records per second instead", api=_LOG_DIRS_API,
        ) from e
    kw = kafka_python_admin_config(config, timeout=timeout)
    try:
        return KafkaAdminClient(**kw)
    except kerr.KafkaError as e:
        raise BrokerUnavailableError(f"kafka-python could not reach {','.join(kw['bootstrap_servers'])} ({e})") from e


def log_sizes(kp_admin: Any, topic: str) -> Dict[int, int]:
    """Bytes on disk of each partition of ``topic`` (the largest replica), from
    DescribeLogDirs through ``kp_admin`` (:func:`log_dir_admin`). Raises
    :class:`UnsupportedBrokerApiError` (api ``"DescribeLogDirs"``) when the
    broker does not report log sizes (no such API, an error for every log
    directory, or no size for the topic)."""
    import kafka.errors as kerr

    why = ("the broker does not report log sizes (DescribeLogDirs); target records per second instead "
           "(--target-records-per-partition)")
    try:
        answers = kp_admin.describe_log_dirs(topic_partitions=[topic])
    except (kerr.IncompatibleBrokerVersion, kerr.UnsupportedVersionError, NotImplementedError) as e:
        raise UnsupportedBrokerApiError(f"{topic}: {why}: {e}", api=_LOG_DIRS_API) from e
    except kerr.KafkaError as e:
        raise KafkaOrderedError(f"describing the log dirs of {topic}: {e}", code=getattr(e, "errno", None)) from e
    except Exception as e:  # a broker that answers something kafka-python cannot parse
        raise UnsupportedBrokerApiError(f"{topic}: {why}: {type(e).__name__}: {e}", api=_LOG_DIRS_API) from e
    sizes: Dict[int, int] = {}
    for broker in answers or ():
        for d in broker.get("log_dirs", ()):
            if d.get("error_code", 0):
                continue
            for t in d.get("topics", ()):
                if (t.get("name") or t.get("topic")) != topic:
                    continue
                for p in t.get("partitions", ()):
                    if p.get("is_future_key"):  # a replica being moved between log dirs
                        continue
                    idx = p.get("partition_index", p.get("partition"))
                    size = p.get("partition_size", p.get("size"))
                    if idx is not None and size is not None and size >= 0:
                        sizes[int(idx)] = max(sizes.get(int(idx), 0), int(size))
    if not sizes:
        raise UnsupportedBrokerApiError(f"{topic}: {why}: no log directory reported a size for it",
                                        api=_LOG_DIRS_API)
    return sizes
