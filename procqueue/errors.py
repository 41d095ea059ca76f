"""procqueue's exceptions.

A class's docstring is its default message. The tree::

    ProcqueueError
    ├── ConfigError          bad DSN, option or configuration value
    ├── EnqueueError         bad input at enqueue: nothing was written
    ├── JobNotFound          no job with that id
    ├── JobFailed            the job waited for failed or was cancelled (`App.result`)
    ├── QueueNotFound        no queue of that name (no jobs, no settings, no supervisor)
    ├── BatchNotFound        no batch with that id
    ├── InvalidState         the job is not in a state the operation accepts
    ├── StoreError           the database failed or refused
    │   ├── StoreRejected    the database refused a value (retrying won't help)
    │   ├── StoreUnavailable the server is not reachable yet (starting, stopping, not listening)
    │   └── SchemaTooNew     the database was migrated by newer code
    ├── ProtocolError        a malformed, truncated or oversized pipe frame
    └── JobFailure           raised by job code to steer what happens next
        ├── Retry            retry after an optional delay
        ├── Permanent        fail now, never retry
        └── Snooze           pending again in N seconds, no attempt spent

Outside that tree, so that ``except Exception`` in job code lets it through::

    BaseException
    └── Stopped              raised in a job's code when the job is told to stop
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from procqueue.models import JobInfo


class ProcqueueError(Exception):
    """procqueue failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(ProcqueueError):
    """Invalid configuration."""


class EnqueueError(ProcqueueError):
    """The job could not be enqueued; nothing was written."""


class JobNotFound(ProcqueueError):
    """No such job."""


class JobFailed(ProcqueueError):
    """The job failed or was cancelled.

    Attributes:
        info: the job's record: its error, and every attempt in `history`.
    """

    def __init__(self, message: str, info: JobInfo) -> None:
        super().__init__(message)
        self.info = info


class QueueNotFound(ProcqueueError):
    """No such queue: it has no jobs, no settings and no supervisor claims from it by name."""


class BatchNotFound(ProcqueueError):
    """No such batch."""


class InvalidState(ProcqueueError):
    """The job is not in a state that allows this operation."""


class StoreError(ProcqueueError):
    """The database failed."""


class StoreRejected(StoreError):
    """The database refused a value; the same write would fail again."""


class StoreUnavailable(StoreError):
    """The database server could not be reached, for a reason that passes on
    its own (it is starting up, shutting down or not listening yet); a
    refused login or a missing database is a plain StoreError."""


class SchemaTooNew(StoreError):
    """The database schema is newer than this version of procqueue."""


class ProtocolError(ProcqueueError):
    """A malformed frame on the supervisor/child pipe."""


class JobFailure(ProcqueueError):
    """Base of the exceptions job code raises to steer its retry policy."""

    def __init__(self, message: str = "") -> None:
        # Not ProcqueueError's docstring default: what job code says is
        # recorded verbatim ("Retry: " alone for a bare `raise Retry()`).
        Exception.__init__(self, message)
        self.message = message


class Retry(JobFailure):
    """Retry the job, after `delay` seconds if given (else the job's backoff)."""

    def __init__(self, message: str = "", *, delay: float | None = None) -> None:
        super().__init__(message)
        if delay is not None and delay < 0:
            raise ValueError("Retry delay must be >= 0")
        self.delay = delay


class Permanent(JobFailure):
    """Fail the job now without retrying."""


class Snooze(JobFailure):
    """Put the job back to pending for `seconds`, spending no attempt (it
    is recorded in the job's history as snoozed). Past the job's
    `max_snoozes` (default 100) snoozes, a snooze fails it."""

    def __init__(self, seconds: float, message: str = "") -> None:
        super().__init__(message)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise TypeError("Snooze takes a number of seconds")
        if not 0 <= seconds <= 10 * 365 * 86400.0:
            raise ValueError("Snooze seconds must be from 0 to ten years")
        self.seconds = float(seconds)


class Stopped(BaseException):
    """The job was told to stop (its timeout passed, it was cancelled, or the
    supervisor's drain ran out of grace); SIGKILL follows after the kill grace.

    Raised by procqueue in the thread running the job (for an async job, its
    task is cancelled when it waits, so it sees CancelledError instead), so
    that ``finally:`` blocks and context managers run. A `BaseException`, like
    `KeyboardInterrupt`: ``except Exception`` does not swallow it. Catching it
    does not change the attempt's outcome: a timed-out or cancelled job stays
    so, whatever it returns.
    """

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or "the job was told to stop")
