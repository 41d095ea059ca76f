"""Every attempt a supervisor runs, from hand-over to outcome.

This module is the one owner of what is known about an attempt (an
`Attempt`): its job, child, deadlines, lease, progress and why it is being
ended. Child frames and deaths become outcomes here, fenced by the attempt
number and queued in order until the database takes them; timeouts, memory
ceilings and leases are enforced here whatever the database does.

Each child holds a small window of attempts: the one it runs and, behind
it, jobs already claimed and waiting in its pipe, so that it starts the
next job the moment one ends. The window is sized from recent job
durations (`Attempts.depth`): a few milliseconds of work for tiny jobs, one
job ahead for longer ones.
"""

from __future__ import annotations

import collections
import math
import random
from dataclasses import dataclass

import msgspec

from procqueue import _clock, config, events, models, protocol, retry
from procqueue.pool import Death, Pool

PROGRESS_TEXT_MAX = 1000
"""Progress text is cut to this many characters."""
AHEAD_S = 0.01
"""Work a child's window holds beyond the job it runs, in seconds of recent job time."""
AHEAD_MAX = 16
"""Most jobs waiting in one child's pipe."""
LONG_JOB_S = 1.0
"""Jobs that take this long on average get no job waiting behind them: a
claimed job must not wait long in one child while another supervisor idles."""


def lease_margin(lease: float) -> float:
    """Seconds before its lease runs out that a job is ended by its own child
    (and by the supervisor) when the lease could not be renewed. Other
    supervisors judge expiry by their own clocks, so the margin must exceed
    the clock skew between machines (NTP keeps it to milliseconds)."""
    return max(0.5, min(5.0, lease * 0.2))


@dataclass
class Attempt:
    """One attempt held by one child, as the supervisor knows it."""

    job: models.ClaimedJob
    child: int
    pid: int
    lease_until: float
    """Wall time its database lease lasts to (as last renewed)."""
    max_memory: float | None
    """MB for the job's whole process tree (the job's own, else the supervisor's default)."""
    started: float | None = None
    """Monotonic time it started in its child (None while it waits in the pipe)."""
    deadline: float | None = None
    """Monotonic time its timeout ends it."""
    kill: tuple[str, str] | None = None
    """(kind, words) once the supervisor started to end it; decides the outcome."""
    revoked: str | None = None
    """Why it was taken back before it started (cancel, drain): the child skips it."""
    drain_asked: bool = False
    progress: tuple[str | None, float | None] | None = None
    progress_unwritten: bool = False
    progress_written_at: float = -math.inf
    memory_checked: float = -math.inf
    pid_written: bool = False


