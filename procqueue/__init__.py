"""procqueue: a durable background-job queue whose jobs run process-isolated.

Importing procqueue imports no database code and opens no connection:
children import it (tests/test_imports.py checks both).
"""

from __future__ import annotations

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
