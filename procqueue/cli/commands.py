"""What each ``procqueue`` command does (the parser and the exit codes are in
`cli.main`; docs/cli.md documents both)."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import socket
import sys
import time
import types
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from procqueue import config, errors, models
from procqueue import store as store_mod
from procqueue.cli import logs, render
from procqueue.clock import from_env
from procqueue.codec import DECODE_ERRORS
from procqueue.jobs import cron
from procqueue.producer.app import App, load_app
from procqueue.supervisor.settings import Settings

T = TypeVar("T")

PRUNE_BATCH = 10_000
"""Jobs deleted per statement by ``prune``, so no transaction grows unbounded."""

DSN_ENV = "PROCQUEUE_DSN"
CRON_TICKS = 3
"""Fire times listed per schedule by ``procqueue cron``."""


class UsageError(Exception):
    """A command line that can't be run as written (exit 2)."""


class LoadError(Exception):
    """The job module (or an optional part of procqueue) could not be loaded (exit 1)."""


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


SUPERVISE_FLAGS = (
    "workers",
    "queues",
    "lease",
    "poll",
    "grace",
    "kill_grace",
    "outcome_wait",
    "max_jobs_per_child",
    "max_memory_per_child",
    "max_memory_per_job",
    "retention_days",
    "cron",
    "log_format",
    "log_level",
    "metrics_port",
    "metrics_host",
    "job_user",
)
"""Config keys `supervise` takes as flags of the same name (``limits`` is ``--queue``)."""


def supervise_config(args: argparse.Namespace) -> config.Config:
    """The flags over the environment over the config file."""
    flags = {key: getattr(args, key) for key in SUPERVISE_FLAGS}
    flags["limits"] = dict(args.queue) if args.queue else None
    given = config.Config(**{k: v for k, v in flags.items() if v is not None})
    layered: config.Config = args.layered
    return given.over(layered)


def supervise_settings(chosen: config.Config) -> Settings:
    """The supervisor's Settings for the `chosen` configuration."""
    fields = Settings.__struct_fields__
    values = {k: v for k, v in chosen.given().items() if k in fields}
    return Settings(**{"titles": True, **values})


def cmd_supervise(args: argparse.Namespace) -> int:
    from procqueue.supervisor.loop import Supervisor

    chosen = supervise_config(args)
    settings = supervise_settings(chosen)
    if chosen.metrics_port is not None:
        check_listen(settings.metrics_host, chosen.metrics_port)  # where they will be served
    _use_cwd(children=True)
    if args.django:
        _setup_django(args)
    elif args.app is None or args.settings is not None:
        raise UsageError("supervise needs MODULE (and --settings needs --django)")
    loaded = _load(args.app)
    if args.django:  # the supervisor's registry finds tasks too (failure handlers, cron)
        from procqueue.contrib.django import worker

        worker.find_tasks(loaded)
    app = _on_dsn(loaded, args)
    # children import the module afresh: its App() must find the same database
    # when job code enqueues follow-up work
    os.environ[DSN_ENV] = str(app.dsn)
    # one line per event on stderr, unless the job module configured logging
    logs.setup(chosen.log_level or "info", chosen.log_format or "text")
    try:
        supervisor = _when_reachable(lambda: Supervisor(app, spec=args.app, settings=settings))
        _when_reachable(supervisor.prepare, failed_query=True)
        return supervisor.run(install_signals=True)
    finally:
        app.close()


DJANGO_APP = "procqueue.contrib.django.app"
"""The App `supervise --django` runs without MODULE: the TASKS backend's."""


def _setup_django(args: argparse.Namespace) -> None:
    """Sets up Django here and, through the environment, in every child
    (before each imports the app); MODULE defaults to `DJANGO_APP`."""
    from procqueue.child import loading
    from procqueue.contrib.django import worker

    worker.setup(args.settings)  # DJANGO_SETTINGS_MODULE set for the children too
    os.environ[loading.DJANGO_ENV] = "1"
    if args.app is None:
        args.app = DJANGO_APP


STARTUP_WAIT_S = 60.0
"""How long a starting supervisor waits for a database server that is not
reachable yet (deployed together with it, or restarting)."""


def _when_reachable(
    make: Callable[[], T], *, wait: float = STARTUP_WAIT_S, failed_query: bool = False
) -> T:
    """`make()`, tried again while it raises StoreUnavailable (or, with
    `failed_query`, any StoreError but a refused value or a newer schema: a
    server restarting ends sessions mid-query), for up to `wait` seconds,
    with one WARNING per try; the last failure propagates. A refused login
    or a missing database fails at once."""
    log = logging.getLogger("procqueue.supervisor")
    give_up = time.monotonic() + wait
    pause = 0.25
    while True:
        try:
            return make()
        except errors.StoreError as exc:
            final = isinstance(exc, errors.StoreRejected | errors.SchemaTooNew)
            passing = isinstance(exc, errors.StoreUnavailable) or (failed_query and not final)
            if not passing or time.monotonic() + pause > give_up:
                raise
            log.warning("%s; trying again in %gs", exc, pause)
            time.sleep(pause)
            pause = min(pause * 2, 5.0)


