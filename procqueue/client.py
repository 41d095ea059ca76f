"""`Client`: the producer and control API over one database.

It owns the store (opened and migrated on first use) and validates every
enqueue against a `Registry` before writing. `App` creates one lazily, the
first time a method needs the database, so that importing job code (what a
child does) never imports `procqueue.store`.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from procqueue import _clock, batching, errors, models
from procqueue import store as store_mod
from procqueue.registry import Registry

RETRYABLE = ("failed", "cancelled")
CANCELLABLE = ("pending", "running")

_WAIT_FIRST_PAUSE_S = 0.005
_WAIT_MAX_PAUSE_S = 0.1
"""`wait` polls quickly at first (short jobs) and backs off to this."""


class Client:
    """Enqueues, reads and controls the jobs of one database.

    Thread-safe: the store is opened once under a lock, and wake-up hooks
    are replaced, never changed in place, so a hook list being iterated
    never changes under an enqueue.

    Args:
        registry: the jobs enqueues are checked and encoded against.
        dsn: the database; None resolves ``$PROCQUEUE_DSN``, the config
            file, then ``sqlite:///procqueue.db`` when the store is opened.
        clock: the time source for every write and for `wait`.
    """

    def __init__(self, registry: Registry, *, dsn: str | None, clock: _clock.Clock) -> None:
        self.registry = registry
        self.dsn = dsn
        self.clock = clock
        self._store: store_mod.Store | None = None
        self._lock = threading.Lock()
        self._wake_hooks: tuple[Callable[[], None], ...] = ()
        self.batches = batching.Batches(self)
        """Batch calls; enqueues inside ``with client.batches.open(...)`` join it."""

    @property
    def store(self) -> store_mod.Store:
        """The open store, migrated on first use (again after `close`)."""
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
        """Closes the store; the next call opens it again. Idempotent."""
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def on_enqueue(self, hook: Callable[[], None]) -> None:
        """Calls `hook` after every enqueue or retry through this client."""
        with self._lock:
            self._wake_hooks = (*self._wake_hooks, hook)

    def off_enqueue(self, hook: Callable[[], None]) -> None:
        """Stops calling `hook` (one subscription of it); a no-op if it isn't subscribed."""
        with self._lock:
            hooks = list(self._wake_hooks)
            if hook in hooks:
                hooks.remove(hook)
                self._wake_hooks = tuple(hooks)

    def _wake(self) -> None:
        for hook in self._wake_hooks:
            hook()

    # -- producing --------------------------------------------------------

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

        Raises EnqueueError, having written nothing, for input that does
        not fit the registered job.
        """
        prepared = self.registry.prepare(name, args, options, now=self.clock.now())
        return self._insert(self.batches.join([prepared]), connection)[0]

    def enqueue_many(
        self,
        items: Iterable[tuple[str, dict[str, Any] | None, dict[str, Any] | None]],
        *,
        connection: object | None = None,
    ) -> list[int]:
        """Enqueues a batch in one transaction; all or nothing. Returns ids in order."""
        now = self.clock.now()
        prepare = self.registry.prepare
        jobs = [prepare(name, args, opts or {}, now=now) for name, args, opts in items]
        return self._insert(self.batches.join(jobs), connection) if jobs else []

    def _insert(self, jobs: Sequence[models.NewJob], connection: object | None) -> list[int]:
        ids = self.store.job_insert_many(jobs=jobs, now=self.clock.now(), connection=connection)
        self._wake()
        return ids

    # -- controlling ------------------------------------------------------

    def get(self, id: int) -> models.JobInfo:
        """The job's record with its attempt history; JobNotFound if there is none."""
        info = self.store.job_get(id=id)
        if info is None:
            raise errors.JobNotFound(f"no job {id}")
        if info.state != models.JobState.RUNNING:
            return info
        return self._orphans([info])[0]

    def wait(self, id: int, timeout: float | None = None) -> models.JobInfo:
        """Blocks until the job is done, failed or cancelled and returns it;
        TimeoutError after `timeout` seconds of the clock's monotonic time."""
        give_up = None if timeout is None else self.clock.monotonic() + timeout
        pause = _WAIT_FIRST_PAUSE_S
        while True:
            info = self.store.job_get(id=id, history=False)  # one query a poll
            if info is None:
                raise errors.JobNotFound(f"no job {id}")
            if info.state in models.TERMINAL_STATES:
                return self.get(id)
            if give_up is not None:
                left = give_up - self.clock.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {id} is still {info.state} after {timeout}s")
                pause = min(pause, left)
            self.clock.sleep(pause)
            pause = min(pause * 2, _WAIT_MAX_PAUSE_S)

    def cancel(self, id: int) -> models.JobState:
        """Cancels a pending job now; a running one has its child killed by its supervisor."""
        return self.store.job_cancel(id=id, now=self.clock.now())

    def retry(self, id: int) -> None:
        """Runs a failed or cancelled job again, with attempts reset."""
        self.store.job_retry(id=id, now=self.clock.now())
        self._wake()

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
        found = self.store.job_list(state=state, queue=queue, name=name, limit=limit)
        if any(info.state == models.JobState.RUNNING for info in found):
            found = self._orphans(found)
        return found

    def stats(self) -> dict[str, models.QueueInfo]:
        """Per queue: counts per state, limit, paused flag, oldest pending age."""
        return {q.name: q for q in self.store.queue_list(now=self.clock.now())}

    def pause(self, queue: str, *, create: bool = False) -> None:
        """Stops new claims from `queue` on every supervisor.

        Raises QueueNotFound for a queue nobody knows (a typo), unless `create`.
        """
        self._known(queue, create)
        self.store.queue_set_paused(queue=queue, paused=True)

    def resume(self, queue: str, *, create: bool = False) -> None:
        """Lets every supervisor claim from `queue` again (QueueNotFound as for `pause`)."""
        self._known(queue, create)
        self.store.queue_set_paused(queue=queue, paused=False)

    # -- operations (issue 14) --------------------------------------------

    def _orphans(self, infos: list[models.JobInfo]) -> list[models.JobInfo]:
        """`infos` with `orphaned` set on running jobs whose owner's heartbeat is stale."""
        now = self.clock.now()
        alive = {s.owner for s in self.store.supervisor_list(now=now) if s.alive}
        return [
            msgspec.structs.replace(info, orphaned=True)
            if info.state == models.JobState.RUNNING and info.owner not in alive
            else info
            for info in infos
        ]

    def supervisors(self) -> list[models.SupervisorInfo]:
        """Every supervisor that sent a heartbeat in the last day, `alive` or not."""
        return self.store.supervisor_list(now=self.clock.now())

    def queues(self) -> list[models.QueueInfo]:
        """Every queue with jobs or settings: limit (and who set it), paused, counts."""
        return self.store.queue_list(now=self.clock.now())

    def _known(self, queue: str, create: bool) -> None:
        if create or not queue:
            return
        if any(q.name == queue for q in self.queues()):
            return
        if any(queue in (s.queues or ()) for s in self.supervisors() if s.alive):
            return
        if any(job.options.queue == queue for job in self.registry.values()):
            return
        raise errors.QueueNotFound(
            f"no queue {queue!r}: it has no jobs, no settings and no supervisor claims from it "
            "(create it explicitly to set it up ahead of its jobs)"
        )

    def set_limit(self, queue: str, limit: int | None, *, create: bool = False) -> None:
        """Sets (None: clears) `queue`'s cluster-wide limit, as an operator;
        supervisors started with ``--queue`` keep it (QueueNotFound as for `pause`)."""
        if limit is not None and (isinstance(limit, bool) or limit < 1):
            raise errors.ConfigError(f"a queue limit must be an integer >= 1, got {limit!r}")
        self._known(queue, create)
        self.store.queue_set_limit(queue=queue, limit=limit, by="operator", now=self.clock.now())

    def _filter(
        self,
        verb: str,
        allowed: tuple[str, ...],
        state: str | None,
        queue: str | None,
        name: str | None,
        since: dt.datetime | None,
    ) -> dict[str, Any]:
        if state is not None and state not in allowed:
            raise errors.InvalidState(
                f"only {' or '.join(allowed)} jobs {verb}; --state {state} matches none"
            )
        if since is not None and since.tzinfo is None:
            raise errors.ConfigError("since must be a timezone-aware datetime")
        return {
            "states": [state] if state else list(allowed),
            "queue": queue,
            "name": name,
            "since": None if since is None else since.timestamp(),
        }

    def count_where(
        self,
        action: str,
        *,
        state: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        since: dt.datetime | None = None,
    ) -> int:
        """How many jobs `retry_where` or `cancel_where` (`action`) would act on now."""
        allowed = RETRYABLE if action == "retry" else CANCELLABLE
        return self.store.job_count_where(
            **self._filter(action, allowed, state, queue, name, since)
        )

    def retry_where(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        since: dt.datetime | None = None,
    ) -> int:
        """`retry` of every failed or cancelled job (or only those in `state`)
        matching every filter given (`since`: enqueued at or after); one
        statement. Returns how many."""
        where = self._filter("retry", RETRYABLE, state, queue, name, since)
        n = self.store.job_retry_where(**where, now=self.clock.now())
        if n:
            self._wake()
        return n

    def cancel_where(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        since: dt.datetime | None = None,
    ) -> tuple[int, int]:
        """`cancel` of every pending or running job (or only those in `state`)
        matching every filter given. Returns (cancelled now, running ones
        whose supervisors now stop them)."""
        where = self._filter("cancel", CANCELLABLE, state, queue, name, since)
        return self.store.job_cancel_where(**where, now=self.clock.now())
