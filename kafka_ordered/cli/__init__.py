"""``kafka-ordered`` command line: manage layouts, run the embedded broker and the demo.

Human output by default, ``--json`` for scripts. Exit codes: 0 success,
1 a kafka-ordered error (the message says what to do), 2 bad usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from confluent_kafka import KafkaException

from .._environment import BOOTSTRAP_ENV
from ..errors import ConfigError, KafkaOrderedError
from . import _render
from ._render import expansion_plan_text

__all__ = ["main", "expansion_plan_text"]


def _config(args: argparse.Namespace) -> Dict[str, Any]:
    conf: Dict[str, Any] = {"bootstrap.servers": args.bootstrap}
    if args.layout_topic:
        conf["ordered.layout.topic"] = args.layout_topic
    for kv in args.config or ():
        if "=" not in kv:
            raise SystemExit(f"-X expects key=value, got {kv!r}")
        k, v = kv.split("=", 1)
        conf[k] = v
    return conf


def _emit(args: argparse.Namespace, data: Any, human: Callable[[], str]) -> None:
    _render.emit(args.json, data, human)


def _admin(args: argparse.Namespace) -> Any:
    from ..admin import LayoutAdmin

    return LayoutAdmin(_config(args))


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


def cmd_create(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        lay = admin.create_topic(args.topic, args.partitions, args.physical, args.replication_factor,
                                 hash=args.hash, **_placement(args))
        placed = admin.last_placement
    data = {**lay.to_dict(), "placement": placed.to_dict() if placed is not None else None}
    _emit(args, data, lambda: _render.created_text(lay, placed, args.topic))
    return 0


def cmd_adopt(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        res = admin.adopt_with_report(args.topic, hash=args.hash)
    _emit(args, res.to_dict(), lambda: _render.adopted_text(res))
    return 0


def _election_status(elections: Any, done: str) -> int:
    """Exit status after a change that elected leaders: 1 (with the reason on
    stderr) when any election failed, else 0."""
    failed = _failed_elections(elections)
    if failed:
        _render.error(f"{done}, but electing preferred leaders failed for partitions {', '.join(failed)}")
        return 1
    return 0


def cmd_expand(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        res = admin.expand_with_report(args.topic, args.partitions, elect_leaders=args.elect_leaders, **_placement(args))
    full = res.to_dict()
    data = {**res.layout.to_dict(), "placement": full["plan"]["placement"], "elections": full["elections"]}
    _emit(args, data, lambda: _render.expanded_text(res, full["elections"], args.elect_leaders))
    return _election_status(full["elections"], f"{args.topic} was expanded")


def cmd_plan(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        plan = admin.plan(args.topic, args.to, **_placement(args))
    _emit(args, plan.to_dict(), lambda: _render.expansion_plan_text(plan))
    return 0


def cmd_heal(args: argparse.Namespace) -> int:
    kwargs = _placement(args, min_rf=False)
    with _admin(args) as admin:
        if args.dry_run:
            plan = admin.plan_heal(args.topic, replication_factor=args.replication_factor, **kwargs)
            data = plan.to_dict()
            if plan.target:
                data["reassignment_json"] = json.loads(plan.to_reassignment_json())
            _emit(args, data, lambda: _render.heal_dry_run_text(plan))
            return 0
        res = admin.heal(args.topic, replication_factor=args.replication_factor, elect_leaders=args.elect_leaders,
                         **kwargs)
    data = res.to_dict()
    _emit(args, data, lambda: _render.healed_text(res, data["elections"], args.elect_leaders))
    return _election_status(data["elections"], "replicas were reassigned")


def cmd_elect_leaders(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        results = admin.elect_leaders(args.topic, args.partitions)
    data = {str(p): r.to_dict() for p, r in sorted(results.items())}
    _emit(args, data, lambda: _render.elections_text(args.topic, data))
    failed = _failed_elections(data)
    if failed:
        _render.error(f"electing preferred leaders failed for partitions {', '.join(failed)}")
        return 1
    return 0


def cmd_shrink(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        lay = admin.shrink(args.topic, args.partitions)
    _emit(args, lay.to_dict(), lambda: "shrunk " + _render.layout_line(lay.to_dict()))
    return 0


def cmd_retire(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        res = admin.retire(args.topic, args.group or (), delete_records=args.delete_records)
    _emit(args, res.to_dict(), lambda: _render.retired_text(res))
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        desc = admin.describe(args.topic, group=args.group)
    data = desc.to_dict()
    _emit(args, data, lambda: _render.description_text(data, args.group))
    return 0


def cmd_upgrade_protocol(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        offset = admin.upgrade_protocol()
        protocol = admin.history.protocol
    data = {"layout_topic": admin.layout_topic, "protocol": protocol, "offset": offset, "changed": offset is not None}
    _emit(args, data, lambda: _render.upgraded_text(data))
    return 0


def cmd_broker(args: argparse.Namespace) -> int:
    from ..testing import EmbeddedBroker

    with EmbeddedBroker(port=args.port) as broker:
        _render.out(broker.bootstrap_servers)
        _render.note(f"embedded Tansu broker running (pid {broker.pid}); Ctrl-C to stop")
        stop = {"now": False}

        def handler(signum: int, frame: Any) -> None:
            stop["now"] = True

        signal.signal(signal.SIGTERM, handler)
        try:
            while not stop["now"]:
                time.sleep(0.2)
                if not broker.running:
                    _render.note("broker exited")
                    return 1
        except KeyboardInterrupt:
            pass
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from ..testing.demo import run_demo, scenario_from_args

    base, runs = scenario_from_args(args)
    results = run_demo(base, runs, bootstrap=args.bootstrap, progress=sys.stderr)
    rows = [r.row() for r in results]
    violations = [
        f"  {'ordered' if r.scenario.ordered else 'plain'}: key {v.key.decode()} of {v.producer} "
        f"delivered seq {v.seq} after {v.after_seq} ({v.where})"
        for r in results for v in r.report.violations[:3]
    ]
    _render.emit(args.json, {"results": rows, "scenario": dataclasses.asdict(base)},
                 lambda: _render.demo_table(rows, violations), sort_keys=False)
    return 0 if all(r.report.ok for r in results if r.scenario.ordered) else 1


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    """The ``demo`` options. Scenario sizes default to ``None``: the demo then
    uses :class:`kafka_ordered.testing.demo.Scenario`'s defaults (so parsing
    needs no import of the testing package)."""
    p.add_argument("--bootstrap", "-b", default=os.environ.get(BOOTSTRAP_ENV),
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
    p.add_argument("--json", action="store_true")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap", "-b", default=os.environ.get(BOOTSTRAP_ENV, "localhost:9092"),
                        help=f"bootstrap servers (default ${BOOTSTRAP_ENV} or localhost:9092)")
    common.add_argument("--layout-topic", help="layout log topic (default _kafka_ordered)")
    common.add_argument("-X", dest="config", action="append", metavar="KEY=VALUE",
                        help="extra librdkafka client config, e.g. -X security.protocol=SSL")
    common.add_argument("--json", action="store_true", help="machine-readable output")

    p = argparse.ArgumentParser(prog="kafka-ordered", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, fn: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, parents=[common], help=help, description=help)
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

    sp = add("expand", cmd_expand, "grow the undeleted partition count")
    sp.add_argument("topic")
    sp.add_argument("partitions", type=int)
    placement(sp)
    sp.add_argument("--elect-leaders", action="store_true",
                    help="elect the preferred leaders of the partitions that become undeleted")

    sp = add("plan", cmd_plan, "show what expand would do (reused spares, new partitions and their replicas); "
                               "changes nothing")
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

    sp = add("describe", cmd_describe, "show layout, history, lineage, registrations (and gates with --group)")
    sp.add_argument("topic")
    sp.add_argument("--group", "-g", help="show every gate's state for this consumer group")

    add("upgrade-protocol", cmd_upgrade_protocol,
        "move a layout log written by kafka-ordered < protocol 2 (settle pause) to the causal-token protocol; "
        "stop every older producer, consumer and Spark query first (docs/protocol.md)")

    sp = sub.add_parser("broker", help="run an embedded Tansu broker in the foreground")
    sp.add_argument("--port", type=int, help="default: a free port")
    sp.set_defaults(fn=cmd_broker)

    sp = sub.add_parser("demo", help="ordered vs plain clients through layout changes, on an embedded broker")
    _demo_arguments(sp)
    sp.set_defaults(fn=cmd_demo)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except KafkaOrderedError as e:
        _render.error(str(e))
        return 1
    except KafkaException as e:  # librdkafka refused a setting (e.g. an unknown -X key)
        err = e.args[0] if e.args else e
        _render.error(err.str() if hasattr(err, "str") else str(err))
        return 2 if "configuration" in str(err).lower() or "property" in str(err).lower() else 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
