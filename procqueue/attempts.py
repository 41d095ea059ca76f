"""Every attempt a supervisor runs, from hand-over to outcome.

This module is the one owner of what is known about a running attempt (an
`Attempt`): its job, child, deadlines, lease, progress and why it is being
killed. Child frames and deaths become outcomes here, fenced by the attempt
number and queued in order until the database takes them; timeouts and
memory ceilings are enforced here whatever the database does.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from procqueue import _clock, config, errors, events, models, protocol, retry
from procqueue._faults import Faults
from procqueue.dbcalls import DbCalls
from procqueue.pool import Death, Pool
from procqueue.store.base import Store

PID_AFTER_S = 1.0
"""The child's pid is written for jobs that report progress or run this long."""
MEMORY_CHECK_MAX_S = 0.25
"""Longest interval between two samples of a job's memory."""
PROGRESS_TEXT_MAX = 1000
"""Progress text is cut to this many characters."""


@dataclass
class Attempt:
    """One attempt running in one child, as the supervisor knows it."""

    job: models.ClaimedJob
    child: int
    pid: int
    started: float
    """Monotonic time it was handed over."""
    deadline: float | None
    """Monotonic time its timeout ends it."""
    lease_until: float
    """Wall time its database lease lasts to (as last renewed)."""
    max_memory: float | None
    """MB for the job's whole process tree (the job's own, else the supervisor's default)."""
    kill: tuple[str, str] | None = None
    """(kind, words) once the supervisor started to end it; decides the outcome."""
    drain_asked: bool = False
    progress: tuple[str | None, float | None] | None = None
    progress_unwritten: bool = False
    progress_written_at: float = -math.inf
    memory_checked: float = -math.inf
    pid_written: bool = False


