"""What a supervisor asks of the database about the jobs it holds: the
record-and-claim cycle (queued outcomes written and jobs claimed while
there is room, in one transaction of a few pipelined round trips, at most
one cycle in flight), lease renewals and cancel polls.

A supervisor claims for its idle children and, for short jobs, a few
ahead: those are reserved in its memory (`running.Attempts`) and go to the
first child that becomes idle, so a child starts the next job the moment
one ends without any job waiting behind another. How many are claimed
ahead comes from recent job durations (`window_depth`): a few milliseconds
of work for tiny jobs, none for jobs of a second or more. A claimed job
that finds no room when the answer arrives (a child died, a drain began)
goes straight back, its attempt unspent.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from procqueue import errors, events, models
from procqueue.clock import Clock
from procqueue.store.base import Cycle, Renewal
from procqueue.supervisor.dbpart import DbPart
from procqueue.supervisor.lease import Lease
from procqueue.supervisor.outbox import Outbox

log = logging.getLogger("procqueue.supervisor")

AHEAD_S = 0.1
"""Work reserved per child beyond the job it runs, in seconds of recent job time."""
AHEAD_MAX = 128
"""Most jobs reserved per child. It must cover the work children do while
one cycle is in flight: tiny jobs drained on PostgreSQL ran dry at 16 (a
cycle of 23 outcomes and claims took 16 ms, 20 ms of work went in it, and
children waited out the rest), so the bound is AHEAD_S, in time, and this
only caps what a mis-measured mean could ask for."""
GATHER_S = 0.005
GATHER_MAX_S = 0.05
"""While every child has a reserved job to go to next, a cycle waits one
recent job's time (at least GATHER_S, at most GATHER_MAX_S) after the last
one answered, so that one commit carries more outcomes and claims: no child
waits for it, each has its next job already, and an outcome is written at
most GATHER_MAX_S later. Real time, not the supervisor's clock: a batching
pause that nothing is promised by, which a test's stopped clock must not
turn into a stall."""
LONG_JOB_S = 1.0
"""Jobs that take this long on average are not claimed ahead: a reserved
job must not wait long in one supervisor while another idles."""


def window_depth(mean_s: float) -> int:
    """How many attempts a supervisor holds per child, the running one
    included, when jobs take `mean_s` seconds on average."""
    if mean_s >= LONG_JOB_S:
        return 1
    return 2 + min(AHEAD_MAX - 1, int(AHEAD_S / max(mean_s, 1e-5)))


@dataclass(eq=False, kw_only=True)
class Claims(DbPart):
    """One supervisor's claims and outcome writes."""

    outbox: Outbox
    """The outcomes each cycle carries; told what the database took."""
    clock: Clock
    lease: Lease
    events: events.EventStream
    owner: str
    """Whose leases it takes and renews (``host:pid:token``)."""

    def __post_init__(self) -> None:
        self.want = True
        """Claim at the next pass (a wake-up, a freed window, a full claim);
        set here and by `wake`."""
        self.next_at = self.clock.monotonic()
        """When the safety-net poll claims anyway (monotonic)."""
        self._stopped = False
        """Draining: outcomes are still written, nothing is claimed."""
        self._solo = 0
        """Outcomes to write one at a time: the database refused a batch."""
        self.renew_at = self.clock.monotonic() + self.lease.renew_every
        """When the leases of every held job are renewed next (monotonic)."""
        self.cancels_at = self.clock.monotonic()
        """When cancel requests are looked for next (monotonic)."""
        self._gather_until = 0.0
        """Until when a cycle waits for more work to carry (`time.monotonic`)."""

    def start(self, now: float) -> None:
        """The supervisor started at monotonic `now`: the first renewal is
        due one renewal interval later."""
        self.renew_at = now + self.lease.renew_every

    def wake(self) -> None:
        """Claims at the next pass (the database said jobs came, or a
        window may have room)."""
        self.want = True

    def stop(self) -> None:
        """Draining: from now on outcomes are still written, nothing is claimed."""
        self._stopped = True

    def depth(self) -> int:
        """Attempts held per child now, the running one included."""
        # While a child starts, nothing is claimed ahead: the new child takes the next job.
        return window_depth(self.attempts.mean_s) if self.pool.all_ready() else 1

    def room(self, depth: int | None = None) -> int:
        """How many more jobs may be claimed now: idle ready children, and
        as many ahead as `depth` (else the depth now) allows."""
        if self._stopped:
            return 0
        depth = self.depth() if depth is None else depth
        capacity = held = 0
        for i in self.pool.available():
            left = self.pool.jobs_left(i)  # a child due for recycling takes no more
            capacity += depth if left is None else min(depth, left)
            held += i in self.attempts.running
        return max(0, capacity - held - len(self.attempts.reserved))

    def gathering(self) -> float:
        """How long the next cycle waits for more to carry (0: it need not):
        while every child has a reserved job to take next, none waits for it."""
        left = self._gather_until - time.monotonic()
        if left <= 0 or self._stopped:
            return 0.0
        return left if len(self.attempts.reserved) >= len(self.pool.available()) else 0.0

    def step(self, now: float) -> None:
        """Submits one cycle if there is something to write or room to fill."""
        if self.db.busy("cycle") or not self.db.ok(now) or self.gathering():
            return
        claim_due = self.want or now >= self.next_at
        depth = self.depth()
        count = self.room(depth) if claim_due else 0
        batch = self.outbox.unwritten(1 if self._solo else None)
        if not count and not batch:
            return
        if count:
            self.next_at = now + self.settings.poll
            self.want = False
        wall = self.clock.now()
        lease_until = self.lease.until(wall)
        start = max(0, len(self.attempts.idle()) - len(self.attempts.reserved))

        def answered(cycle: Cycle) -> None:
            gather = min(GATHER_MAX_S, max(GATHER_S, self.attempts.mean_s))
            self._gather_until = time.monotonic() + gather
            self._recorded(batch, cycle.lost)
            self._dispatch(cycle, lease_until, start, depth)
            if count and len(cycle.claimed) == count:
                self.want = True  # there may be more

        def refused(exc: errors.StoreError) -> None:
            if count:
                self.want = True
            if not isinstance(exc, errors.StoreRejected):
                if count:  # the answer of its commit may be what was lost: renew now
                    self.renew_at = min(self.renew_at, self.clock.monotonic())
                return
            if len(batch) > 1:
                self._solo = len(batch)  # find the one the database refuses
            elif batch:
                log.warning("job %d: outcome refused by the database: %s", batch[0].id, exc)
                self.outbox.refused(batch[0], str(exc))

        self.db.submit(
            "cycle",
            lambda: self.store.job_record_and_claim(
                outcomes=batch,
                owner=self.owner,
                queues=self.settings.queues,
                count=count,
                lease_until=lease_until,
                now=wall,
                start=start,
                clock=self.clock.now,
            ),
            on_done=answered,
            on_error=refused,
        )

    def renew(self, now: float) -> None:
        """Every third of a lease, idle or not, and at once after a claim that
        may have committed unseen: renews, in one statement, the lease of every
        job the owner holds in the database (running or reserved); lost ones
        are ended, unknown ones handed back, children told the time left,
        requested cancels honoured."""
        if now < self.renew_at or self.db.busy("renew"):
            return
        self.renew_at = now + self.lease.renew_every
        lease_until = self.lease.until(self.clock.now())
        released = self.attempts.released_ids(now)

        def renewed(renewal: Renewal) -> None:
            self.events.emit(events.Renewed(held=len(renewal.alive)))
            self.attempts.renewed(alive=renewal.alive, lease_until=lease_until)
            self.attempts.cancel(renewal.cancel_requested)

        self.db.submit(
            "renew",
            lambda: self.store.job_renew_leases(
                owner=self.owner, lease_until=lease_until, released=released
            ),
            on_done=renewed,
        )

    def poll_cancels(self, now: float) -> None:
        """Looks for requested cancels of held jobs, every min(poll, 1 s)."""
        if not self.attempts.holds() or now < self.cancels_at or not self.db.ok(now):
            return
        if self.db.busy("cancels"):
            return
        self.cancels_at = now + min(self.settings.poll, 1.0)
        self.db.submit(
            "cancels",
            lambda: self.store.job_cancel_requested(owner=self.owner),
            on_done=self.attempts.cancel,
        )

    def _recorded(self, batch: list[models.Outcome], lost: list[int]) -> None:
        self.outbox.written(batch)
        if self._solo:
            self._solo = max(0, self._solo - len(batch))
        for id_ in lost:
            log.warning(
                "job %d: outcome not recorded, its lease was lost to another supervisor", id_
            )

    def _dispatch(self, cycle: Cycle, lease_until: float, start: int, depth: int) -> None:
        """Reserves the claimed jobs there is room for at the `depth` they
        were claimed for (idle children take them at once); the rest go back.
        The first `start` were marked started by the claim.

        The depth the claim asked for, not the depth now: recent job times
        move it while the claim is in flight, and jobs handed back for that
        alone are written twice and lose their place in the queue (a tiny-job
        drain on SQLite handed back as many jobs as it ran)."""
        room = self.room(depth)
        wall = self.clock.now()
        for limit in cycle.throttled:
            self.events.emit(events.Throttled(limit))
        for n, job in enumerate(cycle.claimed):
            waited = max(0.0, wall - job.run_at)
            self.events.emit(events.Claimed(job.id, job.name, job.queue, job.attempt, waited))
            if n < room:
                self.attempts.reserve(job, lease_until=lease_until, shown_started=n < start)
            else:
                self.attempts.hand_back(job)
