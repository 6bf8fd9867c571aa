"""Output of the ``kafka-ordered`` command line: the only module of the
package that prints.

:func:`emit` writes a command's result as JSON (``--json``) or as the text a
``*_text`` function renders; :func:`error` and :func:`note` write to stderr.
The ``*_text`` functions are pure: they take result objects (or their
``to_dict()``) and return text.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
import textwrap
from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Mapping, Optional, Sequence, TextIO

if TYPE_CHECKING:  # pragma: no cover - types only
    from ..admin import ExpansionPlan, ExpansionResult, HealResult, RetireResult
    from ..layout import Layout
    from ..placement import HealPlan, PlacementPlan

__all__ = [
    "emit",
    "error",
    "failure",
    "usage_error",
    "traceback",
    "log_handler",
    "version_text",
    "note",
    "out",
    "progress_stream",
    "layout_line",
    "elections_lines",
    "created_text",
    "expanded_text",
    "expansion_plan_text",
    "heal_dry_run_text",
    "healed_text",
    "elections_text",
    "retired_text",
    "description_text",
    "topics_text",
    "group_lines",
    "demo_table",
    "autoscale_event",
    "autoscale_event_text",
    "autoscaler_lines",
]


# -- writing


def emit(as_json: bool, data: Any, text: Callable[[], str], *, sort_keys: bool = True) -> None:
    """Print ``data`` as indented JSON (keys sorted unless ``sort_keys=False``)
    when ``as_json``, else the text ``text()`` renders (called only then), on
    stdout."""
    if as_json:
        print(json.dumps(data, indent=2, sort_keys=sort_keys, default=str))
    else:
        print(text())


def out(line: str) -> None:
    """Print ``line`` on stdout and flush."""
    print(line, flush=True)


def note(line: str) -> None:
    """Print ``line`` on stderr and flush (progress and notices)."""
    print(line, file=sys.stderr, flush=True)


def progress_stream() -> TextIO:
    """Where long-running commands (``demo``) write progress lines: stderr."""
    return sys.stderr


def error(message: str) -> None:
    """Print ``error: message`` on stderr (one line: newlines in ``message``
    become spaces)."""
    print("error: " + " ".join(message.split("\n")), file=sys.stderr)


def failure(as_json: bool, kind: str, message: str, code: Optional[int], *, text: Optional[str] = None) -> None:
    """A command failed: ``{"error": {"type": kind, "message": message,
    "code": code}}`` on stdout when ``as_json``, else ``error: text`` (default
    ``message``) on stderr."""
    if as_json:
        print(json.dumps({"error": {"type": kind, "message": message, "code": code}}, indent=2))
    else:
        error(text if text is not None else message)


def usage_error(as_json: bool, usage: str, prog: str, message: str) -> None:
    """Bad usage: the JSON error (type ``UsageError``) on stdout when
    ``as_json``, else argparse's usage line and ``prog: error: message`` on
    stderr."""
    if as_json:
        print(json.dumps({"error": {"type": "UsageError", "message": message, "code": None}}, indent=2))
    else:
        print(f"{usage.rstrip()}\n{prog}: error: {message}", file=sys.stderr)


def traceback(exc: BaseException) -> None:
    """Print ``exc``'s traceback on stderr (``--debug``)."""
    import traceback as tb

    tb.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)


def log_handler() -> logging.Handler:
    """A handler writing log records to stderr with time, level and logger (``--debug``)."""
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    return h


# -- text


def _ids(ps: Iterable[int]) -> str:
    ps = sorted(ps)
    return ", ".join(map(str, ps)) if ps else "-"


def _capacity_text(cap: Mapping[int, Optional[int]]) -> str:
    return ", ".join(f"{b}: {'unlimited' if c is None else c}" for b, c in sorted(cap.items())) or "not read"


def version_text(info: Mapping[str, Any]) -> str:
    """``kafka-ordered --version``: one line."""
    return (f"kafka-ordered {info['kafka_ordered']} (Python {info['python']}, confluent-kafka "
            f"{info['confluent_kafka']}, librdkafka {info['librdkafka']}, "
            f"C speed-ups {'on' if info['speedups'] else 'off'})")


def layout_line(d: Mapping[str, Any]) -> str:
    """One line for a layout's ``to_dict()``: epoch, counts, hash, draining, spares."""
    draining = d.get("draining") or []
    spares = [p for p in range(d["partitions"], d["physical_partitions"]) if p not in draining]
    return (f"{d['topic']}: epoch {d['epoch']}, {d['partitions']} undeleted of {d['physical_partitions']} physical "
            f"(initial {d['initial_partitions']}, hash {d['hash']}), draining {draining or '-'}, spares {spares or '-'}")


