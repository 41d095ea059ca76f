"""The one storage interface every backend implements.

Methods are named noun_verb, take keyword arguments only, and receive the
time as ``now`` from the caller's clock: no query asks the database what
time it is. Every write about a running job is fenced by ``(id, attempt)``
and only applies while the job is still ``running`` at that attempt, so a
supervisor that lost its lease can never overwrite the one that took over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import msgspec

from procqueue import models

SCHEMA_VERSION = 5
"""The schema version this code writes and reads."""


class Candidate(msgspec.Struct, frozen=True):
    """A pending job a claim may take, in claim order."""

    id: int
    queue: str
    serial_key: str | None
    room: int | None
    """How many more jobs of its queue may start now (None: the queue has no limit)."""


class Cycle(msgspec.Struct, frozen=True):
    """What one record-and-claim transaction did."""

    lost: list[int]
    """Ids whose outcome was not recorded: the attempt was no longer theirs."""
    claimed: list[models.ClaimedJob]


class Renewal(msgspec.Struct, frozen=True):
    """The result of renewing an owner's leases."""

    alive: set[tuple[int, int]]
    """(id, attempt) of every job the owner still holds."""
    cancel_requested: set[int]
    """Ids among them whose cancel was requested."""


class Store(Protocol):
    """A job database. An instance is safe to share between threads."""

    backend: str

    def migrate(self, *, now: float) -> int:
        """Creates or upgrades the schema; returns its version. Safe to race.

        `now` (the caller's clock) is recorded as the time of each migration applied.
        Raises SchemaTooNew when the database was migrated by newer code.
        """
        ...

    def close(self) -> None:
        """Releases connections and wake-up sockets; calls after it raise StoreError."""
        ...

    def job_insert_many(
        self, *, jobs: Sequence[models.NewJob], now: float, connection: object | None = None
    ) -> list[int]:
        """Inserts `jobs` in one transaction; returns their ids in order.

        With `connection` (PostgreSQL: a psycopg connection of the caller's),
        the insert joins that connection's transaction and becomes visible,
        and wakes supervisors, only when the caller commits.

        A job whose `key` already exists is not inserted: its slot in the
        result holds the existing job's id.
        """
        ...

    def wake_fileno(self) -> int | None:
        """A file descriptor that becomes readable when there may be new work
        for a supervisor (PostgreSQL LISTEN, SQLite datagram socket), or None
        when there is none now (ask again later; polling covers the gap).

        Every store wakes them after committing an enqueue, a retry, the
        cancel of a running job (its supervisor should act at once) and the
        resume of a queue.
        """
        ...

    def wake_drain(self) -> bool:
        """Consumes pending wake-ups; True if there was at least one. Never raises."""
        ...

    def job_get(self, *, id: int, history: bool = True) -> models.JobInfo | None:
        """One job's record, with its attempt history unless `history` is False."""
        ...

    def job_list(
        self, *, state: str | None, queue: str | None, name: str | None, limit: int
    ) -> list[models.JobInfo]:
        """Jobs matching every given filter, newest first."""
        ...

    def job_claim(
        self,
        *,
        owner: str,
        queues: Sequence[str] | None,
        count: int,
        lease_until: float,
        now: float,
    ) -> list[models.ClaimedJob]:
        """Atomically moves up to `count` due pending jobs to running for `owner`.

        Order: priority (higher first), then run_at, then id. Skips paused
        queues, jobs past their deadline, queues at their limit and serial
        keys already running, counting every owner's running jobs.
        """
        ...

    def job_record_and_claim(
        self,
        *,
        outcomes: Sequence[models.Outcome],
        owner: str,
        queues: Sequence[str] | None,
        count: int,
        lease_until: float,
        now: float,
    ) -> Cycle:
        """`job_record_many` then `job_claim`, in one transaction: a busy
        supervisor's loop pays one commit for both."""
        ...

    def job_renew_leases(self, *, owner: str, lease_until: float) -> Renewal:
        """Extends, in one statement, the lease of every job `owner` holds."""
        ...

    def job_cancel_requested(self, *, owner: str) -> set[int]:
        """Ids of running jobs held by `owner` whose cancel was requested."""
        ...

    def job_record_many(self, *, outcomes: Sequence[models.Outcome], now: float) -> list[int]:
        """Records outcomes in one transaction, each fenced by (id, attempt).

        Returns the ids whose fence failed (the attempt is no longer theirs
        to record); the others are written.
        """
        ...

    def job_set_progress(
        self, *, id: int, attempt: int, text: str | None, fraction: float | None
    ) -> bool:
        """Sets progress (fenced); False when the attempt is no longer running."""
        ...

    def job_set_pid(self, *, id: int, attempt: int, pid: int) -> bool:
        """Records the child running an attempt (fenced); False when it is no longer running."""
        ...

    def job_save_step(self, *, id: int, attempt: int, name: str, value: bytes) -> bool:
        """Saves a durable step's JSON result (fenced); False when the lease is lost."""
        ...

    def job_cancel(self, *, id: int, now: float) -> models.JobState:
        """Cancels a pending job now, or flags a running one for its supervisor.

        Returns the job's state afterwards (``cancelled`` or ``running``).
        Raises JobNotFound, or InvalidState for a finished job.
        """
        ...

    def job_retry(self, *, id: int, now: float) -> None:
        """Makes a failed or cancelled job pending again with attempts reset.

        Raises JobNotFound, or InvalidState for a job in another state.
        """
        ...

    def job_rescue_expired(self, *, now: float) -> int:
        """Running jobs whose lease passed: pending again (the attempt is
        spent), failed if that was the last attempt, cancelled if a cancel
        was requested. Returns how many."""
        ...

    def job_owners_running(self, *, host: str) -> list[str]:
        """Owners (``host:pid:token``) on `host` that hold running jobs."""
        ...

    def job_expire_owner(self, *, owner: str, until: float) -> int:
        """Brings the leases of `owner`'s running jobs forward to `until` (it
        is gone), so that a rescue at or after `until` takes them."""
        ...

    def job_fail_past_deadline(self, *, now: float) -> int:
        """Pending jobs past their deadline fail with "passed its deadline"."""
        ...

    def job_prune(self, *, states: Iterable[str], before: float, limit: int) -> int:
        """Deletes up to `limit` jobs in `states` finished before `before`."""
        ...

    def job_sweep_failures(
        self,
        *,
        now: float,
        limit: int,
        handler_job: Callable[[models.JobInfo, str], models.NewJob],
    ) -> int:
        """Enqueues the on_failure handler of up to `limit` jobs that gave up.

        In one transaction per batch: the handler job built by
        `handler_job(info, handler_name)` is inserted and the failed job marked,
        so racing sweepers enqueue each handler once. A job whose handler
        can't be built (it raised) is marked and skipped. Returns how many.
        """
        ...

    def chore_claim(self, *, name: str, every: float, now: float) -> bool:
        """True for exactly one caller per `every` seconds, cluster-wide."""
        ...

    def queue_set_limit(
        self, *, queue: str, limit: int | None, by: str | None = None, now: float | None = None
    ) -> None:
        """Sets (None: clears) `queue`'s limit; `by` says who, for ``procqueue queues``."""
        ...

    def queue_set_paused(self, *, queue: str, paused: bool) -> None: ...

    def queue_list(self, *, now: float) -> list[models.QueueInfo]:
        """Every queue that has jobs or settings, with counts per state."""
        ...

    # -- operations (issue 14): see store/_sql_ops.py ----------------------

    def attempt_list(self, *, id: int) -> list[models.AttemptInfo]:
        """Every recorded attempt of job `id`, oldest first."""
        ...

    def supervisor_beat(
        self,
        *,
        owner: str,
        spec: str,
        version: str,
        queues: Sequence[str] | None,
        limits: dict[str, int],
        workers: int,
        busy: int,
        beat_every: float,
        started_at: float,
        now: float,
    ) -> None:
        """Upserts `owner`'s heartbeat row (and forgets rows silent for a day)."""
        ...

    def supervisor_remove(self, *, owner: str) -> None: ...

    def supervisor_list(self, *, now: float) -> list[models.SupervisorInfo]:
        """Every supervisor row, `alive` judged at `now`."""
        ...

    def queue_init_limit(
        self, *, queue: str, limit: int, by: str, now: float
    ) -> tuple[int | None, str | None]:
        """Sets the limit only if nobody set or cleared it; returns (limit, by) in force."""
        ...

    def job_count_where(
        self, *, states: Sequence[str], queue: str | None, name: str | None, since: float | None
    ) -> int: ...

    def job_retry_where(
        self,
        *,
        states: Sequence[str],
        queue: str | None,
        name: str | None,
        since: float | None,
        now: float,
    ) -> int:
        """Retries every failed or cancelled job matching; returns how many."""
        ...

    def job_cancel_where(
        self,
        *,
        states: Sequence[str],
        queue: str | None,
        name: str | None,
        since: float | None,
        now: float,
    ) -> tuple[int, int]:
        """Cancels every pending or running job matching; (cancelled, cancelling)."""

    # -- batches (issue 15) ------------------------------------------------
    # A job joins a batch through `NewJob.batch_id`; `job_insert_many`
    # refuses (InvalidState, nothing written) to add one to a sealed batch.
    # Every call that ends a job (`job_record_and_claim`, `job_cancel`,
    # `job_rescue_expired`, `job_fail_past_deadline`, an undecodable claim)
    # completes, in its own transaction, each batch whose last open member it
    # ended: the batch's handler jobs are inserted there, once per completion.

    def batch_create(
        self,
        *,
        name: str,
        meta: bytes,
        on_complete: models.BatchCallback | None,
        on_success: models.BatchCallback | None,
        now: float,
    ) -> int:
        """Creates an open batch; returns its id. `meta` is JSON of an object."""
        ...

    def batch_seal(self, *, id: int, now: float) -> bool:
        """Seals the batch (idempotent): nothing joins it any more, and it
        completes once every member is terminal (now, if they already are,
        and it has any). True if it completed in this call.
        Raises BatchNotFound."""
        ...

    def batch_get(self, *, id: int) -> models.BatchInfo | None: ...

    def batch_list(
        self, *, name: str | None, state: str | None, limit: int
    ) -> list[models.BatchInfo]:
        """Batches with that name and state (open, running, complete), newest first."""
        ...

    def batch_members(
        self, *, id: int, after: int, state: str | None, limit: int
    ) -> list[models.JobInfo]:
        """Up to `limit` members with ids above `after` (and in `state`), in id order."""
        ...

    def batch_cancel(self, *, id: int, now: float) -> int:
        """Cancels the batch: pending members now, running ones through their
        supervisors (as `job_cancel`); seals it. Returns how many members
        were cancelled or flagged. Raises BatchNotFound."""
        ...

    def batch_retry(self, *, id: int, now: float) -> int:
        """Runs the batch's failed members again (attempts reset) and reopens
        it if complete, so it completes again. Returns how many. Raises BatchNotFound."""
        ...

    def batch_delete(self, *, id: int) -> int:
        """Deletes a complete batch and its members; returns how many members.
        Raises BatchNotFound, or InvalidState for a batch not complete."""
        ...

    def batch_prune(self, *, before: float, limit: int) -> int:
        """Deletes up to `limit` batches completed before `before`, with their
        members; returns how many batches."""
        ...

    def batch_sweep(self, *, now: float, limit: int) -> int:
        """Completes up to `limit` sealed batches whose members all ended but
        that are not complete (a safety net: every path that ends a job
        completes its batch itself). Returns how many."""
        ...

    def batch_member_counts(self) -> list[tuple[str, str, int]]:
        """``(batch name, state, members)`` over the batches not complete."""
        ...


