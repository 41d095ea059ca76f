"""Every attempt a supervisor runs, from hand-over to outcome.

`Attempts` is the only writer of what is known about an attempt (an
`Attempt`: its job, child, deadlines, lease, progress, memory samples and
why it is being ended); the other parts read them and ask through its
methods. Child frames and deaths become outcomes here, fenced by the
attempt number, and wait in the `outbox.Outbox`, in order, until the
database takes them. `limits.Limits` decides when a timeout, a
memory ceiling or an unrenewed lease ends an attempt; `claims.Claims` and
`reports.AttemptWrites` say what the database answered.

A child is given a job only when it is idle. Jobs claimed ahead (sized by
`claims`) are reserved: they wait here, in the supervisor's memory, and go
to the first child that becomes idle, so no job waits behind another while
a child idles, and a reserved job handed back never reached any child.
"""

from __future__ import annotations

import collections
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from procqueue import events, models, protocol
from procqueue.child import crashlog
from procqueue.clock import Clock
from procqueue.jobs.hooks import RunDied
from procqueue.supervisor.attempt import (
    Attempt,
    as_ended,
    cancelled,
    died,
    finished,
    handed_back,
    history_name,
    killed,
    merged_progress,
    replied,
    short_exit,
    step_clock,
    unclaimed,
)
from procqueue.supervisor.children.slots import Children, Death
from procqueue.supervisor.lease import Lease
from procqueue.supervisor.outbox import Outbox
from procqueue.supervisor.settings import Settings

log = logging.getLogger("procqueue.supervisor")


