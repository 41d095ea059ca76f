"""``async def`` jobs: run on one event loop per child, with `cx`, timeouts
and cancels as for sync jobs; `run_inline` runs them; functions that can't
return one value are refused at registration."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from procqueue import App, ConfigError, Context, JobState, Permanent
from procqueue.testing import supervising
from tests.helpers import finished, read_pid
from tests.jobs import stopping

SPEC = "tests.jobs.stopping"
JOB = SPEC + "."


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = stopping.app.using(dsn)
    yield a
    a.close()


def test_an_async_job_returns_its_value_on_one_loop_per_child(app: App) -> None:
    with supervising(app, SPEC, workers=1):
        ids = [app.enqueue(JOB + "add_async", {"a": 2, "b": n}) for n in range(3)]
        infos = [finished(app, i) for i in ids]
    assert [i.state for i in infos] == [JobState.DONE] * 3
    assert [i.result["sum"] for i in infos] == [2, 3, 4]
    assert [i.result["id"] for i in infos] == ids  # cx works inside
    assert infos[0].progress == "adding" and infos[0].fraction == 0.5
    assert len({i.result["loop"] for i in infos}) == 1  # the loop is reused


def test_an_async_job_that_awaits_forever_times_out(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    with supervising(app, SPEC, workers=1, kill_grace=5.0):
        info = finished(app, app.enqueue(JOB + "await_forever", {"marker": str(marker)}))
        after = finished(app, app.enqueue(JOB + "add_async", {"a": 1, "b": 1}))
    assert info.state == JobState.FAILED
    assert "timed out after 1" in (info.error or "") and "encoded" not in (info.error or "")
    assert (tmp_path / "pid.finally").read_text() == "ran"  # the task was cancelled
    assert after.state == JobState.DONE and after.result["sum"] == 2


def test_an_async_cpu_loop_past_its_timeout_runs_its_finally(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    with supervising(app, SPEC, workers=1, kill_grace=5.0):
        info = finished(app, app.enqueue(JOB + "spin_async", {"marker": str(marker)}))
    assert info.state == JobState.FAILED and "timed out after 1" in (info.error or "")
    assert "SIGKILL" not in (info.error or "")
    assert (tmp_path / "pid.finally").read_text() == "ran"


def test_a_cancelled_async_job_runs_its_finally(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    with supervising(app, SPEC, workers=1, kill_grace=5.0):
        job_id = app.enqueue(JOB + "wait_async", {"marker": str(marker)})
        read_pid(marker)
        app.cancel(job_id)
        info = finished(app, job_id)
    assert info.state == JobState.CANCELLED
    assert (tmp_path / "pid.finally").read_text() == "ran"


def test_a_sync_job_returning_a_coroutine_fails_clearly(app: App) -> None:
    with supervising(app, SPEC, workers=1):
        info = finished(app, app.enqueue(JOB + "returns_coroutine"))
    assert info.state == JobState.FAILED and info.attempts == 1
    assert "returned a coroutine; declare it async def" in (info.error or "")


# -- in this process -------------------------------------------------------------


def test_run_inline_runs_an_async_job() -> None:
    result = stopping.app.run_inline(JOB + "add_async", a=1, b=2)
    assert result["sum"] == 3 and result["id"] == 0


def test_run_inline_of_a_sync_function_returning_a_coroutine_raises() -> None:
    with pytest.raises(Permanent, match="returned a coroutine; declare it async def"):
        stopping.app.run_inline(JOB + "returns_coroutine")


def test_run_inline_of_an_async_job_inside_a_running_loop_says_why() -> None:
    async def main() -> None:
        stopping.app.run_inline(JOB + "add_async", a=1, b=2)

    with pytest.raises(RuntimeError, match=r"running event loop.*asyncio\.to_thread"):
        asyncio.run(main())

    # the way it suggests works
    async def threaded() -> object:
        return await asyncio.to_thread(stopping.app.run_inline, JOB + "add_async", a=1, b=2)

    assert asyncio.run(threaded())["sum"] == 3  # type: ignore[index]


def test_generator_functions_are_refused_at_registration() -> None:
    app = App(dsn="sqlite:///unused.db")

    def numbers(n: int) -> Iterator[int]:
        yield from range(n)

    async def stream(cx: Context) -> AsyncIterator[int]:
        yield 1

    with pytest.raises(ConfigError, match="is a generator function"):
        app.job()(numbers)
    with pytest.raises(ConfigError, match="is an async generator function"):
        app.job()(stream)
    assert len(app.registry) == 0