def topics_text(data: Mapping[str, Any]) -> str:
    """``list``: one layout line per managed topic."""
    if not data["topics"]:
        return f"no managed topics in layout log {data['layout_topic']}"
    return "\n".join(layout_line(t) for t in data["topics"])


def elections_lines(elections: Mapping[str, Mapping[str, Any]]) -> List[str]:
    """One indented line per election (partition -> ``ElectionResult.to_dict()``)."""
    return [f"  partition {p}: {e['status']}" + (f" ({e['error']}: {e['message']})" if e["error"] else "")
            for p, e in elections.items()]


def created_text(layout: Layout, placed: Optional[PlacementPlan], topic: str) -> str:
    """``kafka-ordered create``: the new layout, and how to heal an
    under-replicated creation."""
    lines = ["created " + layout_line(layout.to_dict())]
    if placed is not None and placed.missing:
        lines.append(f"under-replicated: partitions {sorted(placed.missing)} have "
                     f"{placed.replication_factor - max(placed.missing.values())} of {placed.replication_factor} "
                     f"replicas; once brokers return run `kafka-ordered heal {topic} "
                     f"--replication-factor {placed.replication_factor}`")
    return "\n".join(lines)


def expanded_text(res: ExpansionResult, elections: Mapping[str, Mapping[str, Any]], elect_leaders: bool) -> str:
    """``kafka-ordered expand``: the new layout, created partitions, elections."""
    lines = ["expanded " + layout_line(res.layout.to_dict())]
    if res.plan.new_partitions:
        lines.append(f"created partitions {res.plan.new_partitions}")
    if elect_leaders:
        lines.append("preferred leader elections:")
        lines += elections_lines(elections)
    return "\n".join(lines)


def expansion_plan_text(plan: ExpansionPlan) -> str:
    """A human-readable summary of an :class:`~kafka_ordered.admin.ExpansionPlan`
    (``kafka-ordered plan``)."""
    lines = [
        f"{plan.topic}: expand {plan.current.partitions} -> {plan.target.partitions} undeleted partitions, "
        f"physical {plan.physical_partitions} -> {plan.target.physical_partitions}",
        f"reuses draining partitions: {_ids(plan.reused_draining)}",
        f"reuses spare partitions: {_ids(plan.reused_spares)}",
    ]
    lines.insert(1, f"spare partitions now: {len(plan.spares)} ({_ids(plan.spares)})")
    if plan.placement is None:
        lines.append("creates no physical partitions (no CreatePartitions needed)")
    else:
        how = "explicit replica assignment" if plan.explicit_assignment else "placed by the broker (one live broker)"
        lines.append(f"creates partitions {_ids(plan.new_partitions)} ({how}; CreatePartitions "
                     f"{_CREATE_PARTITIONS[plan.create_partitions]}):")
        lines += ["  " + line for line in plan.placement.describe().splitlines()]
    lines.append(f"capacity left per broker: {_capacity_text(plan.remaining_capacity)}")
    lines.append("expand would succeed" if plan.will_succeed else f"expand would FAIL: {plan.problem}")
    return "\n".join(lines)


_CREATE_PARTITIONS = {
    "not_needed": "not needed",
    "supported": "validated by the broker",
    "unsupported": "NOT supported by the broker",
    "refused": "refused by the broker",
    "not_checked": "not checked",
}


def heal_dry_run_text(plan: HealPlan) -> str:
    """``kafka-ordered heal --dry-run``: the plan and its reassignment JSON."""
    text = plan.describe()
    if plan.target:
        text += "\nreassignment JSON (kafka-reassign-partitions.sh):\n" + plan.to_reassignment_json()
    return text


def healed_text(res: HealResult, elections: Mapping[str, Mapping[str, Any]], elect_leaders: bool) -> str:
    """``kafka-ordered heal``: the plan, started reassignments, elections."""
    lines = [res.plan.describe()]
    if res.reassignments:
        synced = sorted(p for p, ok in res.in_sync.items() if ok)
        behind = sorted(p for p, ok in res.in_sync.items() if not ok)
        lines.append(f"reassigned partitions {sorted(res.reassignments)}; in sync: {synced or '-'}"
                     + (f"; still catching up in the background: {behind}" if behind else ""))
    if elect_leaders and res.elections:
        lines.append("preferred leader elections:")
        lines += elections_lines(elections)
    return "\n".join(lines)


def elections_text(topic: str, elections: Mapping[str, Mapping[str, Any]]) -> str:
    """``kafka-ordered elect-leaders``: one line per partition."""
    return "\n".join([f"{topic}: preferred leader elections"] + elections_lines(elections))


