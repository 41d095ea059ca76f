"""The ``procqueue`` command line (DESIGN.md sections 3 and 4; docs/cli.md).

Exit codes: 0 ok; 1 the operation failed (unknown id, job not in a state
that allows it, the database failed, the job module could not be loaded);
2 usage error (bad option or value, bad ``--args``, arguments that don't
bind, unknown job name, malformed DSN or setting); 130 interrupted.
Every error is one line on stderr starting ``procqueue: error:``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import msgspec

from procqueue import _format, errors, models
from procqueue import store as store_mod
from procqueue.app import App, load_app

PRUNE_BATCH = 10_000
"""Jobs deleted per statement by ``prune``, so no transaction grows unbounded."""

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
log = logging.getLogger("procqueue.cli")


class UsageError(Exception):
    """A command line that can't be run as written (exit 2)."""


class LoadError(Exception):
    """The job module could not be loaded (exit 1)."""


class _Parser(argparse.ArgumentParser):
    """Usage errors become one line, not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


# -- commands ----------------------------------------------------------------


def _app(args: argparse.Namespace) -> App:
    return App(store_mod.resolve_dsn(args.dsn))


def _use_cwd(*, children: bool) -> None:
    """Makes modules of the current directory importable here (and in children)."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    if not children:
        return
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if cwd not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([cwd, *paths])


def _load(spec: str) -> App:
    try:
        return load_app(spec)
    except errors.ConfigError as exc:
        raise LoadError(str(exc)) from None


def _on_dsn(app: App, args: argparse.Namespace) -> App:
    """`app`'s jobs on its own DSN if it was given one, else on --dsn's."""
    return app.using(app.dsn or store_mod.resolve_dsn(args.dsn))


def cmd_supervise(args: argparse.Namespace) -> int:
    if args.metrics_port is not None:
        raise UsageError("metrics are not available yet (drop --metrics-port)")
    from procqueue import config
    from procqueue.supervisor import Supervisor

    given = {
        "workers": args.workers,
        "queues": args.queues,
        "limits": dict(args.queue) if args.queue else None,
        "lease": args.lease,
        "poll": args.poll,
        "grace": args.grace,
        "max_jobs_per_child": args.max_jobs_per_child,
        "max_memory_per_child": args.max_memory_per_child,
        "retention_days": args.retention_days,
        "cron": False if args.no_cron else None,
    }
    settings = config.Settings(titles=True, **{k: v for k, v in given.items() if v is not None})
    _use_cwd(children=True)
    app = _on_dsn(_load(args.app), args)
    try:
        supervisor = Supervisor(app, spec=args.app, settings=settings)
        # one line per event on stderr, unless the job module configured logging
        logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)
        return supervisor.run(install_signals=True)
    finally:
        app.close()


def _find_job_app(name: str) -> App:
    """The App registering job `name` (``module.qualname``), imported from the
    longest importable module prefix of `name`."""
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:i])
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and (module_name + ".").startswith(exc.name + "."):
                continue  # this prefix is no module: try a shorter one
            raise LoadError(f"cannot import {module_name!r}: {exc}") from None
        except Exception as exc:
            raise LoadError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
        return _app_registering(module, name)
    raise errors.EnqueueError(f"unknown job {name!r}: no module of that name can be imported")


def _app_registering(module: types.ModuleType, name: str) -> App:
    apps = [v for v in vars(module).values() if isinstance(v, App)]
    for app in apps:
        if name in app.registry:
            return app
    if not apps:
        raise errors.EnqueueError(
            f"unknown job {name!r}: module {module.__name__!r} has no procqueue App "
            "(name it with --app MODULE[:APP])"
        )
    raise errors.EnqueueError(f"unknown job {name!r}: not registered in {module.__name__!r}")


