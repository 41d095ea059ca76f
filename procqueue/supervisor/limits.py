"""The limits a supervisor enforces on running attempts, whatever the
database does: timeouts, memory ceilings of each job's whole process tree,
and leases that could not be renewed.

`Limits` decides; `running.Attempts` records the samples and ends the
attempts (renewed and lost leases are its too, told by `claims`).
"""

from __future__ import annotations

from procqueue.supervisor.attempt import Attempt
from procqueue.supervisor.lease import Lease
from procqueue.supervisor.running import Attempts

MEMORY_CHECK_MAX_S = 0.25
"""Longest interval between two samples of a job's memory."""
PEAK_SAMPLE_S = 1.0
"""Interval between samples of a job with no memory ceiling, for its peak
memory (in its history); its first sample comes one period after it starts,
so short jobs cost no sample."""
RESERVED_CHECK_S = 0.1
"""Interval between two looks at the leases of reserved jobs. They can be
hundreds, and no child runs them: a reserved job whose lease ran out is
never started (`Attempts.place` drops it), so this look only ends it in
the books, and need not come at every pass."""


class Limits:
    """Enforces the limits of one supervisor's attempts."""

    def __init__(self, *, attempts: Attempts, lease: Lease) -> None:
        self.attempts = attempts
        self.lease = lease
        self._reserved_at = float("-inf")
        """When the leases of reserved jobs are looked at next (monotonic)."""

    def enforce(self, now: float, *, wall: float) -> None:
        """Timeouts, memory ceilings and leases, at monotonic `now` and wall
        time `wall`: a job whose lease could not be renewed is ended within
        the lease's margin of its end, so it never overlaps a rescue (a
        reserved one within `RESERVED_CHECK_S` more: no child runs it)."""
        if self.attempts.reserved and now >= self._reserved_at:
            self._reserved_at = now + RESERVED_CHECK_S
            for a in list(self.attempts.reserved):
                if a.kill is None and self.lease.expired(a.lease_until, wall):
                    self.attempts.unreserve(a, None)
        for a in list(self.attempts.running.values()):
            if a.kill is not None:
                continue
            if self.lease.expired(a.lease_until, wall):
                self.attempts.kill(a, "lease", "lease expired: it could not be renewed", hard=True)
            elif a.deadline is not None and now >= a.deadline:
                self.attempts.kill(a, "timeout", f"timed out after {a.job.timeout:g}s")
            elif a.step is not None and now >= a.step[2]:
                name, timeout, _ = a.step
                self.attempts.kill(a, "timeout", f"step {name!r} timed out after {timeout:g} s")
            elif a.max_memory is not None and now - a.memory_checked >= self._memory_every(a):
                rss = self.attempts.sample_memory(a, now)
                if rss > a.max_memory:
                    words = f"exceeded max_memory ({rss:.0f} MB > {a.max_memory:g} MB)"
                    self.attempts.kill(a, "memory", words, hard=True)
            elif a.max_memory is None and now - a.memory_checked >= PEAK_SAMPLE_S:
                self.attempts.sample_memory(a, now)

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
            if a.step is not None:
                due.append(a.step[2])
            if a.max_memory is not None:
                due.append(a.memory_checked + self._memory_every(a))
            elif a.started is not None:  # peak memory samples
                due.append(a.memory_checked + PEAK_SAMPLE_S)
        return min(due) if due else None
