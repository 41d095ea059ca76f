"""Supervisor events: what happened to children, attempts and the database,
as small typed records.

The supervisor emits them in its own thread, in the order things happened;
logs, metrics, the demo's live view and tests all learn what happens from
this one stream, never from log text or another module's fields. A
subscriber must be quick (it runs inside the supervision loop); one that
raises is logged and kept, and never stops the supervisor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("procqueue.supervisor")


@dataclass(frozen=True, slots=True)
class ChildStarted:
    """A child process was spawned into slot `child` (it is not ready yet)."""

    child: int
    pid: int


@dataclass(frozen=True, slots=True)
class ChildReady:
    """The child imported the app and said hello: it may take jobs."""

    child: int
    pid: int


@dataclass(frozen=True, slots=True)
class Claimed:
    """A job was claimed from the database; `waited` is seconds since its run_at."""

    job_id: int
    name: str
    queue: str
    attempt: int
    waited: float


@dataclass(frozen=True, slots=True)
class Throttled:
    """A claim left due work behind because of a flow limit: `limit` names
    it (``rate job:NAME``, ``rate group:G``, ``rate queue:Q``, ``group_limit G``)."""

    limit: str


@dataclass(frozen=True, slots=True)
class Started:
    """An attempt was handed to the child in slot `child`."""

    job_id: int
    name: str
    queue: str
    attempt: int
    child: int
    pid: int


@dataclass(frozen=True, slots=True)
class Progress:
    """The job reported progress (not yet written to the database)."""

    job_id: int
    child: int
    text: str | None
    fraction: float | None


@dataclass(frozen=True, slots=True)
class Killed:
    """The supervisor started to end an attempt's child: `kind` is timeout,
    cancel, memory, lease, drain or error; `words` say why."""

    job_id: int
    child: int
    pid: int
    kind: str
    words: str


@dataclass(frozen=True, slots=True)
class Finished:
    """An attempt ended. `outcome`: done, retried, failed, cancelled or
    handed_back (drain: the attempt is not spent), or lost (the lease went
    to another supervisor: nothing is recorded)."""

    job_id: int
    name: str
    queue: str
    attempt: int
    outcome: str
    error: str | None
    retry_in: float | None
    seconds: float
    """Run time of the attempt."""
    kill: str | None = None
    """Why the supervisor ended it (a `Killed` kind), if it did."""
    asked: bool = False
    """A retry the job asked for (it raised `Retry`): rescheduled, not a failure."""


@dataclass(frozen=True, slots=True)
class ChildDied:
    """A child process exited. `job_id`: the attempt it was running, if any;
    `expected`: it was retired or killed by the supervisor."""

    child: int
    pid: int
    reason: str
    job_id: int | None
    name: str | None
    expected: bool
    kill: str | None
    """The `Killed` kind when the supervisor killed it."""
    kill_words: str | None


@dataclass(frozen=True, slots=True)
class Renewed:
    """The leases of the `held` jobs were renewed in one statement."""

    held: int


@dataclass(frozen=True, slots=True)
class DatabaseDown:
    """A database call failed: the supervisor backs off and keeps enforcing."""

    error: str


@dataclass(frozen=True, slots=True)
class DatabaseUp:
    """The database answers again after `after` seconds down."""

    after: float


Event = (
    ChildStarted
    | ChildReady
    | Claimed
    | Throttled
    | Started
    | Progress
    | Killed
    | Finished
    | ChildDied
    | Renewed
    | DatabaseDown
    | DatabaseUp
)

Subscriber = Callable[[Event], None]


class EventStream:
    """Delivers every event to every subscriber, in order, in the emitting thread."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Adds `subscriber`; returns a function that removes it (idempotent)."""
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe

    def emit(self, event: Event) -> None:
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception:
                log.exception("event subscriber %r failed on %r", subscriber, event)


class Counts:
    """Attempt outcomes counted from the stream (for the final log line and the demo)."""

    def __init__(self) -> None:
        self.claimed = 0
        self.outcomes: dict[str, int] = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, Claimed):
            self.claimed += 1
        elif isinstance(event, Finished):
            self.outcomes[event.outcome] = self.outcomes.get(event.outcome, 0) + 1

    def get(self, outcome: str) -> int:
        return self.claimed if outcome == "claimed" else self.outcomes.get(outcome, 0)

    def summary(self) -> str:
        keys = ("done", "failed", "retried", "cancelled", "handed_back")
        return ", ".join([f"claimed {self.claimed}", *(f"{k} {self.get(k)}" for k in keys)])


def first_line(text: str | None) -> str:
    """The first non-blank line of `text` ('' if none)."""
    stripped = (text or "").strip()
    return stripped.splitlines()[0] if stripped else ""


def log_event(event: Event) -> None:
    """The supervisor's log lines, one per event worth a line. Expected ends
    (done, timeouts, cancels, recycling) are INFO or DEBUG; a child that
    died on its own and a lost lease are warnings."""
    if isinstance(event, Finished):
        if event.outcome == "done":
            log.debug("job %d done", event.job_id)
        elif event.outcome == "retried" and event.asked:
            log.info(
                "job %d attempt %d rescheduled by Retry in %.1fs: %s",
                event.job_id,
                event.attempt,
                event.retry_in or 0.0,
                first_line(event.error),
            )
        elif event.outcome == "retried":
            log.info(
                "job %d attempt %d failed, retry in %.1fs: %s",
                event.job_id,
                event.attempt,
                event.retry_in or 0.0,
                first_line(event.error),
            )
        elif event.outcome == "handed_back":
            log.info("job %d handed back (attempt %d not spent)", event.job_id, event.attempt)
        elif event.outcome == "lost":
            log.warning("job %d: lease lost, its outcome is not recorded", event.job_id)
        else:
            log.info("job %d %s: %s", event.job_id, event.outcome, first_line(event.error))
    elif isinstance(event, Killed):
        log.info(
            "job %d: ending child %d (pid %d): %s",
            event.job_id,
            event.child,
            event.pid,
            event.words,
        )
    elif isinstance(event, ChildDied) and not event.expected:
        log.warning("child %d (pid %d) died: %s", event.child, event.pid, event.reason)
    elif isinstance(event, DatabaseDown):
        log.error("database unavailable, retrying with backoff: %s", first_line(event.error))
    elif isinstance(event, DatabaseUp):
        log.warning("database back after %.1fs", event.after)
