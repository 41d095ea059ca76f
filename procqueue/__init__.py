"""procqueue: a durable background-job queue whose jobs run process-isolated.

Importing procqueue opens no database connection (children import it).
"""

from __future__ import annotations

from procqueue.app import App, Job, load_app
from procqueue.context import Context
from procqueue.errors import (
    ConfigError,
    EnqueueError,
    InvalidState,
    JobNotFound,
    Permanent,
    ProcqueueError,
    ProtocolError,
    Retry,
    SchemaTooNew,
    StoreError,
)
from procqueue.models import Backoff, JobInfo, JobState

__all__ = [
    "App",
    "Backoff",
    "ConfigError",
    "Context",
    "EnqueueError",
    "InvalidState",
    "Job",
    "JobInfo",
    "JobNotFound",
    "JobState",
    "Permanent",
    "ProcqueueError",
    "ProtocolError",
    "Retry",
    "SchemaTooNew",
    "StoreError",
    "load_app",
]
