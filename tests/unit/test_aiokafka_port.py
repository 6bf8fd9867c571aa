"""The aiokafka adapter's port: positions read on the loop right before a
hop to the worker serve that hop, until the port itself moves a partition."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import pytest

pytest.importorskip("aiokafka")

from aiokafka.structs import TopicPartition  # noqa: E402

from kafka_ordered.aiokafka._consumer import _ConsumerPort  # noqa: E402


class _State:
    def __init__(self, position: Any) -> None:
        self.has_valid_position = position is not None
        self.position = position


class _Assignment:
    def __init__(self, positions: Dict[TopicPartition, Any]) -> None:
        self.positions = positions

    @property
    def tps(self) -> Any:
        return frozenset(self.positions)

    def state_value(self, tp: TopicPartition) -> _State:
        return _State(self.positions[tp])


class _Consumer:
    def __init__(self, positions: Dict[TopicPartition, Any]) -> None:
        self.assignment = _Assignment(positions)
        sub = type("Sub", (), {"assignment": self.assignment})()
        self._subscription = type("S", (), {"subscription": sub, "assigned_partitions": lambda s: set(positions)})()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.assignment.positions[tp] = offset

    def pause(self, *tps: TopicPartition) -> None:
        pass

    def resume(self, *tps: TopicPartition) -> None:
        pass


class _Bridge:
    """Runs each call at once and counts the round trips to the loop."""

    def __init__(self) -> None:
        self.calls: List[str] = []

    def call(self, fn: Any, *args: Any) -> Any:
        self.calls.append(getattr(fn, "__name__", str(fn)))
        return fn(*args)


def _port() -> Tuple[_ConsumerPort, _Consumer, _Bridge]:
    consumer = _Consumer({TopicPartition("t", 0): 5, TopicPartition("t", 1): None, TopicPartition("t", 2): 9})
    bridge = _Bridge()
    return _ConsumerPort(consumer, bridge, 1.0), consumer, bridge  # type: ignore[arg-type]


@pytest.mark.parametrize("move", ["seek", "pause", "resume"])
def test_a_snapshot_serves_positions_until_the_port_moves_a_partition(move: str) -> None:
    port, consumer, bridge = _port()
    want = [("t", 0), ("t", 1), ("t", 2), ("u", 0)]
    read = port.positions(want)
    assert read == {("t", 0): 5, ("t", 2): 9} and bridge.calls == ["_positions"]
    port.snapshot()
    bridge.calls.clear()
    assert port.positions(want) == read and port.positions([("t", 2)]) == {("t", 2): 9}
    assert bridge.calls == [], "served from the snapshot, no round trip to the loop"
    if move == "seek":
        port.seek(("t", 0), 7)
    else:
        getattr(port, move)([("t", 0)])
    bridge.calls.clear()
    assert port.positions(want)[("t", 0)] == (7 if move == "seek" else 5)
    assert bridge.calls == ["_positions"], "read on the loop again once the port moved a partition"


def test_after_the_hop_positions_are_read_on_the_loop_again() -> None:
    port, consumer, bridge = _port()
    port.snapshot()
    consumer.assignment.positions[TopicPartition("t", 0)] = 6  # a fetch after the hop
    port.forget()
    assert port.positions([("t", 0)]) == {("t", 0): 6} and bridge.calls == ["_positions"]


def test_the_bridge_is_idle_only_when_its_worker_runs_nothing() -> None:
    """The adapter runs a core step on the loop only while the worker runs
    nothing (one call at a time, in order): ``idle`` turns false when a call
    is handed to the worker and true once the worker finished it, even if
    its caller was cancelled meanwhile."""
    import asyncio
    import threading

    from kafka_ordered.aiokafka._bridge import LoopBridge

    async def run() -> None:
        bridge = LoopBridge("test-bridge")
        bridge.bind()
        assert bridge.idle()
        go = threading.Event()
        job = asyncio.ensure_future(bridge.run(go.wait, 10))
        await asyncio.sleep(0.05)
        assert not bridge.idle()
        job.cancel()
        await asyncio.sleep(0.05)
        assert not bridge.idle(), "cancelled while running: the worker is still busy"
        go.set()
        for _ in range(100):
            if bridge.idle():
                break
            await asyncio.sleep(0.01)
        assert bridge.idle()
        assert await bridge.run(lambda: threading.get_ident()) != threading.get_ident()
        assert bridge.idle()
        bridge.close()

    asyncio.run(run())