class Attempts:
    """The attempts one supervisor's children hold, and their unwritten outcomes."""

    def __init__(
        self,
        *,
        pool: Pool,
        clock: _clock.Clock,
        settings: config.Settings,
        events: events.EventStream,
        rng: random.Random,
    ) -> None:
        self.pool = pool
        self.clock = clock
        self.settings = settings
        self.events = events
        self.rng = rng
        self.running: dict[int, Attempt] = {}
        """Child index -> the attempt it runs."""
        self.waiting: dict[int, collections.deque[Attempt]] = collections.defaultdict(
            collections.deque
        )
        """Child index -> attempts in its pipe, in the order it will run them."""
        self.outcomes: list[models.Outcome] = []
        """Decided, in order, not yet written."""
        self.freed = False
        """Set when a window may have room: the supervisor claims again."""
        self.mean_s = 0.05
        """Recent job run time (moving average), which sizes the windows."""

    # -- windows --------------------------------------------------------------

    def depth(self) -> int:
        """How many attempts a child may hold, the running one included."""
        if self.mean_s >= LONG_JOB_S:
            return 1
        return 2 + min(AHEAD_MAX - 1, int(AHEAD_S / max(self.mean_s, 1e-5)))

    def held(self, index: int) -> int:
        return (index in self.running) + len(self.waiting.get(index, ()))

    def all(self) -> list[Attempt]:
        """Every attempt held, running ones first."""
        return [*self.running.values(), *(a for q in self.waiting.values() for a in q)]

    def job_of(self) -> dict[int, int]:
        """Child index -> id of the job it runs."""
        return {index: a.job.id for index, a in self.running.items()}

    def start(self, index: int, job: models.ClaimedJob, *, lease_until: float) -> None:
        """Hands `job` to the child in slot `index`: it runs at once if the
        child is idle, else it waits in the child's pipe."""
        memory = job.max_memory if job.max_memory is not None else self.settings.max_memory_per_job
        a = Attempt(
            job=job,
            child=index,
            pid=self.pool.pid(index),
            lease_until=lease_until,
            max_memory=memory,
        )
        message = protocol.Run(
            job_id=job.id,
            attempt=job.attempt,
            name=job.name,
            args=job.args,
            steps={name: bytes(raw) for name, raw in job.steps.items()},
            lease=self.lease_left(lease_until),
        )
        if index in self.running:
            self.waiting[index].append(a)
        else:
            self._run(a)
        if not self.pool.send(index, message):
            self.pool.kill(index)  # gone: its death hands the window back

    def _run(self, a: Attempt) -> None:
        now = self.clock.monotonic()
        a.started = now
        a.deadline = None if a.job.timeout is None else now + a.job.timeout
        self.running[a.child] = a
        job = a.job
        self.events.emit(
            events.Started(
                job_id=job.id,
                name=job.name,
                queue=job.queue,
                attempt=job.attempt,
                child=a.child,
                pid=a.pid,
            )
        )

    def lease_left(self, lease_until: float) -> float:
        """Seconds a child may run a job whose lease lasts to `lease_until`:
        the lease less its margin."""
        return max(0.0, lease_until - self.clock.now() - lease_margin(self.settings.lease))

    # -- what children say ----------------------------------------------------

    def message(self, index: int, message: protocol.Message) -> None:
        """Acts on one frame from the child in slot `index`."""
        a = self.running.get(index)
        if a is None or getattr(message, "job_id", None) != a.job.id:
            return  # no attempt: nothing to act on
        if a.kill is not None:
            # A job asked to stop (timeout, cancel) that ended in time: its
            # outcome is the kill's; its child exits after it.
            if isinstance(message, (protocol.Done, protocol.Failed)) and a.kill[0] in (
                "timeout",
                "cancel",
            ):
                outcome = self._killed(a, None)
                assert outcome is not None  # only a lost lease has none
                self._end(a, outcome)
            return
        if isinstance(message, protocol.Progress):
            self._progress(a, message.text, message.fraction)
        elif isinstance(message, protocol.Done):
            self._progress(a, message.progress, message.fraction)
            self._done(a, message)
        elif isinstance(message, protocol.Failed):
            self._progress(a, message.progress, message.fraction)
            self._failed(a, message)
        elif not isinstance(message, protocol.Step):  # steps: see AttemptWrites
            self.kill(a, "error", f"protocol error: unexpected {type(message).__name__}")

    def _progress(self, a: Attempt, text: str | None, fraction: float | None) -> None:
        if text is None and fraction is None:
            return
        old_text, old_fraction = a.progress or (None, None)
        if text is not None:
            old_text = text[:PROGRESS_TEXT_MAX].replace("\x00", "\\x00")
        if fraction is not None and 0.0 <= fraction <= 1.0:
            old_fraction = fraction
        a.progress = (old_text, old_fraction)
        a.progress_unwritten = True
        self.events.emit(
            events.Progress(job_id=a.job.id, child=a.child, text=old_text, fraction=old_fraction)
        )

    def protocol_error(self, index: int, words: str) -> None:
        """The child's pipe can't be read any more: its attempt fails."""
        a = self.running.get(index)
        if a is None:
            self.pool.kill(index)
        else:
            self.kill(a, "error", words, hard=True)

    def _done(self, a: Attempt, message: protocol.Done) -> None:
        try:
            msgspec.json.decode(message.result)
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            self.fail(a, f"the job's result is not valid JSON: {exc}")
            return
        outcome = models.Outcome(
            id=a.job.id, attempt=a.job.attempt, state=models.JobState.DONE, result=message.result
        )
        self._end(a, outcome)

    def _failed(self, a: Attempt, message: protocol.Failed) -> None:
        if message.kind == "revoked" and a.revoked is not None:  # taken back before it started
            if a.revoked == "cancel":
                self._end(a, self._cancelled(a, "cancelled before it started"))
            else:
                self._end(a, self._hand_back(a))
        elif a.drain_asked:  # it stopped because the drain asked it to
            self._end(a, self._hand_back(a))
        else:
            permanent = message.kind == "permanent"
            self.fail(a, message.error, permanent=permanent, delay=message.delay)

    def fail(
        self, a: Attempt, error: str, *, permanent: bool = False, delay: float | None = None
    ) -> None:
        """Ends `a` as failed (retried per its policy); its child lives on."""
        now = self.clock.now()
        outcome = retry.after_failure(
            a.job, error=error, permanent=permanent, delay=delay, now=now, rng=self.rng
        )
        self._end(a, outcome)

    def _end(self, a: Attempt, outcome: models.Outcome) -> None:
        """The child replied with the attempt's outcome, lives on, and starts
        the next attempt of its window."""
        # The child flushed its output before replying: log it under this job.
        self.pool.relay_all(a.child, a.job.id)
        del self.running[a.child]
        if a.started is not None and a.revoked is None:
            ran = self.clock.monotonic() - a.started
            self.mean_s = 0.8 * self.mean_s + 0.2 * ran
        self.record(a, outcome)
        self.pool.job_done(a.child)
        queue = self.waiting.get(a.child)
        if queue and not self.pool.stopping(a.child):  # a stopping child runs no more
            self._run(queue.popleft())

    def died(self, death: Death) -> None:
        """A child exited: its attempt ends as its kill reason says; what
        waited in its pipe goes back, attempts unspent."""
        a = self.running.pop(death.child, None)
        queued = self.waiting.pop(death.child, collections.deque())
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
        for w in queued:
            cancelled = w.revoked == "cancel"
            self.record(
                w,
                self._cancelled(w, "cancelled before it started")
                if cancelled
                else self._hand_back(w),
            )
        if a is None:
            return
        outcome = self._killed(a, death.reason)
        if outcome is None:
            self._finished(a, None, "lost")
        else:
            self.record(a, outcome)

    def _killed(self, a: Attempt, died: str | None) -> models.Outcome | None:
        """The outcome of an attempt the supervisor ended (or whose child
        died, `died` saying how): None when its lease is lost (nothing may be
        written)."""
        kind, words = a.kill or (None, "")
        if kind == "lease":
            return None
        if kind == "cancel":
            return self._cancelled(a, "cancelled while running")
        if kind == "drain" or (kind is None and a.drain_asked):
            return self._hand_back(a)
        if kind is None:
            error = died or "the child process ended"
        else:
            error = f"{words} ({died})" if died else words
        now = self.clock.now()
        return retry.after_failure(
            a.job, error=error, permanent=False, delay=None, now=now, rng=self.rng
        )

    def _cancelled(self, a: Attempt, error: str) -> models.Outcome:
        return models.Outcome(
            id=a.job.id, attempt=a.job.attempt, state=models.JobState.CANCELLED, error=error
        )

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
        ran = 0.0 if a.started is None else self.clock.monotonic() - a.started
        self.events.emit(
            events.Finished(
                job_id=a.job.id,
                name=a.job.name,
                queue=a.job.queue,
                attempt=a.job.attempt,
                outcome=name,
                error=None if outcome is None else outcome.error,
                retry_in=retry_in,
                seconds=ran,
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
        if hard:
            self.pool.kill(a.child)
        else:
            self.pool.stop(a.child, a.job.id, grace=self.settings.kill_grace)

    def revoke(self, a: Attempt, why: str) -> None:
        """Takes back an attempt waiting in its child's pipe: the child skips it."""
        if a.revoked is None:
            a.revoked = why
            self.pool.send(a.child, protocol.Revoke(job_id=a.job.id))

    def cancel(self, ids: set[int]) -> None:
        """Ends the attempts of jobs whose cancel was requested."""
        if not ids:
            return
        for a in self.all():
            if a.job.id not in ids:
                continue
            if a.started is None:
                self.revoke(a, "cancel")
            elif a.revoked is None:
                self.kill(a, "cancel", "cancelled")

    def ask_to_stop(self) -> None:
        """Drain: every running job sees `cx.cancelled` and its tree gets
        SIGTERM; what waits in the pipes is taken back."""
        for queue in self.waiting.values():
            for w in queue:
                self.revoke(w, "drain")
        for a in self.running.values():
            if not a.drain_asked and a.kill is None:
                a.drain_asked = True
                self.pool.stop(a.child, a.job.id, grace=None)

    def hand_back_all(self) -> None:
        """End of the drain: what still runs is killed and handed back."""
        for a in list(self.running.values()):
            self.kill(a, "drain", "handed back at shutdown", hard=True)

    def abandon_all(self) -> None:
        """The supervisor is closing and every child is gone: what they
        still held is handed back."""
        for index in [*self.running, *self.waiting]:
            self.died(Death(index, 0, "the supervisor stopped", retired=True, killed=True))