def choose(candidates: Iterable[Candidate], *, count: int) -> list[int]:
    """The ids a claim takes from `candidates`, which are in claim order and
    already exclude full queues and running serial keys.

    Within the batch no queue passes its room and no serial key is taken
    twice. Shared by every backend so that limits and serial keys mean the
    same thing everywhere; the caller runs it inside the transaction (or
    lock) that makes each candidate's room current.
    """
    taken: list[int] = []
    used: dict[str, int] = {}
    serial: set[str] = set()
    for c in candidates:
        if len(taken) >= count:
            break
        if c.room is not None and used.get(c.queue, 0) >= c.room:
            continue
        if c.serial_key is not None:
            if c.serial_key in serial:
                continue
            serial.add(c.serial_key)
        used[c.queue] = used.get(c.queue, 0) + 1
        taken.append(c.id)
    return taken


def queue_infos(
    *,
    settings: dict[str, tuple[int | None, bool, str | None, float | None]],
    counts: Iterable[tuple[str, str, int, float | None]],
    now: float,
) -> list[models.QueueInfo]:
    """Folds per-(queue, state) counts and queue settings into QueueInfo rows."""
    per: dict[str, dict[str, Any]] = {}
    for name, (limit, paused, by, at) in settings.items():
        per[name] = {"name": name, "limit": limit, "paused": paused, "limit_by": by}
        if at is not None:
            per[name]["limit_at"] = models.to_datetime(at)
    for queue, state, n, oldest in counts:
        row = per.setdefault(queue, {"name": queue, "limit": None, "paused": False})
        row[state] = n
        # the pending job that waits longest: due since its run_at (not its creation)
        if state == models.JobState.PENDING and oldest is not None:
            row["oldest_pending_age"] = max(0.0, now - oldest)
    return [msgspec.convert(per[name], models.QueueInfo) for name in sorted(per)]
