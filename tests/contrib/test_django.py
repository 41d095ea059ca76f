"""Django's tasks framework on procqueue: a real Django project
(tests/contrib/django_project), a real ``procqueue supervise --django``
subprocess, on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from procqueue.testing import wait_until
from tests.conftest import _postgres_answers, drop_pg_schema, make_pg_dsn

pytest.importorskip("django")

ROOT = Path(__file__).resolve().parent.parent.parent
SETTINGS = "tests.contrib.django_project.settings"
TASKS = "tests.contrib.django_project.tasksapp.tasks"


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS)
    import django

    django.setup()


_django()

from django.db import transaction  # noqa: E402
from django.test import override_settings  # noqa: E402

from procqueue.contrib.django import ProcqueueBackend, tasks_api  # noqa: E402
from tests.contrib.django_project.tasksapp import tasks  # noqa: E402


@dataclass
class Queue:
    kind: str
    dsn: str
    backend: ProcqueueBackend


def _supervise(dsn: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PQ_DJANGO_DSN=dsn)
    env.pop("DJANGO_SETTINGS_MODULE", None)  # --settings names it
    argv = ["supervise", "--django", "--settings", SETTINGS, "--workers", "2", "--poll", "0.05"]
    return subprocess.Popen([sys.executable, "-m", "procqueue", *argv], cwd=ROOT, env=env)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def queue(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Queue]:
    """The TASKS backend on a fresh database, with a supervisor running its jobs."""
    schema = None
    if request.param == "sqlite":
        dsn = f"sqlite:///{tmp_path_factory.mktemp('django')}/queue.db"
    else:
        reason = _postgres_answers()
        if reason is not None:
            if os.environ.get("PROCQUEUE_REQUIRE_POSTGRES") == "1":
                pytest.fail(f"PostgreSQL required: {reason}")
            pytest.skip(f"no PostgreSQL: {reason}")
        dsn, schema = make_pg_dsn()
    options = {
        "BACKEND": "procqueue.contrib.django.ProcqueueBackend",
        "QUEUES": ["default", "bulk"],
    }
    with override_settings(TASKS={"default": {**options, "OPTIONS": {"dsn": dsn, "timeout": 30}}}):
        backend = tasks_api.task_backends["default"]
        assert isinstance(backend, ProcqueueBackend)
        backend.app.store  # noqa: B018  (migrated before the supervisor starts)
        proc = _supervise(dsn)
        try:
            yield Queue(request.param, dsn, backend)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            backend.app.close()
            if schema is not None:
                drop_pg_schema(schema)


def _finished(result: Any, timeout: float = 30.0) -> Any:
    def done() -> bool:
        result.refresh()
        return bool(result.is_finished)

    wait_until(done, timeout=timeout, what=f"task result {result.id} finished")
    return result


def test_a_task_runs_under_supervise_django_and_refreshes_successful(queue: Queue) -> None:
    result = tasks.add.enqueue(2, b=3)
    assert result.status == tasks_api.TaskResultStatus.READY
    assert queue.backend.app.get(int(result.id)).name == f"{TASKS}.add"  # a job by import path
    _finished(result)
    assert result.status == tasks_api.TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.errors == []
    assert result.attempts == 1
    again = tasks.add.get_result(result.id)  # read back from the id alone
    assert (again.status, again.return_value, again.kwargs) == (
        tasks_api.TaskResultStatus.SUCCESSFUL,
        5,
        {"a": 2, "b": 3},
    )


def test_every_child_has_django_set_up_with_its_database(queue: Queue) -> None:
    result = _finished(tasks.where.enqueue())
    assert result.status == tasks_api.TaskResultStatus.SUCCESSFUL
    value = result.return_value
    assert (value["ready"], value["settings"], value["secret"], value["db"]) == (
        True,
        SETTINGS,
        "procqueue-tests",
        1,
    )
    assert value["pid"] != os.getpid()


def test_priority_and_queue_map_to_the_job(queue: Queue) -> None:
    result = tasks.add.using(priority=-40, queue_name="bulk").enqueue(1)
    info = queue.backend.app.get(int(result.id))
    assert (info.priority, info.queue, info.max_attempts) == (-40, "bulk", 1)
    assert _finished(result).return_value == 1


def test_a_failing_task_refreshes_failed_with_its_error(queue: Queue) -> None:
    result = _finished(tasks.fail.enqueue("no ink"))
    assert result.status == tasks_api.TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class is tasks.TaskBroke
    assert "TaskBroke: no ink" in error.traceback
    assert "tasks.py" in error.traceback  # the frame that raised
    with pytest.raises(ValueError, match="failed"):
        result.return_value  # noqa: B018


def test_an_async_task_runs(queue: Queue) -> None:
    result = _finished(tasks.async_add.enqueue(20, 22))
    assert (result.status, result.return_value) == (tasks_api.TaskResultStatus.SUCCESSFUL, 42)


def test_run_after_is_respected(queue: Queue) -> None:
    after = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1.5)
    later = tasks.add.using(run_after=after).enqueue(1, 1)
    now = _finished(tasks.add.enqueue(2, 2))  # enqueued second, runs first
    later.refresh()
    assert now.status == tasks_api.TaskResultStatus.SUCCESSFUL
    assert later.status == tasks_api.TaskResultStatus.READY
    assert queue.backend.app.get(int(later.id)).run_at == after
    _finished(later)
    assert later.status == tasks_api.TaskResultStatus.SUCCESSFUL
    assert later.started_at is not None and later.started_at >= after


def test_an_unknown_id_does_not_exist_and_a_non_task_job_is_failed(queue: Queue) -> None:
    with pytest.raises(tasks_api.TaskResultDoesNotExist):
        queue.backend.get_result("999999")
    with pytest.raises(tasks_api.TaskResultDoesNotExist):
        queue.backend.get_result("not a number")
    job_id = queue.backend.app.enqueue("nowhere.to_be_found", {"x": 1})
    result = queue.backend.get_result(str(job_id))
    assert result.status == tasks_api.TaskResultStatus.FAILED
    assert "not a Django task" in result.errors[-1].traceback
    assert result.errors[-1].exception_class_path == "procqueue.errors.JobFailed"
    queue.backend.app.cancel(job_id)  # not to be retried by the supervisor


def _postgres_only(queue: Queue) -> None:
    if queue.kind != "postgres":
        pytest.skip("transactions are joined on PostgreSQL only")


def test_an_enqueue_in_a_rolled_back_atomic_leaves_no_job(queue: Queue) -> None:
    _postgres_only(queue)
    before = {j.id for j in queue.backend.app.jobs(limit=1000)}
    with pytest.raises(RuntimeError), transaction.atomic():
        result = tasks.add.enqueue(1, 2)
        raise RuntimeError("roll back")
    with pytest.raises(tasks_api.TaskResultDoesNotExist):
        queue.backend.get_result(result.id)
    assert {j.id for j in queue.backend.app.jobs(limit=1000)} == before


def test_an_enqueue_in_an_atomic_commits_with_it(queue: Queue) -> None:
    _postgres_only(queue)
    with transaction.atomic():
        result = tasks.add.enqueue(3, 4)
        with pytest.raises(tasks_api.TaskResultDoesNotExist):  # not visible before commit
            queue.backend.get_result(result.id)
    assert _finished(result).return_value == 7


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["supervise"], "supervise needs MODULE"),
        (["supervise", "tests.jobs.basic", "--settings", SETTINGS], "--settings needs --django"),
        (["supervise", "--django", "--settings", "no.such.settings"], "cannot set up Django"),
    ],
)
def test_supervise_refuses_a_django_setup_it_cannot_do(argv: list[str], says: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "-m", "procqueue", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert says in done.stderr.decode()
    assert "Traceback" not in done.stderr.decode()


def test_aenqueue_and_arefresh(queue: Queue) -> None:
    import asyncio

    async def run() -> Any:
        result = await tasks.add.aenqueue(5, 6)
        for _ in range(3000):
            await result.arefresh()
            if result.is_finished:
                return result
            await asyncio.sleep(0.01)  # a poll interval, not a wait for an outcome
        raise AssertionError(f"task result {result.id} never finished")

    result = asyncio.run(run())
    assert (result.status, result.return_value) == (tasks_api.TaskResultStatus.SUCCESSFUL, 11)


def test_a_row_that_does_not_decode_is_failed_not_raised(queue: Queue) -> None:
    if queue.kind != "sqlite":
        pytest.skip("a SQLite row can hold text that is no JSON")
    import sqlite3

    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)  # never claimed during the test
    result = tasks.add.using(run_after=later).enqueue(1, 2)
    with sqlite3.connect(queue.dsn.removeprefix("sqlite:///")) as raw:
        raw.execute("UPDATE jobs SET args = '{broken' WHERE id = ?", (int(result.id),))
    result.refresh()
    assert result.status == tasks_api.TaskResultStatus.FAILED
    assert "can't be read" in result.errors[-1].traceback
    assert "args" in result.errors[-1].traceback
    queue.backend.app.cancel(int(result.id))
