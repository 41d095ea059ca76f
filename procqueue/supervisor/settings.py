"""Supervisor settings: one Struct with defaults and validation."""

from __future__ import annotations

import os

import msgspec

from procqueue import errors


class Settings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How a supervisor runs. Durations are seconds."""

    workers: int = os.cpu_count() or 1
    queues: list[str] | None = None
    """Queues to claim from; None claims from all."""
    limits: dict[str, int] = {}
    """Cluster-wide concurrency per queue, written to the database at start."""
    lease: float = 30.0
    """A held job is given up by its owner if not renewed for this long."""
    poll: float = 1.0
    """Safety-net claim interval when no wake-up arrives."""
    grace: float = 30.0
    """On SIGTERM: how long running jobs may finish before they are handed back."""
    kill_grace: float = 2.0
    """Between SIGTERM and SIGKILL of a child on timeout or cancel."""
    outcome_wait: float = 5.0
    """On SIGTERM, after `grace` and `kill_grace`: how long outcomes may still
    be written. A supervisor is gone within grace + kill_grace + outcome_wait
    of the first signal whatever the database does; outcomes not written by
    then are logged and left to lease rescue."""
    max_jobs_per_child: int | None = None
    max_memory_per_child: float | None = None
    """MB of RSS; a child past it is replaced after its job."""
    max_memory_per_job: float | None = None
    """MB for the whole process tree of a job that sets no `max_memory` of its own."""
    retention_days: float = 7.0
    """Done and cancelled jobs are pruned this long after they finish (0: never)."""
    cron: bool = True
    """Enqueue the app's cron ticks (every supervisor may; keys dedupe)."""
    progress_interval: float = 0.25
    """At most one progress write per job per this many seconds."""
    metrics_port: int | None = None
    """Serve Prometheus metrics on metrics_host:PORT."""
    metrics_host: str = "127.0.0.1"
    """Where metrics listen; 0.0.0.0 for a scraper outside the machine (e.g. a pod)."""
    titles: bool = False
    """Set process titles (the CLI does; tests running in-process don't)."""
    job_user: str | None = None
    """Run every child, so every job, as this user (``USER`` or ``USER:GROUP``,
    names or numeric ids); the supervisor must run as root."""

    def __post_init__(self) -> None:
        checks = [
            (self.workers >= 1, "workers must be >= 1"),
            (self.lease >= 1.0, "lease must be >= 1 second"),
            (self.poll > 0, "poll must be > 0 seconds"),
            (self.grace >= 0, "grace must be >= 0 seconds"),
            (self.kill_grace >= 0, "kill_grace must be >= 0 seconds"),
            (self.outcome_wait >= 0, "outcome_wait must be >= 0 seconds"),
            (
                self.max_jobs_per_child is None or self.max_jobs_per_child >= 1,
                "max-jobs-per-child must be >= 1",
            ),
            (
                self.max_memory_per_child is None or self.max_memory_per_child > 0,
                "max-memory-per-child must be > 0 MB",
            ),
            (
                self.max_memory_per_job is None or self.max_memory_per_job > 0,
                "max-memory-per-job must be > 0 MB",
            ),
            (all(v >= 1 for v in self.limits.values()), "queue limits must be >= 1"),
            (self.retention_days >= 0, "retention-days must be >= 0 (0 keeps jobs forever)"),
            (self.job_user is None or self.job_user.strip() != "", "job-user must name a user"),
        ]
        for ok, message in checks:
            if not ok:
                raise errors.ConfigError(message)
