"""``procqueue batches`` and ``procqueue batch show|cancel|retry|prune``
(docs/cli.md). `cli.main` adds these parsers with
`add_parsers`; the formatting is pure functions of the records."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import msgspec

from procqueue import models
from procqueue.cli import commands, render
from procqueue.producer import workflow
from procqueue.producer.app import App

BAR_WIDTH = 24
FAILURES_SHOWN = 10
"""Failed members listed by ``batch show`` unless ``--failures N``."""
BATCH_HEADERS = ("id", "name", "state", "progress", "done", "failed", "cancelled", "total")


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """``[#########...........]  45%``."""
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {fraction * 100:3.0f}%"


def ended(info: models.BatchInfo) -> int:
    return info.done + info.failed + info.cancelled


def rate(info: models.BatchInfo, now: float) -> float | None:
    """Members ended per second since the batch started, or None before any did."""
    if info.started_at is None or not ended(info):
        return None
    until = info.finished_at.timestamp() if info.finished_at else now
    elapsed = until - info.started_at.timestamp()
    return ended(info) / elapsed if elapsed > 0 else None


def eta(info: models.BatchInfo, now: float) -> float | None:
    """Seconds until the last member ends at the current rate (None if unknown or complete)."""
    per_second = rate(info, now)
    if info.state == models.BatchState.COMPLETE or not per_second:
        return None
    return (info.total - ended(info)) / per_second


def batch_row(info: models.BatchInfo) -> list[object]:
    return [
        info.id,
        info.name,
        info.state.value,
        bar(info.fraction, 12),
        info.done,
        info.failed,
        info.cancelled,
        info.total,
    ]


def batch_document(
    info: models.BatchInfo, now: float, failures: list[models.JobInfo]
) -> dict[str, Any]:
    """``batch show --json``: the record, the rate and ETA, the failures."""
    doc: dict[str, Any] = msgspec.to_builtins(info)
    doc["rate"] = rate(info, now)
    doc["eta"] = eta(info, now)
    doc["failures"] = [
        {"id": j.id, "name": j.name, "attempts": j.attempts, "error": j.error} for j in failures
    ]
    return doc


def batch_detail(info: models.BatchInfo, now: float, failures: list[models.JobInfo]) -> str:
    per_second = rate(info, now)
    lines = [
        f"batch {info.id} {models.printable(repr(info.name))}: {info.state.value}",
        f"  {bar(info.fraction)}  {ended(info)}/{info.total} ended",
        f"  blocked {info.blocked}  pending {info.pending}  running {info.running}  "
        f"done {info.done}  "
        f"failed {info.failed}  cancelled {info.cancelled}",
        f"  rate {'-' if per_second is None else f'{per_second:.1f}/s'}  "
        f"eta {render.age(eta(info, now))}",
        f"  created {render.when(info.created_at)}  started {render.when(info.started_at)}  "
        f"finished {render.when(info.finished_at)}",
        f"  on_complete {models.printable(info.on_complete or '-')}  "
        f"on_success {models.printable(info.on_success or '-')}  "
        f"completions {info.completions}",
    ]
    if info.cancelled_at is not None:
        lines.append(f"  cancelled {render.when(info.cancelled_at)}")
    if info.meta:
        lines.append(f"  meta {models.printable(msgspec.json.encode(info.meta).decode())}")
    if info.undecodable:
        lines.append(f"  undecodable: {models.printable(info.undecodable)}")
    if failures:
        lines.append(f"failures ({len(failures)} of {info.failed} shown):")
        for job in failures:
            name, error = models.printable(job.name), render.first_line(job.error, 160)
            lines.append(f"  {job.id}  {name}  attempts {job.attempts}  {models.printable(error)}")
    return "\n".join(lines)


GRAPH_PER_LAYER = 12
"""Nodes drawn per layer by ``batch show --graph``; the rest are counted by state."""
_MARK = {
    "blocked": "..",
    "pending": "  ",
    "running": ">>",
    "reserved": ">>",
    "done": "ok",
    "failed": "XX",
    "cancelled": "--",
}


def _node(node: workflow.Node, width: int) -> str:
    mark = _MARK.get(node.state, "??")
    label = models.printable(f"#{node.id} {node.name}")
    text = f"[{mark}] {label:<{width}} {node.state:<9}"
    if node.after:
        shown = " ".join(f"#{p}" for p in node.after[:6])
        more = f" +{len(node.after) - 6}" if len(node.after) > 6 else ""
        text += f" <- {shown}{more}"
    return text.rstrip()


def graph_text(info: models.BatchInfo, graph: workflow.Graph) -> str:
    """``batch show --graph``: the members layer by layer, top (no
    dependency in the batch) to bottom, each with its id, name, state and
    what it waits for (``<- #id``); wide layers are cut to
    `GRAPH_PER_LAYER` nodes and the rest counted by state."""
    total = sum(len(layer) for layer in graph.layers)
    lines = [
        f"batch {info.id} {models.printable(repr(info.name))}: {info.state.value}, "
        f"{total} members in {len(graph.layers)} layer{'' if len(graph.layers) == 1 else 's'}"
        + ("" if graph.is_workflow else " (no member depends on another)")
    ]
    width = min(48, max((len(f"#{n.id} {n.name}") for ly in graph.layers for n in ly), default=8))
    for depth, layer in enumerate(graph.layers, 1):
        if depth > 1:
            lines.append("  |")
        lines.append(f"layer {depth}: {len(layer)} member{'' if len(layer) == 1 else 's'}")
        for node in layer[:GRAPH_PER_LAYER]:
            lines.append("  " + _node(node, width))
        rest = layer[GRAPH_PER_LAYER:]
        if rest:
            counts: dict[str, int] = {}
            for node in rest:
                counts[node.state] = counts.get(node.state, 0) + 1
            summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
            lines.append(f"  ... {len(rest)} more: {summary}")
    if graph.partial:
        lines.append(f"(only the first {workflow.NODES_MAX} members are drawn)")
    lines.append("[ok] done  [XX] failed  [--] cancelled  [>>] running  [..] blocked  [  ] pending")
    return "\n".join(lines)


def graph_document(graph: workflow.Graph) -> dict[str, Any]:
    """``batch show --graph --json``."""
    nodes = [msgspec.to_builtins(n) for layer in graph.layers for n in layer]
    return {"batch": graph.batch_id, "nodes": nodes, "edges": graph.edges, "partial": graph.partial}


def cmd_batches(args: argparse.Namespace, app: App) -> int:
    found = app.batches(name=args.name, state=args.state, limit=args.limit)
    if args.json:
        for info in found:
            print(msgspec.json.encode(info).decode())
    elif found:
        print(render.table(BATCH_HEADERS, [batch_row(i) for i in found]))
    else:
        print("no batches", file=sys.stderr)
    return 0


def cmd_batch(args: argparse.Namespace, app: App) -> int:
    action: Callable[[argparse.Namespace, App], int] = args.batch_run
    return action(args, app)


def shows_only(args: argparse.Namespace) -> bool:
    """Whether this ``batch`` command only reads (``batch show``)."""
    return bool(getattr(args, "batch_run", None) is _show)


def _show(args: argparse.Namespace, app: App) -> int:
    info = app.batch_info(args.id)
    if args.graph:
        graph = workflow.read(app, info.id, app.batch_results(info.id, page=1000))
        if args.json:
            print(msgspec.json.encode(graph_document(graph)).decode())
        else:
            print(graph_text(info, graph))
        return 0
    failures = list(_first(app, info.id, args.failures))
    now = app.clock.now()
    if args.json:
        print(msgspec.json.encode(batch_document(info, now, failures)).decode())
    else:
        print(batch_detail(info, now, failures))
    return 0


def _first(app: App, id: int, n: int) -> list[models.JobInfo]:
    found: list[models.JobInfo] = []
    if n <= 0:
        return found
    for job in app.batch_results(id, state="failed", page=n):
        found.append(job)
        if len(found) >= n:
            break
    return found


def _cancel(args: argparse.Namespace, app: App) -> int:
    n = app.cancel_batch(args.id)
    print(f"batch {args.id} cancelled: {n} members cancelled or being stopped")
    return 0


def _retry(args: argparse.Namespace, app: App) -> int:
    n = app.retry_batch(args.id)
    print(f"batch {args.id}: {n} failed members will run again")
    return 0


def _prune(args: argparse.Namespace, app: App) -> int:
    if (args.id is None) == (args.older_than is None):
        raise commands.UsageError("batch prune takes an ID or --older-than DAYS")
    if args.id is not None:
        app.prune_batches(args.id)
        print(f"batch {args.id} pruned with its members")
    else:
        n = app.prune_batches(older_than=args.older_than * 86400)
        print(f"{n} batches pruned with their members")
    return 0


def add_parsers(
    command: Callable[[str, str, Callable[..., int]], argparse.ArgumentParser],
    common: argparse.ArgumentParser,
) -> None:
    """Adds ``batches`` and ``batch ACTION`` through cli's `command` helper."""
    p = command("batches", "batches with progress and counts, newest first", cmd_batches)
    p.add_argument("--state", choices=[s.value for s in models.BatchState])
    p.add_argument("--name", metavar="N")
    p.add_argument("--limit", type=render.positive_int, default=50, metavar="N")
    p.add_argument("--json", action="store_true", help="one JSON object a line")

    p = command("batch", "one batch: show, cancel, retry its failures, prune", cmd_batch)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help: str, run: Callable[..., int]) -> argparse.ArgumentParser:
        a = actions.add_parser(
            name, help=help, description=help, parents=[common], allow_abbrev=False
        )
        a.set_defaults(batch_run=run)
        return a

    a = action("show", "counts, progress bar, rate, ETA and failures", _show)
    a.add_argument("id", type=int, metavar="ID")
    a.add_argument("--json", action="store_true")
    a.add_argument(
        "--failures", type=int, default=FAILURES_SHOWN, metavar="N", help="failed members listed"
    )
    a.add_argument(
        "--graph", action="store_true", help="its members by dependency layer, with their states"
    )
    action("cancel", "cancel its members (running ones are killed)", _cancel).add_argument(
        "id", type=int, metavar="ID"
    )
    action("retry", "run its failed members again", _retry).add_argument(
        "id", type=int, metavar="ID"
    )
    a = action("prune", "delete a complete batch (or old ones) with its members", _prune)
    a.add_argument("id", type=int, nargs="?", metavar="ID")
    a.add_argument("--older-than", type=render.non_negative, metavar="DAYS")
