"""`procqueue.Stopped`: a job told to stop (timeout, cancel, the end of a
drain) gets it raised in its code, so `finally:` runs before the SIGKILL;
the outcome stays the stop's. Real supervisors, children and signals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from procqueue import App, JobState
from procqueue.testing import supervising, wait_until
from tests.helpers import finished, read_pid
from tests.jobs import stopping

SPEC = "tests.jobs.stopping"
JOB = SPEC + "."
KILL_GRACE = 5.0
"""Far more than a `finally:` needs, so that a reply before it is the proof."""


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = stopping.app.using(dsn)
    yield a
    a.close()


def test_a_cpu_loop_past_its_timeout_runs_its_finally(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    with supervising(app, SPEC, workers=1, kill_grace=KILL_GRACE):
        info = finished(app, app.enqueue(JOB + "spin_with_timeout", {"marker": str(marker)}))
    assert (tmp_path / "pid.finally").read_text() == "ran"
    assert info.state == JobState.FAILED
    assert "timed out after 1" in (info.error or "")
    assert "SIGKILL" not in (info.error or "")  # it ended itself within the kill grace


def test_a_cancelled_cpu_loop_runs_its_finally(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    with supervising(app, SPEC, workers=1, kill_grace=KILL_GRACE):
        job_id = app.enqueue(JOB + "spin", {"marker": str(marker)})
        read_pid(marker)
        app.cancel(job_id)
        info = finished(app, job_id)
    assert (tmp_path / "pid.finally").read_text() == "ran"
    assert info.state == JobState.CANCELLED


@pytest.mark.parametrize("how", ["timeout", "cancel"])
def test_a_job_that_swallows_stopped_is_not_done(app: App, tmp_path: Path, how: str) -> None:
    marker = tmp_path / "pid"
    with supervising(app, SPEC, workers=1, kill_grace=KILL_GRACE):
        options = {"timeout": 1.0} if how == "timeout" else {}
        job_id = app.enqueue(JOB + "spin_and_swallow_stop", {"marker": str(marker)}, **options)
        read_pid(marker)
        if how == "cancel":
            app.cancel(job_id)
        info = finished(app, job_id)
    assert (tmp_path / "pid.finally").exists()
    if how == "timeout":
        assert info.state == JobState.FAILED and "timed out" in (info.error or "")
    else:
        assert info.state == JobState.CANCELLED
    assert info.result is None


def test_the_end_of_a_drain_stops_a_cpu_loop_and_hands_it_back(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    with supervising(app, SPEC, workers=1, grace=0.5, kill_grace=KILL_GRACE):
        job_id = app.enqueue(JOB + "spin", {"marker": str(marker)})
        read_pid(marker)
    wait_until(lambda: (tmp_path / "pid.finally").exists(), timeout=5, what="the finally")
    info = app.get(job_id)
    assert info.state == JobState.PENDING and info.attempts == 0  # handed back, not spent
