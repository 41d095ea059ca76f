"""How a child or a fork-server template loads the app: as `load_app`
does, with Django set up first when the supervisor runs with ``--django``
(it sets `DJANGO_ENV` in the environment every child inherits)."""

from __future__ import annotations

import os

from procqueue.producer.app import App, load_app

DJANGO_ENV = "PROCQUEUE_DJANGO"


def load(spec: str) -> App:
    """The App of `spec`; under ``--django``, loaded after ``django.setup()``
    and finding Django tasks by import path. ConfigError saying why not."""
    if not os.environ.get(DJANGO_ENV):
        return load_app(spec)
    from procqueue.contrib.django import worker  # Django only when asked

    worker.setup()
    return worker.find_tasks(load_app(spec))


def before_fork() -> None:
    """Closes what a forked child must not share with its template (under
    ``--django``: Django's database connections)."""
    if os.environ.get(DJANGO_ENV):
        from procqueue.contrib.django import worker

        worker.close_connections()