def upgraded_text(data: Mapping[str, Any]) -> str:
    """``kafka-ordered upgrade-protocol``."""
    if data["changed"]:
        return (f"layout log {data['layout_topic']} now speaks ordering protocol {data['protocol']} "
                f"(protocol record at offset {data['offset']}); start the upgraded clients")
    return f"layout log {data['layout_topic']} already speaks ordering protocol {data['protocol']}: nothing changed"


def retired_text(res: RetireResult) -> str:
    """``kafka-ordered retire``: retired partitions, why others still drain, the layout."""
    lines = [f"retired {sorted(res.retired) or 'nothing'}"]
    lines += [f"  partition {q} still draining: {why}" for q, why in sorted(res.still_draining.items())]
    lines.append(layout_line(res.layout.to_dict()))
    return "\n".join(lines)


def gate_text(partition: int, start: int, wait: Mapping[Any, int]) -> str:
    """One gate of a registration: ``p4 from offset 0 waits for p0 to reach offset 1``."""
    waits = " and ".join(f"p{q} to reach offset {w}" for q, w in sorted(wait.items(), key=lambda i: int(i[0])))
    return f"p{partition} from offset {start} waits for {waits or 'nothing'}"


def description_text(data: Mapping[str, Any], group: Optional[str]) -> str:
    """``kafka-ordered describe``, from ``TopicDescription.to_dict()``; gates
    only when described for ``group``."""
    lines = [layout_line(data["layout"]), "history:"]
    for h in data["history"]:
        lines.append(f"  epoch {h['epoch']:>3} {h['op']:<7} {h['partitions']} undeleted, "
                     f"{h['physical_partitions']} physical, draining {h['draining'] or '-'} (log offset {h['offset']})")
    lines.append("lineage (partition <- split from):")
    children = [f"{p}<-{parent}" for p, parent in data["lineage"].items() if parent is not None]
    lines.append("  " + (", ".join(children) if children else "no split partitions"))
    lines.append(f"registrations: {len(data['registrations'])}")
    for r in data["registrations"][-10:]:
        gates = "; ".join(gate_text(int(p), g["start"], g["wait"]) for p, g in r["gates"].items()) or "no gates"
        lines.append(f"  {r['producer']} epoch {r['from_epoch']}->{r['epoch']}: {gates}")
    lines += replication_lines(data)
    if data["problems"]:
        lines.append("layout log problems:")
        lines += [f"  offset {p['offset']}: {p['reason']}" for p in data["problems"]]
    lines += autoscaler_lines(data.get("autoscaler"))
    if group:
        lines += group_lines(data, group)
    return "\n".join(lines)


def replication_lines(data: Mapping[str, Any]) -> List[str]:
    """The replication part of ``describe``: the factor, and the partitions
    lacking replicas or with replicas out of sync (a degraded topic)."""
    reps = data.get("replication") or []
    if not reps:
        return []
    bad = [r for r in reps if r["degraded"]]
    if not bad:
        return [f"replication: factor {data['replication_factor']}, every replica in sync"]
    lines = [f"replication: factor {data['replication_factor']}, DEGRADED on {len(bad)} of {len(reps)} partitions "
             "(kafka-ordered heal adds missing replicas):"]
    for r in bad:
        lines.append(f"  p{r['partition']}: replicas {r['replicas']}, in sync {r['isr']}, missing {r['missing']}")
    return lines


def autoscaler_lines(status: Optional[Mapping[str, Any]]) -> List[str]:
    """The autoscaler part of ``describe``: who acts and its last decision."""
    if status is None:
        return ["autoscaler: none has written a status"]
    lines = [f"autoscaler: {status['autoscaler_id']} (host {status['host']}, pid {status['pid']}), "
             f"status at {_wall(status['time'])}"]
    d = status["decision"]
    if d is not None:
        lines.append(f"  last decision at {_wall(d['time'])}: {_decision_words(d)}")
    return lines


def _decision_words(d: Mapping[str, Any]) -> str:
    what = {"grow": f"grow {d['partitions']} -> {d['partitions_to']}",
            "shrink": f"shrink {d['partitions']} -> {d['partitions_to']}",
            "retire": f"retire {','.join(map(str, d['retire']))}"}.get(d["kind"], f"hold at {d['partitions']}")
    return f"{what} (epoch {d['epoch']}): {d['reason']}"


def autoscale_event_text(line: Mapping[str, Any]) -> str:
    """One line of ``kafka-ordered autoscale`` output."""
    role = "dry run" if line["dry_run"] else "leader" if line["leader"] else "standby"
    head = f"{_wall(line['time'])} {line['topic']} [{role}]"
    if line["event"] == "decision":
        return f"{head} {_decision_words(line['decision'])}"
    words = {"started": f"started as {line['autoscaler_id']}", "stopped": "stopped",
             "leader": "this autoscaler acts now", "standby": "another autoscaler acts; this one stands by"}
    return f"{head} {words[line['event']]}"


