"""The tasks framework this Django has: ``django.tasks`` (Django >= 6) or
the ``django-tasks`` backport (Django 5.2), whose API is the same."""

from __future__ import annotations

try:  # Django >= 6.0
    from django.tasks import task_backends
    from django.tasks.backends.base import (
        BaseTaskBackend,
    )
    from django.tasks.base import (
        Task,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django.tasks.exceptions import (
        InvalidTaskError,
        TaskResultDoesNotExist,
    )
    from django.tasks.signals import (
        task_enqueued,
    )
except ImportError:  # the backport
    from django_tasks import task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError, TaskResult, TaskResultStatus
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued

__all__ = [
    "BaseTaskBackend",
    "InvalidTaskError",
    "Task",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
]
