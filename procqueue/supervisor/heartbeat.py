"""What a supervisor tells the other supervisors and the operators: a
heartbeat row (who it is, what it runs, how busy it is, when it was
last seen), and the queue limits it was started with, applied only where
nobody set a limit before.

A `Heartbeat` is a small service of the supervisor: `step(now)` submits
the beat through the supervisor's `DbCalls` when it is due, so the
supervision loop never waits on the database for it.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from procqueue import errors
from procqueue.clock import Clock
from procqueue.store.base import Store
from procqueue.supervisor.dbthread import DbCalls
from procqueue.supervisor.settings import Settings

log = logging.getLogger("procqueue.supervisor")

HEARTBEAT_MAX_S = 2.0
"""Longest interval between two heartbeats of a supervisor."""


def every(lease: float) -> float:
    """Seconds between heartbeats: often enough that a dead supervisor's jobs
    show orphaned (`models.alive`) well before their lease runs out."""
    return max(0.05, min(HEARTBEAT_MAX_S, lease / 6))


def _version() -> str:
    try:
        return importlib.metadata.version("procqueue")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@dataclass(eq=False, kw_only=True)
class Heartbeat:
    """One supervisor's heartbeat row and start-up limits."""

    store: Store
    db: DbCalls
    clock: Clock
    settings: Settings
    owner: str
    spec: str
    busy: Callable[[], int]
    """How many children run a job now."""

    def __post_init__(self) -> None:
        self.every = every(self.settings.lease)
        self.next_at = self.clock.monotonic()
        self.started_at = self.clock.now()
        self.version = _version()
        self.beating = False
        """Set once `step` submitted a beat: `stop` then removes the row."""

    def step(self, now: float) -> None:
        """Submits a beat when one is due (and the database is not in backoff)."""
        if now < self.next_at or self.db.busy("heartbeat") or not self.db.ok(now):
            return
        self.next_at = now + self.every
        self.beating = True
        beat: dict[str, Any] = {
            "owner": self.owner,
            "spec": self.spec,
            "version": self.version,
            "queues": self.settings.queues,
            "limits": dict(self.settings.limits),
            "workers": self.settings.workers,
            "busy": self.busy(),
            "beat_every": self.every,
            "started_at": self.started_at,
            "now": self.clock.now(),
        }
        self.db.submit("heartbeat", lambda: self.store.supervisor_beat(**beat), on_done=_ignore)

    def stop(self) -> None:
        """Removes the row of a supervisor that stops cleanly (synchronous,
        bounded; after the loop). On failure the row goes stale instead."""
        if not self.beating:
            return
        try:
            self.store.supervisor_remove(owner=self.owner)
        except errors.StoreError as exc:
            log.debug("heartbeat row not removed: %s", exc)

    def init_limits(self) -> None:
        """``--queue NAME=N``: sets a queue's limit only where nobody set or
        cleared it before. A stored limit that differs is kept, with a
        warning; ``procqueue queues limit NAME N`` (or ``--clear``) changes it."""
        by = f"supervise on {self.owner.rsplit(':', 1)[0]}"
        for queue, limit in self.settings.limits.items():
            stored, stored_by = self.store.queue_init_limit(
                queue=queue, limit=limit, by=by, now=self.clock.now()
            )
            if stored != limit:
                log.warning(
                    "queue %s: keeping its stored limit %s (set by %s), not --queue %s=%d; "
                    "change it with: procqueue queues limit %s N (or --clear)",
                    queue,
                    "none" if stored is None else stored,
                    stored_by or "an earlier version of procqueue",
                    queue,
                    limit,
                    queue,
                )


def _ignore(_: object) -> None:
    pass
