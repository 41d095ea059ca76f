"""The lease rules of a supervisor's attempts, in one place: how long a
claim or a renewal lasts, how often leases are renewed, and the margin by
which a job whose lease could not be renewed is ended before it runs out
(by its own child, told the time left, and by the supervisor).

Other supervisors judge expiry by their own clocks, so the margin must
exceed the clock skew between machines (NTP keeps it to milliseconds).
"""

from __future__ import annotations


class Lease:
    """The lease rules for leases of `seconds`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.renew_every = seconds / 3
        """Renewals come this often, so two may fail before a lease runs out."""
        self.margin = max(0.5, min(5.0, seconds * 0.2))
        """Seconds before its lease runs out that an unrenewed job is ended."""

    def until(self, wall: float) -> float:
        """Wall time a lease taken or renewed at wall time `wall` lasts to."""
        return wall + self.seconds

    def expired(self, lease_until: float, wall: float) -> bool:
        """Whether a job whose lease lasts to `lease_until` must end at wall
        time `wall`: it is within the margin, so it never overlaps a rescue."""
        return wall >= lease_until - self.margin

    def left(self, lease_until: float, wall: float) -> float:
        """Seconds a child may run a job whose lease lasts to `lease_until`:
        the lease less its margin."""
        # never 0, which a child reads as "no lease to keep": an expired one ends the job
        return max(0.001, lease_until - wall - self.margin)
