"""`App`: where jobs are registered, and the producer/control API.

An App composes a `Registry` (jobs and schedules: what a child needs) and a
`Client` (the database: its store, inserts and enqueue hooks), and is a
`Control` (the calls that read and control jobs, queues and supervisors).
The client, and with it `procqueue.store`, is imported the first time a
method needs the database, so a child that imports its job module loads
no database code.

The child processes import the same module and find the same `App`, so a
job's name and signature mean the same thing at enqueue and at run time.
Arguments are bound against the signature and JSON-encoded with msgspec at
enqueue: bad input raises there and nothing is written.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

import msgspec

from procqueue import errors, models
from procqueue.clock import Clock, from_env
from procqueue.codec import Codec, DecHook, EncHook
from procqueue.jobs import cron, runner
from procqueue.jobs.context import Context
from procqueue.jobs.hooks import Around, Enqueue, Hooks, entries
from procqueue.jobs.options import bind_args
from procqueue.jobs.registry import Job, JobDecorator, Registry
from procqueue.producer.control import Control

if TYPE_CHECKING:
    from procqueue.producer.batches import Batch
    from procqueue.producer.client import Client
    from procqueue.store import Store

P = ParamSpec("P")
R = TypeVar("R")


class App(Control):
    """The registry of jobs and the handle to their database.

    Attributes:
        registry: the registered jobs, a read-only mapping of name to `Job`.
        dsn: the database given, if any (resolved when first opened).
        clock: the time source of every write and wait.

    Args:
        dsn: database; else ``--dsn``, ``$PROCQUEUE_DSN``, the config file,
            ``sqlite:///procqueue.db``.
        clock: the time source (tests pass a manual clock).
        enc_hook: encodes the app's own types in arguments and results
            (msgspec's ``enc_hook``: returns an encodable value, raises
            NotImplementedError for a type it doesn't handle).
        dec_hook: builds them back for annotated parameters (msgspec's
            ``dec_hook(type, value)``). numpy values, paths, enums and sets
            need no hook (`procqueue.codec`).
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        clock: Clock | None = None,
        enc_hook: EncHook | None = None,
        dec_hook: DecHook | None = None,
    ) -> None:
        self.dsn = dsn
        self.migrate = True
        """Whether first use creates or upgrades the schema; tools that only
        read set it False before that, and then refuse a database without
        this version's schema and change nothing."""
        self.clock = clock or from_env()
        self.registry = Registry(self, Codec(enc_hook, dec_hook))
        self._client: Client | None = None
        self._client_lock = threading.Lock()

    @property
    def hooks(self) -> Hooks:
        """Hooks around every run, every enqueue, and attempts whose child
        died: ``@app.hooks.around_run``, ``@app.hooks.around_enqueue``,
        ``@app.hooks.on_run_died`` (docs/hooks.md)."""
        return self.registry.hooks

    @property
    def schedules(self) -> list[cron.Schedule]:
        """The cron schedules registered with `cron`."""
        return self.registry.schedules

    # -- registration -----------------------------------------------------

    @overload
    def job(self, fn: Callable[Concatenate[Context, P], R], /) -> Job[P, R]: ...

    @overload
    def job(self, fn: Callable[P, R], /) -> Job[P, R]: ...

    @overload
    def job(self, fn: None = None, /, **options: Any) -> JobDecorator: ...

    def job(self, fn: Callable[..., R] | None = None, /, **options: Any) -> Any:
        """Registers a job: ``@app.job`` or ``@app.job(queue=..., timeout=...)``.

        Raises ConfigError for a bad option or a name registered twice.
        """

        def register(fn: Callable[..., R]) -> Job[Any, R]:
            return self.registry.register(fn, options)

        return register(fn) if fn is not None else register

    def cron(
        self,
        expr: str,
        *,
        timezone: str = "UTC",
        args: dict[str, Any] | None = None,
        **options: Any,
    ) -> JobDecorator:
        """Registers a job enqueued on every tick of `expr`, once cluster-wide.

        Raises ConfigError at import for a malformed expression (quoted), one
        that never fires, or `args` that don't fit the function.
        """
        cron.validate(expr, timezone)

        def register(fn: Callable[..., R]) -> Job[Any, R]:
            return self.registry.register_cron(
                fn, expr=expr, timezone=timezone, args=args or {}, options=options
            )

        return register

    def using(self, dsn: str | None = None, *, clock: Clock | None = None) -> App:
        """A new App with the same jobs on another database (or clock)."""
        other = App(dsn, clock=clock or self.clock)
        other.migrate = self.migrate
        other.registry = self.registry
        return other

    def failure_handler_job(self, info: models.JobInfo, handler: str) -> models.NewJob:
        """The job that runs `handler` once for `info`, a job that gave up."""
        return self.registry.failure_handler_job(info, handler, now=self.clock.now())

    def run_inline(self, job: Job[Any, R] | str, /, **args: Any) -> Any:
        """Runs one job in this process with no database (tests).

        Applies the same checks as enqueue and the same argument conversion
        as a child; returns the result as decoded from its JSON encoding and
        lets the job's exception propagate.
        """
        target = self.registry.lookup(job if isinstance(job, str) else job.name)
        encoded = bind_args(
            target.name,
            target.arg_signature,
            args,
            codec=self.registry.codec,
            types=target.arg_types,
        )
        return runner.run_inline(target, encoded)

    # -- database ---------------------------------------------------------

    @property
    def client(self) -> Client:
        """The producer/control API on this App's database, created on first use.

        Creating it imports the store code but opens no connection.
        """
        client = self._client  # set once, never reset: no lock once it exists
        if client is not None:
            return client
        with self._client_lock:
            if self._client is None:
                from procqueue.producer.client import (
                    Client,  # here: children never import the store
                )

                self._client = Client(
                    self.registry, dsn=self.dsn, clock=self.clock, migrate=self.migrate
                )
            return self._client

    @property
    def store(self) -> Store:
        """The open store, migrated on first use."""
        return self.client.store

    def wake(self) -> None:
        """Calls every enqueue hook of this App (`on_enqueue`)."""
        self.client.wake()

    def close(self) -> None:
        """Closes the database connection, if open; the next call reopens it."""
        if self._client is not None:
            self._client.close()

    def on_enqueue(self, hook: Callable[[], None]) -> None:
        """Calls `hook` after every enqueue or retry through this App (in-process wake-up)."""
        self.client.on_enqueue(hook)

    def off_enqueue(self, hook: Callable[[], None]) -> None:
        """Undoes one `on_enqueue(hook)`; a no-op if `hook` isn't subscribed."""
        if self._client is not None:
            self._client.off_enqueue(hook)

    # -- producing (reading and controlling: see Control) ------------------

    def enqueue(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        /,
        *,
        connection: object | None = None,
        **options: Any,
    ) -> int:
        """Enqueues job `name` with `args`; returns its id (the existing id for a known `key`).

        Checks everything before opening the database: EnqueueError for bad
        input, with nothing written.
        """
        prepared = self.registry.prepare(name, args, options, now=self.clock.now())
        return self._insert([prepared], [args], connection)[0]

    def enqueue_many(
        self,
        items: Iterable[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
        *,
        connection: object | None = None,
    ) -> list[int]:
        """Enqueues every item in one transaction; all or nothing. Returns ids
        in order. EnqueueError for any bad item, with nothing written."""
        now = self.clock.now()
        prepare = self.registry.prepare
        given = list(items)
        jobs = [prepare(name, args, opts or {}, now=now) for name, args, opts in given]
        return self._insert(jobs, [args for _, args, _ in given], connection)

    def _insert(
        self,
        jobs: list[models.NewJob],
        args: list[dict[str, Any] | None],
        connection: object | None,
    ) -> list[int]:
        """Inserts checked `jobs` inside the `around_enqueue` hooks, with the
        headers they add (`args`: each job's arguments as given)."""
        hooked = self.registry.hooks.enqueue
        if not hooked:
            return self.client.insert(jobs, connection=connection)
        seen = [
            Enqueue(name=j.name, queue=j.queue, args=a or {})
            for j, a in zip(jobs, args, strict=True)
        ]
        around = Around(hooked, seen)
        around.enter()
        try:
            ids = self.client.insert(
                [
                    msgspec.structs.replace(j, headers=entries(s.headers, j.name))
                    if s.headers
                    else j
                    for j, s in zip(jobs, seen, strict=True)
                ],
                connection=connection,
            )
        except BaseException as exc:
            around.exit(exc)
            raise
        for s, id in zip(seen, ids, strict=True):
            s.id = id
        around.exit(None)
        return ids

    # -- batches (see producer.batches) -----------------------------------

    def batch(
        self,
        name: str = "batch",
        *,
        on_complete: Any = None,
        on_success: Any = None,
        meta: dict[str, Any] | None = None,
    ) -> Batch:
        """Creates an open batch; use it as ``with app.batch(...) as b:``.

        Jobs enqueued through this App inside the block (``job.enqueue``,
        ``app.enqueue``, ``app.enqueue_many``) join batch ``b.id``; the
        block's exit seals it. When every member is done, failed or
        cancelled, `on_complete` is enqueued exactly once, in the
        transaction that ends the last member, and `on_success` too when
        all are done; each receives the batch's `BatchInfo`. An empty
        batch, or one never sealed, never fires.

        Raises EnqueueError or ConfigError, having written nothing, for a
        handler that can't take a `BatchInfo` or `meta` that can't be encoded.
        """
        return self.client.batches.open(
            name=name, on_complete=on_complete, on_success=on_success, meta=meta
        )

    def batch_info(self, id: int) -> models.BatchInfo:
        """The batch's counts by state, fraction ended, times; BatchNotFound if none."""
        return self.client.batches.get(id)

    def wait_batch(self, id: int, timeout: float | None = None) -> models.BatchInfo:
        """Blocks until the batch is complete; TimeoutError after `timeout` s."""
        return self.client.batches.wait(id, timeout)

    def batch_results(
        self, id: int, *, state: str | None = None, page: int = 500
    ) -> Iterator[models.JobInfo]:
        """The batch's members with their results, in id order, read in pages."""
        return self.client.batches.results(id, state=state, page=page)

    def batches(
        self, *, name: str | None = None, state: str | None = None, limit: int = 50
    ) -> list[models.BatchInfo]:
        """Batches (state: open, running or complete), newest first."""
        return self.client.batches.recent(name=name, state=state, limit=limit)

    def cancel_batch(self, id: int) -> int:
        """Cancels the batch's members (running ones killed, as `cancel`) and
        seals it; `on_complete` fires once they have all ended."""
        return self.client.batches.cancel(id)

    def retry_batch(self, id: int) -> int:
        """Runs the batch's failed members again; returns how many. A complete
        batch reopens and fires its handlers again when they end."""
        return self.client.batches.retry(id)

    def prune_batches(self, id: int | None = None, *, older_than: float | None = None) -> int:
        """Deletes batch `id` (complete), or the batches complete for over
        `older_than` seconds, with their members; returns how many batches."""
        return self.client.batches.prune(id, older_than=older_than)


def load_app(spec: str) -> App:
    """The App of ``module`` or ``module:attribute``; ConfigError saying why not."""
    module_name, _, attr = spec.partition(":")
    if module_name.endswith(".py") or "/" in module_name:
        parts = module_name.removesuffix(".py").split("/")
        dotted = ".".join(p for p in parts if p not in ("", "."))
        raise errors.ConfigError(
            f"{module_name!r} is a file: name its module instead, e.g. {dotted!r} "
            "(run from the folder that holds it)"
        )
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
