"""Django tasks that the tests enqueue and a supervisor runs."""

from __future__ import annotations

import os
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import connection

try:
    from django.tasks import task  # type: ignore[import-not-found,unused-ignore]
except ImportError:
    from django_tasks import task


class TaskBroke(Exception):
    """An exception of the tasks module, to find by its import path."""


@task()
def add(a: int, b: int = 0) -> int:
    return a + b


@task()
def fail(message: str) -> None:
    raise TaskBroke(message)


@task(queue_name="bulk", priority=7)
def where() -> dict[str, Any]:
    """Where it ran: Django set up, its settings, and its database usable."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        (one,) = cursor.fetchone()
    return {
        "ready": apps.ready,
        "settings": os.environ["DJANGO_SETTINGS_MODULE"],
        "secret": settings.SECRET_KEY,
        "db": one,
        "pid": os.getpid(),
    }


@task()
async def async_add(a: int, b: int) -> int:
    return a + b
