"""`ProcqueueBackend`: a backend of Django's tasks framework whose tasks are
procqueue jobs, run process-isolated by ``procqueue supervise --django``.

A task's job is named by the task's import path (``myapp.tasks.send_email``)
and takes its arguments by parameter name. Enqueued on the configured
Django database while it is inside ``transaction.atomic()`` (PostgreSQL,
the same database as procqueue's), the job's row is written on Django's own
connection, so it commits or rolls back with the caller's transaction.
"""

from __future__ import annotations

import builtins
import datetime as dt
import urllib.parse
from typing import Any

from django.db import connections
from django.utils import timezone

from procqueue import errors, models
from procqueue.contrib.django import tasks_api, worker
from procqueue.producer.app import App

_STATUS = {
    models.JobState.PENDING: tasks_api.TaskResultStatus.READY,
    models.JobState.RESERVED: tasks_api.TaskResultStatus.RUNNING,
    models.JobState.RUNNING: tasks_api.TaskResultStatus.RUNNING,
    models.JobState.DONE: tasks_api.TaskResultStatus.SUCCESSFUL,
    models.JobState.FAILED: tasks_api.TaskResultStatus.FAILED,
    models.JobState.CANCELLED: tasks_api.TaskResultStatus.FAILED,
}
"""procqueue's states as Django's; any other (``blocked``) is READY."""

FAILURE_CLASS = "procqueue.errors.JobFailed"
"""The exception class of an error that names none a producer can import
(a timeout, a killed child, a cancel, an unreadable row)."""


