"""`App`: where jobs are registered, and the producer/control API.

The child processes import the same module and find the same `App`, so a
job's name and signature mean the same thing at enqueue and at run time.
Arguments are bound against the signature and JSON-encoded with msgspec at
enqueue: bad input raises there and nothing is written.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import threading
import time
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, ParamSpec, TypeVar, overload

from procqueue import _clock, cron, errors, models
from procqueue import store as store_mod
from procqueue.context import Context
from procqueue.jobdef import JobOptions, bind_args, parse_options

P = ParamSpec("P")
R = TypeVar("R")


class Job(Generic[P, R]):
    """A registered job function. Calling it calls the function directly."""

    def __init__(self, app: App, fn: Callable[P, R], name: str, options: JobOptions) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.options = options
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        self.takes_context = bool(params) and _is_context(fn, params[0])
        self.arg_signature = self.signature.replace(
            parameters=params[1:] if self.takes_context else params
        )

    @functools.cached_property
    def arg_types(self) -> dict[str, Any]:
        """Resolved annotations of the arguments (empty when they can't be resolved)."""
        try:
            hints = typing.get_type_hints(self.fn)
        except Exception:
            return {}
        return {n: hints[n] for n in self.arg_signature.parameters if n in hints}

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Job {self.name}>"

    def enqueue(self, **args: Any) -> int:
        """Enqueues one run with these keyword arguments; returns the job id."""
        return self.app.enqueue(self.name, args)

    def configure(self, **options: Any) -> Configured:
        """Per-call options (`delay`, `key`, `serial_key`, `run_at`, `queue`, ...)."""
        parse_options(options, JobOptions(), now=0.0)  # fail here on unknown options
        return Configured(self, options)


class Configured:
    """A job with per-call options, ready to enqueue."""

    def __init__(self, job: Job[Any, Any], options: dict[str, Any]) -> None:
        self._job = job
        self._options = options

    def enqueue(self, **args: Any) -> int:
        return self._job.app.enqueue(self._job.name, args, **self._options)


def _is_context(fn: Callable[..., Any], param: inspect.Parameter) -> bool:
    annotation = param.annotation
    if annotation is Context:
        return True
    if isinstance(annotation, str):
        try:
            return inspect.get_annotations(fn, eval_str=True).get(param.name) is Context
        except Exception:
            return annotation.rsplit(".", 1)[-1] == "Context"
    return False


class App:
    """The registry of jobs and the handle to their database.

    Args:
        dsn: database; else ``--dsn``, ``$PROCQUEUE_DSN``, ``sqlite:///procqueue.db``.
        clock: the time source (tests pass a manual clock).
    """

    def __init__(self, dsn: str | None = None, *, clock: _clock.Clock | None = None) -> None:
        self.dsn = dsn
        self.clock = clock or _clock.from_env()
        self.registry: dict[str, Job[Any, Any]] = {}
        self._store: store_mod.Store | None = None
        self._lock = threading.Lock()
        self._wake_hooks: list[Callable[[], None]] = []
        self.schedules: list[cron.Schedule] = []

    # -- registration -----------------------------------------------------

    @overload
    def job(self, fn: Callable[P, R], /) -> Job[P, R]: ...

    @overload
    def job(self, fn: None = None, /, **options: Any) -> Callable[[Callable[P, R]], Job[P, R]]: ...

    def job(self, fn: Callable[P, R] | None = None, /, **options: Any) -> Any:
        """Registers a job: ``@app.job`` or ``@app.job(queue=..., timeout=...)``."""

        def register(fn: Callable[P, R]) -> Job[P, R]:
            name = options.pop("name", None) or f"{fn.__module__}.{fn.__qualname__}"
            if options.get("on_failure") is not None:
                options["on_failure"] = self._handler_name(options["on_failure"])
            parsed = parse_options(options, JobOptions(), now=0.0, registering=True)
            if name in self.registry:
                raise errors.ConfigError(f"job {name!r} is registered twice")
            job = Job(self, fn, name, parsed.options)
            self.registry[name] = job
            return job

        return register(fn) if fn is not None else register

    def using(self, dsn: str | None = None, *, clock: _clock.Clock | None = None) -> App:
        """A new App with the same jobs on another database (or clock)."""
        other = App(dsn, clock=clock or self.clock)
        other.registry = self.registry
        other.schedules = self.schedules
        return other

    def cron(
        self,
        expr: str,
        *,
        timezone: str = "UTC",
        args: dict[str, Any] | None = None,
        **options: Any,
    ) -> Callable[[Callable[P, R]], Job[P, R]]:
        """Registers a job enqueued on every tick of `expr`, once cluster-wide.

        Raises ConfigError at import for a malformed expression (quoted), one
        that never fires, or `args` that don't fit the function.
        """
        cron.validate(expr, timezone)

        def register(fn: Callable[P, R]) -> Job[P, R]:
            job: Job[P, R] = self.job(**options)(fn)
            try:
                bind_args(job.name, job.arg_signature, args or {})
            except errors.EnqueueError as exc:
                raise errors.ConfigError(f"cron {expr!r}: {exc}") from None
            self.schedules.append(
                cron.Schedule(
                    job=job.name,
                    expr=expr,
                    timezone=timezone,
                    args=args or {},
                    queue=options.get("queue"),
                )
            )
            return job

        return register

    def _handler_name(self, handler: Any) -> str:
        """The job name of an on_failure handler, registering a plain function."""
        if isinstance(handler, Job):
            return handler.name
        if isinstance(handler, str):
            self.lookup(handler)
            return handler
        if callable(handler):
            name = f"{handler.__module__}.{handler.__qualname__}"
            if name not in self.registry:
                self.job(handler)
            return name
        raise errors.ConfigError(f"on_failure must be a job or a function, got {handler!r}")

    def failure_handler_job(self, info: models.JobInfo, handler: str) -> models.NewJob:
        """The job that runs `handler` once for `info`, a job that gave up."""
        job = self.lookup(handler)
        params = list(job.arg_signature.parameters)
        key = f"on_failure:{info.id}:{info.finished_at.isoformat() if info.finished_at else ''}"
        return self.prepare(handler, {params[0]: info} if params else {}, {"key": key})

    # -- database ---------------------------------------------------------

    def bind(self, dsn: str | None) -> None:
        """Uses `dsn` unless the App was given one (App(dsn=...) wins)."""
        if self.dsn is None and dsn is not None:
            self.dsn = dsn

    @property
    def store(self) -> store_mod.Store:
        """The open store, migrated on first use."""
        with self._lock:
            if self._store is None:
                opened = store_mod.open_store(store_mod.resolve_dsn(self.dsn))
                try:
                    opened.migrate(now=self.clock.now())
                except BaseException:
                    opened.close()
                    raise
                self._store = opened
            return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def on_enqueue(self, hook: Callable[[], None]) -> None:
        """Calls `hook` after every enqueue through this App (in-process wake-up)."""
        self._wake_hooks.append(hook)

    # -- producing --------------------------------------------------------

    def lookup(self, name: str) -> Job[Any, Any]:
        """The registered job `name`; EnqueueError naming it if unknown."""
        job = self.registry.get(name)
        if job is None:
            raise errors.EnqueueError(f"unknown job {name!r}")
        return job

    def prepare(
        self, name: str, args: dict[str, Any] | None, options: dict[str, Any]
    ) -> models.NewJob:
        """Validates and encodes one enqueue; raises EnqueueError, writes nothing."""
        job = self.lookup(name)
        if options.get("on_failure") is not None:
            options = {**options, "on_failure": self._handler_name(options["on_failure"])}
        parsed = parse_options(options, job.options, now=self.clock.now())
        encoded = bind_args(name, job.arg_signature, args or {})
        o = parsed.options
        return models.NewJob(
            name=name,
            args=encoded,
            queue=o.queue,
            priority=o.priority,
            max_attempts=o.max_attempts,
            timeout=o.timeout,
            max_memory=o.max_memory,
            backoff=o.backoff,
            run_at=parsed.run_at,
            deadline_at=parsed.deadline_at,
            key=parsed.key,
            serial_key=parsed.serial_key,
            tags=list(o.tags),
            on_failure=o.on_failure,
        )

    def enqueue(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        /,
        *,
        connection: object | None = None,
        **options: Any,
    ) -> int:
        """Enqueues job `name` with `args`; returns its id (the existing id for a known `key`)."""
        return self._insert([self.prepare(name, args, options)], connection)[0]

    def enqueue_many(
        self,
        items: Iterable[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
        *,
        connection: object | None = None,
    ) -> list[int]:
        """Enqueues a batch in one transaction; all or nothing. Returns ids in order."""
        jobs = [self.prepare(name, args, opts or {}) for name, args, opts in items]
        return self._insert(jobs, connection) if jobs else []

    def _insert(self, jobs: Sequence[models.NewJob], connection: object | None) -> list[int]:
        ids = self.store.job_insert_many(jobs=jobs, now=self.clock.now(), connection=connection)
        for hook in self._wake_hooks:
            hook()
        return ids

    # -- controlling ------------------------------------------------------

    def get(self, id: int) -> models.JobInfo:
        """The job's record; JobNotFound if there is none."""
        info = self.store.job_get(id=id)
        if info is None:
            raise errors.JobNotFound(f"no job {id}")
        return info

    def wait(self, id: int, timeout: float | None = None) -> models.JobInfo:
        """Blocks until the job is done, failed or cancelled; TimeoutError after `timeout` s."""
        give_up = None if timeout is None else time.monotonic() + timeout
        pause = 0.005
        while True:
            info = self.get(id)
            if info.state in models.TERMINAL_STATES:
                return info
            if give_up is not None and time.monotonic() >= give_up:
                raise TimeoutError(f"job {id} is still {info.state} after {timeout}s")
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def cancel(self, id: int) -> models.JobState:
        """Cancels a pending job now; a running one has its child killed by its supervisor."""
        return self.store.job_cancel(id=id, now=self.clock.now())

    def retry(self, id: int) -> None:
        """Runs a failed or cancelled job again, with attempts reset."""
        self.store.job_retry(id=id, now=self.clock.now())
        for hook in self._wake_hooks:
            hook()

    def jobs(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        limit: int = 100,
    ) -> list[models.JobInfo]:
        """Jobs matching every filter given, newest first."""
        if state is not None and state not in models.JobState.__members__.values():
            raise errors.ConfigError(f"unknown state {state!r}")
        return self.store.job_list(state=state, queue=queue, name=name, limit=limit)

    def stats(self) -> dict[str, models.QueueInfo]:
        """Per queue: counts per state, limit, paused flag, oldest pending age."""
        return {q.name: q for q in self.store.queue_list(now=self.clock.now())}

    def pause(self, queue: str) -> None:
        """Stops new claims from `queue` on every supervisor."""
        self.store.queue_set_paused(queue=queue, paused=True)

    def resume(self, queue: str) -> None:
        self.store.queue_set_paused(queue=queue, paused=False)

    def run_inline(self, job: Job[Any, R] | str, /, **args: Any) -> Any:
        """Runs one job in this process with no database (tests).

        Applies the same checks as enqueue and the same argument conversion
        as a child; returns the result as decoded from its JSON encoding and
        lets the job's exception propagate.
        """
        from procqueue import runner

        target = self.lookup(job if isinstance(job, str) else job.name)
        encoded = bind_args(target.name, target.arg_signature, args)
        return runner.run_inline(target, encoded)


def load_app(spec: str) -> App:
    """The App of ``module`` or ``module:attribute``; ConfigError saying why not."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise errors.ConfigError(
            f"cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    if attr:
        found = getattr(module, attr, None)
        if not isinstance(found, App):
            raise errors.ConfigError(f"{spec!r} is not a procqueue App")
        return found
    apps = [v for v in vars(module).values() if isinstance(v, App)]
    if len(apps) != 1:
        raise errors.ConfigError(
            f"module {module_name!r} defines {len(apps)} procqueue Apps; name one as MODULE:ATTR"
        )
    return apps[0]
