"""``kafka-ordered`` command line: manage layouts, run the embedded broker and the demo.

Human output by default, ``--json`` for scripts (shapes: ``docs/cli-json.md``).
Exit codes: 0 done, 1 failed, 2 bad usage or configuration, 3 the main job was
done but a follow-up failed (the message says what to run next).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import re
import signal
import sys
import textwrap
import time
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Mapping, NoReturn, Optional, Sequence, Tuple, Union

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException

from .._environment import BOOTSTRAP_ENV
from ..autoscale import AutoscalePolicy
from ..errors import BrokerUnavailableError, ConfigError, KafkaOrderedError
from . import _render
from ._properties import parse_properties
from ._render import expansion_plan_text

__all__ = ["main", "expansion_plan_text", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_FOLLOW_UP", "EXIT_CODES"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_FOLLOW_UP = 3
#: Exit code -> what it means (the ``--help`` epilog; docs/cli-json.md).
EXIT_CODES: Mapping[int, str] = {
    EXIT_OK: "done",
    EXIT_FAILED: "failed: the error says why (for plan: expand would fail, and the plan says why)",
    EXIT_USAGE: "bad usage or configuration: arguments, -X, --command-config, ordered.* values",
    EXIT_FOLLOW_UP: "the main job was done but a follow-up failed (e.g. expand --elect-leaders when the "
                    "election fails); the message says what to run next",
    130: "interrupted (Ctrl-C)",
}
_DEFAULT_BOOTSTRAP = "localhost:9092"


def _epilog() -> str:
    codes = "\n".join(textwrap.fill(text, 78, initial_indent=f"  {code:<4}", subsequent_indent=" " * 6,
                                    break_on_hyphens=False)
                      for code, text in EXIT_CODES.items())
    tail = textwrap.fill("With --json, stdout holds one JSON document: the result, or "
                         '{"error": {"type": ..., "message": ..., "code": ...}}; the shapes are in '
                         "docs/cli-json.md. --debug adds log messages and tracebacks on stderr.", 78)
    return f"exit codes:\n{codes}\n\n{tail}"


class _UsageError(Exception):
    """argparse found bad usage; ``usage`` is the parser's usage line."""

    def __init__(self, message: str, usage: str, prog: str) -> None:
        super().__init__(message)
        self.usage, self.prog = usage, prog


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message, self.format_usage(), self.prog)


def _setting(text: str) -> Tuple[str, str]:
    if "=" not in text or not text.split("=", 1)[0].strip():
        # A bare key is shown; anything else may hold a secret (-X sasl.password:...).
        got = repr(text) if re.fullmatch(r"[A-Za-z0-9._-]*", text) else "a setting without '=' (not shown)"
        raise ConfigError(f"-X expects KEY=VALUE, got {got}")
    k, v = text.split("=", 1)
    return k.strip(), v


def _read_command_config(path: str) -> Dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read --command-config {path}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"cannot read --command-config {path}: not UTF-8 text ({e.reason})") from e
    return parse_properties(text, path)


def _config(args: argparse.Namespace) -> Dict[str, Any]:
    """The client config: the ``--command-config`` file, then ``-X``
    settings, then ``--bootstrap-server`` and ``--layout-topic`` when given
    (later wins, as in Kafka's tools). Without ``--bootstrap-server`` nor a
    ``bootstrap.servers`` setting: ``$KAFKA_ORDERED_BOOTSTRAP``, else
    localhost:9092. Raises :class:`ConfigError` for a bad ``-X`` or file."""
    conf: Dict[str, Any] = {}
    if getattr(args, "command_config", None):
        conf.update(_read_command_config(args.command_config))
    for kv in args.config or ():
        k, v = _setting(kv)
        conf[k] = v
    if args.bootstrap:
        conf["bootstrap.servers"] = args.bootstrap
    elif not conf.get("bootstrap.servers"):
        conf["bootstrap.servers"] = os.environ.get(BOOTSTRAP_ENV) or _DEFAULT_BOOTSTRAP
    if args.layout_topic:
        conf["ordered.layout.topic"] = args.layout_topic
    return conf


def _emit(args: argparse.Namespace, data: Any, human: Callable[[], str]) -> None:
    _render.emit(args.json, data, human)


def _admin(args: argparse.Namespace) -> Any:
    from ..admin import LayoutAdmin

    args.resolved_config = _config(args)
    return LayoutAdmin(args.resolved_config)


def _connection_flags(args: argparse.Namespace) -> str:
    """The connection options to repeat in a suggested follow-up command (no
    ``-X``: it may hold secrets)."""
    conf = getattr(args, "resolved_config", None) or {}
    flags = f" --bootstrap-server {conf.get('bootstrap.servers', args.bootstrap or _DEFAULT_BOOTSTRAP)}"
    if getattr(args, "command_config", None):
        flags += f" --command-config {args.command_config}"
    if args.layout_topic:
        flags += f" --layout-topic {args.layout_topic}"
    if args.config:
        flags += " -X ..."
    return flags