class Attempts:
    """The attempts running in one supervisor's pool, and their unwritten outcomes."""

    def __init__(
        self,
        *,
        pool: Pool,
        store: Store,
        db: DbCalls,
        clock: _clock.Clock,
        settings: config.Settings,
        events: events.EventStream,
        faults: Faults | None,
        rng: random.Random,
    ) -> None:
        self.pool = pool
        self.store = store
        self.db = db
        self.clock = clock
        self.settings = settings
        self.events = events
        self.faults = faults
        self.rng = rng
        self.running: dict[int, Attempt] = {}
        """Child index -> its attempt."""
        self.outcomes: list[models.Outcome] = []
        """Decided, in order, not yet written."""
        self.freed = False
        """Set when a child may have become free: the supervisor claims again."""

    def job_of(self) -> dict[int, int]:
        return {index: a.job.id for index, a in self.running.items()}

    # -- hand-over ------------------------------------------------------------

    def start(self, index: int, job: models.ClaimedJob, *, lease_until: float) -> None:
        """Hands `job` to the child in slot `index`."""
        now = self.clock.monotonic()
        memory = job.max_memory if job.max_memory is not None else self.settings.max_memory_per_job
        attempt = Attempt(
            job=job,
            child=index,
            pid=self.pool.pid(index),
            started=now,
            deadline=None if job.timeout is None else now + job.timeout,
            lease_until=lease_until,
            max_memory=memory,
        )
        self.running[index] = attempt
        message = protocol.Run(
            job_id=job.id,
            attempt=job.attempt,
            name=job.name,
            args=job.args,
            steps={name: bytes(raw) for name, raw in job.steps.items()},
            lease=self._lease_left(lease_until),
        )
        self.events.emit(
            events.Started(
                job_id=job.id,
                name=job.name,
                queue=job.queue,
                attempt=job.attempt,
                child=index,
                pid=attempt.pid,
            )
        )
        if not self.pool.send(index, message):
            self.kill(attempt, "error", "the child was gone before the job reached it")

    def _lease_left(self, lease_until: float) -> float:
        return max(0.0, lease_until - self.clock.now())

    # -- what children say ----------------------------------------------------

    def message(self, index: int, message: protocol.Message) -> None:
        """Acts on one frame from the child in slot `index`."""
        a = self.running.get(index)
        if a is None or a.kill is not None or getattr(message, "job_id", None) != a.job.id:
            return  # no attempt, or its outcome is already decided
        if isinstance(message, protocol.Progress):
            text, fraction = a.progress or (None, None)
            if message.text is not None:
                text = message.text[:PROGRESS_TEXT_MAX].replace("\x00", "\\x00")
            if message.fraction is not None and 0.0 <= message.fraction <= 1.0:
                fraction = message.fraction
            a.progress = (text, fraction)
            a.progress_unwritten = True
            self.events.emit(
                events.Progress(job_id=a.job.id, child=index, text=text, fraction=fraction)
            )
        elif isinstance(message, protocol.Step):
            self._save_step(a, message)
        elif isinstance(message, (protocol.Done, protocol.Failed)):
            if message.progress is not None or message.fraction is not None:
                self.message(
                    index,
                    protocol.Progress(
                        job_id=a.job.id, text=message.progress, fraction=message.fraction
                    ),
                )
            if isinstance(message, protocol.Done):
                self._done(a, message)
            else:
                self._failed(a, message)
        else:
            self.kill(a, "error", f"protocol error: unexpected {type(message).__name__}")

    def protocol_error(self, index: int, words: str) -> None:
        """The child's pipe can't be read any more: its attempt fails."""
        a = self.running.get(index)
        if a is None:
            self.pool.kill(index, grace=0)
        else:
            self.kill(a, "error", words, hard=True)

    def _done(self, a: Attempt, message: protocol.Done) -> None:
        try:
            msgspec.json.decode(message.result)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            self._failure(a, f"the job's result is not valid JSON: {exc}", permanent=False)
            return
        self._end(
            a,
            models.Outcome(
                id=a.job.id,
                attempt=a.job.attempt,
                state=models.JobState.DONE,
                result=message.result,
            ),
        )

    def _failed(self, a: Attempt, message: protocol.Failed) -> None:
        if a.drain_asked:  # it stopped because the drain asked it to
            self._end(a, self._hand_back(a))
            return
        self._failure(a, message.error, permanent=message.kind == "permanent", delay=message.delay)

    def _failure(
        self, a: Attempt, error: str, *, permanent: bool, delay: float | None = None
    ) -> None:
        self._end(
            a,
            retry.after_failure(
                a.job,
                error=error,
                permanent=permanent,
                delay=delay,
                now=self.clock.now(),
                rng=self.rng,
            ),
        )

    def _end(self, a: Attempt, outcome: models.Outcome) -> None:
        """The child replied with the attempt's outcome and lives on."""
        # The child flushed its output before replying: log it under this job.
        self.pool.relay_all(a.child, a.job.id)
        del self.running[a.child]
        self.record(a, outcome)
        self.pool.job_done(a.child)

    def _save_step(self, a: Attempt, message: protocol.Step) -> None:
        if self.faults is not None and self.faults.kills(message.name):
            self.kill(a, "error", f"killed by fault injector in step {message.name!r}", hard=True)
            return
        try:
            msgspec.json.decode(message.value)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            self.kill(a, "error", f"step {message.name!r} is not valid JSON: {exc}", hard=True)
            return

        def saved(ok: bool) -> None:
            if self.running.get(a.child) is not a or a.kill is not None:
                return
            if ok:
                self.pool.send(a.child, protocol.StepSaved(job_id=a.job.id, name=message.name))
            else:
                self.kill(a, "lease", "lease lost", hard=True)

        def refused(exc: errors.StoreError) -> None:
            if self.running.get(a.child) is a:
                words = f"step {message.name!r} could not be saved: {exc}"
                self.kill(a, "error", words, hard=True)

        job = a.job
        self.db.submit(
            f"step:{job.id}",
            lambda: self.store.job_save_step(
                id=job.id, attempt=job.attempt, name=message.name, value=message.value
            ),
            on_done=saved,
            on_error=refused,
        )

    def died(self, death: Death) -> None:
        """A child exited: its attempt (if any) ends as its kill reason says."""
        a = self.running.pop(death.child, None)
        self.freed = True
        kind, words = (a.kill if a is not None else None) or (None, "")
        self.events.emit(
            events.ChildDied(
                child=death.child,
                pid=death.pid,
                reason=death.reason,
                job_id=None if a is None else a.job.id,
                name=None if a is None else a.job.name,
                expected=death.retired or death.killed,
                kill=kind,
                kill_words=words or None,
            )
        )
        if a is None:
            return
        job, now = a.job, self.clock.now()
        if kind == "lease":
            self._finished(a, None, "lost")
            return
        if kind == "cancel":
            outcome = models.Outcome(
                id=job.id,
                attempt=job.attempt,
                state=models.JobState.CANCELLED,
                error="cancelled while running",
            )
        elif kind == "drain" or (kind is None and a.drain_asked):
            outcome = self._hand_back(a)
        else:
            error = death.reason if kind is None else f"{words} ({death.reason})"
            outcome = retry.after_failure(
                job, error=error, permanent=False, delay=None, now=now, rng=self.rng
            )
        self.record(a, outcome)

    def _hand_back(self, a: Attempt) -> models.Outcome:
        return models.Outcome(
            id=a.job.id,
            attempt=a.job.attempt,
            state=models.JobState.PENDING,
            run_at=self.clock.now(),
            refund=True,
        )

    def record(self, a: Attempt, outcome: models.Outcome) -> None:
        """Queues `outcome` for the next write, and tells the stream."""
        if outcome.refund:
            name = "handed_back"
        elif outcome.state == models.JobState.PENDING:
            name = "retried"
        else:
            name = outcome.state.value
        if a.progress_unwritten and a.progress is not None:
            text, fraction = a.progress
            outcome = msgspec.structs.replace(outcome, progress=text, fraction=fraction)
        self.outcomes.append(outcome)
        self.freed = True
        self._finished(a, outcome, name)

    def _finished(self, a: Attempt, outcome: models.Outcome | None, name: str) -> None:
        retry_in = None
        if outcome is not None and name == "retried" and outcome.run_at is not None:
            retry_in = max(0.0, outcome.run_at - self.clock.now())
        self.events.emit(
            events.Finished(
                job_id=a.job.id,
                name=a.job.name,
                queue=a.job.queue,
                attempt=a.job.attempt,
                outcome=name,
                error=None if outcome is None else outcome.error,
                retry_in=retry_in,
                seconds=self.clock.monotonic() - a.started,
                kill=None if a.kill is None else a.kill[0],
            )
        )

    # -- ending attempts ------------------------------------------------------

    def kill(self, a: Attempt, kind: str, words: str, *, hard: bool = False) -> None:
        """Starts to end `a`'s child; the first reason given decides the outcome."""
        if a.kill is None:
            a.kill = (kind, words)
            self.events.emit(
                events.Killed(job_id=a.job.id, child=a.child, pid=a.pid, kind=kind, words=words)
            )
        self.pool.kill(a.child, grace=0.0 if hard else self.settings.kill_grace)

    def cancel(self, ids: set[int]) -> None:
        """Ends the attempts of jobs whose cancel was requested."""
        for a in list(self.running.values()):
            if a.job.id in ids:
                self.kill(a, "cancel", "cancelled")

    def ask_to_stop(self) -> None:
        """Drain: every running job sees `cx.cancelled` and its tree gets SIGTERM."""
        for a in self.running.values():
            if not a.drain_asked and a.kill is None:
                a.drain_asked = True
                self.pool.terminate(a.child)

    def hand_back_unstarted(self, job: models.ClaimedJob) -> None:
        """A claimed job no child can take now goes back, its attempt unspent."""
        self.outcomes.append(
            models.Outcome(
                id=job.id,
                attempt=job.attempt,
                state=models.JobState.PENDING,
                run_at=self.clock.now(),
                refund=True,
            )
        )

    def refused(self, outcome: models.Outcome, words: str) -> None:
        """The database refused `outcome` (the first queued): that attempt
        fails instead, so one job's value never blocks the others."""
        if self.outcomes and self.outcomes[0] is outcome:
            self.outcomes[0] = models.Outcome(
                id=outcome.id,
                attempt=outcome.attempt,
                state=models.JobState.FAILED,
                error=f"the outcome could not be stored: {words}",
            )

    def abandon_all(self) -> None:
        """The supervisor is closing and every child is gone: what still ran
        is handed back."""
        for a in list(self.running.values()):
            del self.running[a.child]
            self.record(a, self._hand_back(a))

    def hand_back_all(self) -> None:
        """End of the drain: what still runs is killed and handed back."""
        for a in list(self.running.values()):
            self.kill(a, "drain", "handed back at shutdown", hard=True)

    def enforce(self, now: float, *, wall: float, margin: float) -> None:
        """Timeouts, memory ceilings and leases, at monotonic `now` and wall
        time `wall`: a job whose lease could not be renewed is ended `margin`
        seconds before it runs out, so it never overlaps a rescue."""
        for a in list(self.running.values()):
            if a.kill is not None:
                continue
            if wall >= a.lease_until - margin:
                self.kill(a, "lease", "lease expired: it could not be renewed", hard=True)
            elif a.deadline is not None and now >= a.deadline:
                self.kill(a, "timeout", f"timed out after {a.job.timeout:g}s")
            elif a.max_memory is not None and now - a.memory_checked >= self._memory_every(a):
                a.memory_checked = now
                rss = self.pool.rss_mb(a.child)
                if rss > a.max_memory:
                    words = f"exceeded max_memory ({rss:.0f} MB > {a.max_memory:g} MB)"
                    self.kill(a, "memory", words, hard=True)

    @staticmethod
    def _memory_every(a: Attempt) -> float:
        """Seconds between memory samples: a job allocating 1 GB/s is caught
        before it doubles its ceiling (so it is stopped under 3x)."""
        assert a.max_memory is not None
        return max(0.02, min(MEMORY_CHECK_MAX_S, a.max_memory / 1000.0))

    def next_due(self, now: float) -> float | None:
        """The earliest monotonic time `enforce` or `flush_progress` has work."""
        due: list[float] = []
        for a in self.running.values():
            if a.kill is not None:
                continue
            if a.deadline is not None:
                due.append(a.deadline)
            if a.max_memory is not None:
                due.append(a.memory_checked + self._memory_every(a))
            if a.progress_unwritten:
                due.append(a.progress_written_at + self.settings.progress_interval)
            elif not a.pid_written:
                due.append(a.started + PID_AFTER_S)
        return min(due) if due else None

    # -- leases, progress and pids ----------------------------------------------

    def renewed(self, *, alive: set[tuple[int, int]], lease_until: float) -> None:
        """A renewal answered: attempts the owner lost are killed, the others'
        children learn the new time left on their lease."""
        left = self._lease_left(lease_until)
        for a in list(self.running.values()):
            if (a.job.id, a.job.attempt) not in alive:
                if a.kill is None:
                    self.kill(a, "lease", "lease lost", hard=True)
                continue
            a.lease_until = lease_until
            self.pool.send(a.child, protocol.Lease(job_id=a.job.id, left=left))
        kept = [o for o in self.outcomes if (o.id, o.attempt) in alive]
        if len(kept) != len(self.outcomes):  # their jobs were rescued elsewhere meanwhile
            for o in self.outcomes:
                if (o.id, o.attempt) not in alive:
                    self.events.emit(
                        events.Finished(
                            job_id=o.id,
                            name="",
                            queue="",
                            attempt=o.attempt,
                            outcome="lost",
                            error=None,
                            retry_in=None,
                            seconds=0.0,
                        )
                    )
            self.outcomes = kept

    def flush_progress(self, now: float) -> None:
        """Submits progress (at most every `progress_interval` per job) and
        the pid of jobs that report progress or run over a second."""
        for a in self.running.values():
            if a.kill is not None:
                continue
            job = a.job
            if (
                a.progress_unwritten
                and a.progress is not None
                and now - a.progress_written_at >= self.settings.progress_interval
                and not self.db.busy(f"progress:{job.id}")
                and self.db.ok(now)
            ):
                a.progress_unwritten = False
                a.progress_written_at = now
                text, fraction = a.progress
                write = functools.partial(
                    self.store.job_set_progress,
                    id=job.id,
                    attempt=job.attempt,
                    text=text,
                    fraction=fraction,
                )
                self._fenced(a, "progress", write)
            if (
                not a.pid_written
                and (now - a.started >= PID_AFTER_S or a.progress is not None)
                and self.db.ok(now)
            ):
                a.pid_written = True
                write = functools.partial(
                    self.store.job_set_pid, id=job.id, attempt=job.attempt, pid=a.pid
                )
                self._fenced(a, "pid", write)

    def _fenced(self, a: Attempt, what: str, call: Callable[[], bool]) -> None:
        """Submits a fenced write about `a`; a False answer means its lease is lost."""

        def answered(ok: bool) -> None:
            if ok is False and self.running.get(a.child) is a and a.kill is None:
                self.kill(a, "lease", "lease lost", hard=True)

        self.db.submit(f"{what}:{a.job.id}", call, on_done=answered)
