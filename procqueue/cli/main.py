"""The ``procqueue`` command line (DESIGN.md sections 3 and 4; docs/cli.md).

Exit codes: 0 ok; 1 the operation failed (unknown id, job not in a state
that allows it, the database failed, the job module could not be loaded);
2 usage error (bad option or value, bad ``--args``, arguments that don't
bind, unknown job name, malformed DSN, setting or config file); 130
interrupted. Every error is one line on stderr starting ``procqueue: error:``.

This module is the parser and the entry point; `cli.commands`, `cli.ops`,
`cli.batches` and `cli.web` hold what each command does, `procqueue.config`
the config file and environment.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from procqueue import config, errors, models, rates
from procqueue.cli import batches, render
from procqueue.cli.commands import (
    LoadError,
    UsageError,
    cmd_cron,
    cmd_enqueue,
    cmd_jobs,
    cmd_migrate,
    cmd_prune,
    cmd_show,
    cmd_stats,
    cmd_supervise,
)
from procqueue.cli.ops import (
    add_filters,
    cmd_cancel,
    cmd_queues,
    cmd_retry,
    cmd_supervisors,
    lists_only,
)
from procqueue.cli.web import cmd_dashboard
from procqueue.producer.app import App

__all__ = ["LoadError", "UsageError", "build_parser", "main"]

log = logging.getLogger("procqueue.cli")

NO_STORE = frozenset({"supervise", "enqueue", "migrate", "cron", "dashboard"})
"""Commands that open the database themselves, or not at all."""


class _Parser(argparse.ArgumentParser):
    """Usage errors become one line, not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def cmd_demo(args: argparse.Namespace, extra: list[str]) -> int:
    try:
        demo: Any = importlib.import_module("procqueue.demo")
    except ModuleNotFoundError as exc:
        if exc.name != "procqueue.demo":
            raise
        raise LoadError("the demo is not available in this version of procqueue") from None
    parser = _Parser(prog="procqueue demo", description=DEMO_HELP)
    demo.add_arguments(parser)
    return int(demo.main(parser.parse_args(extra)))


# -- the parser ----------------------------------------------------------------

DEMO_HELP = "run a self-contained demo on an embedded SQLite file"
LOG_LEVELS = ("debug", "info", "warning", "error")


