"""Hooks: the user's code around every run (in the child), every enqueue
(in the producer) and every attempt whose child died (in the supervisor),
for error reporters, logging context and tracing (`procqueue.contrib.otel`
is built on them).

A hook is the user's code, not the job's: one that raises is logged and
skipped, and never changes a job's record, its outcome or its enqueue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("procqueue.hooks")

HEADERS_MAX = 8192
"""Bytes of one job's headers (names and values added up); more are dropped."""


@dataclass
class Run:
    """One attempt as an `around_run` hook sees it.

    `outcome`, `result`, `error` and `exception` are set before the hooks
    exit: `outcome` is ``done`` or how the job's code failed (``error``: it
    raised, and is retried while attempts remain; ``retry``, ``snooze``,
    ``permanent``: it raised `Retry`, `Snooze`, `Permanent`).
    """

    job_id: int
    name: str
    queue: str
    attempt: int
    args: Mapping[str, Any]
    """The arguments as stored (JSON values), before conversion to annotated types."""
    headers: Mapping[str, str]
    """What `around_enqueue` hooks stored with the job (e.g. a trace context)."""
    outcome: str | None = None
    result: Any = None
    error: str | None = None
    exception: BaseException | None = None


@dataclass
class Enqueue:
    """One job being enqueued, as an `around_enqueue` hook sees it. A hook
    may add text entries to `headers`: they are stored with the job and
    handed to `around_run` hooks as `Run.headers`. `id` is set once inserted."""

    name: str
    queue: str
    args: Mapping[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    id: int | None = None


@dataclass(frozen=True)
class RunDied:
    """An attempt whose child process died (a fatal signal, a timeout,
    memory or cancel kill, a lost lease), told by the supervisor."""

    job_id: int
    name: str
    queue: str
    attempt: int
    headers: Mapping[str, str]
    exit_reason: str
    """How the child ended: ``SIGSEGV``, ``SIGKILL``, ``exit 3``..."""
    kill: str | None
    """Why the supervisor ended it, if it did: timeout, memory, cancel, lease, drain, error."""
    error: str | None
    """The attempt's error as recorded (None for a lost lease: nothing is recorded)."""
    started_at: float | None
    """Wall time the child started it (None: it never reached a child)."""
    ended_at: float
    """Wall time its death was noticed."""


RunHook = Callable[[Run], AbstractContextManager[Any]]
EnqueueHook = Callable[[list[Enqueue]], AbstractContextManager[Any]]
DiedHook = Callable[[RunDied], None]


class Hooks:
    """The hooks of one App; each registration is usable as a decorator.

    Registered at import of the app's module, so the child processes (which
    import it too) run with the same hooks; lists are replaced, never
    changed in place, so a run iterating them never sees one change.
    """

    def __init__(self) -> None:
        self.run: tuple[RunHook, ...] = ()
        self.enqueue: tuple[EnqueueHook, ...] = ()
        self.died: tuple[DiedHook, ...] = ()

    def around_run(self, hook: RunHook) -> RunHook:
        """Wraps every run of every job in the child: ``hook(run)`` returns a
        context manager entered before the job's function is called (its
        arguments decoded, not yet converted) and exited after the outcome
        is known, with the job's exception if it raised. What `__exit__`
        returns is ignored: a hook can't swallow a failure."""
        self.run = (*self.run, hook)
        return hook

    def around_enqueue(self, hook: EnqueueHook) -> EnqueueHook:
        """Wraps every enqueue through the App (one call for a batch from
        `enqueue_many`): ``hook(jobs)`` returns a context manager entered
        after the jobs were checked and exited after they were inserted
        (with the insert's exception if it failed)."""
        self.enqueue = (*self.enqueue, hook)
        return hook

    def on_run_died(self, hook: DiedHook) -> DiedHook:
        """Calls ``hook(died)`` in the supervisor for each attempt whose child
        died. It runs in the supervision loop: keep it quick."""
        self.died = (*self.died, hook)
        return hook

    def tell_died(self, died: RunDied) -> None:
        """Calls every `on_run_died` hook with `died`; one that raises is logged."""
        for hook in self.died:
            try:
                hook(died)
            except Exception:
                log.exception("on_run_died hook %r failed for job %d", hook, died.job_id)


class Around:
    """Several hooks' context managers around one block, entered in order
    and exited in reverse, each on its own: one that raises entering is
    logged and not exited, one that raises exiting is logged; neither
    touches the block or what it did."""

    def __init__(
        self, hooks: tuple[Callable[[Any], AbstractContextManager[Any]], ...], arg: Any
    ) -> None:
        self._hooks = hooks
        self._arg = arg
        self._entered: list[AbstractContextManager[Any]] = []

    def enter(self) -> None:
        """Enters each hook's context manager, in order."""
        for hook in self._hooks:
            try:
                manager = hook(self._arg)
                manager.__enter__()
            except BaseException:
                log.exception("hook %r failed on entering", hook)
                continue
            self._entered.append(manager)

    def exit(self, exc: BaseException | None) -> None:
        """Exits the entered hooks, telling them `exc` (the block's failure)."""
        while self._entered:
            manager = self._entered.pop()
            try:
                manager.__exit__(
                    None if exc is None else type(exc),
                    exc,
                    None if exc is None else exc.__traceback__,
                )
            except BaseException as raised:
                if raised is not exc:
                    log.exception("hook %r failed on exiting", manager)


def entries(headers: Mapping[str, Any], job: str) -> dict[str, str]:
    """The headers hooks set on `job` that can be stored: text names and
    values, at most `HEADERS_MAX` bytes in all; the rest are logged and dropped."""
    kept: dict[str, str] = {}
    size = 0
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            log.warning("header %r of %s dropped: names and values must be text", name, job)
            continue
        size += len(name.encode(errors="replace")) + len(value.encode(errors="replace"))
        if size > HEADERS_MAX:
            log.warning("headers of %s past %d bytes dropped", job, HEADERS_MAX)
            break
        kept[name] = value
    return kept
