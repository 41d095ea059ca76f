"""Batches for producers: ``with app.batch(...) as b`` and the
calls that read and control batches.

A batch is created open; every job enqueued through the same client inside
the ``with`` block (``job.enqueue``, ``app.enqueue``, ``app.enqueue_many``,
in the same thread or task) joins it, and the block's exit seals it. The
store completes it in the transaction that ends its last member and
enqueues its handlers there (see `procqueue.store._rules`): the
guarantee lives in the database, not here.
"""

from __future__ import annotations

import contextvars
import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import msgspec

from procqueue import errors, models

if TYPE_CHECKING:
    from procqueue.clock import Clock
    from procqueue.jobs.registry import Registry
    from procqueue.store import Store

_WAIT_FIRST_PAUSE_S = 0.01
_WAIT_MAX_PAUSE_S = 0.25
PAGE_DEFAULT = 500
"""Members read per page by `Batches.results`."""
_STATES = frozenset(s.value for s in models.BatchState)


class Batch:
    """An open batch. As a context manager, jobs enqueued inside the block
    join it and the block's exit seals it; a block left by an exception
    leaves it open (it never fires; cancel it, or seal it to let it fire
    for the members it has).

    Attributes:
        id: the batch's id.
        name: its name.
    """

    def __init__(self, batches: Batches, id: int, name: str) -> None:
        self._batches = batches
        self.id = id
        self.name = name
        self._tokens: list[contextvars.Token[Batch | None]] = []

    def __repr__(self) -> str:
        return f"<Batch {self.id} {self.name!r}>"

    def __enter__(self) -> Batch:
        self._tokens.append(self._batches.current.set(self))
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._batches.current.reset(self._tokens.pop())
        if kind is None:
            self.seal()

    def seal(self) -> None:
        """Seals the batch (idempotent): nothing joins it any more, and it
        completes when its last member ends (at once if all have ended; an
        empty batch never completes)."""
        self._batches.seal(self.id)

    def info(self) -> models.BatchInfo:
        """The batch's record now."""
        return self._batches.get(self.id)


