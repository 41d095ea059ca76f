"""The record of one attempt a supervisor holds (`Attempt`), and the pure
rules that turn an attempt into the outcome written for it."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import msgspec

from procqueue import codec, events, models, protocol
from procqueue.jobs import hooks
from procqueue.supervisor import retry

PROGRESS_TEXT_MAX = 1000
"""Progress text is cut to this many characters."""


def short_exit(reason: str) -> str:
    """``SIGSEGV`` or ``exit code 3`` from a `Death.reason` (its history's exit reason)."""
    for prefix, shown in (
        ("child process killed by ", ""),
        ("child process exited with ", "exit "),
    ):
        if reason.startswith(prefix):
            return shown + reason[len(prefix) :]
    return reason


@dataclass
class Attempt:
    """One attempt a supervisor holds, reserved or in a child, as it knows
    it. Written only by `running.Attempts`; the other parts read it."""

    job: models.ClaimedJob
    child: int
    """The slot of the child that runs it (0 while it is reserved)."""
    pid: int
    lease_until: float
    """Wall time its database lease lasts to (as last renewed)."""
    max_memory: float | None
    """MB for the job's whole process tree (the job's own, else the supervisor's default)."""
    started: float | None = None
    """Monotonic time it started in its child (None while it is reserved)."""
    deadline: float | None = None
    """Monotonic time its timeout ends it."""
    step: tuple[str, float, float] | None = None
    """The step with a timeout it runs now: (name, timeout, the monotonic time that ends it)."""
    kill: tuple[str, str] | None = None
    """(kind, words) once the supervisor started to end it; decides the outcome."""
    drain_asked: bool = False
    retry_asked: bool = False
    """Its job raised `Retry`: a retry it asked for, not a failure."""
    progress: tuple[str | None, float | None] | None = None
    progress_unwritten: bool = False
    progress_written_at: float = -math.inf
    memory_checked: float = -math.inf
    """Monotonic time of its last memory sample (its start, for a job with no ceiling)."""
    pid_written: bool = False
    shown_started: bool = True
    """Whether its claim marked it started (it went to an idle child at
    once); one claimed ahead shows as reserved until its start is written."""
    # -- for its history row: what ran, where, and how it ended --
    started_wall: float | None = None
    """Wall time it started in its child."""
    peak_memory: float | None = None
    """Highest RSS (MB) of its process tree sampled by `Limits`."""


def step_clock(message: protocol.StepClock, now: float) -> tuple[str, float, float] | None:
    """The step timeout a child announced at monotonic `now` (an untrusted
    frame: a timeout that is not a positive finite number arms nothing)."""
    timeout = message.timeout
    if timeout is None or not math.isfinite(timeout) or timeout <= 0:
        return None
    timeout = min(timeout, models.MAX_SECONDS)
    return message.name[:200], timeout, now + timeout


def merged_progress(
    old: tuple[str | None, float | None] | None, text: str | None, fraction: float | None
) -> tuple[str | None, float | None]:
    """The progress `old` with what a child reported: text cut and made
    printable, a fraction outside [0, 1] ignored; None keeps what was."""
    old_text, old_fraction = old or (None, None)
    if text is not None:
        old_text = text[:PROGRESS_TEXT_MAX].replace("\x00", "\\x00")
    if fraction is not None and 0.0 <= fraction <= 1.0:
        old_fraction = fraction
    return old_text, old_fraction


def json_fault(raw: bytes) -> str | None:
    """What is wrong with JSON `raw` from a child (an untrusted frame): "is
    not valid JSON: ...", "is nested deeper than ..."; None if nothing is."""
    if codec.too_deep(raw):
        return f"is nested deeper than {codec.MAX_DEPTH} levels"
    try:
        msgspec.json.decode(raw)
    except codec.DECODE_ERRORS as exc:
        return f"is not valid JSON: {exc}"
    return None


def replied(
    a: Attempt, message: protocol.Done | protocol.Failed, *, now: float, rng: random.Random
) -> models.Outcome:
    """The outcome of `a` whose child replied `message` (and lives on): done
    with a result that is JSON; handed back when the drain stopped it;
    pending again, its attempt given back, when it snoozed; else failed,
    retried per its policy (at once never, for a permanent failure)."""
    if isinstance(message, protocol.Done):
        error = json_fault(message.result)
        if error is not None:
            error = f"the job's result {error}"
            return retry.after_failure(
                a.job, error=error, permanent=False, delay=None, now=now, rng=rng
            )
        return models.Outcome(
            id=a.job.id, attempt=a.job.attempt, state=models.JobState.DONE, result=message.result
        )
    if a.drain_asked:  # it stopped because the drain asked it to
        return handed_back(a.job, now=now)
    if message.kind == "snooze":
        return retry.snoozed(a.job, seconds=message.delay, words=message.error, now=now)
    permanent = message.kind == "permanent"
    return retry.after_failure(
        a.job, error=message.error, permanent=permanent, delay=message.delay, now=now, rng=rng
    )


def handed_back(job: models.ClaimedJob, *, now: float) -> models.Outcome:
    """The outcome of an attempt that goes back unspent: pending, due at `now`."""
    return models.Outcome(
        id=job.id, attempt=job.attempt, state=models.JobState.PENDING, run_at=now, refund=True
    )


def unclaimed(held: set[tuple[int, int]], *, now: float) -> list[models.Outcome]:
    """Hand-backs (attempt unspent, due at `now`) of the (id, attempt) pairs
    the database says this owner holds and the supervisor does not know."""
    return [
        models.Outcome(id=i, attempt=n, state=models.JobState.PENDING, run_at=now, refund=True)
        for i, n in sorted(held)
    ]


def cancelled(job: models.ClaimedJob, error: str) -> models.Outcome:
    return models.Outcome(
        id=job.id, attempt=job.attempt, state=models.JobState.CANCELLED, error=error
    )


def history_name(outcome: models.Outcome) -> str:
    """What the history (and the event stream) calls `outcome`."""
    if outcome.snooze:
        return "snoozed"
    if outcome.refund:
        return "handed_back"
    if outcome.state == models.JobState.PENDING:
        return "retried"
    return outcome.state.value


def as_ended(a: Attempt, outcome: models.Outcome, *, exit_reason: str | None) -> models.Outcome:
    """`outcome` with the progress not yet written and, when the attempt ran
    or ended, its history row: an unstarted hand-back leaves no history."""
    if a.progress_unwritten and a.progress is not None:
        text, fraction = a.progress
        outcome = msgspec.structs.replace(outcome, progress=text, fraction=fraction)
    if a.started is not None or not outcome.refund:
        outcome = msgspec.structs.replace(
            outcome,
            history=history_name(outcome),
            child_pid=a.pid if a.started is not None else None,
            started_at=a.started_wall,
            exit_reason=exit_reason,
            peak_memory=a.peak_memory,
        )
    return outcome


def refused(outcome: models.Outcome, words: str) -> models.Outcome:
    """What replaces an outcome the database refused: its attempt failed, so
    one job's value never blocks the others; its history row (if it has
    one) keeps how it ran, now failed."""
    return models.Outcome(
        id=outcome.id,
        attempt=outcome.attempt,
        state=models.JobState.FAILED,
        error=f"the outcome could not be stored: {words}",
        history=None if outcome.history is None else "failed",
        child_pid=outcome.child_pid,
        started_at=outcome.started_at,
        exit_reason=outcome.exit_reason,
        peak_memory=outcome.peak_memory,
    )


def killed(
    a: Attempt, died: str | None, *, stack: str | None = None, now: float, rng: random.Random
) -> models.Outcome | None:
    """The outcome, at wall time `now`, of an attempt the supervisor ended
    (or whose child died, `died` saying how, `stack` where when it crashed):
    None when its lease is lost (nothing may be written)."""
    kind, words = a.kill or (None, "")
    if kind == "lease":
        return None
    if kind == "cancel":
        return cancelled(a.job, "cancelled while running")
    if kind == "drain" or (kind is None and a.drain_asked):
        return handed_back(a.job, now=now)
    if kind is None:
        error = died or "the child process ended"
        if stack is not None:  # its own crash: where it was
            error = f"{error}\n{stack}"
    else:
        error = f"{words} ({died})" if died else words
    return retry.after_failure(a.job, error=error, permanent=False, delay=None, now=now, rng=rng)


def finished(
    a: Attempt, outcome: models.Outcome | None, name: str, *, now: float, ran: float
) -> events.Finished:
    """What the stream is told when `a` ended as `name` (`outcome` None: its
    lease was lost), at wall time `now`, after running `ran` seconds."""
    retry_in = None
    if outcome is not None and name == "retried" and outcome.run_at is not None:
        retry_in = max(0.0, outcome.run_at - now)
    return events.Finished(
        job_id=a.job.id,
        name=a.job.name,
        queue=a.job.queue,
        attempt=a.job.attempt,
        outcome=name,
        error=None if outcome is None else outcome.error,
        retry_in=retry_in,
        seconds=ran,
        kill=None if a.kill is None else a.kill[0],
        asked=a.retry_asked,
    )


def died(
    a: Attempt, exit_reason: str, outcome: models.Outcome | None, *, now: float
) -> hooks.RunDied:
    """What `on_run_died` hooks are told of `a`, whose child died at wall
    time `now` (`outcome` None: its lease was lost)."""
    return hooks.RunDied(
        job_id=a.job.id,
        name=a.job.name,
        queue=a.job.queue,
        attempt=a.job.attempt,
        headers=a.job.headers,
        exit_reason=exit_reason,
        kill=None if a.kill is None else a.kill[0],
        error=None if outcome is None else outcome.error,
        started_at=a.started_wall,
        ended_at=now,
    )