@dataclass(eq=False, kw_only=True)
class Attempts:
    """The attempts one supervisor's children hold."""

    pool: Children
    outbox: Outbox
    """Where the outcomes decided here wait for their write."""
    clock: Clock
    settings: Settings
    lease: Lease
    events: events.EventStream
    rng: random.Random
    """Draws the jitter of retry delays."""
    on_died: Callable[[RunDied], None] | None = None
    """Told of each attempt whose child died (the App's `on_run_died` hooks)."""

    def __post_init__(self) -> None:
        self.running: dict[int, Attempt] = {}
        """Child index -> the attempt it runs."""
        self.reserved: collections.deque[Attempt] = collections.deque()
        """Claimed jobs no child runs yet, oldest first (their `child` is 0)."""
        self.released: dict[int, float] = {}
        """Jobs whose lease was given up (id -> monotonic time): never renewed
        again, so that their lease runs out and the rescue takes them."""
        self._freed = False
        """Set when a window may have room: the supervisor claims again."""
        self.mean_s = 0.05
        """Recent job run time (moving average), which sizes the windows."""

    # -- reservations and placement ---------------------------------------------

    def all(self) -> list[Attempt]:
        """Every attempt held, running ones first."""
        return [*self.running.values(), *self.reserved]

    def holds(self) -> bool:
        """Whether any attempt is held, running or reserved."""
        return bool(self.running or self.reserved)

    def job_of(self) -> dict[int, int]:
        """Child index -> id of the job it runs."""
        return {index: a.job.id for index, a in self.running.items()}

    def reserve(
        self, job: models.ClaimedJob, *, lease_until: float, shown_started: bool = True
    ) -> None:
        """Holds the claimed `job` until a child is idle (at once if one is);
        `shown_started`: its claim marked it started."""
        memory = job.max_memory if job.max_memory is not None else self.settings.max_memory_per_job
        a = Attempt(
            job=job,
            child=0,
            pid=0,
            lease_until=lease_until,
            max_memory=memory,
            shown_started=shown_started,
        )
        self.reserved.append(a)
        self.place()

    def idle(self) -> list[int]:
        """Ready children that run nothing and may take a job."""
        return [
            i
            for i in self.pool.available()
            if i not in self.running and self.pool.jobs_left(i) != 0
        ]

    def place(self) -> None:
        """Hands reserved jobs, oldest first, to the children that are idle.
        A reserved job whose lease has run out (this supervisor was stopped
        meanwhile) is dropped, never started: another may have run it already."""
        if not self.reserved:
            return
        wall = self.clock.now()
        for index in self.idle():
            while self.reserved and self.lease.expired(self.reserved[0].lease_until, wall):
                self.unreserve(self.reserved[0], None)
            if not self.reserved:
                return
            self._place(index, self.reserved.popleft())

    def _place(self, index: int, a: Attempt) -> None:
        job = a.job
        a.child = index
        a.pid = self.pool.pid(index)
        message = protocol.Run(
            job_id=job.id,
            attempt=job.attempt,
            name=job.name,
            args=job.args,
            steps={name: bytes(raw) for name, raw in job.steps.items()},
            lease=self.lease.left(a.lease_until, self.clock.now()),
            parents=job.parents,
            queue=job.queue,
            headers=job.headers,
        )
        self._run(a)
        if not self.pool.send(index, message):
            self.pool.kill(index)  # gone: its death hands the job back

    def _run(self, a: Attempt) -> None:
        now = self.clock.monotonic()
        a.started = now
        a.started_wall = self.clock.now()
        a.deadline = None if a.job.timeout is None else now + a.job.timeout
        if a.max_memory is None:  # sampled for its peak only: short jobs cost no sample
            a.memory_checked = now
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
                outcome = killed(a, None, now=self.clock.now(), rng=self.rng)
                assert outcome is not None  # only a lost lease has none
                self._end(a, outcome)
            return
        if isinstance(message, protocol.Progress):
            self._progress(a, message.text, message.fraction)
        elif isinstance(message, protocol.Done | protocol.Failed):
            self._progress(a, message.progress, message.fraction)
            retrying = isinstance(message, protocol.Failed) and message.kind == "retry"
            a.retry_asked = retrying and not a.drain_asked  # a Retry the job raised itself
            self._end(a, replied(a, message, now=self.clock.now(), rng=self.rng))
        elif isinstance(message, protocol.StepClock):
            a.step = step_clock(message, self.clock.monotonic())
        elif not isinstance(message, protocol.Step):  # steps: see AttemptWrites
            self.kill(a, "error", f"protocol error: unexpected {type(message).__name__}")

    def _progress(self, a: Attempt, text: str | None, fraction: float | None) -> None:
        if text is None and fraction is None:
            return
        a.progress = merged_progress(a.progress, text, fraction)
        a.progress_unwritten = True
        text, fraction = a.progress
        self.events.emit(
            events.Progress(job_id=a.job.id, child=a.child, text=text, fraction=fraction)
        )

    def protocol_error(self, index: int, words: str) -> None:
        """The child's pipe can't be read any more: its attempt fails."""
        a = self.running.get(index)
        if a is None:
            self.pool.kill(index)
        else:
            self.kill(a, "error", words, hard=True)

    def _end(self, a: Attempt, outcome: models.Outcome) -> None:
        """The child replied with the attempt's outcome, lives on, and is
        given the oldest reserved job."""
        del self.running[a.child]
        self.pool.end_output(a.child, a.job.id)  # before the next job can write
        if a.started is not None:
            ran = self.clock.monotonic() - a.started
            self.mean_s = 0.8 * self.mean_s + 0.2 * ran
        self.record(a, outcome)
        self.pool.job_done(a.child)
        self.place()

    def died(self, death: Death) -> None:
        """A child exited: its attempt ends as its kill reason says."""
        a = self.running.pop(death.child, None)
        if a is None:
            crashlog.collect(death.pid)  # deletes its file: no attempt to tell
        self._freed = True
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
        stack = crashlog.collect(death.pid)  # a fatal signal's Python stack, for its history
        outcome = killed(a, death.reason, stack=stack, now=self.clock.now(), rng=self.rng)
        exit_reason = short_exit(death.reason)
        if outcome is None:
            self._finished(a, None, "lost")
        else:
            self.record(a, outcome, exit_reason=exit_reason)
        if self.on_died is not None:
            self.on_died(died(a, exit_reason, outcome, now=self.clock.now()))

    def record(
        self, a: Attempt, outcome: models.Outcome, *, exit_reason: str | None = None
    ) -> None:
        """Queues `outcome` for the next write, and tells the stream."""
        outcome = as_ended(a, outcome, exit_reason=exit_reason)
        self.outbox.add(outcome)
        self._freed = True
        self._finished(a, outcome, history_name(outcome))

    def _finished(self, a: Attempt, outcome: models.Outcome | None, name: str) -> None:
        if outcome is None:  # its lease is lost: never renewed again, left to the rescue
            self.released[a.job.id] = self.clock.monotonic()
        ran = 0.0 if a.started is None else self.clock.monotonic() - a.started
        self.events.emit(finished(a, outcome, name, now=self.clock.now(), ran=ran))

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

    def unreserve(self, a: Attempt, outcome: models.Outcome | None) -> None:
        """Ends a reserved attempt, which no child ever saw, with `outcome`
        (None: its lease is lost, nothing may be written)."""
        self.reserved.remove(a)
        if outcome is None:
            self._finished(a, None, "lost")
        else:
            self.record(a, outcome)

    def cancel(self, ids: set[int]) -> None:
        """Ends the attempts of jobs whose cancel was requested."""
        if not ids:
            return
        for a in [r for r in self.reserved if r.job.id in ids]:
            self.unreserve(a, cancelled(a.job, "cancelled before it started"))
        for a in self.running.values():
            if a.job.id in ids:
                self.kill(a, "cancel", "cancelled")

    def _unreserve_all(self) -> None:
        for a in list(self.reserved):
            self.unreserve(a, handed_back(a.job, now=self.clock.now()))

    def ask_to_stop(self) -> None:
        """Drain: every running job sees `cx.cancelled` and its tree gets
        SIGTERM; reserved jobs go back, attempts unspent."""
        self._unreserve_all()
        for a in self.running.values():
            if not a.drain_asked and a.kill is None:
                a.drain_asked = True
                self.pool.stop(a.child, a.job.id, grace=None)

    def hand_back_all(self, *, hard: bool = True) -> None:
        """End of the drain: what still runs is killed and handed back, and
        so is every reserved job. Not `hard`: the job's code gets `Stopped`
        and the kill comes after the kill grace."""
        self._unreserve_all()
        for a in list(self.running.values()):
            self.kill(a, "drain", "handed back at shutdown", hard=hard)

    def abandon_all(self) -> None:
        """The supervisor is closing and every child is gone: what they
        still held is handed back."""
        self._unreserve_all()
        for index in list(self.running):
            self.died(Death(index, 0, "the supervisor stopped", retired=True, killed=True))

    # -- hand-backs and freed room --------------------------------------------

    def hand_back(self, job: models.ClaimedJob) -> None:
        """A claimed job no child can take now goes back, its attempt unspent."""
        self.outbox.add(handed_back(job, now=self.clock.now()))

    def take_freed(self) -> bool:
        """Whether a window may have room since the last call."""
        freed, self._freed = self._freed, False
        return freed

    # -- what the other parts report ------------------------------------------

    def released_ids(self, now: float) -> list[int]:
        """Ids of the jobs whose lease was given up in the last ten leases
        (by then the rescue has taken them: their rows are no longer ours)."""
        keep = now - 10 * self.settings.lease
        self.released = {i: t for i, t in self.released.items() if t >= keep}
        return list(self.released)

    def renewed(self, *, alive: set[tuple[int, int]], lease_until: float) -> None:
        """A renewal answered: attempts the owner lost are ended and their
        unwritten outcomes dropped (their jobs were rescued elsewhere: nothing
        may be written); the others' children learn their time left.

        An attempt held in the database (released ones are not renewed) that
        is not running, reserved or waiting to be written here was claimed by
        a call whose answer was lost after it committed (calls answer in
        order): no child ever saw it, and it is handed back unspent."""
        known = {(a.job.id, a.job.attempt) for a in self.all()}
        known |= self.outbox.attempts()
        for outcome in unclaimed(alive - known, now=self.clock.now()):
            log.warning("job %d: held by a claim whose answer was lost; handed back", outcome.id)
            self.outbox.add(outcome)
            self._freed = True
        left = self.lease.left(lease_until, self.clock.now())
        for a in [r for r in self.reserved if (r.job.id, r.job.attempt) not in alive]:
            self.unreserve(a, None)
        for a in self.all():
            if (a.job.id, a.job.attempt) not in alive:
                if a.kill is None:
                    self.kill(a, "lease", "lease lost", hard=True)
                continue
            a.lease_until = lease_until
            if a.child:
                self.pool.send(a.child, protocol.Lease(job_id=a.job.id, left=left))
        self.outbox.keep(alive)

    def sample_memory(self, a: Attempt, now: float) -> float:
        """Samples the RSS (MB) of `a`'s process tree at monotonic `now`."""
        rss = self.pool.rss_mb(a.child)
        a.memory_checked = now
        a.peak_memory = max(a.peak_memory or 0.0, rss)
        return rss

    def progress_sent(self, a: Attempt, now: float) -> tuple[str | None, float | None]:
        """The progress of `a` to write now (monotonic `now`), no longer unwritten."""
        assert a.progress is not None
        a.progress_unwritten = False
        a.progress_written_at = now
        return a.progress

    def pid_sent(self, a: Attempt) -> None:
        """The pid of `a`'s child is being written."""
        a.pid_written = True
