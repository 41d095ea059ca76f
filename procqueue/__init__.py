"""procqueue: a durable background-job queue whose jobs run process-isolated.

Importing procqueue imports no database code and opens no connection:
children import it (tests/test_imports.py checks both). The public names are
imported on first use, so `import procqueue` itself costs nothing: the
command line's entry point (`procqueue.cli.entry`) is reached at once, and a
Ctrl-C while the rest loads exits without a traceback.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
"""True for type checkers only: `typing` is not imported until a public name is used."""

if TYPE_CHECKING:
    from typing import Any

    from procqueue.errors import (
        BatchNotFound,
        ConfigError,
        EnqueueError,
        InvalidState,
        JobFailed,
        JobFailure,
        JobNotFound,
        Permanent,
        ProcqueueError,
        ProtocolError,
        QueueNotFound,
        Retry,
        SchemaTooNew,
        Snooze,
        Stopped,
        StoreError,
        StoreRejected,
        StoreUnavailable,
    )
    from procqueue.jobs.context import Context
    from procqueue.jobs.registry import Job
    from procqueue.models import (
        AttemptInfo,
        Backoff,
        BatchInfo,
        BatchState,
        JobInfo,
        JobState,
        QueueInfo,
        SupervisorInfo,
    )
    from procqueue.producer.app import App, load_app

_HOMES = {
    "App": "procqueue.producer.app",
    "AttemptInfo": "procqueue.models",
    "Backoff": "procqueue.models",
    "BatchInfo": "procqueue.models",
    "BatchNotFound": "procqueue.errors",
    "BatchState": "procqueue.models",
    "ConfigError": "procqueue.errors",
    "Context": "procqueue.jobs.context",
    "EnqueueError": "procqueue.errors",
    "InvalidState": "procqueue.errors",
    "Job": "procqueue.jobs.registry",
    "JobFailed": "procqueue.errors",
    "JobFailure": "procqueue.errors",
    "JobInfo": "procqueue.models",
    "JobNotFound": "procqueue.errors",
    "JobState": "procqueue.models",
    "Permanent": "procqueue.errors",
    "ProcqueueError": "procqueue.errors",
    "ProtocolError": "procqueue.errors",
    "QueueInfo": "procqueue.models",
    "QueueNotFound": "procqueue.errors",
    "Retry": "procqueue.errors",
    "SchemaTooNew": "procqueue.errors",
    "Snooze": "procqueue.errors",
    "Stopped": "procqueue.errors",
    "StoreError": "procqueue.errors",
    "StoreRejected": "procqueue.errors",
    "StoreUnavailable": "procqueue.errors",
    "SupervisorInfo": "procqueue.models",
    "load_app": "procqueue.producer.app",
}
"""Where each public name lives."""


def __getattr__(name: str) -> Any:
    """Imports a public name from its home on first use (PEP 562) and keeps it."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'procqueue' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "App",
    "AttemptInfo",
    "Backoff",
    "BatchInfo",
    "BatchNotFound",
    "BatchState",
    "ConfigError",
    "Context",
    "EnqueueError",
    "InvalidState",
    "Job",
    "JobFailed",
    "JobFailure",
    "JobInfo",
    "JobNotFound",
    "JobState",
    "Permanent",
    "ProcqueueError",
    "ProtocolError",
    "QueueInfo",
    "QueueNotFound",
    "Retry",
    "SchemaTooNew",
    "Snooze",
    "Stopped",
    "StoreError",
    "StoreRejected",
    "StoreUnavailable",
    "SupervisorInfo",
    "load_app",
]
