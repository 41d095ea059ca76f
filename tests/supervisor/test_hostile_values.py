"""Values job code sends that the supervisor must survive, on both backends,
through a real supervisor process: the job that sends them fails clearly
(once, not in a loop of restarts) and the next job runs."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from procqueue import App, EnqueueError, JobState
from procqueue.testing import wait_until
from tests.chaos import cluster
from tests.cli.test_commands import run
from tests.jobs import hostile_values
from tests.procs import start_supervisor
from tests.store.rawdb import RawDb

SPEC = "tests.jobs.hostile_values"
H = SPEC + "."


@pytest.fixture
def live(dsn: str) -> Iterator[tuple[App, subprocess.Popen[bytes]]]:
    app = hostile_values.app.using(dsn)
    app.store.migrate(now=app.clock.now())
    sup = start_supervisor(dsn, spec=SPEC, workers=1)
    try:
        yield app, sup
    finally:
        sup.terminate()
        try:
            sup.wait(timeout=30)
        except subprocess.TimeoutExpired:
            sup.kill()
            sup.wait(timeout=10)
        app.close()


def still_runs(app: App, sup: subprocess.Popen[bytes]) -> None:
    """The supervisor is alive and runs the next job."""
    assert sup.poll() is None, "the supervisor exited"
    assert app.wait(app.enqueue(H + "echo", {"value": "next"}), timeout=30).result == "next"
    assert sup.poll() is None


@pytest.mark.parametrize("job", ["deep_result", "deep_step", "deep_frame"])
def test_a_value_nested_990_deep_fails_its_job_not_the_supervisor(
    live: tuple[App, subprocess.Popen[bytes]], job: str
) -> None:
    app, sup = live
    info = app.wait(app.enqueue(H + job, {"depth": 990}), timeout=60)
    assert info.state == JobState.FAILED, info
    assert "deep" in (info.error or "") or "protocol" in (info.error or ""), info.error
    assert "gave up after 3 attempts" in (info.error or ""), "retried per its policy"
    still_runs(app, sup)


def test_arguments_nested_990_deep_are_refused_at_enqueue(dsn: str) -> None:
    app = hostile_values.app.using(dsn)
    try:
        with pytest.raises(EnqueueError, match=r"nested deeper than 512 levels|cannot be encoded"):
            app.enqueue(H + "echo", {"value": hostile_values.nested(990)})
        assert app.jobs() == []
        assert app.get(app.enqueue(H + "echo", {"value": hostile_values.nested(500)})).args
    finally:
        app.close()


def test_a_row_out_of_int_range_fails_alone_and_claiming_goes_on(
    live: tuple[App, subprocess.Popen[bytes]], dsn: str
) -> None:
    app, sup = live
    raw = RawDb(dsn)
    try:
        app.pause("default")  # corrupted before the supervisor sees the rows
        bad = app.enqueue(H + "echo", {"value": "bad"})
        ghost = app.enqueue(H + "echo", {"value": "ghost"})
        top = 2**31 - 1
        raw.execute("UPDATE jobs SET attempts = ?, max_attempts = ? WHERE id = ?", (top, top, bad))
        # a row left running by nobody, its lease no time at all
        raw.execute("UPDATE jobs SET state = 'running', owner = 'ghost' WHERE id = ?", (ghost,))
        goods = [app.enqueue(H + "echo", {"value": n}) for n in range(5)]
        app.resume("default")
        assert [app.wait(g, timeout=30).result for g in goods] == list(range(5))
        info = app.wait(bad, timeout=30)
        assert info.state == JobState.FAILED and "no attempt left" in (info.error or "")
        assert app.wait(ghost, timeout=60).result == "ghost"  # rescued, then run
        still_runs(app, sup)
    finally:
        raw.close()


@pytest.mark.parametrize(
    ("job", "kind"),
    [("bad_step", "nan"), ("bad_step", "inf"), ("bad_result", "nan"), ("bad_result", "inf")],
)
def test_nan_or_infinity_in_a_step_or_result_fails_the_job_not_saved_as_null(
    live: tuple[App, subprocess.Popen[bytes]], job: str, kind: str
) -> None:
    app, sup = live
    info = app.wait(app.enqueue(H + job, {"kind": kind}), timeout=30)
    assert info.state == JobState.FAILED, info
    assert "NaN or infinity" in (info.error or ""), info.error
    still_runs(app, sup)


@pytest.mark.parametrize("kind", ["int", "bool"])
def test_progress_of_the_wrong_type_raises_type_error_in_the_job(
    live: tuple[App, subprocess.Popen[bytes]], kind: str
) -> None:
    app, sup = live
    info = app.wait(app.enqueue(H + "bad_progress", {"kind": kind}), timeout=30)
    assert info.state == JobState.DONE, info
    assert str(info.result).startswith("TypeError: "), info.result
    still_runs(app, sup)


def hopping(log: Path) -> bool:
    """Whether the chain logging to `log` still hops (its log grows)."""
    before = log.stat().st_size
    time.sleep(0.2)  # many generations' time
    return log.stat().st_size != before


def kill_chain(log: Path) -> None:
    """The test's own leftovers, should the promise break: each generation
    it logged, again and again until the log stops growing."""
    for _ in range(1000):
        for line in log.read_text().split():
            with contextlib.suppress(OSError):
                os.kill(int(line), signal.SIGKILL)
        if not hopping(log):
            return


@pytest.mark.parametrize("when", ["return", "timeout", "stop"])
def test_a_pid_hopping_chain_does_not_outlive_its_job(
    live: tuple[App, subprocess.Popen[bytes]], tmp_path: Path, when: str
) -> None:
    app, sup = live
    log = tmp_path / "hops"
    then = "return" if when == "return" else "sleep"
    options = {"timeout": 1.0} if when == "timeout" else {}
    job_id = app.enqueue(H + "hop_chain", {"log": str(log), "then": then}, **options)
    try:
        wait_until(lambda: log.exists() and hopping(log), timeout=30, what="the chain")
        if when == "stop":
            wait_until(lambda: app.get(job_id).started_at is not None, timeout=30)
            sup.terminate()
            assert sup.wait(timeout=30) == 0
        else:
            info = app.wait(job_id, timeout=30)
            assert info.state == (JobState.DONE if when == "return" else JobState.FAILED)
        wait_until(lambda: not hopping(log), timeout=10, what="the chain to end")
    finally:
        kill_chain(log)


@pytest.fixture
def logged(dsn: str, tmp_path: Path) -> Iterator[tuple[App, Path]]:
    """A real ``procqueue supervise`` of one child, its log in a file."""
    log = tmp_path / "sup.log"
    app = hostile_values.app.using(dsn)
    sup = cluster.start_supervisor(dsn, spec=SPEC, log_path=log, workers=1, poll=0.05, cron=False)
    try:
        yield app, log
    finally:
        sup.terminate()
        sup.wait(timeout=30)
        app.close()


def test_child_output_and_errors_reach_the_log_escaped(logged: tuple[App, Path]) -> None:
    app, log = logged
    info = app.wait(app.enqueue(H + "evil_output", {}), timeout=30)
    assert info.state == JobState.FAILED
    wait_until(lambda: "\\x1b[2J\\x0derr" in log.read_text(), timeout=10, what="stderr")
    text = log.read_text()
    assert f"job {info.id} stdout: \\x1b]0;PWN\\x07\\x1b[2J\\x0djob {info.id} done" in text, text
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), repr(text)


def test_a_job_closing_its_output_does_not_silence_the_next_jobs(
    logged: tuple[App, Path],
) -> None:
    app, log = logged
    closer = app.wait(app.enqueue(H + "close_output", {}), timeout=30)
    assert closer.state == JobState.DONE
    after = app.wait(app.enqueue(H + "say", {"text": "still heard"}), timeout=30)
    assert after.state == JobState.DONE
    assert after.history[-1].child_pid == closer.history[-1].child_pid  # the same child
    wait_until(lambda: "still heard on stderr" in log.read_text(), timeout=10, what="stderr")
    assert f"job {after.id} stdout: still heard" in log.read_text()


def test_a_crash_stack_shows_the_jobs_frames_not_procqueues(
    live: tuple[App, subprocess.Popen[bytes]],
) -> None:
    app, sup = live
    info = app.wait(app.enqueue(H + "segfault", {}), timeout=30)
    error = info.error or ""
    assert info.state == JobState.FAILED and "SIGSEGV" in error, error
    frames = [line.strip() for line in error.splitlines() if line.strip().startswith("File ")]
    assert any("in _crash_here" in f for f in frames), error
    assert not any("/procqueue/" in f for f in frames), error
    assert "procqueue's own" in error, error
    still_runs(app, sup)


def test_a_timed_out_job_keeps_no_pid(live: tuple[App, subprocess.Popen[bytes]]) -> None:
    app, _ = live
    info = app.wait(app.enqueue(H + "sleeps", {"seconds": 60}, timeout=2.0), timeout=30)
    assert info.state == JobState.FAILED and "timed out" in (info.error or ""), info.error
    assert info.pid is None
    assert info.history[-1].child_pid is not None  # the history keeps it


def test_batch_show_prints_each_failed_members_error_line(
    live: tuple[App, subprocess.Popen[bytes]], capsys: pytest.CaptureFixture[str], dsn: str
) -> None:
    app, _ = live
    with app.batch(name="b") as b:
        ids = [app.enqueue(H + "fails", {"why": f"reason {n}"}) for n in range(2)]
    for id_ in ids:
        app.wait(id_, timeout=30)
    code, out, err = run(capsys, "batch", "show", str(b.id), "--dsn", dsn)
    assert code == 0, err
    for n, id_ in enumerate(ids):
        line = next(x for x in out.splitlines() if x.strip().startswith(str(id_)))
        assert f"ValueError: reason {n}" in line, out
    assert "gave up after" not in out, out
