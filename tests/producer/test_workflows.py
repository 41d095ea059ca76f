"""Workflows end to end on both backends, with real supervisors and
children: dependents never start before their last dependency ended (by
the jobs' own timestamps), results flow to dependents, a failure cancels
what depends on it, a snooze spends no attempt, and a step's timeout ends
the job."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from procqueue import App, EnqueueError, JobState
from procqueue.testing import supervising
from tests.jobs import flows

SPEC = "tests.jobs.flows"


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = flows.app.using(dsn)
    yield a
    a.close()


def after_all(app: App, child: int, parents: list[int]) -> None:
    """`child` started after every one of `parents` finished, by their records."""
    started = app.get(child).started_at
    assert started is not None
    for p in parents:
        finished = app.get(p).finished_at
        assert finished is not None and finished <= started, (p, child)


def test_a_diamond_runs_in_order_and_passes_results_along(app: App) -> None:
    with app.batch("diamond") as b:
        top = app.enqueue(flows.stage.name, {"n": 1})
        left = app.enqueue(flows.stage.name, {"n": 10}, after=[top])
        right = app.enqueue(flows.stage.name, {"n": 100}, after=[top])
        (bottom,) = app.enqueue_many([(flows.gather.name, {}, {"after": [left, right]})])
    assert app.get(bottom).state == JobState.BLOCKED
    # a poll far away: every start follows a wake-up sent by the promoting commit
    with supervising(app, SPEC, workers=3, poll=30.0):
        info = app.wait_batch(b.id, timeout=30)
    assert (info.done, info.total) == (4, 4)
    after_all(app, left, [top])
    after_all(app, right, [top])
    after_all(app, bottom, [left, right])
    assert app.get(bottom).result == {"ids": [left, right], "sum": 11 + 101}


def test_a_fan_in_of_1000_starts_after_its_last_dependency(app: App) -> None:
    with app.batch("fan") as b:
        parents = app.enqueue_many([(flows.stage.name, {"n": 1}, None) for _ in range(1000)])
        last = app.enqueue(flows.gather.name, after=parents)
    with supervising(app, SPEC, workers=4):
        info = app.wait_batch(b.id, timeout=120)
    assert info.done == 1001
    started = app.get(last).started_at
    assert started is not None
    finished = [app.get(p).finished_at for p in parents]
    assert all(f is not None and f <= started for f in finished)
    assert app.get(last).result == {"ids": parents, "sum": 1000}


def test_a_failure_cancels_its_dependents_transitively_unless_allowed(app: App) -> None:
    with app.batch("failing") as b:
        bad = app.enqueue(flows.broken.name)
        gone = app.enqueue(flows.stage.name, {"n": 1}, after=[bad])
        also = app.enqueue(flows.stage.name, {"n": 2}, after=[gone])
        kept = app.enqueue(flows.gather.name, after=[bad], allow_failure=True)
    with supervising(app, SPEC, workers=2):
        info = app.wait_batch(b.id, timeout=30)
    assert (info.done, info.failed, info.cancelled) == (1, 1, 2)
    assert app.get(gone).error == f"dependency {bad} ({flows.broken.name}) failed"
    assert app.get(also).error == f"dependency {gone} ({flows.stage.name}) was cancelled"
    assert app.get(also).started_at is None
    assert app.get(kept).result == {"ids": [], "sum": 0}  # a failed dependency has no result


def test_configure_after_and_refusals_at_the_call(dsn: str) -> None:
    own = App(dsn)

    @own.job
    def step(n: int) -> int:
        return n

    try:
        first = step.enqueue(1)
        second = step.configure(after=[first], allow_failure=True).enqueue(2)
        assert own.get(second).state == JobState.BLOCKED
        with pytest.raises(EnqueueError, match="does not exist"):
            step.configure(after=[first, 10**9]).enqueue(3)
        with pytest.raises(EnqueueError, match="after must be a list of job ids"):
            step.configure(after=["x"]).enqueue(3)
        with pytest.raises(EnqueueError, match="allow_failure must be True or False"):
            step.configure(after=[first], allow_failure="yes").enqueue(3)
        assert [j.id for j in own.jobs()] == [second, first]
    finally:
        own.close()


def test_a_snooze_spends_no_attempt_and_is_in_the_history(app: App, tmp_path: Path) -> None:
    id_ = app.enqueue(flows.snoozer.name, {"marker": str(tmp_path / "z"), "times": 2})
    too_many = app.enqueue(flows.snoozer.name, {"marker": str(tmp_path / "y"), "times": 5})
    with supervising(app, SPEC, workers=2):
        info = app.wait(id_, timeout=30)
        over = app.wait(too_many, timeout=30)
    assert (info.state, info.result, info.attempts) == (JobState.DONE, 1, 1)
    assert [h.outcome for h in info.history] == ["snoozed", "snoozed", "done"]
    assert over.state == JobState.FAILED
    assert over.error is not None and "snoozed 3 times already" in over.error
    assert [h.outcome for h in over.history] == ["snoozed"] * 3 + ["failed"]


def test_a_step_past_its_timeout_ends_the_attempt_and_the_retry_resumes(
    app: App, tmp_path: Path
) -> None:
    marker = tmp_path / "noted"
    id_ = app.enqueue(flows.slow_step.name, {"marker": str(marker)})
    with supervising(app, SPEC, workers=1):
        info = app.wait(id_, timeout=60)
    assert info.state == JobState.FAILED and info.attempts == 2
    assert info.error is not None and info.error.startswith("step 'hang' timed out after 0.5 s")
    assert [h.outcome for h in info.history] == ["retried", "failed"]
    assert marker.read_text() == "x"  # the saved step did not run again
