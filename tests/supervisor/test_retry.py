"""The retry policy as pure functions: whatever a job's backoff or a job's
``Retry(delay=...)`` says, the next run is a finite time away, at most the
backoff's cap."""

from __future__ import annotations

import random

import pytest

from procqueue import models
from procqueue.supervisor import retry

BASE = 1_700_000_000.0


def _job(backoff: models.Backoff, attempt: int, max_attempts: int = 1000) -> models.ClaimedJob:
    return models.ClaimedJob(
        id=1,
        attempt=attempt,
        name="x.y",
        queue="default",
        args=b"{}",
        steps={},
        max_attempts=max_attempts,
        timeout=None,
        max_memory=None,
        backoff=backoff,
        deadline_at=None,
        serial_key=None,
        run_at=BASE,
    )


@pytest.mark.parametrize(
    ("backoff", "attempt"),
    [
        (models.Backoff(base=0.01, factor=1e300, max=1), 3),
        (models.Backoff(base=2, factor=65536, max=3600), 200),
        (models.Backoff(base=1, factor=2, max=60), 10_000),
    ],
)
def test_a_steep_backoff_stops_at_its_cap(backoff: models.Backoff, attempt: int) -> None:
    delay = retry.backoff_delay(backoff, attempt, random.Random(1))
    assert 0 <= delay <= backoff.max
    exact = models.Backoff(base=backoff.base, factor=backoff.factor, max=backoff.max, jitter=False)
    assert retry.backoff_delay(exact, attempt, random.Random(1)) == backoff.max


@pytest.mark.parametrize("asked", [float("inf"), float("-inf"), float("nan"), 1e308])
def test_a_retry_delay_from_a_job_stays_in_range(asked: float) -> None:
    backoff = models.Backoff(base=5, factor=1, max=5, jitter=False)
    outcome = retry.after_failure(
        _job(backoff, 1), error="Retry", permanent=False, delay=asked, now=BASE, rng=random.Random()
    )
    assert outcome.state == models.JobState.PENDING
    assert outcome.run_at is not None
    assert BASE <= outcome.run_at <= BASE + models.MAX_SECONDS


def test_a_backoff_that_is_not_a_number_is_refused() -> None:
    for bad in ({"base": float("nan")}, {"factor": float("inf")}, {"max": 1e300}):
        with pytest.raises(ValueError, match="Backoff needs"):
            models.Backoff(**bad)  # type: ignore[arg-type]
