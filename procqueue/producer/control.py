"""`Control`: the calls that read and control jobs, queues and supervisors,
written once for `App` (which opens its client on first use) and run over
the one store of a database.

Every call validates its input before touching the store (JobNotFound,
InvalidState, ConfigError the same on both backends). Importing this module
imports no store code: the store arrives through `store`.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import msgspec

from procqueue import errors, models, rates
from procqueue.clock import Clock

if TYPE_CHECKING:
    from procqueue.jobs.registry import Registry
    from procqueue.store import Store

RETRYABLE = ("failed", "cancelled")
CANCELLABLE = ("blocked", "pending", "running")

_WAIT_FIRST_PAUSE_S = 0.005
_WAIT_MAX_PAUSE_S = 0.1
"""`wait` polls quickly at first (short jobs) and backs off to this."""


class Control:
    """Reads and controls the jobs of one database.

    A subclass provides `store` (the open store), `clock`, `registry` (the
    jobs a queue name may belong to) and `wake` (called after a job became
    due through this process).
    """

    clock: Clock
    registry: Registry

    @property
    def store(self) -> Store:
        raise NotImplementedError

    def wake(self) -> None:
        raise NotImplementedError

    def get(self, id: int) -> models.JobInfo:
        """The job's record with its attempt history; JobNotFound if there is none."""
        info = self.store.job_get(id=_job_id(id))
        if info is None:
            raise errors.JobNotFound(f"no job {id}")
        if info.state not in models.HELD_STATES:
            return info
        return self._orphans([info])[0]

    def dependencies(self, ids: list[int]) -> list[models.Dependency]:
        """The dependencies of the jobs `ids` (what each was enqueued `after`),
        by job then dependency, with each dependency's name and state."""
        return self.store.job_dependencies(ids=[i for i in ids if models.is_id(i)])

    def wait(self, id: int, timeout: float | None = None) -> models.JobInfo:
        """Blocks until the job is done, failed or cancelled and returns it;
        TimeoutError after `timeout` seconds of the clock's monotonic time."""
        give_up = None if timeout is None else self.clock.monotonic() + timeout
        pause = _WAIT_FIRST_PAUSE_S
        while True:
            info = self.store.job_get(id=_job_id(id), history=False)  # one query a poll
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

    def result(self, id: int, timeout: float | None = None) -> Any:
        """Waits for the job and returns its result (decoded from JSON); if it
        failed or was cancelled, raises JobFailed with its record (error and
        attempt history). TimeoutError after `timeout` s, as `wait`."""
        info = self.wait(id, timeout)
        if info.state == models.JobState.DONE:
            return info.result
        line = next((ln for ln in (info.error or "").splitlines() if ln.strip()), "")
        raise errors.JobFailed(f"job {id} {info.state.value}" + (f": {line}" if line else ""), info)

    def cancel(self, id: int) -> models.JobState:
        """Cancels a pending job now; a running one has its child killed by its supervisor."""
        return self.store.job_cancel(id=_job_id(id), now=self.clock.now())

    def retry(self, id: int) -> None:
        """Runs a failed or cancelled job again, with attempts reset."""
        self.store.job_retry(id=_job_id(id), now=self.clock.now())
        self.wake()

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
        if any(info.state in models.HELD_STATES for info in found):
            found = self._orphans(found)
        return found

    def stats(self) -> dict[str, models.QueueInfo]:
        """Per queue: counts per state, limit, paused flag, oldest pending age."""
        return {q.name: q for q in self.store.queue_list(now=self.clock.now())}

    def throughput(self, minutes: int = 15) -> models.Throughput:
        """Jobs done and failed per minute over the last `minutes`, counted by the store."""
        return self.store.job_finished_per_minute(minutes=minutes, now=self.clock.now())

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

    def _orphans(self, infos: list[models.JobInfo]) -> list[models.JobInfo]:
        """`infos` with `orphaned` set on running jobs whose owner's heartbeat is stale."""
        now = self.clock.now()
        alive = {s.owner for s in self.store.supervisor_list(now=now) if s.alive}
        return [
            msgspec.structs.replace(info, orphaned=True)
            if info.state in models.HELD_STATES and info.owner not in alive
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

    def set_rate(self, queue: str, rate: str | None, *, create: bool = False) -> None:
        """Sets (None: clears) `queue`'s cluster-wide rate, ``"N/s"``, ``"N/m"``
        or ``"N/h"`` starts per sliding window (ConfigError for another
        text; QueueNotFound as for `pause`)."""
        if rate is not None:
            try:
                rates.parse_rate(rate)
            except ValueError as exc:
                raise errors.ConfigError(str(exc)) from None
        self._known(queue, create)
        self.store.queue_set_rate(queue=queue, rate=rate, now=self.clock.now())

    def waits(self, id: int) -> list[str]:
        """Why the pending job `id` is not running yet though due: each rate
        it is throttled by (until when) and its group's limit when reached;
        empty otherwise."""
        return self.store.job_waits(id=id, now=self.clock.now())

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
            self.wake()
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


def _job_id(id: int) -> int:
    """`id` if a job could have it; else JobNotFound, the same on both backends."""
    if not models.is_id(id):
        raise errors.JobNotFound(f"no job {id}")
    return id
