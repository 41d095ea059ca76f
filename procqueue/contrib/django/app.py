"""The App of the Django TASKS backend ``$PROCQUEUE_DJANGO_BACKEND``
("default"): what ``procqueue supervise --django`` runs without MODULE.
Importing it needs Django set up (``--django`` does that first)."""

from __future__ import annotations

import os

from procqueue import errors
from procqueue.contrib.django.backend import ProcqueueBackend

BACKEND_ENV = "PROCQUEUE_DJANGO_BACKEND"


def _backend_app() -> ProcqueueBackend:
    from procqueue.contrib.django.tasks_api import task_backends

    alias = os.environ.get(BACKEND_ENV) or "default"
    try:
        backend = task_backends[alias]
    except Exception as exc:
        raise errors.ConfigError(f"TASKS[{alias!r}]: {type(exc).__name__}: {exc}") from None
    if not isinstance(backend, ProcqueueBackend):
        raise errors.ConfigError(
            f"TASKS[{alias!r}] is {type(backend).__name__}, not procqueue's ProcqueueBackend"
        )
    return backend


app = _backend_app().app
"""The backend's App: its DSN (OPTIONS), its registry finding tasks by path."""
