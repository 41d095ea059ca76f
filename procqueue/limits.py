"""The limits a supervisor enforces on running attempts, whatever the
database does: timeouts, memory ceilings of each job's whole process tree,
and leases: renewed ones are passed on to the children, lost ones and
ones that could not be renewed end their attempts.
"""

from __future__ import annotations

import math

from procqueue import protocol
from procqueue.attempts import Attempt, Attempts
from procqueue.pool import Pool

MEMORY_CHECK_MAX_S = 0.25
"""Longest interval between two samples of a job's memory."""
PEAK_SAMPLE_S = 1.0
"""Interval between samples of a job with no memory ceiling, for its peak memory."""


class Limits:
    """Enforces the limits of one supervisor's attempts."""

    def __init__(self, *, attempts: Attempts, pool: Pool) -> None:
        self.attempts = attempts
        self.pool = pool

    def enforce(self, now: float, *, wall: float, margin: float) -> None:
        """Timeouts, memory ceilings and leases, at monotonic `now` and wall
        time `wall`: a job whose lease could not be renewed is ended `margin`
        seconds before it runs out, so it never overlaps a rescue."""
        for a in self.attempts.all():
            if a.kill is not None or a.revoked is not None:
                continue
            if wall >= a.lease_until - margin:
                if a.started is None:
                    self.attempts.revoke(a, "lease")
                else:
                    self.attempts.kill(
                        a, "lease", "lease expired: it could not be renewed", hard=True
                    )
            elif a.started is None:
                continue
            elif a.deadline is not None and now >= a.deadline:
                self.attempts.kill(a, "timeout", f"timed out after {a.job.timeout:g}s")
            elif a.max_memory is not None and now - a.memory_checked >= self._memory_every(a):
                a.memory_checked = now
                rss = self.pool.rss_mb(a.child)
                a.peak_memory = max(a.peak_memory or 0.0, rss)
                if rss > a.max_memory:
                    words = f"exceeded max_memory ({rss:.0f} MB > {a.max_memory:g} MB)"
                    self.attempts.kill(a, "memory", words, hard=True)
            elif a.max_memory is None and now - a.memory_checked >= PEAK_SAMPLE_S:
                self._sample_peak(a, now)

    def _sample_peak(self, a: Attempt, now: float) -> None:
        """For the history's peak memory (issue 14): a job with no ceiling is
        sampled every PEAK_SAMPLE_S, its first sample one period after it
        starts (short jobs cost no sample)."""
        if a.memory_checked == -math.inf and a.started is not None:
            a.memory_checked = a.started
            if now - a.started < PEAK_SAMPLE_S:
                return
        a.memory_checked = now
        a.peak_memory = max(a.peak_memory or 0.0, self.pool.rss_mb(a.child))

    @staticmethod
    def _memory_every(a: Attempt) -> float:
        """Seconds between memory samples: a job allocating 1 GB/s is caught
        before it doubles its ceiling (so it is stopped under 3x)."""
        assert a.max_memory is not None
        return max(0.02, min(MEMORY_CHECK_MAX_S, a.max_memory / 1000.0))

    def next_due(self) -> float | None:
        """The earliest monotonic time `enforce` has work (leases aside)."""
        due: list[float] = []
        for a in self.attempts.running.values():
            if a.kill is not None:
                continue
            if a.deadline is not None:
                due.append(a.deadline)
            if a.max_memory is not None:
                due.append(a.memory_checked + self._memory_every(a))
            elif a.started is not None:  # peak memory samples (issue 14)
                due.append(max(a.memory_checked, a.started) + PEAK_SAMPLE_S)
        return min(due) if due else None

    def renewed(self, *, alive: set[tuple[int, int]], lease_until: float) -> None:
        """A renewal answered: attempts the owner lost are ended, the others'
        children learn the new time left on their lease."""
        left = self.attempts.lease_left(lease_until)
        for a in self.attempts.all():
            if (a.job.id, a.job.attempt) not in alive:
                if a.started is None:
                    self.attempts.revoke(a, "lease")
                elif a.kill is None:
                    self.attempts.kill(a, "lease", "lease lost", hard=True)
                continue
            a.lease_until = lease_until
            self.pool.send(a.child, protocol.Lease(job_id=a.job.id, left=left))
        lost = [o for o in self.attempts.outcomes if (o.id, o.attempt) not in alive]
        if lost:  # their jobs were rescued elsewhere meanwhile: nothing to write
            self.attempts.outcomes = [
                o for o in self.attempts.outcomes if (o.id, o.attempt) in alive
            ]