def cmd_enqueue(args: argparse.Namespace) -> int:
    try:
        job_args = msgspec.json.decode(args.args) if args.args is not None else {}
    except msgspec.DecodeError as exc:
        raise UsageError(f"--args is not valid JSON: {exc}") from None
    if not isinstance(job_args, dict):
        raise UsageError(f"--args must be a JSON object, got {type(job_args).__name__}")
    options: dict[str, Any] = {
        k: v
        for k, v in {
            "key": args.key,
            "delay": args.delay,
            "queue": args.queue,
            "priority": args.priority,
            "serial_key": args.serial_key,
        }.items()
        if v is not None
    }
    _use_cwd(children=False)
    app = _on_dsn(_load(args.app) if args.app else _find_job_app(args.name), args)
    try:
        print(app.enqueue(args.name, job_args, **options))  # checks all before opening the store
    finally:
        app.close()
    return 0


def cmd_jobs(args: argparse.Namespace, app: App) -> int:
    found = app.jobs(state=args.state, queue=args.queue, name=args.name, limit=args.limit)
    if args.json:
        for info in found:
            print(_format.job_json(info))
    elif found:
        print(_format.table(_format.JOB_HEADERS, [_format.job_row(i) for i in found]))
    else:
        print("no jobs", file=sys.stderr)
    return 0


def cmd_show(args: argparse.Namespace, app: App) -> int:
    info = app.get(args.id)
    print(_format.job_json(info) if args.json else _format.job_detail(info))
    return 0


def cmd_cancel(args: argparse.Namespace, app: App) -> int:
    state = app.cancel(args.id)
    if state == models.JobState.CANCELLED:
        print(f"job {args.id} cancelled")
    else:
        print(f"job {args.id} is {state}: cancel requested, its supervisor will stop it")
    return 0


def cmd_retry(args: argparse.Namespace, app: App) -> int:
    app.retry(args.id)
    print(f"job {args.id} is pending again, attempts reset")
    return 0


def cmd_stats(args: argparse.Namespace, app: App) -> int:
    queues = list(app.stats().values())
    if args.json:
        print(msgspec.json.encode(_format.stats_document(queues)).decode())
    elif queues:
        print(_format.table(_format.STATS_HEADERS, [_format.stats_row(q) for q in queues]))
    else:
        print("no queues", file=sys.stderr)
    return 0


def cmd_prune(args: argparse.Namespace, app: App) -> int:
    states = ["done", "cancelled", *(["failed"] if args.failed else [])]
    before = app.clock.now() - args.older_than * 86400
    total = 0
    while True:
        n = app.store.job_prune(states=states, before=before, limit=PRUNE_BATCH)
        total += n
        if n < PRUNE_BATCH:
            break
    print(f"pruned {total} job{'' if total == 1 else 's'}")
    return 0


