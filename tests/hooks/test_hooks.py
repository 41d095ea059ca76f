"""Hooks around runs (in real children), enqueues (in the producer) and
attempts whose child died (in the supervisor), on both backends; a hook
that raises is logged and changes nothing about the job."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from procqueue import App, JobState
from procqueue.testing import supervising
from tests.helpers import finished
from tests.jobs import hooked
from tests.store.rawdb import RawDb

SPEC = "tests.jobs.hooked"
JOB = SPEC + "."


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "hooks.jsonl"
    monkeypatch.setenv(hooked.LOG_ENV, str(path))
    return path


@pytest.fixture
def app(dsn: str, log: Path) -> Iterator[App]:
    a = hooked.app.using(dsn)
    yield a
    a.close()


def _of(entries: list[dict[str, Any]], job_id: int, at: str) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("id") == job_id and e["at"] == at]


def test_run_hooks_wrap_every_attempt_in_the_child(app: App, log: Path) -> None:
    with supervising(app, SPEC, workers=1):
        done = app.enqueue(JOB + "add", {"a": 2, "b": 3})
        failed = app.enqueue(JOB + "fail", {"a": 7})
        refused = app.enqueue(JOB + "refuse", {"a": 1})
        infos = [finished(app, i) for i in (done, failed, refused)]
    assert [i.state for i in infos] == [JobState.DONE, JobState.FAILED, JobState.FAILED]
    entries = hooked.read(log)
    (enter,) = _of(entries, done, "enter")
    assert enter["name"] == JOB + "add" and enter["queue"] == "default"
    assert enter["attempt"] == 1 and enter["args"] == {"a": 2, "b": 3}
    assert enter["headers"] == {"request": "req-2"}  # stored by the enqueue hook
    assert enter["pid"] != os.getpid()  # in a child
    (exit_,) = _of(entries, done, "exit")
    assert exit_["outcome"] == "done" and exit_["result"] == 5 and exit_["exception"] is None
    assert [e["attempt"] for e in _of(entries, failed, "enter")] == [1, 2]
    assert [e["exception"] for e in _of(entries, failed, "raised")] == ["ValueError"] * 2
    fails = _of(entries, failed, "exit")
    assert [e["outcome"] for e in fails] == ["error", "error"]
    assert "ValueError: failing attempt with a=7" in fails[0]["error"]
    assert _of(entries, refused, "exit")[0]["outcome"] == "permanent"
    enqueued = [e for e in entries if e["at"] == "enqueued"]
    assert [e["ids"] for e in enqueued] == [[done], [failed], [refused]]


def test_enqueue_many_is_one_hook_call_with_every_job(app: App, log: Path) -> None:
    ids = app.enqueue_many([(JOB + "add", {"a": n}, None) for n in range(3)])
    (entry,) = [e for e in hooked.read(log) if e["at"] == "enqueued"]
    assert entry["ids"] == ids and entry["names"] == [JOB + "add"] * 3


def test_a_hook_that_raises_is_logged_and_changes_nothing(
    app: App, log: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="procqueue")
    with supervising(app, SPEC, workers=1):
        entering = app.enqueue(JOB + "add", {"a": 1, "boom": "enter"})
        exiting = app.enqueue(JOB + "add", {"a": 2, "boom": "exit"})
        swallowed = app.enqueue(JOB + "fail", {"a": 3, "boom": "exit"})
        in_enqueue = app.enqueue(JOB + "add", {"a": 4, "boom": "enqueue"})
        infos = {i: finished(app, i) for i in (entering, exiting, swallowed, in_enqueue)}
    assert infos[entering].state == JobState.DONE and infos[entering].result == 1
    assert infos[exiting].state == JobState.DONE and infos[exiting].result == 2
    assert infos[in_enqueue].state == JobState.DONE and infos[in_enqueue].result == 4
    # A hook's __exit__ returning True does not swallow the job's failure.
    assert infos[swallowed].state == JobState.FAILED and infos[swallowed].attempts == 2
    assert "ValueError" in (infos[swallowed].error or "")
    assert "hook failed" not in (infos[swallowed].error or "")
    entries = hooked.read(log)
    assert _of(entries, in_enqueue, "enter")[0]["headers"] == {"request": "req-4"}
    assert _of(entries, entering, "exit")[0]["outcome"] == "done"  # the other hooks ran
    err = caplog.text  # the child's stderr is relayed to the supervisor's log
    assert "hook failed entering" in err and "hook failed exiting" in err
    assert "enqueue hook failed" in err


def test_the_supervisor_tells_of_each_attempt_whose_child_died(app: App, log: Path) -> None:
    with supervising(app, SPEC, workers=1, kill_grace=0.2):
        crashed = app.enqueue(JOB + "segfault_twice", {"a": 5})
        slept = app.enqueue(JOB + "sleep_past_timeout", {"a": 6})
        infos = [finished(app, i) for i in (crashed, slept)]
        # The died hook raised for the segfaults: the supervisor went on.
        after = finished(app, app.enqueue(JOB + "add", {"a": 1, "b": 1}))
    assert [i.state for i in infos] == [JobState.FAILED, JobState.FAILED]
    assert after.state == JobState.DONE
    entries = hooked.read(log)
    deaths = _of(entries, crashed, "died")
    assert [d["attempt"] for d in deaths] == [1, 2]
    assert {d["exit_reason"] for d in deaths} == {"SIGSEGV"}
    assert deaths[0]["kill"] is None and deaths[0]["started_at"] is not None
    assert deaths[0]["headers"] == {"request": "req-5"}
    assert "SIGSEGV" in (deaths[1]["error"] or "")
    assert all(d["pid"] == os.getpid() for d in deaths)  # in the supervisor
    (timed_out,) = _of(entries, slept, "died")
    assert timed_out["kill"] == "timeout" and timed_out["exit_reason"] == "SIGKILL"
    assert _of(entries, after.id, "died") == []


def test_run_inline_runs_the_run_hooks(app: App, log: Path) -> None:
    assert app.run_inline(hooked.add, a=1, b=2) == 3
    with pytest.raises(ValueError):
        app.run_inline(hooked.fail, a=1)
    entries = hooked.read(log)
    outcomes = [e["outcome"] for e in entries if e["at"] == "exit"]
    assert outcomes == ["done", "error"]
    assert all(e["pid"] == os.getpid() for e in entries)


@pytest.mark.parametrize("stored", ['{"request": 7, "ok": "yes"}', "[1, 2]", '"text"', "not json"])
def test_headers_that_are_not_text_reach_the_hooks_as_what_is_text(
    app: App, log: Path, dsn: str, stored: str
) -> None:
    job_id = app.enqueue(JOB + "add", {"a": 1})
    if dsn.startswith("postgres") and stored == "not json":
        stored = '"not json"'  # a json column refuses it; a string is the same test
    raw = RawDb(dsn)
    try:
        raw.execute("UPDATE jobs SET headers = ? WHERE id = ?", (stored, job_id))
    finally:
        raw.close()
    with supervising(app, SPEC, workers=1):
        info = finished(app, job_id)
    assert info.state == JobState.DONE and info.result == 1
    (enter,) = _of(hooked.read(log), job_id, "enter")
    assert enter["headers"] == ({"ok": "yes"} if stored.startswith("{") else {})