def _limits_arg(text: str) -> Union[int, Dict[int, int]]:
    """``N`` (every broker) or ``BROKER=N,BROKER=N`` (brokers not named are unlimited)."""
    try:
        if "=" not in text:
            return int(text)
        out: Dict[int, int] = {}
        for part in text.split(","):
            b, n = part.split("=", 1)
            out[int(b)] = int(n)
        return out
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or BROKER=N,BROKER=N, got {text!r}") from None


def _min_rf_arg(text: str) -> Union[int, str]:
    if text == "min.insync.replicas":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int or min.insync.replicas, got {text!r}") from None


def _partitions_arg(text: str) -> List[int]:
    try:
        return sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated partition ids, got {text!r}") from None


def _port_arg(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port 0-65535, got {text!r}")
    return port


def _read_limits_file(path: str) -> Union[int, Dict[int, int]]:
    """A JSON file holding one limit for every broker (``100``) or broker id ->
    limit (``{"1": 100, "2": 200}``; brokers not named are unlimited)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read --max-partitions-file {path}: {e}") from e
    if isinstance(data, int) and not isinstance(data, bool):
        return data
    if isinstance(data, dict):
        try:
            return {int(b): int(n) for b, n in data.items() if not isinstance(n, bool)}
        except (TypeError, ValueError):
            pass
    raise ConfigError(f"--max-partitions-file {path} must hold an int or an object of broker id -> int, got {data!r}")


def _placement(args: argparse.Namespace, *, min_rf: bool = True) -> Dict[str, Any]:
    """The placement keyword arguments of create_topic/expand/plan/heal."""
    limits = args.max_partitions
    if getattr(args, "max_partitions_file", None):
        limits = _read_limits_file(args.max_partitions_file)
    out: Dict[str, Any] = {"max_partitions": limits, "ignore_racks": args.ignore_racks}
    if min_rf:
        out["min_required_replication_factor"] = args.min_required_replication_factor
    return out


def _failed_elections(elections: Mapping[str, Mapping[str, Any]]) -> List[str]:
    return [p for p, e in elections.items() if e["status"] == "failed"]


def _election_follow_up(args: argparse.Namespace, elections: Mapping[str, Mapping[str, Any]],
                        done: str) -> Optional[Dict[str, str]]:
    """``None`` when no election failed, else what failed and the command
    that retries it (the ``follow_up`` of expand and heal)."""
    failed = _failed_elections(elections)
    if not failed:
        return None
    first = elections[failed[0]]
    why = f"{first['error']}: {first['message']}" if first["error"] else "failed"
    return {
        "done": done,
        "failed": f"electing preferred leaders of partitions {','.join(failed)} ({why})",
        "run": f"kafka-ordered elect-leaders {args.topic} --partitions {','.join(failed)}{_connection_flags(args)}",
    }


def _follow_up_status(follow_up: Optional[Mapping[str, str]]) -> int:
    """0, or 3 with one line on stderr saying what failed and what to run next."""
    if follow_up is None:
        return EXIT_OK
    _render.error(f"{follow_up['done']}, but {follow_up['failed']}; once that is fixed run: {follow_up['run']}")
    return EXIT_FOLLOW_UP


def cmd_create(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        lay = admin.create_topic(args.topic, args.partitions, args.physical, args.replication_factor,
                                 hash=args.hash, **_placement(args))
        placed = admin.last_placement
    data = {**lay.to_dict(), "placement": placed.to_dict() if placed is not None else None}
    _emit(args, data, lambda: _render.created_text(lay, placed, args.topic))
    return EXIT_OK


def cmd_adopt(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        res = admin.adopt_with_report(args.topic, hash=args.hash)
    _emit(args, res.to_dict(), lambda: _render.adopted_text(res))
    return EXIT_OK


def cmd_expand(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        res = admin.expand_with_report(args.topic, args.partitions, elect_leaders=args.elect_leaders, **_placement(args))
    full = res.to_dict()
    follow_up = _election_follow_up(args, full["elections"], f"{args.topic} was expanded to {args.partitions}")
    data = {**res.layout.to_dict(), "placement": full["plan"]["placement"], "elections": full["elections"],
            "follow_up": follow_up}
    _emit(args, data, lambda: _render.expanded_text(res, full["elections"], args.elect_leaders))
    return _follow_up_status(follow_up)


def cmd_plan(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        plan = admin.plan(args.topic, args.to, **_placement(args))
    _emit(args, plan.to_dict(), lambda: _render.expansion_plan_text(plan))
    if not plan.will_succeed:
        _render.error(f"expand would fail: {(plan.problem or '').split('. ')[0]} (the plan says more)")
        return EXIT_FAILED
    return EXIT_OK


def cmd_heal(args: argparse.Namespace) -> int:
    kwargs = _placement(args, min_rf=False)
    with _admin(args) as admin:
        if args.dry_run:
            plan = admin.plan_heal(args.topic, replication_factor=args.replication_factor, **kwargs)
            data = {"dry_run": True, "plan": plan.to_dict(),
                    "reassignment_json": json.loads(plan.to_reassignment_json()) if plan.target else None,
                    "reassignments": {}, "elections": {}, "in_sync": {}, "follow_up": None}
            _emit(args, data, lambda: _render.heal_dry_run_text(plan))
            return EXIT_OK
        res = admin.heal(args.topic, replication_factor=args.replication_factor, elect_leaders=args.elect_leaders,
                         **kwargs)
    full = res.to_dict()
    follow_up = _election_follow_up(args, full["elections"], "replicas were reassigned")
    data = {"dry_run": False, **full,
            "reassignment_json": json.loads(res.plan.to_reassignment_json()) if res.plan.target else None,
            "follow_up": follow_up}
    _emit(args, data, lambda: _render.healed_text(res, full["elections"], args.elect_leaders))
    return _follow_up_status(follow_up)


def cmd_elect_leaders(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        results = admin.elect_leaders(args.topic, args.partitions)
    elections = {str(p): r.to_dict() for p, r in sorted(results.items())}
    _emit(args, {"topic": args.topic, "elections": elections}, lambda: _render.elections_text(args.topic, elections))
    failed = _failed_elections(elections)
    if failed:
        _render.error(f"electing preferred leaders failed for partitions {', '.join(failed)}")
        return EXIT_FAILED
    return EXIT_OK


def cmd_shrink(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        lay = admin.shrink(args.topic, args.partitions)
    _emit(args, lay.to_dict(), lambda: "shrunk " + _render.layout_line(lay.to_dict()))
    return EXIT_OK


def cmd_retire(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        res = admin.retire(args.topic, args.group or (), delete_records=args.delete_records)
    _emit(args, res.to_dict(), lambda: _render.retired_text(res))
    return EXIT_OK


def cmd_unmanage(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        lay = admin.unmanage(args.topic, args.group or (), producers_idle_s=args.producers_idle)
        data = {"topic": args.topic, "layout_topic": admin.layout_topic, "last_layout": lay.to_dict()}
    _emit(args, data, lambda: f"{args.topic} is no longer managed (its last layout: "
                              f"{_render.layout_line(lay.to_dict())})")
    return EXIT_OK


def cmd_describe(args: argparse.Namespace) -> int:
    from ..admin import autoscaler_status

    with _admin(args) as admin:
        desc = admin.describe(args.topic, group=args.group)
        status = autoscaler_status(admin, args.topic)
    data = {**desc.to_dict(), "autoscaler": status.to_dict() if status is not None else None}
    _emit(args, data, lambda: _render.description_text(data, args.group))
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        layouts = [admin.layout(t).to_dict() for t in sorted(admin.topics())]
        data = {"layout_topic": admin.layout_topic, "topics": layouts}
    _emit(args, data, lambda: _render.topics_text(data))
    return EXIT_OK


def _client_config(args: argparse.Namespace) -> Dict[str, Any]:
    args.resolved_config = _config(args)
    return dict(args.resolved_config)


def cmd_produce(args: argparse.Namespace) -> int:
    from ..confluent import OrderedProducer

    sep = args.key_separator
    if sep == "":
        raise ConfigError("-K needs a non-empty key separator")
    failed: List[str] = []
    produced = 0

    def delivered(err: Any, msg: Any) -> None:
        nonlocal produced
        if err is None:
            produced += 1
        else:
            failed.append(err.str() if hasattr(err, "str") else str(err))

    bad_line: Optional[int] = None
    read = 0
    with OrderedProducer(_client_config(args)) as producer:
        for number, line in enumerate(sys.stdin, 1):
            line = line[:-1] if line.endswith("\n") else line
            if sep is None:
                key, value = None, line
            elif sep in line:
                key, value = line.split(sep, 1)
            else:
                bad_line = number  # like kafka-console-producer: stop, nothing of this line is sent
                break
            while True:
                try:
                    producer.produce(args.topic, value=value.encode("utf-8"),
                                     key=None if key is None else key.encode("utf-8"), on_delivery=delivered)
                    break
                except BufferError:  # the client's queue is full: serve deliveries, then again
                    producer.poll(0.1)
            read += 1
            producer.poll(0)
        left = producer.flush(args.timeout)
    data = {"topic": args.topic, "produced": produced, "failed": len(failed) + left}
    if args.json:
        _emit(args, data, str)
    else:  # stdout stays empty, as kafka-console-producer's
        _render.note(f"produced {produced} record(s) to {args.topic}")
    if bad_line is not None:
        _render.error(f"line {bad_line} has no key separator {sep!r}; the {read} line(s) before it were sent, "
                      "nothing after it")
        return EXIT_FAILED
    if failed or left:
        why = f" (first error: {failed[0]})" if failed else ""
        _render.error(f"{len(failed) + left} of {read} record(s) were not delivered{why}")
        return EXIT_FAILED
    return EXIT_OK


def _text(data: Optional[bytes]) -> Optional[str]:
    return None if data is None else data.decode("utf-8", "backslashreplace")


def cmd_consume(args: argparse.Namespace) -> int:
    from ..confluent import OrderedConsumer

    conf = _client_config(args)
    # As kafka-console-consumer: without a group, a new one.
    conf["group.id"] = args.group or conf.get("group.id") or f"kafka-ordered-console-{uuid.uuid4().hex[:8]}"
    if args.from_beginning:
        conf["auto.offset.reset"] = "earliest"
    stop = {"now": False}

    def handler(signum: int, frame: Any) -> None:
        stop["now"] = True

    # Ctrl-C sets the flag too, rather than raising KeyboardInterrupt
    # wherever the consumer is (a layout-log read, a lock held): the loop
    # ends within one poll, and leaving the block commits and leaves.
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    count = 0
    idle_since = time.monotonic()
    try:
        with OrderedConsumer(conf) as consumer:
            consumer.subscribe([args.topic])
            while not stop["now"] and (args.max_messages is None or count < args.max_messages):
                msg = consumer.poll(0.2)
                if msg is None:
                    if args.timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                        break
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                idle_since = time.monotonic()
                count += 1
                key, value = _text(msg.key()), _text(msg.value())
                if args.json:
                    _render.out(json.dumps({"topic": msg.topic(), "partition": msg.partition(),
                                            "offset": msg.offset(), "timestamp": msg.timestamp()[1],
                                            "key": key, "value": value}, sort_keys=True))
                elif args.print_key:
                    _render.out(f"{key if key is not None else 'null'}\t{value if value is not None else 'null'}")
                else:
                    _render.out(value if value is not None else "null")
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)
    _render.note(f"Processed a total of {count} messages")
    return EXIT_OK


_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]i?b?|b)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "ki": 1024, "kib": 1024, "m": 1e6, "mb": 1e6, "mi": 1024**2,
          "mib": 1024**2, "g": 1e9, "gb": 1e9, "gi": 1024**3, "gib": 1024**3, "t": 1e12, "tb": 1e12,
          "ti": 1024**4, "tib": 1024**4}


def _size_arg(text: str) -> float:
    """Bytes: ``5000000``, ``5MB``, ``4MiB``, ``512k`` (decimal k/M/G, binary Ki/Mi/Gi)."""
    m = _SIZE.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(f"expected a size such as 5MB, 4MiB or 1000000, got {text!r}")
    return float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]


def _autoscale_line(args: argparse.Namespace, scaler: Any, event: str, decision: Any = None) -> Dict[str, Any]:
    return {"event": event, "time": time.time(), "topic": args.topic, "autoscaler_id": scaler.autoscaler_id,
            "leader": scaler.is_leader, "dry_run": args.dry_run,
            "decision": decision.to_dict() if decision is not None else None}


def cmd_autoscale(args: argparse.Namespace) -> int:
    from ..admin import Autoscaler

    given = {k: v for k, v in (("scale_up_after", args.scale_up_after), ("scale_down_after", args.scale_down_after),
                               ("cooldown", args.cooldown)) if v is not None}
    policy = AutoscalePolicy(
        min_partitions=args.min, max_partitions=args.max,
        target_records_per_s=args.target_records_per_partition, target_bytes_per_s=args.target_bytes_per_partition,
        max_step=args.max_step, groups=tuple(args.group or ()), **given,
    )
    args.resolved_config = _config(args)
    stop = {"now": False}

    def handler(signum: int, frame: Any) -> None:
        stop["now"] = True

    shown: Dict[str, Any] = {"hold": None, "at": 0.0}

    def decided(d: Any) -> None:
        if d.kind == "hold":
            # Every change is shown; a hold when its reason changes, else once a minute.
            gist = re.sub(r"[0-9.]+", "#", d.reason)
            if gist == shown["hold"] and time.monotonic() - shown["at"] < 60:
                return
            shown["hold"], shown["at"] = gist, time.monotonic()
        _render.autoscale_event(args.json, _autoscale_line(args, scaler, "decision", d))

    scaler = Autoscaler(args.resolved_config, args.topic, policy, interval=args.interval, window=args.window,
                        dry_run=args.dry_run, delete_records=args.delete_records, on_decision=decided)
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    logger = logging.getLogger("kafka_ordered.autoscale")
    saved = (logger.level, logger.propagate, list(logger.handlers))
    if not args.debug:  # warnings (growth stopped by capacity, failed rounds) are shown without --debug
        logger.handlers, logger.propagate = [_render.log_handler()], False
        logger.setLevel(logging.WARNING)
    try:
        scaler.start()
        _render.autoscale_event(args.json, _autoscale_line(args, scaler, "started"))
        leader = scaler.is_leader
        while not stop["now"]:
            time.sleep(0.1)
            if scaler.is_leader != leader:
                leader = scaler.is_leader
                _render.autoscale_event(args.json, _autoscale_line(args, scaler, "leader" if leader else "standby"))
    finally:
        scaler.close()
        for sig, h in previous.items():
            signal.signal(sig, h)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        logger.handlers = saved[2]
    _render.autoscale_event(args.json, _autoscale_line(args, scaler, "stopped"))
    return EXIT_OK


def cmd_upgrade_protocol(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        offset = admin.upgrade_protocol()
        protocol = admin.history.protocol
    data = {"layout_topic": admin.layout_topic, "protocol": protocol, "offset": offset, "changed": offset is not None}
    _emit(args, data, lambda: _render.upgraded_text(data))
    return 0


def cmd_broker(args: argparse.Namespace) -> int:
    from ..testing import EmbeddedBroker, KafkaCluster

    if not args.kafka and args.nodes is not None:
        raise ConfigError("--nodes needs --kafka (the embedded broker has one node)")
    if args.kafka and args.port is not None:
        raise ConfigError("--port is for the embedded broker; an Apache Kafka cluster takes free ports")
    stop = {"now": False}

    def handler(signum: int, frame: Any) -> None:
        stop["now"] = True

    # Installed before the address is printed: a caller may stop us as soon as it reads it.
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        if args.kafka:
            nodes = 1 if args.nodes is None else args.nodes
            if nodes < 1:
                raise ConfigError(f"--nodes must be at least 1, got {nodes}")
            _render.note(f"starting Apache Kafka {_kafka_version()} ({nodes} node{'s' if nodes > 1 else ''}; "
                         "the first start fetches its jars from Maven Central)")
            cluster = KafkaCluster(nodes=nodes)
            with cluster:
                pids = [cluster.pid(i) for i in range(nodes)]
                if args.json:
                    _render.out(json.dumps({"bootstrap_servers": cluster.bootstrap_servers, "pids": pids,
                                            "kafka_version": _kafka_version()}))
                else:
                    _render.out(cluster.bootstrap_servers)
                _render.note(f"Apache Kafka {_kafka_version()} running ({nodes} node(s), pids "
                             f"{', '.join(map(str, pids))}); Ctrl-C to stop")
                return _serve(stop, lambda: all(cluster.running(i) for i in range(nodes)), "an Apache Kafka node")
        with EmbeddedBroker(port=args.port) as broker:
            if args.json:
                _render.out(json.dumps({"bootstrap_servers": broker.bootstrap_servers, "pid": broker.pid}))
            else:
                _render.out(broker.bootstrap_servers)
            _render.note(f"embedded Tansu broker running (pid {broker.pid}); Ctrl-C to stop")
            return _serve(stop, lambda: broker.running, "the embedded broker")
    finally:
        signal.signal(signal.SIGTERM, previous)


def _kafka_version() -> str:
    from ..testing import KAFKA_VERSION

    return KAFKA_VERSION


def _serve(stop: Dict[str, bool], alive: Callable[[], bool], what: str) -> int:
    try:
        while not stop["now"]:
            time.sleep(0.2)
            if not alive():
                _render.error(f"{what} exited")
                return EXIT_FAILED
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from ..testing.demo import run_demo, scenario_from_args

    base, runs = scenario_from_args(args)
    results = run_demo(base, runs, bootstrap=args.bootstrap, progress=_render.progress_stream())
    rows = [r.row() for r in results]
    violations = [
        f"  {'ordered' if r.scenario.ordered else 'plain'}: key {v.key.decode()} of {v.producer} "
        f"delivered seq {v.seq} after {v.after_seq} ({v.where})"
        for r in results for v in r.report.violations[:3]
    ]
    _render.emit(args.json, {"results": rows, "scenario": dataclasses.asdict(base)},
                 lambda: _render.demo_table(rows, violations), sort_keys=False)
    return EXIT_OK if all(r.report.ok for r in results if r.scenario.ordered) else EXIT_FAILED


def _client_version() -> str:
    v = confluent_kafka.version()  # a str in 2.x; (str, int) in older releases
    return str(v[0] if isinstance(v, tuple) else v)


def _version() -> Dict[str, Any]:
    from .. import __version__, speedups_enabled

    return {"kafka_ordered": __version__, "python": platform.python_version(),
            "confluent_kafka": _client_version(), "librdkafka": confluent_kafka.libversion()[0],
            "speedups": speedups_enabled()}


def _output_arguments(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    suffix = "_top" if top else ""
    p.add_argument("--json", dest="json" + suffix, action="store_true",
                   help="machine-readable output, errors included (docs/cli-json.md)")
    p.add_argument("--debug", dest="debug" + suffix, action="store_true",
                   help="log messages and tracebacks on stderr")


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    """The ``demo`` options. Scenario sizes default to ``None``: the demo then
    uses :class:`kafka_ordered.testing.demo.Scenario`'s defaults (so parsing
    needs no import of the testing package)."""
    p.add_argument("--bootstrap-server", "--bootstrap", "-b", dest="bootstrap", default=os.environ.get(BOOTSTRAP_ENV),
                   help="use this broker instead of starting an embedded one")
    p.add_argument("--duration", type=float, help="seconds of producing per run")
    p.add_argument("--producers", type=int)
    p.add_argument("--keys", type=int)
    p.add_argument("--rate", type=int, help="records/s per producer")
    p.add_argument("--consumers", type=int)
    p.add_argument("--consumer-rate", type=int, help="records/s each consumer processes")
    p.add_argument("--layouts", default="4,5,6,8,6,8", help="initial count, then the layout changes")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--only", choices=["ordered", "plain"], help="run just one of the two")
    _output_arguments(p)


def _parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    conn = common.add_argument_group("connection")
    conn.add_argument("--bootstrap-server", "--bootstrap", "-b", dest="bootstrap", metavar="HOST:PORT,...",
                      help=f"bootstrap servers (default: bootstrap.servers from --command-config or -X, else "
                           f"${BOOTSTRAP_ENV}, else {_DEFAULT_BOOTSTRAP})")
    conn.add_argument("--command-config", metavar="FILE",
                      help="client settings in a Java properties file (key=value lines, # comments), "
                           "as Kafka's tools take; -X settings override it")
    conn.add_argument("-X", dest="config", action="append", metavar="KEY=VALUE",
                      help="a librdkafka client setting, e.g. -X security.protocol=SSL (repeatable)")
    conn.add_argument("--layout-topic", help="layout log topic (default _kafka_ordered)")
    _output_arguments(common)

    p = _Parser(prog="kafka-ordered", description="Manage the layouts of ordered topics; run the embedded broker "
                "and the demo.", epilog=_epilog(),
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="store_true",
                   help="print the versions of kafka-ordered, Python, confluent-kafka and librdkafka, and whether "
                        "the C speed-ups are on, and exit")
    _output_arguments(p, top=True)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, fn: Callable[[argparse.Namespace], int], help: str,
            parents: Sequence[_Parser] = (common,)) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, parents=list(parents), help=help, description=textwrap.fill(help, 78),
                            epilog=_epilog(),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.set_defaults(fn=fn)
        return sp

    def placement(sp: argparse.ArgumentParser, *, min_rf: bool = True) -> None:
        g = sp.add_argument_group("replica placement (see docs/placement.md)")
        limits = g.add_mutually_exclusive_group()
        limits.add_argument("--max-partitions", type=_limits_arg, metavar="N|BROKER=N,...",
                            help="partition replicas a broker may host (all brokers, or per broker id); "
                                 "a request that would exceed it fails before anything is created")
        limits.add_argument("--max-partitions-file", metavar="FILE.json",
                            help='the limits as JSON: 100, or {"1": 100, "2": 200}')
        if min_rf:
            g.add_argument("--min-required-replication-factor", type=_min_rf_arg, metavar="N|min.insync.replicas",
                           help="create partitions under-replicated on the live brokers when fewer than the "
                                "replication factor are live (heal adds the rest later)")
        g.add_argument("--ignore-racks", action="store_true", help="place replicas ignoring broker racks")

    sp = add("create", cmd_create, "create a topic under management")
    sp.add_argument("topic")
    sp.add_argument("--partitions", "-p", type=int, required=True, help="initial (undeleted) partitions")
    sp.add_argument("--physical", type=int, help="physical partitions to create (spares for later expansion)")
    sp.add_argument("--replication-factor", "-r", type=int, default=-1, help="default: broker default")
    sp.add_argument("--hash", choices=["murmur2", "murmur3", "crc32"], default="murmur2")
    placement(sp)

    sp = add("adopt", cmd_adopt, "put an existing topic under management (no key moves)")
    sp.add_argument("topic")
    sp.add_argument("--hash", choices=["murmur2", "murmur3", "crc32"], default=None,
                    help="default: detected from the topic's keyed records (murmur2: Java clients/librdkafka "
                         "murmur2_random; crc32: librdkafka default consistent_random)")

    sp = add("expand", cmd_expand, "grow the undeleted partition count (exit 3 when --elect-leaders fails "
                                   "after the expansion)")
    sp.add_argument("topic")
    sp.add_argument("partitions", type=int)
    placement(sp)
    sp.add_argument("--elect-leaders", action="store_true",
                    help="elect the preferred leaders of the partitions that become undeleted")

    sp = add("plan", cmd_plan, "show what expand would do (reused spares, new partitions and their replicas, "
                               "whether the broker can create them); changes nothing; exit 1 when expand would fail")
    sp.add_argument("topic")
    sp.add_argument("--to", type=int, required=True, metavar="N", help="the undeleted partition count to plan for")
    placement(sp)

    sp = add("heal", cmd_heal, "add the replicas under-replicated partitions lack (partition reassignment)")
    sp.add_argument("topic")
    sp.add_argument("--replication-factor", "-r", type=int,
                    help="target replication factor (default: the largest replica count among the partitions)")
    placement(sp, min_rf=False)
    sp.add_argument("--elect-leaders", action="store_true", help="elect the preferred leaders of healed partitions")
    sp.add_argument("--dry-run", action="store_true", help="print the plan and the reassignment JSON only")

    sp = add("elect-leaders", cmd_elect_leaders, "elect the preferred (first) replica as leader (KIP-183)")
    sp.add_argument("topic")
    sp.add_argument("--partitions", type=_partitions_arg, metavar="0,1,...", help="default: every partition")

    sp = add("shrink", cmd_shrink, "reduce the undeleted partition count (removed partitions drain)")
    sp.add_argument("topic")
    sp.add_argument("partitions", type=int)

    sp = add("retire", cmd_retire, "turn drained partitions into spares")
    sp.add_argument("topic")
    sp.add_argument("--group", "-g", action="append", help="consumer group that must have consumed them (repeatable)")
    sp.add_argument("--delete-records", action="store_true", help="also delete their records (DeleteRecords)")

    sp = add("describe", cmd_describe, "show layout, history, lineage, registrations; with --group also every "
                                       "gate, partition lag and owner for that group")
    sp.add_argument("topic")
    sp.add_argument("--group", "-g", help="show gates (state, held since, waits, lag, owners) and per partition "
                                          "committed offset, lag and owner for this consumer group")

    add("list", cmd_list, "list the managed topics with their layouts")

    sp = add("unmanage", cmd_unmanage, "take a topic out of management (its records stay); refused, with the "
                                       "reason, while partitions drain, a named group has not passed a gate, "
                                       "or a producer registered recently")
    sp.add_argument("topic")
    sp.add_argument("--group", "-g", action="append",
                    help="consumer group that reads the topic: it must have passed every gate (repeatable; "
                         "required when the topic has gates)")
    sp.add_argument("--producers-idle", type=float, default=600.0, metavar="S",
                    help="refuse while a producer registered for the topic less than S seconds ago (default 600, "
                         "ordered.transition.window.ms)")

    sp = add("produce", cmd_produce, "send lines from stdin to TOPIC through OrderedProducer (one record a line; "
                                     "with -K, key and value split at the first separator)")
    sp.add_argument("topic")
    sp.add_argument("-K", "--key-separator", metavar="SEP",
                    help="split each line into key SEP value (kcat's -K; kafka-console-producer's key.separator); "
                         "a line without SEP stops the command with an error. Default: no key")
    sp.add_argument("--timeout", type=float, default=30.0, metavar="S",
                    help="seconds to wait for the last deliveries (default 30)")

    sp = add("consume", cmd_consume, "print TOPIC's records through OrderedConsumer (gated: per-key order "
                                     "across layout changes); Ctrl-C commits and leaves the group")
    sp.add_argument("topic")
    sp.add_argument("--group", "-g", help="consumer group (default: a new kafka-ordered-console-... group)")
    sp.add_argument("--from-beginning", action="store_true",
                    help="start at the earliest offset when the group has no committed offset "
                         "(auto.offset.reset=earliest; default latest)")
    sp.add_argument("--max-messages", "-c", dest="max_messages", type=int, metavar="COUNT",
                    help="exit after COUNT records (committed first)")
    sp.add_argument("--print-key", action="store_true", help="print KEY<TAB>VALUE ('null' for a missing key)")
    sp.add_argument("--timeout-ms", type=int, metavar="MS", help="exit when no record arrived for MS milliseconds")

    sp = add("autoscale", cmd_autoscale,
             "grow and shrink the topic with its load, in the foreground (docs/howto/autoscale.md): one line per "
             "decision (JSON lines with --json); several may run, one acts; SIGTERM/SIGINT stop it cleanly")
    sp.add_argument("topic")
    sp.add_argument("--min", type=int, required=True, metavar="N", help="fewest undeleted partitions "
                    "(not below the topic's initial count)")
    sp.add_argument("--max", type=int, required=True, metavar="N", help="most undeleted partitions")
    target = sp.add_mutually_exclusive_group(required=True)
    target.add_argument("--target-records-per-partition", type=float, metavar="N",
                        help="records/s one partition should carry")
    target.add_argument("--target-bytes-per-partition", type=_size_arg, metavar="SIZE",
                        help="bytes/s one partition should carry (5MB, 4MiB; needs DescribeLogDirs)")
    sp.add_argument("--group", "-g", action="append", metavar="G",
                    help="consumer group whose lag and gates count and that must consume a shrunk partition "
                         "before it is retired (repeatable)")
    defaults = {f.name: f.default for f in dataclasses.fields(AutoscalePolicy)}
    sp.add_argument("--scale-up-after", type=float, metavar="S",
                    help=f"seconds the load must stay high before a grow (default {defaults['scale_up_after']:g})")
    sp.add_argument("--scale-down-after", type=float, metavar="S",
                    help=f"seconds the load must stay low before a shrink (default {defaults['scale_down_after']:g})")
    sp.add_argument("--cooldown", type=float, metavar="S",
                    help=f"seconds after a grow or shrink before the next one (default {defaults['cooldown']:g})")
    sp.add_argument("--max-step", type=int, metavar="N", help="most partitions added or removed at once "
                                                            "(default: no limit)")
    sp.add_argument("--interval", type=float, default=10.0, metavar="S",
                    help="seconds between observations (default 10)")
    sp.add_argument("--window", type=float, metavar="S", help="seconds rates are measured over "
                                                            "(default 3 x interval)")
    sp.add_argument("--delete-records", action="store_true",
                    help="retire with DeleteRecords (brokers that support it, e.g. Apache Kafka)")
    sp.add_argument("--dry-run", action="store_true", help="decide and log, change nothing")

    add("upgrade-protocol", cmd_upgrade_protocol,
        "move a layout log written by kafka-ordered < protocol 2 (settle pause) to the causal-token protocol; "
        "stop every older producer, consumer and Spark query first (docs/protocol.md)")

    output = _Parser(add_help=False)
    _output_arguments(output)
    sp = add("broker", cmd_broker, "run an embedded Tansu broker (or with --kafka an Apache Kafka cluster) in the "
                                   "foreground (prints its address; with --json one line "
                                   "{\"bootstrap_servers\": ..., \"pid\": ...}, with --kafka \"pids\": [...])",
             parents=[output])
    sp.add_argument("--port", type=_port_arg, help="0-65535; default, or 0: a free port (embedded broker only)")
    sp.add_argument("--kafka", action="store_true",
                    help="run Apache Kafka (KRaft, jars from Maven Central; needs Java 17+ and Maven) instead")
    sp.add_argument("--nodes", type=int, help="with --kafka: combined broker+controller nodes (default 1)")

    sp = add("demo", cmd_demo, "ordered vs plain clients through layout changes, on an embedded broker",
             parents=[])
    _demo_arguments(sp)
    return p


@contextmanager
def _logging(debug: bool) -> Iterator[None]:
    """Library log messages (kafka_ordered.*, librdkafka's through it) go to
    stderr with ``--debug`` and nowhere otherwise (the command's output says
    what happened); the logger is restored afterwards."""
    logger = logging.getLogger("kafka_ordered")
    saved = (logger.level, logger.propagate, list(logger.handlers))
    logger.handlers = [_render.log_handler() if debug else logging.NullHandler()]
    logger.propagate = False
    logger.setLevel(logging.DEBUG if debug else logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        logger.handlers = saved[2]


def _is_config_error(err: Any, text: str) -> bool:
    code = err.code() if hasattr(err, "code") else None
    low = text.lower()
    return code == KafkaError._INVALID_ARG or "configuration" in low or "property" in low


def _failure(args: argparse.Namespace, exc: BaseException) -> int:
    """Report ``exc`` as one line (JSON with --json, after the traceback with
    --debug); returns the exit code."""
    code: Optional[int] = None
    hint = None
    if isinstance(exc, KafkaOrderedError):
        kind, message, code = type(exc).__name__, str(exc), exc.code
        status = EXIT_USAGE if isinstance(exc, ConfigError) else EXIT_FAILED
        servers = (getattr(args, "resolved_config", None) or {}).get("bootstrap.servers")
        if isinstance(exc, BrokerUnavailableError) and servers and str(servers) not in message:
            message += f" (bootstrap.servers={servers})"
    elif isinstance(exc, KafkaException):  # librdkafka refused a setting (e.g. an unknown -X key)
        err: Any = exc.args[0] if exc.args else None
        kind = "KafkaException"
        message = err.str() if hasattr(err, "str") else str(exc)
        code = err.code() if hasattr(err, "code") else None
        status = EXIT_USAGE if _is_config_error(err, message) else EXIT_FAILED
    else:
        kind, message, status = type(exc).__name__, str(exc), EXIT_FAILED
        hint = f"unexpected {kind}: {message}" + ("" if args.debug else " (run with --debug for the traceback)")
    if args.debug:
        _render.traceback(exc)
    _render.failure(args.json, kind, message, code, text=hint)
    return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``kafka-ordered`` with ``argv`` (default ``sys.argv[1:]``);
    returns the exit code (see :data:`EXIT_CODES`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        args.json = bool(getattr(args, "json", False) or args.json_top)
        args.debug = bool(getattr(args, "debug", False) or args.debug_top)
        if not args.version and args.command is None:
            parser.error("a command is required")
    except _UsageError as e:
        _render.usage_error("--json" in argv, e.usage, e.prog, str(e))
        return EXIT_USAGE
    if args.version:
        info = _version()
        _render.emit(args.json, info, lambda: _render.version_text(info))
        return EXIT_OK
    with _logging(args.debug):
        try:
            return int(args.fn(args))
        except KeyboardInterrupt:
            return 130
        except Exception as e:
            return _failure(args, e)


if __name__ == "__main__":
    sys.exit(main())
