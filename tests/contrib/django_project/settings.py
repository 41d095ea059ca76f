"""A Django project for procqueue's Django tests.

Django's database is the test PostgreSQL (``$PROCQUEUE_TEST_PG``); the
TASKS backend writes to ``$PQ_DJANGO_DSN`` (a SQLite file, or a schema of
that same PostgreSQL database), as the supervisor under test does.
"""

from __future__ import annotations

import os
import urllib.parse

_pg = urllib.parse.urlsplit(os.environ.get("PROCQUEUE_TEST_PG", "postgresql://127.0.0.1:5432/test"))

SECRET_KEY = "procqueue-tests"
USE_TZ = True
INSTALLED_APPS = ["tests.contrib.django_project.tasksapp"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _pg.path.lstrip("/"),
        "HOST": _pg.hostname or "",
        "PORT": str(_pg.port or ""),
        "USER": _pg.username or "",
        "PASSWORD": _pg.password or "",
    }
}
TASKS = {
    "default": {
        "BACKEND": "procqueue.contrib.django.ProcqueueBackend",
        "QUEUES": ["default", "bulk"],
        "OPTIONS": {"dsn": os.environ.get("PQ_DJANGO_DSN"), "timeout": 30},
    }
}