def _find_job_app(name: str) -> App:
    """The App registering job `name` (``module.qualname``), imported from the
    longest importable module prefix of `name`; where no prefix imports (a
    host without the job's code), an App that knows no job, which stores
    the arguments as given, as `App.enqueue` does for an unknown name."""
    parts = name.split(".")
    if len(parts) < 2 or not all(parts):
        raise errors.EnqueueError(f"unknown job {name!r}: a job's name is MODULE.FUNCTION")
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
    return App()


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
    except DECODE_ERRORS as exc:
        raise UsageError(f"--args is not valid JSON: {exc}") from None
    if not isinstance(job_args, dict | list):
        raise UsageError(f"--args must be a JSON object or list, got {type(job_args).__name__}")
    options: dict[str, Any] = {
        k: v
        for k, v in {
            "key": args.key,
            "delay": args.delay,
            "queue": args.queue,
            "priority": args.priority,
            "serial_key": args.serial_key,
            "after": args.after,
            "allow_failure": args.allow_failure,
        }.items()
        if v is not None
    }
    _use_cwd(children=False)
    app = _on_dsn(_load(args.app) if args.app else _find_job_app(args.name), args)
    if isinstance(job_args, list):  # positional: the job's parameters name them
        if args.name not in app.registry:
            raise UsageError(
                "--args as a JSON list needs the job's code to name them: give an object"
            )
        job_args = app.registry[args.name].by_name(tuple(job_args), {})
    try:
        print(app.enqueue(args.name, job_args, **options))  # checks all before opening the store
    finally:
        app.close()
    if not args.app and args.name not in app.registry:
        print(
            f"note: no module of {args.name!r} can be imported here: its arguments were "
            "stored unchecked, and are checked when a supervisor that has the code runs it",
            file=sys.stderr,
        )
    return 0


def cmd_jobs(args: argparse.Namespace, app: App) -> int:
    found = app.jobs(state=args.state, queue=args.queue, name=args.name, limit=args.limit)
    if args.json:
        for info in found:
            print(render.job_json(info))
    elif found:
        headers = render.job_headers(args.state)
        print(render.table(headers, [render.job_row(i, args.state) for i in found]))
    else:
        print("no jobs", file=sys.stderr)
    return 0


def cmd_show(args: argparse.Namespace, app: App) -> int:
    info = app.get(args.id)
    print(render.job_json(info) if args.json else render.job_detail(info))
    deps = [] if args.json else app.dependencies([info.id])
    if deps:
        shown = ", ".join(f"#{d.depends_on} ({d.state or 'pruned'})" for d in deps)
        print(f"{'after:':<14}{models.printable(shown)}")
    for why in [] if args.json or info.state != "pending" else app.waits(info.id):
        print(f"{'waits:':<14}{models.printable(why)}")
    return 0


def cmd_stats(args: argparse.Namespace, app: App) -> int:
    queues = list(app.stats().values())
    if args.json:
        print(msgspec.json.encode(render.stats_document(queues)).decode())
    elif queues:
        print(render.table(render.STATS_HEADERS, [render.stats_row(q) for q in queues]))
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


def cmd_migrate(args: argparse.Namespace) -> int:
    store = store_mod.open_store(store_mod.resolve_dsn(args.dsn))
    try:
        print(f"schema at version {store.migrate(now=from_env().now())}")
    finally:
        store.close()
    return 0


def cmd_cron(args: argparse.Namespace) -> int:
    """Lists the schedules of an App with their next fire times."""
    _use_cwd(children=False)
    app = _load(args.app)
    now = app.clock.now()
    rows = []
    for schedule in app.schedules:
        job = app.registry.get(schedule.job)
        queue = schedule.queue or (job.options.queue if job else "default")
        ticks = [render.moment(t) for t in cron.next_ticks(schedule, now, CRON_TICKS)]
        rows.append((schedule, queue, ticks))
    if args.json:
        for schedule, queue, ticks in rows:
            doc = {
                "job": schedule.job,
                "expr": schedule.expr,
                "timezone": schedule.timezone,
                "queue": queue,
                "next": ticks,
            }
            print(msgspec.json.encode(doc).decode())
    elif rows:
        table = [(s.job, s.expr, s.timezone, q, ", ".join(t)) for s, q, t in rows]
        print(render.table(render.CRON_HEADERS, table))
    else:
        print("no schedules", file=sys.stderr)
    return 0


def check_listen(host: str, port: int) -> None:
    """Fails in one line when `host`:`port` can't be listened on (in use, bad host)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise LoadError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
