"""Cluster chores on both backends: cron exactly once per tick, on_failure
exactly once, deadlines, pruning — driven by a manual clock."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from procqueue import App, JobState, models
from procqueue.supervisor import retry
from procqueue.testing import ManualClock, supervising, wait_until
from tests.helpers import JOB, SPEC, finished
from tests.jobs import basic, lifecycle

LSPEC = "tests.jobs.lifecycle"
TICK_JOB = "tests.jobs.lifecycle.every_minute"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def ticks(app: App) -> list[float]:
    """The ticks enqueued, read from their keys (a tick job that ran while the
    clock jumped may be retried, which moves its run_at)."""
    stamps = (j.key.rsplit(":", 3)[-3:] for j in app.jobs(name=TICK_JOB, limit=5000) if j.key)
    return sorted(
        dt.datetime.strptime(":".join(s), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
        for s in stamps
    )


def test_three_supervisors_enqueue_each_cron_tick_once(dsn: str, clock: ManualClock) -> None:
    app = lifecycle.app.using(dsn, clock=clock)
    with ExitStack() as stack:
        sups = [stack.enter_context(supervising(app, LSPEC, workers=1)) for _ in range(3)]
        wait_until(lambda: all(s.maintenance.cron_after for s in sups), what="first passes")
        first = ticks(app)[0]
        clock.advance(3600)
        jumped = clock.now()
        wait_until(
            lambda: all(min(s.maintenance.cron_after.values()) >= jumped for s in sups),
            what="every supervisor's pass after the jump",
        )
    seen = ticks(app)
    assert len(seen) == len(set(seen))
    assert all(b - a == 60 for a, b in itertools.pairwise(seen))
    assert len([t for t in seen if first < t <= first + 3600]) == 60
    app.close()


def test_a_clock_jump_of_a_year_enqueues_at_most_a_thousand_ticks(
    dsn: str, clock: ManualClock
) -> None:
    app = lifecycle.app.using(dsn, clock=clock)
    with supervising(app, LSPEC, workers=1) as sup:
        wait_until(lambda: ticks(app), what="the current tick")
        clock.advance(365 * 86400)
        wait_until(lambda: len(ticks(app)) > 1, what="the jump's ticks")
        wait_until(lambda: sup.maintenance.cron_after, what="a cron pass")
        passes_done = wait_until(
            lambda: all(v >= clock.now() - 5 for v in sup.maintenance.cron_after.values()),
            what="the pass after the jump",
        )
        assert passes_done
    assert 1000 <= len(ticks(app)) <= 1002


def test_on_failure_runs_once_under_two_racing_supervisors(dsn: str, tmp_path: Path) -> None:
    app = lifecycle.app.using(dsn)
    log = tmp_path / "failures"
    ids = [app.enqueue("tests.jobs.lifecycle.doomed", {"log": str(log)}) for _ in range(20)]
    handler = "tests.jobs.lifecycle.record_failure"
    with supervising(app, LSPEC, workers=2), supervising(app, LSPEC, workers=2):
        for i in ids:
            finished(app, i)
        wait_until(lambda: len(app.jobs(name=handler, limit=100)) >= 20, what="handlers")
        for job in app.jobs(name=handler, limit=100):
            finished(app, job.id)
    lines = log.read_text().splitlines()
    assert sorted(int(line.split()[0]) for line in lines) == sorted(ids)
    assert all("doomed in" in line for line in lines)
    assert len(app.jobs(name=handler, limit=100)) == 20
    app.close()


def test_a_job_past_its_deadline_fails_instead_of_starting(dsn: str, clock: ManualClock) -> None:
    app = basic.app.using(dsn, clock=clock)
    job_id = app.enqueue(JOB + "add", {"a": 1, "b": 1}, deadline=10)
    clock.advance(11)
    with supervising(app, SPEC, workers=1):
        info = finished(app, job_id)
    assert info.state == JobState.FAILED and info.attempts == 0
    assert info.error == "passed its deadline"
    app.close()


@pytest.mark.slow
@pytest.mark.timeout(400)  # 200,000 jobs enqueued, claimed and recorded first: ~2 min on PostgreSQL
def test_pruning_deletes_old_finished_jobs_in_batches_while_claims_go_on(
    dsn: str, clock: ManualClock
) -> None:
    app = basic.app.using(dsn, clock=clock)
    total = 200_000
    batch = [(JOB + "add", {"a": 1, "b": 1}, None)] * 5000
    for _ in range(total // 5000):
        ids = app.enqueue_many(batch)
    for claimed in _claim_all(app):
        app.store.job_record_many(
            outcomes=[
                models.Outcome(id=c.id, attempt=c.attempt, state=JobState.DONE, result=b"2")
                for c in claimed
            ],
            now=clock.now(),
        )
    failed = app.enqueue(JOB + "permanent")
    clock.advance(8 * 86400)
    with supervising(app, SPEC, workers=1, retention_days=7) as sup:
        assert finished(app, failed).state == JobState.FAILED
        fresh = app.enqueue(JOB + "add", {"a": 2, "b": 2})
        assert finished(app, fresh).result == 4
        wait_until(lambda: app.stats()["default"].done <= 1, timeout=60, what="pruning")
        # the last batch's count reaches the supervisor when its answer is delivered
        wait_until(lambda: sup.maintenance.pruned >= total, timeout=10, what="the count")
    assert app.get(failed).state == JobState.FAILED  # failed jobs stay
    assert ids  # keys of pruned jobs are free again
    app.close()


def _claim_all(app: App) -> Iterator[list[models.ClaimedJob]]:
    now = app.clock.now()
    while True:
        claimed = app.store.job_claim(
            owner="test", queues=None, count=5000, lease_until=now + 60, now=now
        )
        if not claimed:
            return
        yield claimed


def _claimed(attempt: int, deadline: float | None = None) -> models.ClaimedJob:
    return models.ClaimedJob(
        id=1,
        attempt=attempt,
        name="x",
        queue="default",
        args=b"{}",
        steps={},
        max_attempts=5,
        timeout=None,
        max_memory=None,
        backoff=models.Backoff(base=10, factor=2, max=60, jitter=True),
        deadline_at=deadline,
        serial_key=None,
        run_at=0.0,
    )


def test_backoff_is_full_jitter_and_capped() -> None:
    rng = random.Random(7)
    backoff = models.Backoff(base=10, factor=2, max=60, jitter=True)
    delays = [retry.backoff_delay(backoff, 10, rng) for _ in range(500)]
    assert 0 <= min(delays) < 10 and 50 < max(delays) <= 60
    fixed = models.Backoff(base=1, factor=3, max=100, jitter=False)
    assert [retry.backoff_delay(fixed, n, rng) for n in (1, 2, 3, 9)] == [1, 3, 9, 100]


def test_a_retry_that_would_land_after_the_deadline_gives_up_now() -> None:
    rng = random.Random(1)
    late = retry.after_failure(
        _claimed(1, deadline=1000.5), error="boom", permanent=False, delay=5, now=1000, rng=rng
    )
    assert late.state == JobState.FAILED and "deadline" in (late.error or "")
    fine = retry.after_failure(
        _claimed(1, deadline=2000), error="boom", permanent=False, delay=5, now=1000, rng=rng
    )
    assert fine.state == JobState.PENDING and fine.run_at == 1005
