"""The supervisor stepped by hand on a `FakeClock`: timeouts, kill escalation,
backoff, lease renewal and drain decided on fake time, so each is exact.

The children are real and the database is real; only the clock is fake
(wall, monotonic and sleeping), so a 30-second timeout takes no 30 seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from procqueue import App, JobState, events
from procqueue.clock import FakeClock
from procqueue.supervisor import settings as config
from procqueue.supervisor.loop import Supervisor
from tests.helpers import JOB, SPEC, read_pid
from tests.jobs import basic
from tests.supervisor.stepping import recorder, until


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def app(dsn: str, clock: FakeClock) -> Iterator[App]:
    a = basic.app.using(dsn, clock=clock)
    yield a
    a.close()


@contextmanager
def stepped(app: App, clock: FakeClock, **settings: Any) -> Iterator[Supervisor]:
    """A started supervisor nobody runs: the test calls `step`/`tick`."""
    options: dict[str, Any] = {"workers": 1, "poll": 1.0, "lease": 30.0, "kill_grace": 2.0}
    sup = Supervisor(
        app, spec=SPEC, settings=config.Settings(**{**options, **settings}), clock=clock
    )
    sup.start()
    try:
        yield sup
    finally:
        sup.close()


def test_a_timeout_is_decided_on_the_clock_not_on_real_time(
    app: App, clock: FakeClock, tmp_path: Path
) -> None:
    with stepped(app, clock, lease=120.0) as sup:  # no renewal is due in the jump
        seen = recorder(sup)
        marker = tmp_path / "pid"
        job_id = app.enqueue(JOB + "sleep_forever", {"marker": str(marker)}, timeout=30)
        until(sup, "the job to start", lambda: job_id in sup.attempts.job_of().values())
        pid = read_pid(marker)
        clock.advance(29.9)
        sup.tick(clock.monotonic())
        assert not [e for e in seen if isinstance(e, events.Killed)]  # 0.1 s early: still runs
        clock.advance(0.1)
        sup.tick(clock.monotonic())
        killed = [e for e in seen if isinstance(e, events.Killed)]
        assert [(k.job_id, k.kind, k.words) for k in killed] == [
            (job_id, "timeout", "timed out after 30s")
        ]
        clock.advance(2.0)  # the kill grace: sleep_forever ignores its cx.cancelled
        finished = until(
            sup, "the outcome", lambda: [e for e in seen if isinstance(e, events.Finished)]
        )
        until(sup, "the outcome written", lambda: app.get(job_id).state == JobState.FAILED)
    assert finished[0].outcome == "failed" and finished[0].kill == "timeout"
    assert "timed out after 30s" in (app.get(job_id).error or "")
    assert killed[0].pid == pid


def test_sigkill_follows_sigterm_after_exactly_the_kill_grace(
    app: App, clock: FakeClock, tmp_path: Path
) -> None:
    with stepped(app, clock, kill_grace=5.0) as sup:
        seen = recorder(sup)
        marker = tmp_path / "pid"
        job_id = app.enqueue(JOB + "ignore_sigterm_and_sleep", {"marker": str(marker)})
        until(sup, "the job to start", lambda: job_id in sup.attempts.job_of().values())
        read_pid(marker)
        clock.advance(0.5)  # its timeout
        sup.tick(clock.monotonic())
        assert any(isinstance(e, events.Killed) for e in seen)
        clock.advance(4.9)
        for _ in range(20):  # it ignores SIGTERM: without SIGKILL it stays
            sup.step(timeout=0.01)
        assert not any(isinstance(e, events.ChildDied) for e in seen)
        clock.advance(0.1)
        died = until(sup, "SIGKILL", lambda: [e for e in seen if isinstance(e, events.ChildDied)])
    assert "SIGKILL" in died[0].reason and died[0].kill == "timeout"


def test_a_retry_waits_its_backoff_on_the_clock(app: App, clock: FakeClock) -> None:
    with stepped(app, clock) as sup:
        job_id = app.enqueue(
            JOB + "fail_then_succeed",
            {"times": 1},
            backoff={"base": 60.0, "factor": 1.0, "jitter": False},
        )
        until(
            sup,
            "attempt 1's failure written",
            lambda: (
                (app.get(job_id).state, app.get(job_id).attempts) == (JobState.PENDING, 1)
                and app.get(job_id).run_at.timestamp() > clock.now()
            ),
        )
        failed_at = clock.now()
        assert app.get(job_id).run_at.timestamp() == pytest.approx(failed_at + 60.0, abs=0.01)
        clock.advance(59.0)
        for _ in range(30):
            sup.step(timeout=0.01)
        assert app.get(job_id).state == JobState.PENDING  # not due for another second
        clock.advance(1.0)
        until(sup, "attempt 2", lambda: app.get(job_id).state == JobState.DONE)
    assert app.get(job_id).attempts == 2


def test_leases_are_renewed_every_third_of_a_lease(
    app: App, clock: FakeClock, tmp_path: Path
) -> None:
    with stepped(app, clock, lease=30.0) as sup:
        seen = recorder(sup)
        marker = tmp_path / "pid"
        job_id = app.enqueue(JOB + "sleep_forever", {"marker": str(marker)})
        until(sup, "the job to start", lambda: job_id in sup.attempts.job_of().values())
        first = sup.attempts.running[1].lease_until
        assert first == pytest.approx(clock.now() + 30.0, abs=0.5)
        for _ in range(5):  # 50 s of fake time: the lease never lapses
            clock.advance(10.0)
            before = first
            until(sup, "a renewal", lambda b=before: sup.attempts.running[1].lease_until > b)
            first = sup.attempts.running[1].lease_until
        assert not [e for e in seen if isinstance(e, events.Killed)]
        assert app.get(job_id).state == JobState.RUNNING


def test_a_lease_that_cannot_be_renewed_ends_the_job_before_it_lapses(
    app: App, clock: FakeClock, tmp_path: Path
) -> None:
    with stepped(app, clock, lease=30.0) as sup:
        seen = recorder(sup)
        marker = tmp_path / "pid"
        job_id = app.enqueue(JOB + "sleep_forever", {"marker": str(marker)})
        until(sup, "the job to start", lambda: job_id in sup.attempts.job_of().values())
        # The database thread answers nothing from here on: a renewal never lands.
        gate = threading.Event()
        sup.db.submit("stall", gate.wait, on_done=lambda _: None)
        try:
            clock.advance(24.9)  # the margin is 5 s of a 30 s lease
            sup.tick(clock.monotonic())
            assert not [e for e in seen if isinstance(e, events.Killed)]
            clock.advance(0.1)
            sup.tick(clock.monotonic())
            killed = [e for e in seen if isinstance(e, events.Killed)]
        finally:
            gate.set()
    assert [(k.job_id, k.kind) for k in killed] == [(job_id, "lease")]


def test_a_job_claimed_ahead_is_never_started_once_its_lease_ran_out(
    app: App, clock: FakeClock
) -> None:
    """A supervisor stopped (SIGSTOP) past the lease of a job it holds in
    reserve must not hand it to a child when it resumes: another supervisor
    may have run it already. It drops the job, writing nothing."""
    with stepped(app, clock, lease=30.0) as sup:
        seen = recorder(sup)
        until(sup, "a child to be ready", sup.attempts.idle)
        # not stepped from here on: the supervisor claims nothing itself
        job_id = app.enqueue(JOB + "add", {"a": 1, "b": 2})
        (job,) = app.store.job_claim(
            owner=sup.owner, queues=None, count=1, lease_until=clock.now() + 30, now=clock.now()
        )
        clock.advance(31.0)  # the supervisor was stopped past the lease
        sup.attempts.reserve(job, lease_until=clock.now() - 1.0)
        assert not sup.attempts.reserved and job_id not in sup.attempts.job_of().values()
        assert not [e for e in seen if isinstance(e, events.Started)]
        # Released: later renewals neither extend its lease nor hand it back
        # unspent as a claim whose answer was lost; the rescue spends attempt 1.
        renewals = len([e for e in seen if isinstance(e, events.Renewed)])
        clock.advance(10.0)
        until(
            sup,
            "a renewal",
            lambda: len([e for e in seen if isinstance(e, events.Renewed)]) > renewals,
        )
        until(sup, "the job to run again", lambda: app.get(job_id).state == JobState.DONE)
    started = [e.attempt for e in seen if isinstance(e, events.Started) and e.job_id == job_id]
    assert started == [2]


def test_a_claim_whose_answer_was_lost_is_handed_back_unspent_and_run(
    app: App, clock: FakeClock
) -> None:
    """A claim can commit and its answer be lost (the connection dies between
    the server's commit and the reply): the database then says this owner
    holds a job the supervisor never heard of. The next renewal, made idle
    or not, hands it back with its attempt unspent, and it runs once."""
    with stepped(app, clock, lease=30.0) as sup:
        until(sup, "a child to be ready", sup.attempts.idle)
        # not stepped from here on: the claim below is the one whose answer was lost
        job_id = app.enqueue(JOB + "add", {"a": 1, "b": 2})
        app.store.job_claim(
            owner=sup.owner, queues=None, count=1, lease_until=clock.now() + 30, now=clock.now()
        )
        clock.advance(10.0)  # a third of the lease: the next renewal is due
        info = until(sup, "the job to be done", lambda: _done(app, job_id))
    assert (info.result, info.attempts) == (3, 1)


def _done(app: App, job_id: int) -> Any:
    info = app.get(job_id)
    return info if info.state == JobState.DONE else None


def test_a_claim_in_flight_is_reserved_at_the_depth_it_asked_for(
    app: App, clock: FakeClock
) -> None:
    """Recent job times that shrink the window while a claim is in flight
    send none of its jobs back: each would be written twice and lose its
    place in the queue."""
    with stepped(app, clock) as sup:
        seen = recorder(sup)
        # ready, and no claim in flight: the next one is the enqueue's
        until(sup, "the child ready", lambda: sup.pool.all_ready() and not sup.db.busy("cycle"))
        sup.attempts.mean_s = 0.001  # tiny jobs: a deep window
        ids = app.enqueue_many([(JOB + "add", {"a": i, "b": 1}, None) for i in range(40)])
        until(sup, "a claim in flight", lambda: sup.db.busy("cycle"))
        sup.attempts.mean_s = 10.0  # long jobs now: a window of one
        until(sup, "its answer", lambda: [e for e in seen if isinstance(e, events.Claimed)])
        claimed = [e.job_id for e in seen if isinstance(e, events.Claimed)]
        held = {a.job.id for a in sup.attempts.all()}
        done = {e.job_id for e in seen if isinstance(e, events.Finished) and e.outcome == "done"}
        unspent = [o.id for o in sup.outbox.unwritten() if o.refund]
    assert sorted(claimed) == ids
    assert unspent == []  # none goes back
    assert held | done == set(ids)
