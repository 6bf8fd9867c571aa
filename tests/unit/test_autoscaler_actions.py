"""How :class:`kafka_ordered.Autoscaler` applies a decision, over a fake
:class:`LayoutAdmin`: the epoch it decided on goes with every action; a
moved layout, a refused plan, a failed or partial retire become holds that
say why. (The broker-side runs are tests/integration/test_autoscale.py.)"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import pytest

from kafka_ordered import Autoscaler, AutoscalePolicy, Layout
from kafka_ordered.admin import RetireResult
from kafka_ordered.autoscale import Decision, PolicyState
from kafka_ordered.errors import ConcurrentLayoutChangeError, GuardRailsError, UnsupportedBrokerApiError

CUR = Layout("orders", 5, 2, 4, 8, draining=frozenset({4, 5}))


class FakePlan:
    def __init__(self, problem: Optional[str], physical: int = 8) -> None:
        self.problem, self.physical_partitions = problem, physical


class FakeAdmin:
    def __init__(self, **raises: BaseException) -> None:
        self.calls: List[Tuple[str, Any, Dict[str, Any]]] = []
        self.raises = raises
        self.plan_problem: Optional[str] = None
        self.retired: Any = frozenset({4, 5})

    def _call(self, name: str, arg: Any, **kw: Any) -> None:
        self.calls.append((name, arg, kw))
        if name in self.raises:
            raise self.raises[name]

    def plan(self, topic: str, n: int) -> FakePlan:
        self._call("plan", n)
        return FakePlan(self.plan_problem)

    def expand(self, topic: str, n: int, **kw: Any) -> None:
        self._call("expand", n, **kw)

    def shrink(self, topic: str, n: int, **kw: Any) -> None:
        self._call("shrink", n, **kw)

    def retire(self, topic: str, groups: Any, **kw: Any) -> RetireResult:
        self._call("retire", groups, **kw)
        still = {q: "not fully consumed: g at 3 of 9" for q in CUR.draining - self.retired}
        return RetireResult(CUR, frozenset(self.retired), still)


def scaler(**kw: Any) -> Autoscaler:
    policy = AutoscalePolicy(min_partitions=2, max_partitions=16, target_records_per_s=100.0, groups=("g",))
    return Autoscaler({"bootstrap.servers": "127.0.0.1:1"}, "orders", policy, **kw)


def decision(kind: str, to: int = 4, retire: frozenset = frozenset()) -> Decision:
    return Decision(kind, "because", 1000.0, CUR.epoch, CUR.partitions, to, retire, 90.0, 45.0, 360.0, 100.0,  # type: ignore[arg-type]
                    "records", PolicyState(last_change=1000.0))


BEFORE = PolicyState(above_since=900.0)


@pytest.mark.parametrize("kind, to, call", [("grow", 8, "expand"), ("shrink", 2, "shrink")])
def test_every_action_names_the_epoch_it_was_decided_on(kind: str, to: int, call: str) -> None:
    a, admin = scaler(), FakeAdmin()
    d = a._act(admin, CUR, decision(kind, to), BEFORE)  # type: ignore[arg-type]
    assert d.kind == kind
    name, arg, kw = admin.calls[-1]
    assert (name, arg, kw) == (call, to, {"expected_epoch": CUR.epoch})


def test_retire_names_the_epoch_and_reports_a_partial_retire() -> None:
    a, admin = scaler(delete_records=True), FakeAdmin()
    admin.retired = frozenset({4})
    d = a._act(admin, CUR, decision("retire", retire=frozenset({4, 5})), BEFORE)  # type: ignore[arg-type]
    assert admin.calls[-1] == ("retire", ("g",), {"delete_records": True, "expected_epoch": CUR.epoch})
    assert d.kind == "retire" and d.retire == {4} and "5: not fully consumed" in d.reason
    admin.retired = frozenset()
    d = a._act(admin, CUR, decision("retire", retire=frozenset({4, 5})), BEFORE)  # type: ignore[arg-type]
    assert d.kind == "hold" and d.reason.startswith("retire not applied")


def test_a_moved_layout_is_a_hold_and_the_policy_state_is_restored() -> None:
    a = scaler()
    admin = FakeAdmin(expand=ConcurrentLayoutChangeError("moved"))
    a._samples.append((1.0, {}, {}))
    d = a._act(admin, CUR, decision("grow", 8), BEFORE)  # type: ignore[arg-type]
    assert d.kind == "hold" and d.partitions_to == CUR.partitions
    assert "not applied: the layout moved past epoch 5" in d.reason
    assert a._state == BEFORE and not a._samples  # decide again from fresh rates, no cooldown


def test_a_refused_plan_stops_growth_at_the_capacity_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    a, admin = scaler(), FakeAdmin()
    admin.plan_problem = "the broker does not support the CreatePartitions API"
    d = a._act(admin, CUR, decision("grow", 12), BEFORE)  # type: ignore[arg-type]
    assert d.kind == "hold" and "the cluster cannot take it: the broker does not support" in d.reason
    assert [c[0] for c in admin.calls] == ["plan"]  # nothing applied
    assert a._capacity_now(1000.0) == 8 and a._state == BEFORE
    assert any("growth stops at 8" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)
    assert a._capacity_now(1000.0 + 601) is None  # checked again later
    limited = FakeAdmin(plan=GuardRailsError("broker 1 is full", remaining={1: 0}))
    d = a._act(limited, CUR, decision("grow", 12), BEFORE)  # type: ignore[arg-type]
    assert d.kind == "hold" and "broker 1 is full" in d.reason


def test_a_failed_action_is_a_hold_with_the_error() -> None:
    a = scaler()
    admin = FakeAdmin(shrink=UnsupportedBrokerApiError("no", api="X"))
    d = a._act(admin, CUR, decision("shrink", 2), BEFORE)  # type: ignore[arg-type]
    assert d.kind == "hold" and d.reason == "shrink failed: no"


def test_bad_arguments_fail_at_construction() -> None:
    with pytest.raises(TypeError, match="AutoscalePolicy"):
        Autoscaler({}, "orders", {"min_partitions": 2})  # type: ignore[arg-type]
    with pytest.raises(Exception, match="interval must be > 0"):
        scaler(interval=0)
    with pytest.raises(Exception, match="unknown configuration key 'ordered.nope'"):
        Autoscaler({"ordered.nope": 1}, "orders", scaler().policy)


# -- log sizes (DescribeLogDirs through kafka-python)


class FakeLogDirs:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def describe_log_dirs(self, topic_partitions: Any = None) -> Any:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def _part(i: int, size: int, future: bool = False) -> Dict[str, Any]:
    return {"partition_index": i, "partition_size": size, "offset_lag": 0, "is_future_key": future}


def test_log_sizes_take_the_largest_current_replica_of_each_partition() -> None:
    from kafka_ordered.admin import _cluster

    answer = [
        {"broker": 1, "log_dirs": [{"error_code": 0, "log_dir": "/a", "topics": [
            {"name": "orders", "partitions": [_part(0, 100), _part(1, 50)]},
            {"name": "other", "partitions": [_part(0, 999)]}]}]},
        {"broker": 2, "log_dirs": [
            {"error_code": 0, "log_dir": "/b", "topics": [
                {"name": "orders", "partitions": [_part(0, 90), _part(1, 70), _part(2, 999, future=True)]}]},
            {"error_code": 57, "log_dir": "/c", "topics": [{"name": "orders", "partitions": [_part(2, 5000)]}]}]},
    ]
    assert _cluster.log_sizes(FakeLogDirs(answer), "orders") == {0: 100, 1: 70}


def test_no_log_sizes_is_an_unsupported_broker_api() -> None:
    import kafka.errors as kerr

    from kafka_ordered.admin import _cluster

    for answer in ([], [{"broker": 1, "log_dirs": []}], kerr.IncompatibleBrokerVersion("too old"),
                   ValueError("cannot parse")):
        with pytest.raises(UnsupportedBrokerApiError) as e:
            _cluster.log_sizes(FakeLogDirs(answer), "orders")
        assert e.value.api == "DescribeLogDirs" and "target records per second" in str(e.value)
