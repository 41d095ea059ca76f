"""The drain's timeline: from the first stop request to the moment the
supervisor must be gone.

The budget is fixed at the first signal (grace + kill_grace + outcome_wait)
and never depends on the database: `Drain` alone decides when running jobs
are told to stop, when they are handed back, and when the loop gives up
waiting for outcomes to be written (what is left goes to lease rescue).
"""

from __future__ import annotations

import logging

from procqueue.supervisor.children.slots import Children
from procqueue.supervisor.claims import Claims
from procqueue.supervisor.dbthread import DbCalls
from procqueue.supervisor.outbox import Outbox
from procqueue.supervisor.running import Attempts
from procqueue.supervisor.settings import Settings

log = logging.getLogger("procqueue.supervisor")


class Drain:
    """Owns the stop requests and the drain's deadlines (monotonic seconds)."""

    def __init__(
        self,
        *,
        settings: Settings,
        attempts: Attempts,
        outbox: Outbox,
        pool: Children,
        claims: Claims,
        db: DbCalls,
    ) -> None:
        self._settings = settings
        self._attempts = attempts
        self._outbox = outbox
        self._pool = pool
        self._claims = claims
        self._db = db
        self._stops = 0
        self._kill_at: float | None = None
        """When the grace ends and running jobs are handed back."""
        self._gone_by: float | None = None
        """When the supervisor must be gone, whatever the database does."""
        self._killed = False

    def request(self) -> None:
        """Counts a stop request: the first drains, the second stops at once.
        Safe from a signal handler (one integer store)."""
        self._stops += 1

    def step(self, now: float) -> None:
        """Starts the drain at the first request; hands every attempt back
        when the grace is spent or at a second request."""
        if self._stops and self._kill_at is None:
            s = self._settings
            self._kill_at = now + s.grace
            self._gone_by = now + s.grace + s.kill_grace + s.outcome_wait
            log.info("draining: %d running, up to %.1fs", len(self._attempts.running), s.grace)
            self._pool.stop_respawning()
            self._claims.stop()
            self._attempts.ask_to_stop()
        if (
            self._kill_at is not None
            and not self._killed
            and (self._stops > 1 or now >= self._kill_at)
        ):
            self._killed = True
            # the grace ran out: Stopped, then SIGKILL after the kill grace
            # (kept in the budget); a second signal stops at once
            self._attempts.hand_back_all(hard=self._stops > 1)

    def finished(self, now: float) -> bool:
        """Whether the drain is over: nothing runs and the outcomes are
        written, or its budget is spent (`close` then leaves what is left
        to lease rescue)."""
        if self._gone_by is None:
            return False
        if now >= self._gone_by - self._close_reserve():
            return True
        if self._attempts.running or self._attempts.reserved:
            return False
        return not self._outbox.waiting() and not self._db.busy("cycle")

    def next_due(self) -> list[float]:
        """The drain's next deadlines, for the loop's wait."""
        due = [] if self._kill_at is None or self._killed else [self._kill_at]
        if self._gone_by is not None:
            due.append(self._gone_by - self._close_reserve())
        return due

    def gone_by(self, now: float) -> float:
        """When `close` must be done: the drain's end, or kill_grace +
        outcome_wait from `now` when no drain began."""
        if self._gone_by is not None:
            return self._gone_by
        return now + self._settings.kill_grace + self._settings.outcome_wait

    def _close_reserve(self) -> float:
        """The part of the budget kept for `close`: its last write and its
        heartbeat removal, on the database thread."""
        return min(1.0, self._settings.outcome_wait / 2)
