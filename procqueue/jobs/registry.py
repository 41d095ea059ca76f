"""The job registry: registered job functions and cron schedules by name,
and everything checked about an enqueue before anything is written.

This is the part of an `App` a child process needs. It never imports
`procqueue.store` (tests/test_imports.py checks it), so a child that imports
its job module loads no database code.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

from procqueue import errors, models, rates
from procqueue.codec import Codec
from procqueue.jobs import cron
from procqueue.jobs.context import Context
from procqueue.jobs.hooks import Hooks
from procqueue.jobs.options import JobOptions, bind_args, parse_options

P = ParamSpec("P")
R = TypeVar("R")


class Enqueuer(Protocol):
    """Where a `Job` enqueues itself: the `App` that registered it."""

    def enqueue(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        /,
        *,
        connection: object | None = None,
        **options: Any,
    ) -> int: ...


class Job(Generic[P, R]):
    """A registered job function. Calling it calls the function directly.

    `P` is what `enqueue` takes: the function's parameters less a leading
    `Context` (`JobDecorator` types it so), so type checkers check enqueues.

    Attributes:
        app: what `enqueue` goes through (the App that registered the job).
        name: the job's name, ``module.qualname`` unless given.
        options: the job's defaults, overridable per enqueue.
    """

    def __init__(
        self,
        app: Enqueuer,
        fn: Callable[..., R],
        name: str,
        options: JobOptions,
        codec: Codec | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        self.app = app
        self.codec = codec or Codec()
        """How its arguments and result are encoded (the App's hooks)."""
        self.hooks = hooks or Hooks()
        """The App's `around_run` hooks wrap each of its runs."""
        self.info_param: str | None = None
        """Set for an on_failure handler: its first argument is always a `JobInfo`."""
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        """An ``async def`` job: its coroutine runs on the child's event loop."""
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
            hints = {}
        types = {n: hints[n] for n in self.arg_signature.parameters if n in hints}
        if self.info_param is not None and types.get(self.info_param, Any) is Any:
            types[self.info_param] = models.JobInfo  # unannotated: still a JobInfo
        return types

    def handles_failures(self) -> None:
        """Marks this job as an on_failure handler: its first argument is a `JobInfo`."""
        params = list(self.arg_signature.parameters)
        if params and self.info_param is None:
            self.info_param = params[0]
            self.__dict__.pop("arg_types", None)  # computed again with it

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Job {self.name}>"

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """Enqueues one run with these arguments (positional ones bound to the
        job's parameters in order, as a call would); returns the job id."""
        return self.app.enqueue(self.name, self.by_name(args, kwargs))

    def by_name(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The arguments of one call, every one by its parameter's name.

        Raises EnqueueError for positional arguments that don't fit (too
        many, one given twice, or one that would fill ``*args``).
        """
        if not args:
            return kwargs
        try:
            bound = self.arg_signature.bind_partial(*args, **kwargs)
        except TypeError as exc:
            raise errors.EnqueueError(
                f"arguments don't fit {self.name}{self.arg_signature}: {exc}"
            ) from None
        kinds = {name: p.kind for name, p in self.arg_signature.parameters.items()}
        star = [n for n in bound.arguments if kinds[n] is inspect.Parameter.VAR_POSITIONAL]
        if star:
            raise errors.EnqueueError(
                f"positional arguments of {self.name} can't fill *{star[0]}: name them"
            )
        flat = {
            n: v
            for n, v in bound.arguments.items()
            if kinds[n] is not inspect.Parameter.VAR_KEYWORD
        }
        for name, value in bound.arguments.items():
            if kinds[name] is inspect.Parameter.VAR_KEYWORD:
                flat.update(value)
        return flat

    def configure(self, **options: Any) -> Configured[P]:
        """Per-call options (`delay`, `key`, `serial_key`, `run_at`, `queue`, ...).

        Raises EnqueueError here for an unknown option.
        """
        parse_options(options, JobOptions(), now=0.0)
        return Configured(self, options)


class Configured(Generic[P]):
    """A job with per-call options, ready to enqueue."""

    def __init__(self, job: Job[P, Any], options: dict[str, Any]) -> None:
        self._job = job
        self._options = options

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """Enqueues one run with these arguments and the configured options."""
        job = self._job
        return job.app.enqueue(job.name, job.by_name(args, kwargs), **self._options)


class JobDecorator(Protocol):
    """What ``@app.job(...)`` and ``@app.cron(...)`` return: registers a
    function as a `Job` whose `enqueue` takes its parameters less a leading
    `Context`."""

    @overload
    def __call__(self, fn: Callable[Concatenate[Context, P], R], /) -> Job[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Job[P, R]: ...


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


class Registry(Mapping[str, Job[Any, Any]]):
    """The jobs (a read-only mapping of name to `Job`) and cron schedules
    of one App. Registering, validating and encoding need no database.

    Args:
        owner: what the registered jobs' `enqueue` goes through.
    """

    def __init__(self, owner: Enqueuer, codec: Codec | None = None) -> None:
        self._owner = owner
        self.codec = codec or Codec()
        self.hooks = Hooks()
        """Around runs, enqueues and attempts that died (`App.hooks`)."""
        self._jobs: dict[str, Job[Any, Any]] = {}
        self.schedules: list[cron.Schedule] = []

    def __getitem__(self, name: str) -> Job[Any, Any]:
        return self._jobs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def __repr__(self) -> str:
        return f"<Registry of {len(self._jobs)} jobs>"

    def register(self, fn: Callable[..., R], options: dict[str, Any]) -> Job[Any, R]:
        """Registers `fn` with `options` (``name`` among them, optionally).

        Raises ConfigError for a bad option, a name registered twice, or a
        generator or async generator function (no job can return what it makes).
        """
        options = dict(options)
        name = options.pop("name", None) or f"{fn.__module__}.{fn.__qualname__}"
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            kind = "an async generator" if inspect.isasyncgenfunction(fn) else "a generator"
            raise errors.ConfigError(
                f"job {name!r} is {kind} function: a job returns one encodable value; "
                "return a list (or use def / async def without yield)"
            )
        if options.get("on_failure") is not None:
            options["on_failure"] = self.handler_name(options["on_failure"])
        parsed = parse_options(options, JobOptions(), now=0.0, registering=True)
        if name in self._jobs:
            raise errors.ConfigError(f"job {name!r} is registered twice")
        job: Job[Any, R] = Job(self._owner, fn, name, parsed.options, self.codec, self.hooks)
        self._jobs[name] = job
        return job

    def register_cron(
        self,
        fn: Callable[..., R],
        *,
        expr: str,
        timezone: str,
        args: dict[str, Any],
        options: dict[str, Any],
    ) -> Job[Any, R]:
        """Registers `fn` and a schedule enqueuing it with `args` on every
        tick of `expr` (validated by the caller with `cron.validate`).

        Raises ConfigError if `args` don't fit the function.
        """
        job = self.register(fn, options)
        try:
            bind_args(job.name, job.arg_signature, args, codec=self.codec, types=job.arg_types)
        except errors.EnqueueError as exc:
            raise errors.ConfigError(f"cron {expr!r}: {exc}") from None
        self.schedules.append(
            cron.Schedule(
                job=job.name,
                expr=expr,
                timezone=timezone,
                args=args,
                queue=options.get("queue"),
            )
        )
        return job

    def handler_name(self, handler: Any) -> str:
        """The job name of an on_failure handler, registering a plain function."""
        if isinstance(handler, Job):
            handler.handles_failures()
            return handler.name
        if isinstance(handler, str):
            self.lookup(handler).handles_failures()
            return handler
        if callable(handler):
            name = f"{handler.__module__}.{handler.__qualname__}"
            if name not in self._jobs:
                self.register(handler, {})
            self._jobs[name].handles_failures()
            return name
        raise errors.ConfigError(f"on_failure must be a job or a function, got {handler!r}")

    def lookup(self, name: str) -> Job[Any, Any]:
        """The registered job `name`; EnqueueError naming it if unknown."""
        job = self._jobs.get(name)
        if job is None:
            raise errors.EnqueueError(f"unknown job {name!r}")
        return job

    def prepare(
        self, name: str, args: dict[str, Any] | None, options: dict[str, Any], *, now: float
    ) -> models.NewJob:
        """One enqueue validated and encoded, times resolved against `now`.

        A name this registry doesn't know (a producer that doesn't import the
        job code) is stored with its arguments as given, JSON-encoded, and
        the default options; the child that runs it checks them.

        Raises EnqueueError saying what is wrong; writes nothing.
        """
        if not isinstance(name, str) or not name or len(name) > 1000 or "\x00" in name:
            raise errors.EnqueueError(
                f"a job name must be 1-1000 characters without NUL, got {name!r}"
            )
        job = self._jobs.get(name)
        handler = options.get("on_failure")
        if handler is not None and not (job is None and isinstance(handler, str)):
            options = {**options, "on_failure": self.handler_name(handler)}
        parsed = parse_options(options, JobOptions() if job is None else job.options, now=now)
        if job is None:
            encoded = bind_args(name, None, args or {}, codec=self.codec)
        else:
            encoded = bind_args(
                name, job.arg_signature, args or {}, codec=self.codec, types=job.arg_types
            )
        o = parsed.options
        # Field by field, so mypy checks each option against the column it fills.
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
            after=list(parsed.after),
            allow_failure=parsed.allow_failure,
            max_snoozes=o.max_snoozes,
            flow=rates.Flow(
                group=parsed.flow.group,
                group_limit=o.group_limit,
                rate_limit=o.rate_limit,
                group_rate=o.group_rate,
                debounce=parsed.flow.debounce,
                debounce_max=parsed.flow.debounce_max,
            ),
        )

    def failure_handler_job(
        self, info: models.JobInfo, handler: str, *, now: float
    ) -> models.NewJob:
        """The job that runs `handler` once for `info`, a job that gave up.

        Its key names the give-up, so sweeping it twice enqueues it once.
        """
        job = self.lookup(handler)
        params = list(job.arg_signature.parameters)
        key = f"on_failure:{info.id}:{info.finished_at.isoformat() if info.finished_at else ''}"
        return self.prepare(handler, {params[0]: info} if params else {}, {"key": key}, now=now)
