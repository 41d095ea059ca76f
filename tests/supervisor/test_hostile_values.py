"""Values job code sends that the supervisor must survive, on both backends,
through a real supervisor process: the job that sends them fails clearly
(once, not in a loop of restarts) and the next job runs."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from procqueue import App, EnqueueError, JobState
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