def cmd_queues(args: argparse.Namespace, app: App) -> int:
    if args.action == "pause":
        app.pause(args.queue)
        print(f"queue {args.queue} paused: no new claims from it")
        return 0
    if args.action == "resume":
        app.resume(args.queue)
        print(f"queue {args.queue} resumed")
        return 0
    queues = list(app.stats().values())
    if queues:
        print(_format.table(_format.QUEUE_HEADERS, [_format.queue_row(q) for q in queues]))
    else:
        print("no queues", file=sys.stderr)
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    store = store_mod.open_store(store_mod.resolve_dsn(args.dsn))
    try:
        print(f"schema at version {store.migrate()}")
    finally:
        store.close()
    return 0


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


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (docs/cli.md documents every part of it)."""
    dsn_help = "database (default: $PROCQUEUE_DSN, else sqlite:///procqueue.db)"
    parser: argparse.ArgumentParser = _Parser(
        prog="procqueue", description="A durable, process-isolated job queue.", allow_abbrev=False
    )
    parser.add_argument("--dsn", default=None, help=dsn_help)
    common = _Parser(add_help=False, allow_abbrev=False)
    common.add_argument("--dsn", default=argparse.SUPPRESS, help=dsn_help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str, run: Callable[..., int]) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, parents=[common], allow_abbrev=False)
        p.set_defaults(run=run)
        return p

    p = sub.add_parser("demo", help=DEMO_HELP, add_help=False)
    p.set_defaults(run=None)

    p = command("supervise", "run the jobs of MODULE in child processes", cmd_supervise)
    p.add_argument("app", metavar="MODULE[:APP]", help="module defining the App (cwd importable)")
    p.add_argument(
        "--workers", type=_format.positive_int, help="child processes (default: CPU count)"
    )
    p.add_argument("--queues", type=_format.queue_list, help="claim only from these queues (a,b)")
    p.add_argument(
        "--queue",
        action="append",
        type=_format.queue_limit,
        metavar="NAME=LIMIT",
        help="cluster-wide concurrency limit of a queue (repeatable)",
    )
    p.add_argument("--lease", type=_format.non_negative, metavar="S", help="job lease (default 30)")
    p.add_argument(
        "--poll", type=_format.non_negative, metavar="S", help="safety-net poll (default 1)"
    )
    p.add_argument(
        "--grace", type=_format.non_negative, metavar="S", help="drain time on SIGTERM (30)"
    )
    p.add_argument("--max-jobs-per-child", type=_format.positive_int, metavar="N")
    p.add_argument("--max-memory-per-child", type=_format.positive_float, metavar="MB")
    p.add_argument("--no-cron", action="store_true", help="don't enqueue cron ticks")
    p.add_argument("--retention-days", type=_format.positive_float, metavar="D")
    p.add_argument(
        "--metrics-port", type=_format.positive_int, metavar="P", help="not available yet"
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])

    p = command("enqueue", "enqueue job NAME (module.qualname); prints its id", cmd_enqueue)
    p.add_argument("name", metavar="NAME")
    p.add_argument("--args", metavar="JSON", help="arguments as a JSON object")
    p.add_argument("--key", metavar="K", help="idempotency key")
    p.add_argument(
        "--delay", type=_format.non_negative, metavar="S", help="run no sooner than S from now"
    )
    p.add_argument("--queue", metavar="Q")
    p.add_argument("--priority", type=int, metavar="P", help="higher runs first")
    p.add_argument("--serial-key", metavar="K", help="one job with this key runs at a time")
    p.add_argument("--app", metavar="MODULE[:APP]", help="where NAME is registered")

    p = command("jobs", "list jobs, newest first", cmd_jobs)
    p.add_argument("--state", choices=[s.value for s in models.JobState])
    p.add_argument("--queue", metavar="Q")
    p.add_argument("--name", metavar="N")
    p.add_argument("--limit", type=_format.positive_int, default=100, metavar="N")
    p.add_argument("--json", action="store_true", help="one JSON object a line")

    p = command("show", "one job, every field", cmd_show)
    p.add_argument("id", type=int, metavar="ID")
    p.add_argument("--json", action="store_true")

    command("cancel", "cancel a job", cmd_cancel).add_argument("id", type=int, metavar="ID")
    command("retry", "run a failed or cancelled job again", cmd_retry).add_argument(
        "id", type=int, metavar="ID"
    )

    p = command("stats", "counts per queue and state", cmd_stats)
    p.add_argument("--json", action="store_true")

    p = command("prune", "delete old finished jobs", cmd_prune)
    p.add_argument("--older-than", type=_format.non_negative, default=7.0, metavar="DAYS")
    p.add_argument("--failed", action="store_true", help="failed jobs too")

    p = command("queues", "queues with limits, paused flag and counts", cmd_queues)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    for action, text in (("pause", "stop new claims from Q"), ("resume", "claim from Q again")):
        a = actions.add_parser(
            action, help=text, description=text, parents=[common], allow_abbrev=False
        )
        a.add_argument("queue", metavar="Q")

    command("migrate", "create or upgrade the schema", cmd_migrate)
    return parser


# -- entry point -------------------------------------------------------------------


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.run is None:
        return cmd_demo(args, extra)
    if extra:
        raise UsageError(
            f"unrecognized arguments: {' '.join(extra)} (see procqueue {args.command} --help)"
        )
    if args.command in ("supervise", "enqueue", "migrate"):
        return int(args.run(args))
    app = _app(args)
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
