"""Jobs running in real child processes under a real supervisor, on both backends."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from procqueue import App, EnqueueError, JobState
from procqueue.testing import Faults, supervising, wait_until
from tests.helpers import JOB, SPEC, finished, pid_alive, read_pid, state_is
from tests.jobs import basic


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = basic.app.using(dsn)
    yield a
    a.close()


def test_jobs_run_and_record_results(app: App) -> None:
    with supervising(app, SPEC):
        ids = app.enqueue_many([(JOB + "add", {"a": 1, "b": i}, None) for i in range(10)])
        results = [finished(app, i).result for i in ids]
    assert results == [1 + i for i in range(10)]
    info = app.get(ids[0])
    assert info.state == JobState.DONE and info.attempts == 1
    assert info.started_at is not None and info.finished_at is not None


@pytest.mark.parametrize(
    ("job", "words"),
    [
        ("segfault", "killed by SIGSEGV"),
        ("exit3", "exited with code 3"),
    ],
)
def test_a_dying_child_fails_the_attempt_and_is_replaced(app: App, job: str, words: str) -> None:
    with supervising(app, SPEC, workers=1):
        before = finished(app, app.enqueue(JOB + "whoami")).result
        bad = finished(app, app.enqueue(JOB + job))
        after = finished(app, app.enqueue(JOB + "whoami")).result
    assert bad.state == JobState.FAILED
    assert words in (bad.error or "")
    assert before != after  # a fresh child took over
    assert not pid_alive(before)


@pytest.mark.parametrize(
    ("job", "words"),
    [("raise_system_exit", "SystemExit"), ("raise_keyboard_interrupt", "KeyboardInterrupt")],
)
def test_system_exit_and_keyboard_interrupt_fail_only_the_job(
    app: App, job: str, words: str
) -> None:
    with supervising(app, SPEC, workers=1):
        before = finished(app, app.enqueue(JOB + "whoami")).result
        bad = finished(app, app.enqueue(JOB + job))
        after = finished(app, app.enqueue(JOB + "whoami")).result
    assert bad.state == JobState.FAILED and words in (bad.error or "")
    assert before == after  # the child survived its job's exception


def test_timeout_kills_a_child_that_ignores_sigterm(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    with supervising(app, SPEC, workers=1, kill_grace=0.3):
        job_id = app.enqueue(JOB + "ignore_sigterm_and_sleep", {"marker": str(marker)})
        pid = read_pid(marker)
        info = finished(app, job_id)
        assert finished(app, app.enqueue(JOB + "add", {"a": 1, "b": 1})).result == 2
    assert info.state == JobState.FAILED
    assert "timed out after 0.5s" in (info.error or "") and "SIGKILL" in (info.error or "")
    assert not pid_alive(pid)


def test_child_is_recycled_past_max_memory_per_child(app: App) -> None:
    with supervising(app, SPEC, workers=1, max_memory_per_child=150):
        fat = finished(app, app.enqueue(JOB + "allocate", {"mb": 300}))
        slim = finished(app, app.enqueue(JOB + "whoami"))
    assert fat.state == JobState.DONE and slim.state == JobState.DONE
    assert fat.result != slim.result
    assert not pid_alive(fat.result)


def test_child_is_recycled_after_max_jobs_per_child(app: App) -> None:
    with supervising(app, SPEC, workers=1, max_jobs_per_child=2):
        pids = [finished(app, app.enqueue(JOB + "whoami")).result for _ in range(4)]
    assert pids[0] == pids[1] and pids[2] == pids[3] and pids[1] != pids[2]


def test_a_fresh_process_per_job_even_when_jobs_are_claimed_ahead(app: App) -> None:
    with supervising(app, SPEC, workers=2, max_jobs_per_child=1):
        ids = app.enqueue_many([(JOB + "whoami", {}, None) for _ in range(40)])
        pids = [finished(app, i).result for i in ids]
    assert len(set(pids)) == 40  # 40 jobs, 40 processes: none ran two


def test_a_job_past_its_max_memory_is_killed(app: App) -> None:
    with supervising(app, SPEC, workers=1):
        info = finished(app, app.enqueue(JOB + "allocate_forever"))
    assert info.state == JobState.FAILED
    assert "exceeded max_memory" in (info.error or "")


def test_a_flood_of_output_does_not_stop_the_job(app: App) -> None:
    with supervising(app, SPEC, workers=1):
        info = finished(app, app.enqueue(JOB + "flood", {"mb": 100}), timeout=60)
    assert info.state == JobState.DONE and info.result == "flooded"


def test_failures_are_retried_until_they_succeed(app: App) -> None:
    with supervising(app, SPEC):
        info = finished(app, app.enqueue(JOB + "fail_then_succeed", {"times": 2}))
        retried = finished(app, app.enqueue(JOB + "retry_later"))
        permanent = finished(app, app.enqueue(JOB + "permanent"))
    assert (info.state, info.result, info.attempts) == (JobState.DONE, 3, 3)
    assert (retried.state, retried.result) == (JobState.DONE, 2)
    assert permanent.state == JobState.FAILED and permanent.attempts == 1
    assert "no point retrying" in (permanent.error or "")


def test_attempts_run_out(app: App) -> None:
    with supervising(app, SPEC):
        info = finished(app, app.enqueue(JOB + "fail_then_succeed", {"times": 5}))
    assert info.state == JobState.FAILED and info.attempts == 3
    assert "failing attempt 3" in (info.error or "")


def test_typed_arguments_are_converted_or_fail_naming_the_argument(app: App) -> None:
    with pytest.raises(EnqueueError, match="argument 'when'"):  # checked at enqueue
        app.enqueue(JOB + "typed", {"when": "yesterday"})
    producer = App(app.dsn, clock=app.clock)  # without the job code: stored as given
    with supervising(app, SPEC):
        good = finished(app, app.enqueue(JOB + "typed", {"when": "2024-01-02T03:04:05Z", "n": 2}))
        bad = finished(app, producer.enqueue(JOB + "typed", {"when": "yesterday"}))
    producer.close()
    assert good.result == "2024-01-02T03:04:05+00:00 x2"
    assert bad.state == JobState.FAILED and bad.attempts == 1
    assert "argument 'when'" in (bad.error or "")


def test_progress_is_visible_while_running(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "go"
    with supervising(app, SPEC):
        job_id = app.enqueue(JOB + "progress", {"marker": str(marker)})
        wait_until(lambda: app.get(job_id).progress == "half", what="progress")
        assert app.get(job_id).fraction == 0.5
        marker.write_text("go")
        assert finished(app, job_id).state == JobState.DONE


def test_cancel_kills_a_running_child(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    with supervising(app, SPEC, workers=1):
        job_id = app.enqueue(JOB + "sleep_forever", {"marker": str(marker)})
        pid = read_pid(marker)
        wait_until(lambda: app.get(job_id).pid == pid, what="the child's pid on the record")
        assert app.cancel(job_id) == JobState.RUNNING
        info = finished(app, job_id)
        wait_until(lambda: not pid_alive(pid), what="the cancelled child to exit")
        assert finished(app, app.enqueue(JOB + "add", {"a": 2, "b": 2})).result == 4
    assert info.state == JobState.CANCELLED


def test_a_durable_step_killed_before_its_save_reruns_only_itself(app: App, tmp_path: Path) -> None:
    log = tmp_path / "log"
    faults = Faults()
    faults.kill_in("second")
    with supervising(app, SPEC, workers=1, faults=faults):
        info = finished(app, app.enqueue(JOB + "durable", {"log": str(log)}))
    assert info.state == JobState.DONE and info.result == [10, 20] and info.attempts == 2
    # "first" was saved before the kill, so only "second" ran twice.
    assert log.read_text().split() == ["1", "2", "2"]


def test_serial_key_never_runs_two_at_once(app: App, tmp_path: Path) -> None:
    spans = tmp_path / "spans"
    with supervising(app, SPEC, workers=2):
        ids = [
            app.enqueue(JOB + "span", {"path": str(spans), "seconds": 0.1}, serial_key="user:1")
            for _ in range(4)
        ]
        for i in ids:
            finished(app, i)
    intervals = sorted(tuple(map(float, line.split())) for line in spans.read_text().splitlines())
    assert len(intervals) == 4
    for (_, end), (start, _) in itertools.pairwise(intervals):
        assert start >= end


def test_graceful_stop_hands_running_jobs_back_without_spending_an_attempt(
    app: App, tmp_path: Path
) -> None:
    marker = tmp_path / "pid"
    with supervising(app, SPEC, workers=1, grace=0.2):
        job_id = app.enqueue(JOB + "sleep_forever", {"marker": str(marker)})
        pid = read_pid(marker)
    info = app.get(job_id)
    assert info.state == JobState.PENDING and info.attempts == 0
    assert not pid_alive(pid)


def test_children_hold_no_database_connection(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    with supervising(app, SPEC, workers=1):
        job_id = app.enqueue(JOB + "sleep_forever", {"marker": str(marker)})
        pid = read_pid(marker)
        targets = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert f"procqueue child 1 {JOB}sleep_forever#{job_id}" in title
        app.cancel(job_id)
        wait_until(lambda: state_is(app, job_id, JobState.CANCELLED), what="cancel")
    assert not [t for t in targets if t.startswith("socket:") or ".db" in t], targets


def test_a_retry_the_job_asks_for_is_logged_as_a_reschedule(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="procqueue.supervisor")
    with supervising(app, SPEC, workers=1):
        asked = app.enqueue(JOB + "retry_later")
        failing = app.enqueue(JOB + "fail_then_succeed", {"times": 1})
        assert finished(app, asked).state == JobState.DONE
        assert finished(app, failing).state == JobState.DONE
    lines = [r.getMessage() for r in caplog.records]
    assert f"job {asked} attempt 1 rescheduled by Retry in 0.0s: Retry: not yet" in lines, lines
    assert not any(line.startswith(f"job {asked} attempt 1 failed") for line in lines), lines
    assert any(line.startswith(f"job {failing} attempt 1 failed, retry in") for line in lines)
