"""``kafka-ordered`` command line: manage layouts, run the embedded broker and the demo.

Human output by default, ``--json`` for scripts. Exit codes: 0 success,
1 a kafka-ordered error (the message says what to do), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from .broker import BOOTSTRAP_ENV
from .errors import KafkaOrderedError

__all__ = ["main"]


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
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        print(human())


def _layout_line(d: Mapping[str, Any]) -> str:
    draining = d.get("draining") or []
    spares = [p for p in range(d["partitions"], d["physical_partitions"]) if p not in draining]
    return (f"{d['topic']}: epoch {d['epoch']}, {d['partitions']} undeleted of {d['physical_partitions']} physical "
            f"(initial {d['initial_partitions']}, hash {d['hash']}), draining {draining or '-'}, spares {spares or '-'}")


def _admin(args: argparse.Namespace) -> Any:
    from .admin import LayoutAdmin

    return LayoutAdmin(_config(args))


def cmd_create(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        lay = admin.create_topic(args.topic, args.partitions, args.physical, args.replication_factor,
                                 hash=args.hash, settle_ms=args.settle_ms)
    _emit(args, lay.to_dict(), lambda: "created " + _layout_line(lay.to_dict()))
    return 0


def cmd_adopt(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        lay = admin.adopt(args.topic, hash=args.hash, settle_ms=args.settle_ms)
    _emit(args, lay.to_dict(), lambda: "adopted " + _layout_line(lay.to_dict()))
    return 0


def cmd_expand(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        lay = admin.expand(args.topic, args.partitions)
    _emit(args, lay.to_dict(), lambda: "expanded " + _layout_line(lay.to_dict()))
    return 0


def cmd_shrink(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        lay = admin.shrink(args.topic, args.partitions)
    _emit(args, lay.to_dict(), lambda: "shrunk " + _layout_line(lay.to_dict()))
    return 0


def cmd_retire(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        res = admin.retire(args.topic, args.group or (), delete_records=args.delete_records)
    data = {"layout": res.layout.to_dict(), "retired": sorted(res.retired),
            "still_draining": {str(k): v for k, v in sorted(res.still_draining.items())},
            "deleted_records": {str(k): v for k, v in sorted(res.deleted_records.items())}}

    def human() -> str:
        lines = [f"retired {sorted(res.retired) or 'nothing'}"]
        lines += [f"  partition {q} still draining: {why}" for q, why in sorted(res.still_draining.items())]
        lines.append(_layout_line(res.layout.to_dict()))
        return "\n".join(lines)

    _emit(args, data, human)
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        desc = admin.describe(args.topic, group=args.group)
    data = desc.to_dict()

    def human() -> str:
        lines = [_layout_line(data["layout"]), "history:"]
        for h in data["history"]:
            lines.append(f"  epoch {h['epoch']:>3} {h['op']:<7} {h['partitions']} undeleted, "
                         f"{h['physical_partitions']} physical, draining {h['draining'] or '-'} (log offset {h['offset']})")
        lines.append("lineage (partition <- split from):")
        children = [f"{p}<-{parent}" for p, parent in data["lineage"].items() if parent is not None]
        lines.append("  " + (", ".join(children) if children else "no split partitions"))
        lines.append(f"registrations: {len(data['registrations'])}")
        for r in data["registrations"][-10:]:
            gates = ", ".join(f"p{p}@{g['start']} waits {g['wait']}" for p, g in r["gates"].items()) or "no gates"
            lines.append(f"  {r['producer']} epoch {r['from_epoch']}->{r['epoch']}: {gates}")
        if data["problems"]:
            lines.append("layout log problems:")
            lines += [f"  offset {p['offset']}: {p['reason']}" for p in data["problems"]]
        if args.group:
            closed = [g for g in data["gates"] if not g["open"]]
            lines.append(f"gates for group {args.group}: {len(data['gates']) - len(closed)} open, {len(closed)} waiting")
            for g in closed:
                waits = ", ".join(f"p{q} at {w['processed']} of {w['wait']}" for q, w in g["waiting_on"].items())
                lines.append(f"  partition {g['partition']} from offset {g['start']}: waiting {g['waiting_s']:.1f} s on {waits}")
        return "\n".join(lines)

    _emit(args, data, human)
    return 0


def cmd_broker(args: argparse.Namespace) -> int:
    from .broker import EmbeddedBroker

    with EmbeddedBroker(port=args.port) as broker:
        print(broker.bootstrap_servers, flush=True)
        print(f"embedded Tansu broker running (pid {broker.pid}); Ctrl-C to stop", file=sys.stderr, flush=True)
        stop = {"now": False}

        def handler(signum: int, frame: Any) -> None:
            stop["now"] = True

        signal.signal(signal.SIGTERM, handler)
        try:
            while not stop["now"]:
                time.sleep(0.2)
                if broker._proc is None or broker._proc.poll() is not None:
                    print("broker exited", file=sys.stderr)
                    return 1
        except KeyboardInterrupt:
            pass
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main as demo_main

    return demo_main(args)


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

    sp = add("create", cmd_create, "create a topic under management")
    sp.add_argument("topic")
    sp.add_argument("--partitions", "-p", type=int, required=True, help="initial (undeleted) partitions")
    sp.add_argument("--physical", type=int, help="physical partitions to create (spares for later expansion)")
    sp.add_argument("--replication-factor", "-r", type=int, default=-1, help="default: broker default")
    sp.add_argument("--hash", choices=["murmur2", "murmur3", "crc32"], default="murmur2")
    sp.add_argument("--settle-ms", type=int, default=100, help="producer pause after registering")

    sp = add("adopt", cmd_adopt, "put an existing topic under management (no key moves)")
    sp.add_argument("topic")
    sp.add_argument("--hash", choices=["murmur2", "murmur3", "crc32"], default="murmur2",
                    help="murmur2: Java clients/librdkafka murmur2_random; crc32: librdkafka default")
    sp.add_argument("--settle-ms", type=int, default=100)

    sp = add("expand", cmd_expand, "grow the undeleted partition count")
    sp.add_argument("topic")
    sp.add_argument("partitions", type=int)

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

    sp = sub.add_parser("broker", help="run an embedded Tansu broker in the foreground")
    sp.add_argument("--port", type=int, help="default: a free port")
    sp.set_defaults(fn=cmd_broker)

    sp = sub.add_parser("demo", help="ordered vs plain clients through layout changes, on an embedded broker")
    from .demo import add_arguments

    add_arguments(sp)
    sp.set_defaults(fn=cmd_demo)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except KafkaOrderedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
