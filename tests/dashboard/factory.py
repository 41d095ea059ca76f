"""Puts jobs into given states directly through the store, as a supervisor
would, so page tests need no child processes."""

from __future__ import annotations

import re
import time
from typing import Any

import msgspec

from procqueue import App, JobState, models

CSRF = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "no CSRF token in the page"
    return found.group(1)


def insert(
    app: App,
    name: str = "tests.dashboard.dashjobs.flaky",
    args: dict[str, Any] | None = None,
    *,
    now: float | None = None,
    **fields: Any,
) -> int:
    """Inserts a job without validating it against a registry (any name, any args)."""
    job = models.NewJob(name=name, args=msgspec.json.encode(args or {}), **fields)
    (job_id,) = app.store.job_insert_many(jobs=[job], now=time.time() if now is None else now)
    return job_id


def start(app: App, job_id: int, *, now: float | None = None) -> models.ClaimedJob:
    """Claims `job_id` (it must be the only due job of its queue) as running."""
    now = time.time() if now is None else now
    (claimed,) = app.store.job_claim(
        owner="worker-7.internal:31337:5f2c",  # host:pid:token, as a supervisor writes it
        queues=[app.get(job_id).queue],
        count=1,
        lease_until=now + 600,
        now=now,
    )
    assert claimed.id == job_id
    return claimed


def progress(app: App, job_id: int, text: str | None, fraction: float | None) -> None:
    info = app.get(job_id)
    assert app.store.job_set_progress(
        id=job_id, attempt=info.attempts, text=text, fraction=fraction
    )


def finish(
    app: App,
    job_id: int,
    state: JobState,
    *,
    result: Any = None,
    error: str | None = None,
    now: float | None = None,
    exit_reason: str | None = None,
    started: float | None = None,
) -> None:
    """Records the running attempt of `job_id` as `state` (pending: a retry),
    with its history row, as a supervisor would."""
    info = app.get(job_id)
    at = time.time() if now is None else now
    outcome = models.Outcome(
        id=job_id,
        attempt=info.attempts,
        state=state,
        result=None if result is None else msgspec.json.encode(result),
        error=error,
        run_at=at if state == JobState.PENDING else None,
        history="retried" if state == JobState.PENDING else state.value,
        child_pid=40000 + job_id % 1000,
        started_at=started if started is not None else at - 0.5,
        exit_reason=exit_reason,
        peak_memory=96.0 + job_id % 50,
    )
    lost = app.store.job_record_many(outcomes=[outcome], now=at)
    assert lost == []


def make(
    app: App, state: JobState, *, error: str | None = None, result: Any = None, **insert_args: Any
) -> int:
    """A job in `state` (running ones are claimed by a fake owner).

    Jobs that are to run are due a minute early, so the claim takes them
    before any pending job of the same queue."""
    if state == JobState.PENDING:
        return insert(app, **insert_args)
    job_id = insert(app, run_at=time.time() - 60, **insert_args)
    if state == JobState.CANCELLED:
        app.cancel(job_id)
        return job_id
    start(app, job_id)
    if state != JobState.RUNNING:
        finish(app, job_id, state, error=error, result=result)
    return job_id