class ProcqueueBackend(tasks_api.BaseTaskBackend):  # type: ignore[misc]
    """Django tasks as procqueue jobs.

    OPTIONS:
        dsn: procqueue's database. Default: the Django database `database`
            when it is PostgreSQL (procqueue's tables in its schema
            `schema`), else procqueue's own default ($PROCQUEUE_DSN, the
            config file, ``sqlite:///procqueue.db``).
        database: the Django database alias whose transactions an enqueue
            joins ("default").
        schema: the PostgreSQL schema of procqueue's tables when the DSN is
            derived from `database` ("procqueue").
        max_attempts: runs of a task before it is FAILED (1: Django's
            tasks are not retried unless asked).
        timeout: seconds a run may take before its child is killed
            (procqueue's default, 60, when not given).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.database: str = self.options.get("database", "default")
        self.dsn: str | None = self.options.get("dsn") or _dsn_of(
            self.database, self.options.get("schema", "procqueue")
        )
        self.app = worker.find_tasks(App(self.dsn))
        """Where jobs are written and read: its registry finds tasks by path."""
        self._enqueue_options: dict[str, Any] = {
            "max_attempts": int(self.options.get("max_attempts", 1))
        }
        if self.options.get("timeout") is not None:
            self._enqueue_options["timeout"] = float(self.options["timeout"])

    # -- producing ----------------------------------------------------------

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Writes the task's job and returns its READY `TaskResult`.

        Inside ``transaction.atomic()`` on `database` (PostgreSQL, same
        database as the DSN) the row is written on Django's connection and
        exists only if that transaction commits; elsewhere it is committed
        at once.

        Raises InvalidTaskError for a task this backend can't run, and
        procqueue's EnqueueError for arguments that don't fit the task's
        signature or can't be encoded (nothing written).
        """
        self.validate_task(task)
        if task.takes_context:
            raise tasks_api.InvalidTaskError("ProcqueueBackend does not run takes_context tasks")
        job = self.app.registry[task.module_path]
        by_name = job.by_name(tuple(args), dict(kwargs))
        options = {**self._enqueue_options, "queue": task.queue_name, "priority": task.priority}
        if task.run_after is not None:
            run_after = task.run_after
            if timezone.is_naive(run_after):  # USE_TZ = False: local time
                run_after = timezone.make_aware(run_after)
            options["run_at"] = run_after
        job_id = self.app.enqueue(
            task.module_path, by_name, connection=self._joinable_connection(), **options
        )
        result = tasks_api.TaskResult(
            task=task,
            id=str(job_id),
            status=tasks_api.TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        tasks_api.task_enqueued.send(type(self), task_result=result)
        return result

    def _joinable_connection(self) -> object | None:
        """Django's psycopg connection when the enqueue can join its open
        transaction, else None (procqueue commits on its own connection)."""
        conn = connections[self.database]
        if conn.vendor != "postgresql" or not conn.in_atomic_block:
            return None
        if not _same_database(self.dsn, conn.settings_dict):
            return None
        conn.ensure_connection()
        raw: object = conn.connection  # psycopg's: procqueue checks it is one
        return raw

    # -- reading ------------------------------------------------------------

    def get_result(self, result_id: str) -> Any:
        """The `TaskResult` of job `result_id`, as its row says now.

        Raises TaskResultDoesNotExist for an id that is no job. A job whose
        name is no importable Django task, or whose row can't be decoded,
        is FAILED with an error saying so; it never raises.
        """
        try:
            info = self.app.get(int(result_id))
        except (ValueError, errors.JobNotFound):
            raise tasks_api.TaskResultDoesNotExist(result_id) from None
        return self._result(info)

    def _result(self, info: models.JobInfo) -> Any:
        task = worker.import_task(info.name)
        status = _STATUS.get(info.state, tasks_api.TaskResultStatus.READY)
        task_errors = _errors(info, task)
        if task is None:
            task = self.task_class(func=_not_a_task, backend=self.alias, queue_name=self._queue())
            status = tasks_api.TaskResultStatus.FAILED
            why = f"job {info.id} is {info.name!r}, not a Django task importable here"
            task_errors.append(
                tasks_api.TaskError(exception_class_path=FAILURE_CLASS, traceback=why)
            )
        elif task.backend != self.alias:
            task = task.using(backend=self.alias)
        if info.undecodable is not None:
            status = tasks_api.TaskResultStatus.FAILED
            why = f"job {info.id}'s row can't be read: {info.undecodable}"
            task_errors.append(
                tasks_api.TaskError(exception_class_path=FAILURE_CLASS, traceback=why)
            )
        attempts = info.history
        result = tasks_api.TaskResult(
            task=task,
            id=str(info.id),
            status=status,
            enqueued_at=info.created_at,
            started_at=info.started_at,
            last_attempted_at=_last_attempted(info),
            finished_at=info.finished_at,
            args=[],
            kwargs=_json_dict(info.args),
            backend=self.alias,
            errors=task_errors,
            worker_ids=[f"{a.host}:{a.child_pid}" for a in attempts]
            + ([info.owner] if info.owner and info.state == models.JobState.RUNNING else []),
        )
        if status == tasks_api.TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", info.result)  # Django's own way
        return result

    def _queue(self) -> str:
        return "default" if not self.queues or "default" in self.queues else min(self.queues)


def _not_a_task() -> None:
    """The function of a result whose job is not a Django task."""


def _last_attempted(info: models.JobInfo) -> dt.datetime | None:
    if info.state == models.JobState.RUNNING or not info.history:
        return info.started_at
    last = info.history[-1]
    return last.started_at or last.claimed_at or last.ended_at


def _json_dict(args: Any) -> dict[str, Any]:
    return args if isinstance(args, dict) else {}


def _errors(info: models.JobInfo, task: Any) -> list[Any]:
    """One `TaskError` per attempt that ended in an error, oldest first; a
    failed or cancelled job with none recorded gets one from its own."""
    found = [
        tasks_api.TaskError(exception_class_path=_class_path(a.error, task), traceback=a.error)
        for a in info.history
        if a.error
    ]
    ended = info.state in (models.JobState.FAILED, models.JobState.CANCELLED)
    if ended and not found:
        text = info.error or f"job {info.id} was {info.state}"
        found.append(
            tasks_api.TaskError(exception_class_path=_class_path(text, task), traceback=text)
        )
    return found


def _class_path(error: str, task: Any) -> str:
    """The import path of the exception that `error` (procqueue's "Type:
    message" then frames) names: a builtin, one of the task's module, or
    procqueue's; `FAILURE_CLASS` when there is none to import."""
    name = error.split("\n", 1)[0].split(":", 1)[0].strip()
    if not name.isidentifier():
        return FAILURE_CLASS
    for where, module in (
        ("builtins", builtins),
        (getattr(task, "func", None) and task.func.__module__, None),
        ("procqueue.errors", errors),
    ):
        if not where:
            continue
        if module is None:
            import sys

            module = sys.modules.get(where)
        found = getattr(module, name, None)
        if isinstance(found, type) and issubclass(found, BaseException):
            return f"{where}.{name}"
    return FAILURE_CLASS


def _dsn_of(alias: str, schema: str) -> str | None:
    """procqueue's DSN on Django database `alias` when it is PostgreSQL."""
    from django.conf import settings

    db = settings.DATABASES.get(alias, {})
    if "postgresql" not in db.get("ENGINE", ""):
        return None
    user = urllib.parse.quote(db.get("USER") or "", safe="")
    password = urllib.parse.quote(str(db.get("PASSWORD") or ""), safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = db.get("HOST") or ""
    port = f":{db['PORT']}" if db.get("PORT") else ""
    name = urllib.parse.quote(db.get("NAME") or "", safe="")
    return f"postgresql://{auth}{host}{port}/{name}?schema={schema}"


def _same_database(dsn: str | None, db: dict[str, Any]) -> bool:
    """Whether procqueue's `dsn` names Django database `db` (its name and
    port: hosts are not compared, "localhost" and "127.0.0.1" being one)."""
    if not dsn or not dsn.startswith(("postgresql://", "postgres://")):
        return False
    parts = urllib.parse.urlsplit(dsn)
    name = urllib.parse.unquote(parts.path.lstrip("/"))
    return name == db.get("NAME") and (parts.port or 5432) == int(db.get("PORT") or 5432)
