"""procqueue: a durable background-job queue whose jobs run process-isolated.

Importing procqueue imports no database code and opens no connection:
children import it (tests/test_imports.py checks both).
"""

from __future__ import annotations

from procqueue.app import App, load_app
from procqueue.context import Context
from procqueue.errors import (
    BatchNotFound,
    ConfigError,
    EnqueueError,
    InvalidState,
    JobFailure,
    JobNotFound,
    Permanent,
    ProcqueueError,
    ProtocolError,
    QueueNotFound,
    Retry,
    SchemaTooNew,
    StoreError,
    StoreRejected,
)
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
from procqueue.registry import Job

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
    "StoreError",
    "StoreRejected",
    "SupervisorInfo",
    "load_app",
]
