"""The record of one attempt a supervisor holds (`Attempt`), and the few
pure rules about attempts other modules share."""

from __future__ import annotations

import math
from dataclasses import dataclass

from procqueue import models


def short_exit(reason: str) -> str:
    """``SIGSEGV`` or ``exit code 3`` from a `Death.reason` (its history's exit reason)."""
    for prefix, shown in (
        ("child process killed by ", ""),
        ("child process exited with ", "exit "),
    ):
        if reason.startswith(prefix):
            return shown + reason[len(prefix) :]
    return reason


def lease_margin(lease: float) -> float:
    """Seconds before its lease runs out that a job is ended by its own child
    (and by the supervisor) when the lease could not be renewed. Other
    supervisors judge expiry by their own clocks, so the margin must exceed
    the clock skew between machines (NTP keeps it to milliseconds)."""
    return max(0.5, min(5.0, lease * 0.2))


@dataclass
class Attempt:
    """One attempt held by one child, as the supervisor knows it."""

    job: models.ClaimedJob
    child: int
    pid: int
    lease_until: float
    """Wall time its database lease lasts to (as last renewed)."""
    max_memory: float | None
    """MB for the job's whole process tree (the job's own, else the supervisor's default)."""
    started: float | None = None
    """Monotonic time it started in its child (None while it waits in the pipe)."""
    deadline: float | None = None
    """Monotonic time its timeout ends it."""
    kill: tuple[str, str] | None = None
    """(kind, words) once the supervisor started to end it; decides the outcome."""
    revoked: str | None = None
    """Why it was taken back before it started (cancel, drain): the child skips it."""
    drain_asked: bool = False
    progress: tuple[str | None, float | None] | None = None
    progress_unwritten: bool = False
    progress_written_at: float = -math.inf
    memory_checked: float = -math.inf
    pid_written: bool = False
    # -- for its history row (issue 14) --
    started_wall: float | None = None
    """Wall time it started in its child."""
    peak_memory: float | None = None
    """Highest RSS (MB) of its process tree sampled by `Limits`."""