def _rate(text: str) -> str:
    try:
        return rates.parse_rate(text).text
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (docs/cli.md documents every part of it)."""
    dsn_help = "database (default: $PROCQUEUE_DSN, the config file, sqlite:///procqueue.db)"
    config_help = "config file (default: $PROCQUEUE_CONFIG, ./procqueue.toml, ./pyproject.toml)"
    parser: argparse.ArgumentParser = _Parser(
        prog="procqueue", description="A durable, process-isolated job queue.", allow_abbrev=False
    )
    parser.add_argument("--dsn", default=None, help=dsn_help)
    parser.add_argument("--config", default=None, metavar="PATH", help=config_help)
    common = _Parser(add_help=False, allow_abbrev=False)
    common.add_argument("--dsn", default=argparse.SUPPRESS, help=dsn_help)
    common.add_argument("--config", default=argparse.SUPPRESS, metavar="PATH", help=config_help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str, run: Callable[..., int]) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, parents=[common], allow_abbrev=False)
        p.set_defaults(run=run)
        return p

    p = sub.add_parser("demo", help=DEMO_HELP, add_help=False)
    p.set_defaults(run=None)

    p = command("supervise", "run the jobs of MODULE in child processes", cmd_supervise)
    _supervise_options(p)

    p = command("enqueue", "enqueue job NAME (module.qualname); prints its id", cmd_enqueue)
    p.add_argument("name", metavar="NAME")
    p.add_argument(
        "--args", metavar="JSON", help="arguments: a JSON object, or a list (positional)"
    )
    p.add_argument("--key", metavar="K", help="idempotency key")
    p.add_argument(
        "--delay", type=render.non_negative, metavar="S", help="run no sooner than S from now"
    )
    p.add_argument("--queue", metavar="Q")
    p.add_argument("--priority", type=int, metavar="P", help="higher runs first")
    p.add_argument("--serial-key", metavar="K", help="one job with this key runs at a time")
    p.add_argument(
        "--after",
        type=render.id_list,
        metavar="ID,ID",
        help="blocked until these jobs end; cancelled if one fails, unless --allow-failure",
    )
    p.add_argument(
        "--allow-failure",
        action="store_true",
        default=None,
        help="with --after: run once they ended, whatever their states",
    )
    p.add_argument("--app", metavar="MODULE[:APP]", help="where NAME is registered")

    p = command("jobs", "list jobs, newest first", cmd_jobs)
    p.add_argument("--state", choices=[s.value for s in models.JobState])
    p.add_argument("--queue", metavar="Q")
    p.add_argument("--name", metavar="N")
    p.add_argument("--limit", type=render.positive_int, default=100, metavar="N")
    p.add_argument("--json", action="store_true", help="one JSON object a line")

    p = command("show", "one job, every field", cmd_show)
    p.add_argument("id", type=int, metavar="ID")
    p.add_argument("--json", action="store_true")

    add_filters(
        command("cancel", "cancel a job, or every job matching filters", cmd_cancel),
        ("blocked", "pending", "running"),
    )
    add_filters(
        command("retry", "run a failed or cancelled job again (or all matching)", cmd_retry),
        ("failed", "cancelled"),
    )

    p = command("stats", "counts per queue and state", cmd_stats)
    p.add_argument("--json", action="store_true")

    p = command("prune", "delete old finished jobs", cmd_prune)
    p.add_argument("--older-than", type=render.non_negative, default=7.0, metavar="DAYS")
    p.add_argument("--failed", action="store_true", help="failed jobs too")

    p = command("queues", "queues with limits, paused flag and counts", cmd_queues)
    p.add_argument("--json", action="store_true", help="one JSON object a line")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    for action, text in (
        ("pause", "stop new claims from Q"),
        ("resume", "claim from Q again"),
        ("limit", "set (N) or clear (--clear) Q's cluster-wide limit"),
        ("rate", "set (N/s, N/m, N/h) or clear (--clear) Q's cluster-wide start rate"),
    ):
        a = actions.add_parser(
            action, help=text, description=text, parents=[common], allow_abbrev=False
        )
        a.add_argument("queue", metavar="Q")
        if action == "limit":
            a.add_argument("limit", type=render.positive_int, nargs="?", metavar="N")
            a.add_argument("--clear", action="store_true", help="no limit")
        if action == "rate":
            a.add_argument("rate", type=_rate, nargs="?", metavar="N/PERIOD")
            a.add_argument("--clear", action="store_true", help="no rate")
        if action != "resume":
            a.add_argument("--create", action="store_true", help="even if Q has no jobs yet")

    p = command(
        "supervisors", "live supervisors: host, pid, queues, busy, last seen", cmd_supervisors
    )
    p.add_argument("--json", action="store_true", help="one JSON object a line")

    p = command("cron", "the cron schedules of MODULE and their next fire times", cmd_cron)
    p.add_argument("app", metavar="MODULE[:APP]", help="module defining the App (cwd importable)")
    p.add_argument("--json", action="store_true", help="one JSON object a line")

    p = command("dashboard", "serve the web dashboard", cmd_dashboard)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=render.port, default=8040, metavar="P", help="(8040)")
    p.add_argument("--token", metavar="T", help="access token (default $PROCQUEUE_DASHBOARD_TOKEN)")

    batches.add_parsers(command, common)  # batches, batch show|cancel|retry|prune

    command("migrate", "create or upgrade the schema", cmd_migrate)
    return parser


def _supervise_options(p: argparse.ArgumentParser) -> None:
    """supervise's options; each defaults to None so the config file and the
    environment can fill it (see procqueue.config)."""
    p.add_argument(
        "app",
        metavar="MODULE[:APP]",
        nargs="?",
        help="module defining the App (cwd importable); with --django, by default the "
        "App of the TASKS backend (procqueue.contrib.django.app)",
    )
    p.add_argument(
        "--django",
        action="store_true",
        help="set up Django (django.setup()) before MODULE is imported, here and in every "
        "child, and run Django tasks by import path",
    )
    p.add_argument(
        "--settings", metavar="MODULE", help="Django settings (default $DJANGO_SETTINGS_MODULE)"
    )
    p.add_argument(
        "--workers", type=render.positive_int, help="child processes (default: CPU count)"
    )
    p.add_argument("--queues", type=render.queue_list, help="claim only from these queues (a,b)")
    p.add_argument(
        "--queue",
        action="append",
        type=render.queue_limit,
        metavar="NAME=LIMIT",
        help="cluster-wide concurrency limit of a queue (repeatable)",
    )
    p.add_argument("--lease", type=render.non_negative, metavar="S", help="job lease (default 30)")
    p.add_argument(
        "--poll", type=render.non_negative, metavar="S", help="safety-net poll (default 1)"
    )
    p.add_argument(
        "--grace", type=render.non_negative, metavar="S", help="drain time on SIGTERM (30)"
    )
    p.add_argument(
        "--kill-grace", type=render.non_negative, metavar="S", help="SIGTERM to SIGKILL (2)"
    )
    p.add_argument(
        "--outcome-wait",
        type=render.non_negative,
        metavar="S",
        help="after a drain's kills, how long outcomes may still be written (5)",
    )
    p.add_argument("--max-jobs-per-child", type=render.positive_int, metavar="N")
    p.add_argument("--max-memory-per-child", type=render.positive_float, metavar="MB")
    p.add_argument("--max-memory-per-job", type=render.positive_float, metavar="MB")
    p.add_argument(
        "--cron",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="enqueue cron ticks from this supervisor (default: yes)",
    )
    p.add_argument(
        "--retention-days", type=render.non_negative, metavar="D", help="(7; 0 keeps jobs forever)"
    )
    p.add_argument("--metrics-port", type=render.port, metavar="P", help="Prometheus metrics")
    p.add_argument(
        "--metrics-host", metavar="HOST", help="where metrics listen (default 127.0.0.1)"
    )
    p.add_argument("--log-level", choices=LOG_LEVELS, help="(default info)")
    p.add_argument("--log-format", choices=("text", "json"), help="(default text)")
    p.add_argument(
        "--job-user",
        metavar="USER[:GROUP]",
        help="run children, so jobs, as this user (the supervisor runs as root)",
    )


# -- entry point -------------------------------------------------------------------


def _reads_only(args: argparse.Namespace) -> bool:
    """Whether the command only reads: it then never creates or migrates a
    database (a mistyped DSN is an error, not a new empty queue)."""
    run = args.run
    if run in (cmd_jobs, cmd_show, cmd_stats, cmd_supervisors, batches.cmd_batches):
        return True
    if run is cmd_queues:
        return lists_only(args)
    return run is batches.cmd_batch and batches.shows_only(args)


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.run is None:
        return cmd_demo(args, extra)
    if extra:
        raise UsageError(
            f"unrecognized arguments: {' '.join(extra)} (see procqueue {args.command} --help)"
        )
    if args.dsn is not None and not args.dsn.strip():  # '' would mean the default file
        raise UsageError("--dsn is empty: give sqlite:///PATH or postgresql://HOST/DB")
    args.layered = config.layered(args.config)
    args.dsn = args.dsn or args.layered.dsn
    if args.command in NO_STORE:
        return int(args.run(args))
    # resolved: --dsn, $PROCQUEUE_DSN, the config file, the default
    app = App(args.dsn)
    app.migrate = not _reads_only(args)
    try:
        return int(args.run(args, app))
    finally:
        app.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command; returns its exit code (see the module docstring)."""
    code: int
    try:
        return _run(argv)
    except SystemExit as exc:  # --help, or a command that exits
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            _error(exc.code)
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `procqueue jobs | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (UsageError, errors.ConfigError, errors.EnqueueError) as exc:
        _error(str(exc))
        return 2
    except (LoadError, errors.ProcqueueError) as exc:
        _error(str(exc))
        return 1
    except Exception as exc:
        log.debug("unexpected error", exc_info=True)  # the traceback, with --log-level debug
        _error(f"unexpected {type(exc).__name__}: {exc}")
        return 1


def _error(message: str) -> None:
    line = " ".join(message.split()) or "failed"
    print(f"procqueue: error: {line}", file=sys.stderr)
