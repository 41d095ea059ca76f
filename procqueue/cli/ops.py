"""The operators' commands: ``supervisors``, ``queues`` with
limits, and ``retry``/``cancel`` by id or by filter. The parser is in
`cli.main`; docs/cli.md documents both."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import TypedDict

import msgspec

from procqueue import models
from procqueue.cli import render
from procqueue.cli.commands import UsageError
from procqueue.producer.app import App


def cmd_supervisors(args: argparse.Namespace, app: App) -> int:
    found = app.supervisors()
    if args.json:
        for s in found:
            print(msgspec.json.encode(s).decode())
    elif found:
        now = dt.datetime.fromtimestamp(app.clock.now(), tz=dt.UTC)
        rows = [render.supervisor_row(s, now) for s in found]
        print(render.table(render.SUPERVISOR_HEADERS, rows))
    else:
        print("no supervisors", file=sys.stderr)
    return 0


def lists_only(args: argparse.Namespace) -> bool:
    """Whether this ``queues`` command only reads (the listing)."""
    return getattr(args, "action", None) not in ("pause", "resume", "limit")


_SAID = {
    ("limit", True): "queue {q}: limit cleared (no limit; supervisors keep it so)",
    ("limit", False): "queue {q}: at most {value} running at once, cluster-wide",
    ("rate", True): "queue {q}: rate cleared (no rate)",
    ("rate", False): "queue {q}: at most {value} starts, cluster-wide",
}
"""What `queues limit` and `queues rate` say, by (action, cleared)."""


def cmd_queues(args: argparse.Namespace, app: App) -> int:
    create = bool(getattr(args, "create", False))
    if args.action == "pause":
        app.pause(args.queue, create=create)
        print(f"queue {args.queue} paused: no new claims from it")
        return 0
    if args.action == "resume":
        app.resume(args.queue)
        print(f"queue {args.queue} resumed")
        return 0
    if args.action in ("limit", "rate"):
        value = getattr(args, args.action)
        if args.clear == (value is not None):
            wanted = "N" if args.action == "limit" else "N/PERIOD"
            raise UsageError(f"queues {args.action} takes either {wanted} or --clear")
        if args.action == "limit":
            app.set_limit(args.queue, value, create=create)
        else:
            app.set_rate(args.queue, value, create=create)
        print(_SAID[args.action, value is None].format(q=args.queue, value=value))
        return 0
    queues = app.queues()
    if getattr(args, "json", False):
        for q in queues:
            print(msgspec.json.encode(q).decode())
    elif queues:
        print(render.table(render.QUEUE_HEADERS, [render.queue_row(q) for q in queues]))
    else:
        print("no queues", file=sys.stderr)
    return 0


class Where(TypedDict):
    state: str | None
    queue: str | None
    name: str | None
    since: dt.datetime | None


def _filters(args: argparse.Namespace, app: App) -> Where | None:
    """The filter flags given (None: none given, the command acts on ID)."""
    try:
        since = None if args.since is None else render.since(args.since, app.clock.now())
    except argparse.ArgumentTypeError as exc:
        raise UsageError(str(exc)) from None
    given = Where(state=args.state, queue=args.queue, name=args.name, since=since)
    if args.id is not None:
        if any(v is not None for v in given.values()) or args.yes:
            raise UsageError("give a job ID or filters (--state/--queue/--name/--since), not both")
        return None
    if all(v is None for v in given.values()):
        raise UsageError("give a job ID, or at least one of --state, --queue, --name, --since")
    return given


def _confirmed(verb: str, n: int, args: argparse.Namespace) -> bool:
    """--yes, or the operator answers y to the count."""
    if args.yes:
        return True
    print(f"{n} job{'' if n == 1 else 's'} match; {verb} them? [y/N] ", end="", file=sys.stderr)
    sys.stderr.flush()
    answer = sys.stdin.readline() if sys.stdin is not None else ""
    return answer.strip().lower() in ("y", "yes")


def _plural(n: int) -> str:
    return f"{n} job{'' if n == 1 else 's'}"


def cmd_cancel(args: argparse.Namespace, app: App) -> int:
    where = _filters(args, app)
    if where is None:
        state = app.cancel(args.id)
        if state == models.JobState.CANCELLED:
            print(f"job {args.id} cancelled")
        else:
            print(f"job {args.id} is {state}: cancel requested, its supervisor will stop it")
        return 0
    if (code := _stop_before("cancel", "cancelled", where, args, app)) is not None:
        return code
    cancelled, stopping = app.cancel_where(**where)
    print(f"{_plural(cancelled)} cancelled, {_plural(stopping)} running being stopped")
    return 0


def cmd_retry(args: argparse.Namespace, app: App) -> int:
    where = _filters(args, app)
    if where is None:
        app.retry(args.id)
        print(f"job {args.id} is pending again, attempts reset")
        return 0
    if (code := _stop_before("retry", "retried", where, args, app)) is not None:
        return code
    print(f"{_plural(app.retry_where(**where))} pending again, attempts reset")
    return 0


def _stop_before(
    verb: str, done: str, where: Where, args: argparse.Namespace, app: App
) -> int | None:
    """None when a bulk `verb` over `where` goes ahead: some job matches and
    the operator said yes (or passed --yes); else, having said why not, the
    exit code to end with."""
    n = app.count_where(verb, **where)
    if n == 0:
        print(f"no jobs match: nothing to {verb}")
        return 0
    if not _confirmed(verb, n, args):
        print(f"not confirmed: nothing {done} (pass --yes to skip the question)")
        return 1
    return None


def add_filters(p: argparse.ArgumentParser, states: tuple[str, ...]) -> None:
    """``ID`` or ``--state --queue --name --since --yes`` (retry and cancel)."""
    p.add_argument("id", type=int, nargs="?", metavar="ID")
    p.add_argument("--state", choices=states, help="by filter: only jobs in this state")
    p.add_argument("--queue", metavar="Q", help="by filter: only jobs of this queue")
    p.add_argument("--name", metavar="N", help="by filter: only jobs of this name")
    p.add_argument(
        "--since", metavar="T", help="by filter: enqueued at or after T (ISO time, or 30m, 2h, 1d)"
    )
    p.add_argument("--yes", action="store_true", help="act without asking")
