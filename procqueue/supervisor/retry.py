"""What happens after an attempt fails: pure functions of the job and the time."""

from __future__ import annotations

import math
import random

from procqueue import models


def backoff_delay(backoff: models.Backoff, attempt: int, rng: random.Random) -> float:
    """Seconds to wait before the retry that follows failed attempt `attempt`:
    at most `backoff.max`, whatever the factor and the attempt (the power is
    compared in logarithms, so it never overflows)."""
    exponent = max(attempt - 1, 0)
    if backoff.base <= 0:
        delay = 0.0
    elif math.log(backoff.base) + exponent * math.log(backoff.factor) >= math.log(backoff.max or 1):
        delay = backoff.max
    else:
        delay = min(backoff.max, backoff.base * backoff.factor**exponent)
    return rng.uniform(0.0, delay) if backoff.jitter else delay


def _retry_wait(
    delay: float | None, backoff: models.Backoff, attempt: int, rng: random.Random
) -> float:
    """The wait a job asked for (``Retry(delay=...)``, from an untrusted frame)
    within [0, MAX_SECONDS], or its backoff when it asked for none or for NaN."""
    if delay is None or math.isnan(delay):
        return backoff_delay(backoff, attempt, rng)
    return min(max(delay, 0.0), models.MAX_SECONDS)


def _attempts(n: int) -> str:
    return f"{n} attempt{'' if n == 1 else 's'}"


def snoozed(
    job: models.ClaimedJob, *, seconds: float | None, words: str, now: float
) -> models.Outcome:
    """The outcome of an attempt that raised `Snooze`: pending again in
    `seconds` (from an untrusted frame: within [0, MAX_SECONDS]), its attempt
    given back; failed once it snoozed `max_snoozes` times, or when it would
    wake after its deadline."""
    state, error, run_at = models.JobState.FAILED, None, None
    if job.snoozes >= job.max_snoozes:
        error = f"{words}\n(snoozed {job.snoozes} times already: its max_snoozes)"
    else:
        wait = 0.0 if seconds is None or math.isnan(seconds) else seconds
        run_at = now + min(max(wait, 0.0), models.MAX_SECONDS)
        if job.deadline_at is not None and run_at >= job.deadline_at:
            error = f"{words}\n(it would wake after its deadline)"
        else:
            state = models.JobState.PENDING
    return models.Outcome(
        id=job.id,
        attempt=job.attempt,
        state=state,
        error=error,
        run_at=run_at if error is None else None,
        refund=error is None,
        snooze=error is None,
    )


def after_failure(
    job: models.ClaimedJob,
    *,
    error: str,
    permanent: bool,
    delay: float | None,
    now: float,
    rng: random.Random,
) -> models.Outcome:
    """The outcome of a failed attempt: a retry at some run_at, or failed for good.

    Fails now when the failure is permanent, attempts are used up, or the
    retry would start after the job's deadline.
    """
    if permanent:
        return models.Outcome(
            id=job.id, attempt=job.attempt, state=models.JobState.FAILED, error=error
        )
    if job.attempt >= job.max_attempts:
        return models.Outcome(
            id=job.id,
            attempt=job.attempt,
            state=models.JobState.FAILED,
            error=f"{error}\n(gave up after {_attempts(job.attempt)})",
        )
    wait = _retry_wait(delay, job.backoff, job.attempt, rng)
    run_at = now + wait
    if job.deadline_at is not None and run_at >= job.deadline_at:
        return models.Outcome(
            id=job.id,
            attempt=job.attempt,
            state=models.JobState.FAILED,
            error=f"{error}\n(a retry would start after its deadline)",
        )
    return models.Outcome(
        id=job.id, attempt=job.attempt, state=models.JobState.PENDING, error=error, run_at=run_at
    )