class Batches:
    """The batch calls of one `Client` (``client.batches``), on its store
    (opened on first use), registry, clock and wake-up hooks."""

    def __init__(
        self,
        *,
        store: Callable[[], Store],
        registry: Registry,
        clock: Clock,
        wake: Callable[[], None],
    ) -> None:
        self._store = store
        self._registry = registry
        self._clock = clock
        self._wake = wake
        # Per client (a batch id means something in one database only) and
        # per thread or task: another thread's enqueues don't join by accident.
        self.current: contextvars.ContextVar[Batch | None] = contextvars.ContextVar(
            f"procqueue_batch_{id(self)}", default=None
        )

    def join(self, jobs: Sequence[models.NewJob]) -> Sequence[models.NewJob]:
        """`jobs` as members of the batch open in this context, if any."""
        batch = self.current.get()
        if batch is None:
            return jobs
        return [msgspec.structs.replace(job, batch_id=batch.id) for job in jobs]

    def seal(self, id: int) -> None:
        """Seals batch `id` (see `Batch.seal`)."""
        self._store().batch_seal(id=id, now=self._clock.now())

    def open(
        self,
        *,
        name: str,
        on_complete: Any = None,
        on_success: Any = None,
        meta: dict[str, Any] | None = None,
    ) -> Batch:
        """Creates an open batch. Handlers are registered jobs (or their
        names) taking one argument, the `BatchInfo`.

        Raises EnqueueError (ConfigError for a handler that is not a job or
        function) with nothing written.
        """
        if not isinstance(name, str) or not name or len(name) > 200:
            raise errors.EnqueueError("a batch's name must be 1-200 characters")
        if meta is not None and not isinstance(meta, dict):
            raise errors.EnqueueError(f"a batch's meta must be a dict, got {type(meta).__name__}")
        try:
            encoded = msgspec.json.encode(meta or {})
        except (TypeError, ValueError, msgspec.EncodeError, OverflowError) as exc:
            raise errors.EnqueueError(f"the batch's meta cannot be encoded: {exc}") from None
        now = self._clock.now()
        complete = self._callback(on_complete, name, now)
        success = self._callback(on_success, name, now)
        id_ = self._store().batch_create(
            name=name, meta=encoded, on_complete=complete, on_success=success, now=now
        )
        return Batch(self, id_, name)

    def _callback(self, handler: Any, name: str, now: float) -> models.BatchCallback | None:
        """`handler` prepared as a job now, so that a handler that can't take
        a `BatchInfo` fails here rather than when the batch completes."""
        if handler is None:
            return None
        registry = self._registry
        if isinstance(handler, str):
            handler_name = handler
        elif callable(handler):
            handler_name = getattr(handler, "name", None) or (
                f"{handler.__module__}.{handler.__qualname__}"
            )
        else:
            raise errors.ConfigError(f"a batch handler must be a job: {handler!r}")
        if handler_name not in registry:
            # Unlike on_failure=, which registers its function at import in
            # every process, a handler given here would be known only to
            # this producer: the children that run it would not know it.
            raise errors.ConfigError(
                f"batch handler {handler_name!r} is not a registered job; "
                "decorate it with @app.job so that supervisors' children know it"
            )
        params = list(registry.lookup(handler_name).arg_signature.parameters)
        arg = params[0] if params else None
        sample = _placeholder(name, now)
        job = registry.prepare(handler_name, {arg: sample} if arg else {}, {}, now=now)
        # A deadline counts from the completion, not from now.
        deadline = None if job.deadline_at is None else job.deadline_at - now
        return models.BatchCallback(
            job=msgspec.structs.replace(job, args=b"{}", deadline_at=None),
            arg=arg,
            deadline=deadline,
        )

    def get(self, id: int) -> models.BatchInfo:
        """The batch's record; BatchNotFound if there is none."""
        info = self._store().batch_get(id=_batch_id(id))
        if info is None:
            raise errors.BatchNotFound(f"no batch {id}")
        return info

    def wait(self, id: int, timeout: float | None = None) -> models.BatchInfo:
        """Blocks until the batch is complete; TimeoutError after `timeout`
        seconds of the clock's monotonic time."""
        clock = self._clock
        give_up = None if timeout is None else clock.monotonic() + timeout
        pause = _WAIT_FIRST_PAUSE_S
        while True:
            info = self.get(id)
            if info.state == models.BatchState.COMPLETE:
                return info
            if give_up is not None:
                left = give_up - clock.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"batch {id} is still {info.state} after {timeout}s "
                        f"({info.total - info.pending - info.running}/{info.total} ended)"
                    )
                pause = min(pause, left)
            clock.sleep(pause)
            pause = min(pause * 2, _WAIT_MAX_PAUSE_S)

    def results(
        self, id: int, *, state: str | None = None, page: int = PAGE_DEFAULT
    ) -> Iterator[models.JobInfo]:
        """The batch's members in id order (in `state`, if given), read `page`
        at a time, so a batch of any size streams in bounded memory."""
        self.get(id)
        if state is not None and state not in models.JobState.__members__.values():
            raise errors.ConfigError(f"unknown state {state!r}")
        after = 0
        while True:
            members = self._store().batch_members(id=id, after=after, state=state, limit=page)
            yield from members
            if len(members) < page:
                return
            after = members[-1].id

    def recent(
        self, *, name: str | None = None, state: str | None = None, limit: int = 50
    ) -> list[models.BatchInfo]:
        """Batches, newest first."""
        if state is not None and state not in _STATES:
            raise errors.ConfigError(f"unknown batch state {state!r}; one of {sorted(_STATES)}")
        return self._store().batch_list(name=name, state=state, limit=limit)

    def cancel(self, id: int) -> int:
        """Cancels the batch's pending members now and its running ones
        through their supervisors, and seals it; returns how many members."""
        return self._store().batch_cancel(id=_batch_id(id), now=self._clock.now())

    def retry(self, id: int) -> int:
        """Runs the batch's failed members again; it completes again after."""
        n = self._store().batch_retry(id=_batch_id(id), now=self._clock.now())
        self._wake()  # the client's own hooks (in-process supervisors)
        return n

    def prune(self, id: int | None = None, *, older_than: float | None = None) -> int:
        """Deletes batch `id`, or every batch complete for over `older_than`
        seconds, with their members; returns how many batches."""
        store = self._store()
        if id is not None:
            store.batch_delete(id=id)
            return 1
        if older_than is None or older_than < 0:
            raise errors.ConfigError("prune needs a batch id or older_than >= 0 seconds")
        before = self._clock.now() - older_than
        total = 0
        while n := store.batch_prune(before=before, limit=100):
            total += n
        return total


def _placeholder(name: str, now: float) -> models.BatchInfo:
    """A `BatchInfo` to check a handler's arguments against at creation."""
    at = dt.datetime.fromtimestamp(now, tz=dt.UTC)
    return models.BatchInfo(
        id=0,
        name=name,
        state=models.BatchState.OPEN,
        meta={},
        total=0,
        pending=0,
        running=0,
        done=0,
        failed=0,
        cancelled=0,
        fraction=0.0,
        created_at=at,
        sealed_at=None,
        started_at=None,
        finished_at=None,
        cancelled_at=None,
        completions=0,
        on_complete=None,
        on_success=None,
    )


def _batch_id(id: int) -> int:
    """`id` if a batch could have it; else BatchNotFound, the same on both backends."""
    if not models.is_id(id):
        raise errors.BatchNotFound(f"no batch {id}")
    return id
