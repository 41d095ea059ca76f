"""What a supervisor writes about attempts while they run: durable steps,
progress (at most every `progress_interval` per job) and the child's pid.

Every write is fenced by (id, attempt) and submitted to the database
thread, never waited on; a write that finds the attempt no longer running
means its lease is lost, and the attempt is ended.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from procqueue import errors, protocol
from procqueue.supervisor.attempt import Attempt, json_fault
from procqueue.supervisor.dbpart import DbPart
from procqueue.supervisor.faults import Faults

PID_AFTER_S = 1.0
"""The child's pid is written for jobs that report progress or run this long."""
RESERVED_START_S = 0.1
"""A job claimed ahead shows as reserved, not running, until its start is
written: for one still running after this long, with its pid."""


@dataclass(eq=False, kw_only=True)
class AttemptWrites(DbPart):
    """Submits one supervisor's writes about its running attempts."""

    faults: Faults | None
    """Where a test kills a child inside a step (None: nowhere)."""

    def step(self, index: int, message: protocol.Step) -> None:
        """Saves a durable step the child in slot `index` reported, then lets
        the job go on (StepSaved); ends the attempt if it can't be saved."""
        a = self.attempts.running.get(index)
        if a is None or a.kill is not None or message.job_id != a.job.id:
            return
        a.step = None  # it returned: its timeout no longer applies
        if self.db.busy(f"step:{a.job.id}"):
            # a child waits for StepSaved before its next step: a second one
            # now is job code writing frames by hand, and must not queue
            # database calls without bound ahead of every lease renewal
            words = "protocol error: a step frame before the last step was saved"
            self.attempts.kill(a, "error", words, hard=True)
            return
        if self.faults is not None and self.faults.kills(message.name):
            words = f"killed by fault injector in step {message.name!r}"
            self.attempts.kill(a, "error", words, hard=True)
            return
        fault = json_fault(message.value)
        if fault is not None:
            self.attempts.kill(a, "error", f"step {message.name!r} {fault}", hard=True)
            return

        def saved(ok: bool) -> None:
            if self.attempts.running.get(a.child) is not a or a.kill is not None:
                return
            if ok:
                self.pool.send(a.child, protocol.StepSaved(job_id=a.job.id, name=message.name))
            else:
                self.attempts.kill(a, "lease", "lease lost", hard=True)

        def refused(exc: errors.StoreError) -> None:
            if self.attempts.running.get(a.child) is a:
                words = f"step {message.name!r} could not be saved: {exc}"
                self.attempts.kill(a, "error", words, hard=True)

        save = _fence(a, self.store.job_save_step, name=message.name, value=message.value)
        self.db.submit(f"step:{a.job.id}", save, on_done=saved, on_error=refused)

    def flush(self, now: float) -> None:
        """Submits progress (at most every `progress_interval` per job) and
        the pid of jobs that report progress or run over a second."""
        for a in self.attempts.running.values():
            if a.kill is not None or a.started is None:
                continue
            job = a.job
            if (
                a.progress_unwritten
                and a.progress is not None
                and now - a.progress_written_at >= self.settings.progress_interval
                and not self.db.busy(f"progress:{job.id}")
                and self.db.ok(now)
            ):
                text, fraction = self.attempts.progress_sent(a, now)
                write = _fence(a, self.store.job_set_progress, text=text, fraction=fraction)
                self._fenced(a, "progress", write)
            if (
                not a.pid_written
                and (now - a.started >= _pid_after(a) or a.progress is not None)
                and self.db.ok(now)
            ):
                self.attempts.pid_sent(a)
                write = _fence(a, self.store.job_set_pid, pid=a.pid, started_at=a.started_wall)
                self._fenced(a, "pid", write)

    def next_due(self) -> float | None:
        """The earliest monotonic time `flush` has work."""
        due: list[float] = []
        for a in self.attempts.running.values():
            if a.kill is not None or a.started is None:
                continue
            if a.progress_unwritten:
                due.append(a.progress_written_at + self.settings.progress_interval)
            elif not a.pid_written:
                due.append(a.started + _pid_after(a))
        return min(due) if due else None

    def _fenced(self, a: Attempt, what: str, call: Callable[[], bool]) -> None:
        """Submits a fenced write about `a`; a False answer means its lease is lost."""

        def answered(ok: bool) -> None:
            if ok is False and self.attempts.running.get(a.child) is a and a.kill is None:
                self.attempts.kill(a, "lease", "lease lost", hard=True)

        self.db.submit(f"{what}:{a.job.id}", call, on_done=answered)


def _pid_after(a: Attempt) -> float:
    """How long `a` runs before its pid (and, claimed ahead, its start) is written."""
    return PID_AFTER_S if a.shown_started else RESERVED_START_S


def _fence(a: Attempt, write: Callable[..., bool], **fields: object) -> Callable[[], bool]:
    """`write` bound to `a`'s fence (its job id and attempt number): the
    store applies it only while that attempt is the job's running one."""
    return functools.partial(write, id=a.job.id, attempt=a.job.attempt, **fields)
