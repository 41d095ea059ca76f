"""The supervisor's chores: rescuing expired leases, failing jobs past their
deadline, enqueuing cron ticks and on_failure handlers, pruning.

Each chore is safe with any number of supervisors: rescues and deadline
failures are single fenced statements, cron ticks and handler jobs are
deduplicated by key (and, for handlers, marked in the same transaction),
and pruning is taken by one supervisor per hour through a chore row.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
from typing import Any

from procqueue import models
from procqueue.jobs import cron
from procqueue.producer.app import App
from procqueue.store.base import Store
from procqueue.supervisor.settings import Settings

log = logging.getLogger("procqueue.supervisor")

PRUNE_EVERY_S = 3600.0
PRUNE_BATCH = 500
"""Rows deleted per statement: a table of millions never holds a long lock,
and a batch (about 35 ms with a million rows to prune) holds the database
thread for less than the work the children hold in reserve, so claims and
outcomes never wait long behind it."""
PRUNE_REST_BUSY = 4.0
"""While the supervisor holds jobs, the database thread rests this many times a
prune batch's time before the next: pruning then takes at most a fifth of that
thread and of its database backend, whose CPU the children share (at half,
a million rows pruned beside a drain slowed it by a fifth on 2 cores). Idle,
it rests as long again."""
FAILURE_SWEEP_BATCH = 100
ORPHAN_GRACE_S = 2.0
"""After a supervisor on this host is seen gone, how long its jobs wait
before they are rescued (its children end their runs on their own first)."""


def prune_rest(took: float, *, busy: bool) -> float:
    """How long the database thread is left to claims and outcomes after a
    prune batch that took `took` seconds (`busy`: the supervisor holds jobs)."""
    return took * (PRUNE_REST_BUSY if busy else 1.0)


class Maintenance:
    """One supervisor's share of the cluster's chores."""

    def __init__(self, *, app: App, store: Store, settings: Settings) -> None:
        self.app = app
        self.store = store
        self.settings = settings
        self.cron_after: dict[tuple[str, str], float] = {}
        self.pruning = False
        self.pruned = 0
        self.pruned_batches = 0
        self._prune_after = 0.0
        """When the next prune batch may start (`time.monotonic`, real time:
        a pacing that a test's stopped clock must not turn into a stall)."""

    def step(self, now: float) -> bool:
        """One pass of every chore (on the database thread; StoreError
        propagates); True if jobs may have become claimable."""
        self._rescue_orphans(now)
        woke = bool(self.store.job_rescue_expired(now=now))
        if woke:
            log.warning("jobs whose leases expired were made available again")
        self.store.job_fail_past_deadline(now=now)
        if self.settings.cron and self.app.schedules:
            woke = self._cron(now) or woke
        swept = self.store.job_sweep_failures(
            now=now, limit=FAILURE_SWEEP_BATCH, handler_job=self.app.failure_handler_job
        )
        swept += self.store.batch_sweep(now=now, limit=FAILURE_SWEEP_BATCH)
        keep_forever = self.settings.retention_days == 0
        if (
            not self.pruning
            and not keep_forever
            and self.store.chore_claim(name="prune", every=PRUNE_EVERY_S, now=now)
        ):
            self.pruning = True
            self.pruned = 0
            self.pruned_batches = 0
            # groups idle for a pruning period leave the claims' rotation
            self.store.flow_groups_prune(before=now - PRUNE_EVERY_S)
        return woke or bool(swept)

    def _rescue_orphans(self, now: float) -> None:
        """Fast rescue on one host: the jobs of a supervisor on this machine
        whose process is gone are rescued `ORPHAN_GRACE_S` from now instead
        of when their lease runs out. Its children end their jobs as soon as
        their pipe from it ends; the grace covers that."""
        host = socket.gethostname()
        for owner in self.store.job_owners_running(host=host):
            pid = owner[len(host) + 1 :].split(":", 1)[0]
            if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
                continue
            if self.store.job_expire_owner(owner=owner, until=now + ORPHAN_GRACE_S):
                log.warning(
                    "supervisor %s is gone: its jobs are rescued in %gs", owner, ORPHAN_GRACE_S
                )

    def prune_wait(self) -> float:
        """Seconds before the next prune batch may start (0: now)."""
        return max(0.0, self._prune_after - time.monotonic())

    def prune_batch(self, now: float, *, busy: bool = False) -> None:
        """Deletes one bounded batch of expired done/cancelled jobs. A batch
        holds the database thread, and the supervisor's claims and outcomes
        queue behind it: the next one starts (`prune_wait`) after as long
        again, or `PRUNE_REST_BUSY` times as long when the supervisor holds
        jobs (`busy`), so pruning takes at most half of that thread, or a
        fifth while jobs run."""
        began = time.monotonic()
        try:
            self._prune(now)
        finally:
            ended = time.monotonic()
            self._prune_after = ended + prune_rest(ended - began, busy=busy)

    def _prune(self, now: float) -> None:
        before = now - self.settings.retention_days * 86400
        n = self.store.job_prune(states=("done", "cancelled"), before=before, limit=PRUNE_BATCH)
        self.pruned += n
        # Members of batches are not pruned as jobs (a batch's counts must not
        # change under it): a batch complete for the retention period goes
        # with its members, one batch per pass (in bounded statements).
        if n < PRUNE_BATCH and self.store.batch_prune(before=before, limit=1):
            self.pruned_batches += 1
        elif n < PRUNE_BATCH:
            self.pruning = False
            if self.pruned or self.pruned_batches:
                log.info(
                    "pruned %d finished jobs and %d batches older than %g days",
                    self.pruned,
                    self.pruned_batches,
                    self.settings.retention_days,
                )

    def _cron(self, now: float) -> bool:
        jobs: list[models.NewJob] = []
        advanced: dict[tuple[str, str], float] = {}
        for schedule in self.app.schedules:
            ident = (schedule.job, schedule.expr)
            after = self.cron_after.get(ident)
            if after is None:  # at start: the current tick, never the ones before it
                previous = cron.previous_tick(schedule, now)
                after = now if previous is None else previous - 1e-3
            ticks = cron.ticks_between(schedule, after, now)
            if len(ticks) == cron.MAX_TICKS_PER_PASS:
                log.warning(
                    "cron %s: clock jumped; enqueued %d ticks and skipped the rest",
                    schedule.job,
                    len(ticks),
                )
            advanced[ident] = now
            options: dict[str, Any] = {"queue": schedule.queue} if schedule.queue else {}
            for tick in ticks:
                at = dt.datetime.fromtimestamp(tick, tz=dt.UTC)
                jobs.append(
                    self.app.registry.prepare(
                        schedule.job,
                        schedule.args,
                        {**options, "key": cron.tick_key(schedule, tick), "run_at": at},
                        now=now,
                    )
                )
        if jobs:  # a failure propagates before `advanced` is kept: the next pass retries
            self.store.job_insert_many(jobs=jobs, now=now)
        self.cron_after.update(advanced)
        return bool(jobs)


def _alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