def autoscale_event(as_json: bool, line: Mapping[str, Any]) -> None:
    """Print one ``autoscale`` event: a JSON line with ``as_json``, else text; flushed."""
    print(json.dumps(line, sort_keys=True, default=str) if as_json else autoscale_event_text(line), flush=True)


def _wall(ts: Optional[float]) -> str:
    if ts is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _owner(o: Optional[Mapping[str, Any]]) -> str:
    return "-" if o is None else f"{o['member_id']} (client {o['client_id']}, host {o['host']})"


def _table(rows: Sequence[Sequence[str]]) -> List[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def group_lines(data: Mapping[str, Any], group: str) -> List[str]:
    """The group part of ``describe --group``: the group's state and members,
    one row per partition as ``kafka-consumer-groups --describe`` shows it,
    then every closed gate with since when, its sources' committed offsets,
    lag and owners."""
    m = data["membership"]
    lines = [f"group {group}: state {m['state'] or 'unknown'}, {len(m['members'])} member(s)"]
    if m["note"]:
        lines.append(f"  {m['note']}")
    lines.append("partitions (as kafka-consumer-groups --describe):")
    rows = [["PARTITION", "ROLE", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]]
    for p in data["partitions"]:
        o = p["owner"]
        rows.append([str(p["partition"]), p["role"], str(p["committed"]) if p["committed"] >= 0 else "-",
                     str(p["log_end"]), "-" if p["lag"] is None else str(p["lag"]),
                     o["member_id"] if o else "-", o["host"] if o else "-", o["client_id"] if o else "-"])
    lines += _table(rows)
    closed = [g for g in data["gates"] if not g["open"]]
    lines.append(f"gates for group {group}: {len(data['gates']) - len(closed)} open, {len(closed)} waiting")
    for g in closed:
        what = (f"holding {g['held_records']} record(s), held since" if g["state"] == "holding"
                else "closed (no records behind it yet) since")
        lines.append(f"  partition {g['partition']} from offset {g['start']}: {what} {_wall(g['held_since'])} "
                     f"({g['waiting_s']:.1f} s)")
        for q, src in g["sources"].items():
            committed = src["committed"] if src["committed"] >= 0 else "none"
            lines.append(f"    waits for partition {q} >= {src['wait']}: committed {committed}, lag {src['lag']}, "
                         f"owner {_owner(src['owner'])}")
            if src.get("open_transaction") is not None:
                lines.append(f"      behind an open transaction: read_committed readers stop at offset "
                             f"{src['open_transaction']} of partition {q} until it ends")
    return lines


_DEMO_LABELS = {"produced_acked": "produced (acked)"}
#: What the demo table's rows mean (printed under it).
DEMO_NOTES = (
    "violations: records a group received after a later record of the same key and producer.",
    "duplicates: records received more than once. Delivery is at-least-once: a killed consumer (SIGKILL) or a "
    "rebalance makes the group redeliver what was processed after the last commit. Not a loss, not a reordering.",
    "missing: acknowledged records no consumer received.",
    "gate stall s: seconds partitions spent held at gates, summed over every partition and consumer (so it can "
    "exceed the run's duration). The price of order: a moved key's new partition waits until the group has "
    "processed its old partition up to the layout change.",
)


def demo_table(rows: Sequence[Mapping[str, Any]], violations: Sequence[str] = ()) -> str:
    """``kafka-ordered demo``: one column per run (``ScenarioResult.row()``),
    then the given violation lines."""
    keys = list(rows[0])
    labels = {k: _DEMO_LABELS.get(k, k.replace("_", " ")) for k in keys}
    width = max(len(label) for label in labels.values())
    lines = [f"{'':<{width}}  " + "  ".join(f"{r['clients']:>10}" for r in rows)]
    for k in keys[1:]:
        lines.append(f"{labels[k]:<{width}}  " + "  ".join(f"{r[k]!s:>10}" for r in rows))
    lines += list(violations)
    lines.append("")
    lines += [textwrap.fill(note, 100, subsequent_indent="  ") for note in DEMO_NOTES]
    return "\n".join(lines)


def adopted_text(res: Any) -> str:
    """``adopt``: the layout, and the hash with where it came from."""
    how = (f"hash {res.hash} detected from {res.records} keyed record(s)" if res.detected
           else f"hash {res.hash} as given")
    return f"adopted {layout_line(res.layout.to_dict())}\n{how}"
