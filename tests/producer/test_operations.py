"""What an operator asks during an incident, against real
supervisors and children on both backends: every attempt's history, live
supervisors and orphaned jobs, queue limits as managed settings, bulk
retry and cancel, producers without the job code, numpy in and out."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import numpy as np
import pytest

import procqueue
from procqueue import App, EnqueueError, JobFailed, JobState, QueueNotFound
from procqueue.testing import supervising, wait_until
from tests.helpers import JOB, SPEC, finished, read_pid
from tests.jobs import basic, ops
from tests.procs import ROOT, start_supervisor

OPS = "tests.jobs.ops"
OPS_JOB = "tests.jobs.ops."


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = basic.app.using(dsn)
    yield a
    a.close()


@pytest.fixture
def ops_app(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    monkeypatch.setenv("OPS_TEST_DIR", str(tmp_path))  # children inherit it
    a = ops.app.using(dsn)
    yield a
    a.close()


# -- attempt history ---------------------------------------------------------------


def test_every_attempt_is_recorded_with_host_pids_times_and_outcome(app: App) -> None:
    with supervising(app, SPEC, workers=1) as sup:
        info = finished(app, app.enqueue(JOB + "fail_then_succeed", {"times": 2}))
    assert info.state == JobState.DONE and info.attempts == 3
    history = info.history
    assert [h.attempt for h in history] == [1, 2, 3]
    assert [h.outcome for h in history] == ["retried", "retried", "done"]
    host, pid = sup.owner.split(":")[:2]
    assert {(h.host, h.supervisor_pid) for h in history} == {(host, int(pid))}
    assert all(h.child_pid and h.started_at and h.claimed_at for h in history)
    assert all(h.seconds is not None and h.seconds >= 0 for h in history)
    assert "failing attempt 1" in (history[0].error or "")
    assert "failing attempt 2" in (history[1].error or "") and history[2].error is None
    assert all(h.started_at <= h.ended_at for h in history if h.started_at)
    # the traceback holds the job's frame and none of procqueue's own
    assert "fail_then_succeed" in (history[0].error or "")
    assert os.path.dirname(procqueue.__file__) + os.sep not in (history[0].error or "")


def test_a_segfault_records_its_python_stack_and_signal(ops_app: App) -> None:
    with supervising(ops_app, OPS, workers=1):
        info = finished(ops_app, ops_app.enqueue(OPS_JOB + "crash_once", {}))
    assert info.state == JobState.DONE and info.result == 2
    crash = info.history[0]
    assert (crash.outcome, crash.exit_reason) == ("retried", "SIGSEGV")
    assert "Segmentation fault" in (crash.error or "")
    assert "_deep_in_the_job" in (crash.error or "")  # faulthandler's stack of the job
    assert info.history[1].outcome == "done" and info.history[1].exit_reason is None


def test_timeouts_and_cancels_are_recorded_and_logged_at_info(
    app: App, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="procqueue")
    marker = tmp_path / "pid"
    with supervising(app, SPEC, workers=2):
        timed = app.enqueue(JOB + "ignore_sigterm_and_sleep", {"marker": str(tmp_path / "t")})
        running = app.enqueue(JOB + "sleep_forever", {"marker": str(marker)})
        read_pid(marker)
        wait_until(lambda: app.get(running).pid is not None, what="the pid on the record")
        app.cancel(running)
        cancelled = finished(app, running)
        timed_out = finished(app, timed)
    assert [h.outcome for h in cancelled.history] == ["cancelled"]
    # Stopped ended it in time (no exit reason: the attempt ended before its child)
    assert cancelled.history[0].exit_reason in (None, "SIGTERM", "SIGKILL", "exit code 0")
    assert timed_out.history[0].outcome == "failed"
    assert timed_out.history[0].exit_reason == "SIGKILL"
    assert "timed out after 0.5s" in (timed_out.history[0].error or "")
    assert "(gave up after 1 attempt)" in (timed_out.error or "")
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert noisy == [], [r.getMessage() for r in noisy]


def test_history_is_in_show_and_its_json_and_pruned_with_the_job(app: App) -> None:
    from procqueue.cli import main as cli

    with supervising(app, SPEC, workers=1):
        job_id = finished(app, app.enqueue(JOB + "fail_then_succeed", {"times": 1})).id
    doc = msgspec.json.decode(subprocess_cli("show", str(job_id), "--json", dsn=app.dsn))
    assert [h["outcome"] for h in doc["history"]] == ["retried", "done"]
    assert doc["history"][0]["error"].startswith("RuntimeError: failing attempt 1")
    text = subprocess_cli("show", str(job_id), dsn=app.dsn)
    assert "#1  retried  on " in text and "#2  done  on " in text
    assert cli.main(["prune", "--older-than", "0", "--dsn", str(app.dsn)]) == 0
    assert app.store.attempt_list(id=job_id) == []


def subprocess_cli(*argv: str, dsn: str | None, stdin: str = "") -> str:
    done = subprocess.run(
        [sys.executable, "-m", "procqueue", *argv, "--dsn", str(dsn)],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- supervisors and orphans ----------------------------------------------------------


def test_supervisors_are_listed_while_alive_and_removed_when_they_stop(app: App) -> None:
    with supervising(app, SPEC, workers=2, queues=["default", "bulk"]) as sup:
        found = wait_until(lambda: app.supervisors(), what="a heartbeat row")
        (row,) = found
        assert (row.owner, row.alive, row.workers, row.spec) == (sup.owner, True, 2, SPEC)
        assert row.queues == ["default", "bulk"] and row.pid == os.getpid()
        text = subprocess_cli("supervisors", dsn=app.dsn)
        assert "alive" in text and "default,bulk" in text and "0/2" in text
    assert app.supervisors() == []


def test_a_job_whose_supervisor_died_shows_orphaned_until_rescued(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    proc = start_supervisor(str(app.dsn), workers=1, lease=3.0)
    try:
        job_id = app.enqueue(JOB + "sleep_forever", {"marker": str(marker)})
        read_pid(marker)
        running = wait_until(lambda: app.get(job_id).owner and app.get(job_id), what="owner")
        assert running.state == JobState.RUNNING and not running.orphaned
        assert f":{proc.pid}:" in (running.owner or "")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        orphan = wait_until(lambda: app.get(job_id).orphaned and app.get(job_id), timeout=15)
        assert orphan.state == JobState.RUNNING
        assert [j.orphaned for j in app.jobs(state="running")] == [True]
        assert not next(s for s in app.supervisors() if s.pid == proc.pid).alive
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- queue limits --------------------------------------------------------------------


def test_supervise_limits_never_overwrite_a_stored_limit(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    with supervising(app, SPEC, limits={"bulk": 2}):
        pass
    bulk = {q.name: q for q in app.queues()}["bulk"]
    assert bulk.limit == 2 and (bulk.limit_by or "").startswith("supervise on ")
    app.set_limit("bulk", 5)
    with (
        caplog.at_level(logging.WARNING, logger="procqueue"),
        supervising(app, SPEC, limits={"bulk": 3}),
    ):
        pass
    bulk = {q.name: q for q in app.queues()}["bulk"]
    assert (bulk.limit, bulk.limit_by) == (5, "operator")
    assert any("keeping its stored limit 5" in r.getMessage() for r in caplog.records)
    app.set_limit("bulk", None)  # cleared by an operator: supervisors keep it cleared too
    with supervising(app, SPEC, limits={"bulk": 3}):
        pass
    assert {q.name: q for q in app.queues()}["bulk"].limit is None


def test_limits_and_pauses_of_unknown_queues_are_refused_unless_created(app: App) -> None:
    with pytest.raises(QueueNotFound, match="no queue 'bulkk'"):
        app.pause("bulkk")
    with pytest.raises(QueueNotFound):
        app.set_limit("bulkk", 2)
    assert app.queues() == []
    app.set_limit("later", 2, create=True)
    app.pause("later")  # it has settings now
    (later,) = app.queues()
    assert (later.name, later.limit, later.paused) == ("later", 2, True)
    app.pause("default")  # the registered jobs' queue is known without jobs


def test_oldest_pending_counts_from_run_at(app: App) -> None:
    app.enqueue(JOB + "add", {"a": 1, "b": 2}, delay=3600)
    (queue,) = app.queues()
    assert queue.oldest_pending_age is None  # not due yet: nobody waits for it


# -- bulk actions ----------------------------------------------------------------------


def test_retry_and_cancel_by_filter(app: App) -> None:
    with supervising(app, SPEC, workers=2):
        failed = [app.enqueue(JOB + "permanent") for _ in range(5)]
        for job_id in failed:
            assert finished(app, job_id).state == JobState.FAILED
    other = app.enqueue(JOB + "add", {"a": 1, "b": 1}, queue="bulk")
    assert app.count_where("retry", state="failed", name=JOB + "permanent") == 5
    assert app.retry_where(state="failed", name=JOB + "permanent") == 5
    assert {app.get(i).state for i in failed} == {JobState.PENDING}
    assert app.get(failed[0]).history[0].outcome == "failed"  # kept across the retry
    assert app.cancel_where(queue="default") == (5, 0)
    assert app.get(other).state == JobState.PENDING
    with pytest.raises(Exception, match="only failed or cancelled jobs retry"):
        app.retry_where(state="pending")


def test_cli_bulk_retry_asks_first_unless_yes(app: App) -> None:
    ids = [app.enqueue(JOB + "add", {"a": i, "b": 0}) for i in range(3)]
    base = [sys.executable, "-m", "procqueue", "cancel", "--name", JOB + "add"]
    args = {"capture_output": True, "text": True, "cwd": ROOT, "timeout": 60}
    no = subprocess.run([*base, "--dsn", str(app.dsn)], input="n\n", **args)  # type: ignore[call-overload]
    assert no.returncode == 1 and "3 jobs match; cancel them?" in no.stderr
    assert {app.get(i).state for i in ids} == {JobState.PENDING}
    yes = subprocess.run([*base, "--dsn", str(app.dsn)], input="y\n", **args)  # type: ignore[call-overload]
    assert yes.returncode == 0 and "3 jobs cancelled" in yes.stdout
    out = subprocess_cli("retry", "--state", "cancelled", "--since", "1h", "--yes", dsn=app.dsn)
    assert "3 jobs pending again" in out
    assert {app.get(i).state for i in ids} == {JobState.PENDING}


# -- producers without the job code; arguments' types -----------------------------------


def test_a_process_that_imports_only_procqueue_enqueues_by_name(app: App) -> None:
    script = (
        "import sys, procqueue\n"
        "app = procqueue.App(sys.argv[1])\n"
        "print(app.enqueue('tests.jobs.basic.add', {'a': 2, 'b': 3}))\n"
        "print(app.enqueue('tests.jobs.basic.add', {'a': 'x', 'b': 3}))\n"
        "assert not any(m.startswith('tests') for m in sys.modules), 'imported job code'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(app.dsn)],
        capture_output=True,
        text=True,
        cwd="/",
        env={**os.environ, "PYTHONPATH": ""},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    good, bad = (int(line) for line in done.stdout.split())
    with supervising(app, SPEC):
        assert finished(app, good).result == 5
        failed = finished(app, bad)
    assert failed.state == JobState.FAILED and failed.attempts == 1
    assert "argument 'a'" in (failed.error or "") and "Expected `int`" in (failed.error or "")


def test_registered_arguments_are_checked_against_their_annotations(app: App) -> None:
    with pytest.raises(EnqueueError, match=r"argument 'a' of tests\.jobs\.basic\.add: Expected"):
        app.enqueue(JOB + "add", {"a": "x", "b": 1})
    assert app.jobs() == []


# -- scientific types in and out ---------------------------------------------------------


def test_numpy_values_paths_enums_sets_and_app_types_go_in_and_out(ops_app: App) -> None:
    with supervising(ops_app, OPS, workers=1):
        stats = finished(ops_app, ops_app.enqueue(OPS_JOB + "numpy_stats", {"values": [1, 2, 3]}))
        args = {
            "data": np.arange(3),
            "where": Path("/data/in.png"),
            "point": ops.Point(2, 5),
        }
        described = finished(ops_app, ops_app.enqueue(OPS_JOB + "describe", args))
        broken = finished(ops_app, ops_app.enqueue(OPS_JOB + "unencodable", {}))
    assert stats.state == JobState.DONE, stats.error
    assert stats.result == {"mean": 2.0, "max": 3, "doubled": [2.0, 4.0, 6.0]}
    assert described.args == {"data": [0, 1, 2], "where": "/data/in.png", "point": {"x": 2, "y": 5}}
    assert described.state == JobState.DONE, described.error
    assert described.result == {
        "data": [0, 1, 2],
        "where": "/data/in.png",
        "is_path": True,
        "point": {"x": 2, "y": 5},
        "sum": 7,
        "color": "red",
        "tags": ["only"],
    }
    assert broken.state == JobState.FAILED
    assert "result['stats'][2]: tests.jobs.ops.Opaque" in (broken.error or "")


def test_an_argument_that_cannot_be_encoded_is_named_by_its_path(ops_app: App) -> None:
    with pytest.raises(
        EnqueueError, match=r"args\['data'\]\['deep'\]\[1\]: tests\.jobs\.ops\.Opaque"
    ):
        ops_app.enqueue(
            OPS_JOB + "describe",
            {"data": {"deep": [1, ops.Opaque()]}, "where": "/x", "point": ops.Point(0, 0)},
        )


def test_an_unannotated_on_failure_handler_receives_a_job_info(
    ops_app: App, tmp_path: Path
) -> None:
    with supervising(ops_app, OPS, workers=1):
        job_id = ops_app.enqueue(OPS_JOB + "fails_with_handler", {})
        assert finished(ops_app, job_id).state == JobState.FAILED
        seen = tmp_path / f"handled-{job_id}"
        wait_until(seen.exists, timeout=20, what="the handler ran")
    assert seen.read_text() == "JobInfo failed True"


# -- polish --------------------------------------------------------------------------------


def test_a_requeued_job_drops_its_previous_progress_and_pid(app: App) -> None:
    from procqueue import models

    store = app.store
    job_id = app.enqueue(JOB + "add", {"a": 1, "b": 2})
    now = app.clock.now()
    assert store.job_claim(owner="h:1:t", queues=None, count=1, lease_until=now + 60, now=now)
    store.job_set_progress(id=job_id, attempt=1, text="half", fraction=0.5)
    store.job_set_pid(id=job_id, attempt=1, pid=4242)
    retry = models.Outcome(
        id=job_id, attempt=1, state=JobState.PENDING, error="x", run_at=now, history="retried"
    )
    assert store.job_record_many(outcomes=[retry], now=now) == []
    info = app.get(job_id)
    assert (info.state, info.progress, info.fraction, info.pid) == (
        JobState.PENDING,
        None,
        None,
        None,
    )
    assert [(h.outcome, h.host, h.supervisor_pid) for h in info.history] == [("retried", "h", 1)]


def test_retention_days_0_keeps_finished_jobs_forever(app: App) -> None:
    from procqueue.supervisor import settings as config
    from procqueue.supervisor.maintenance import Maintenance

    maintenance = Maintenance(app=app, store=app.store, settings=config.Settings(retention_days=0))
    maintenance.step(app.clock.now())
    assert not maintenance.pruning
    with pytest.raises(Exception, match="retention-days must be >= 0"):
        config.Settings(retention_days=-1)


def test_a_prune_batch_leaves_the_database_thread_as_long_again(app: App) -> None:
    """A batch holds the supervisor's database thread, so the next one waits as
    long as it took: claims and outcomes get at least half of that thread."""
    import time

    from procqueue.supervisor import settings as config
    from procqueue.supervisor.maintenance import Maintenance

    maintenance = Maintenance(app=app, store=app.store, settings=config.Settings(retention_days=1))
    assert maintenance.prune_wait() == 0.0
    began = time.monotonic()
    maintenance.prune_batch(app.clock.now())
    took = time.monotonic() - began
    wait = maintenance.prune_wait()
    assert 0.0 < wait <= took


def test_a_prune_batch_beside_running_jobs_rests_four_times_as_long(app: App) -> None:
    """While the supervisor holds jobs, a batch leaves the database thread
    (and its backend) four times as long as it took, so pruning costs the
    running jobs' claims and outcomes at most a fifth of that thread."""
    import time

    from procqueue.supervisor import settings as config
    from procqueue.supervisor.maintenance import Maintenance, prune_rest

    assert prune_rest(0.05, busy=False) == pytest.approx(0.05)
    assert prune_rest(0.05, busy=True) == pytest.approx(0.2)
    maintenance = Maintenance(app=app, store=app.store, settings=config.Settings(retention_days=1))
    began = time.monotonic()
    maintenance.prune_batch(app.clock.now(), busy=True)
    took = time.monotonic() - began
    assert 0.0 < maintenance.prune_wait() <= prune_rest(took, busy=True)


def test_result_returns_the_value_or_raises_with_the_record(app: App) -> None:
    with supervising(app, SPEC, workers=1):
        ok = app.enqueue(JOB + "add", {"a": 2, "b": 3})
        bad = app.enqueue(JOB + "permanent")
        assert app.result(ok, timeout=20) == 5
        with pytest.raises(JobFailed) as failed:
            app.result(bad, timeout=20)
    assert str(failed.value).startswith(f"job {bad} failed: ")
    assert failed.value.info.id == bad and failed.value.info.state == JobState.FAILED
    assert len(failed.value.info.history) == failed.value.info.attempts >= 1
    pending = app.enqueue(JOB + "add", {"a": 1, "b": 1})
    with pytest.raises(TimeoutError):
        app.result(pending, timeout=0.05)
