"""Django in a procqueue process: set up before the app module is imported
(supervisor, fork-server template, every child), and Django tasks found by
their import path, so ``myapp.tasks.send_email`` runs as the procqueue job
of that name without being registered anywhere.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from typing import Any

from procqueue import errors
from procqueue.jobs.registry import Job, Registry
from procqueue.producer.app import App

SETTINGS_ENV = "DJANGO_SETTINGS_MODULE"


def setup(settings: str | None = None) -> None:
    """Configures Django (``django.setup()``) with `settings`, else
    ``$DJANGO_SETTINGS_MODULE``; a second call changes nothing.

    Raises ConfigError when neither names a settings module, or Django
    can't set up with it.
    """
    if settings:
        os.environ[SETTINGS_ENV] = settings
    if not os.environ.get(SETTINGS_ENV):
        raise errors.ConfigError(
            f"--django needs a settings module: give --settings or set ${SETTINGS_ENV}"
        )
    try:
        import django

        django.setup()
    except Exception as exc:
        raise errors.ConfigError(
            f"cannot set up Django with {os.environ[SETTINGS_ENV]!r}: {type(exc).__name__}: {exc}"
        ) from None


def close_connections() -> None:
    """Closes this process's Django database connections: a process about
    to fork calls it so that no two processes ever share a socket."""
    from django.db import connections

    connections.close_all()


class TaskRegistry(Registry):
    """A registry that also knows every Django task by its import path.

    A name it has no job for is imported (``module.attribute``); a Django
    `Task` found there is registered under that name, its function wrapped
    so that each run starts and ends with Django's stale-connection check,
    as a request does.
    """

    def __getitem__(self, name: str) -> Job[Any, Any]:
        try:
            return super().__getitem__(name)
        except KeyError:
            task = import_task(name)
            if task is None:
                raise
        try:
            return self.register(_run_in_django(task.func), {"name": name})
        except errors.ConfigError:  # another thread registered it first
            return super().__getitem__(name)


def find_tasks(app: App) -> App:
    """`app`, its registry now also finding Django tasks by import path."""
    if not isinstance(app.registry, TaskRegistry):
        # TaskRegistry adds behaviour, no state: the registry keeps its jobs
        # and schedules, and every Job keeps its owner.
        app.registry.__class__ = TaskRegistry
    return app


def import_task(name: str) -> Any:
    """The Django `Task` at import path `name`, or None."""
    from django.utils.module_loading import import_string

    from procqueue.contrib.django import tasks_api

    try:
        found = import_string(name)
    except Exception:
        return None
    return found if isinstance(found, tasks_api.Task) else None


def _run_in_django(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` between two ``close_old_connections()`` calls (sync functions;
    an ``async def`` task is returned as it is: Django's connections are
    per thread and the check may not run on an event loop)."""
    if inspect.iscoroutinefunction(fn):
        return fn

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        from django.db import close_old_connections

        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return run
