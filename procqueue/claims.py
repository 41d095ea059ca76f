"""What a supervisor asks of the database about the jobs it holds: the
record-and-claim cycle (queued outcomes written and jobs claimed for the
children's windows that have room, in one transaction and one round trip,
at most one cycle in flight), lease renewals and cancel polls.

A claimed job is handed to a child when the answer arrives; one that finds
no room by then (its child died, a drain began) goes straight back,
its attempt unspent.
"""

from __future__ import annotations

import logging

from procqueue import _clock, config, errors, events, models
from procqueue.attempts import Attempts
from procqueue.dbcalls import DbCalls
from procqueue.limits import Limits
from procqueue.pool import Pool
from procqueue.store.base import Cycle, Renewal, Store

log = logging.getLogger("procqueue.supervisor")


class Claims:
    """One supervisor's claims and outcome writes."""

    def __init__(
        self,
        *,
        attempts: Attempts,
        limits: Limits,
        pool: Pool,
        store: Store,
        db: DbCalls,
        clock: _clock.Clock,
        settings: config.Settings,
        events: events.EventStream,
        owner: str,
    ) -> None:
        self.attempts = attempts
        self.limits = limits
        self.pool = pool
        self.store = store
        self.db = db
        self.clock = clock
        self.settings = settings
        self.events = events
        self.owner = owner
        self.want = True
        """Claim at the next pass (a wake-up, a freed window, a full claim)."""
        self.next_at = clock.monotonic()
        """When the safety-net poll claims anyway (monotonic)."""
        self.stopped = False
        """Draining: outcomes are still written, nothing is claimed."""
        self._solo = 0
        """Outcomes to write one at a time: the database refused a batch."""
        self.renew_at = clock.monotonic() + settings.lease / 3
        """When the leases of every held job are renewed next (monotonic)."""
        self.cancels_at = clock.monotonic()
        """When cancel requests are looked for next (monotonic)."""

    def room(self) -> dict[int, int]:
        """Ready children -> how many more attempts their windows take."""
        if self.stopped:
            return {}
        depth = self.attempts.depth()
        room = {}
        for i in self.pool.available():
            left = self.pool.jobs_left(i)  # a child due for recycling holds no more
            room[i] = (depth if left is None else min(depth, left)) - self.attempts.held(i)
        return {i: n for i, n in room.items() if n > 0}

    def due(self) -> bool:
        """Whether a claim would be submitted at once."""
        return self.want and not self.db.busy("cycle") and bool(self.room())

    def step(self, now: float) -> None:
        """Submits one cycle if there is something to write or room to fill."""
        if self.db.busy("cycle") or not self.db.ok(now):
            return
        claim_due = self.want or now >= self.next_at
        count = sum(self.room().values()) if claim_due else 0
        batch = list(self.attempts.outcomes[: 1 if self._solo else None])
        if not count and not batch:
            return
        if count:
            self.next_at = now + self.settings.poll
            self.want = False
        wall = self.clock.now()
        lease_until = wall + self.settings.lease

        def answered(cycle: Cycle) -> None:
            self._recorded(batch, cycle.lost)
            self._dispatch(cycle, lease_until)
            if count and len(cycle.claimed) == count:
                self.want = True  # there may be more

        def refused(exc: errors.StoreError) -> None:
            if count:
                self.want = True
            if not isinstance(exc, errors.StoreRejected):
                return
            if len(batch) > 1:
                self._solo = len(batch)  # find the one the database refuses
            elif batch:
                log.warning("job %d: outcome refused by the database: %s", batch[0].id, exc)
                self._refused(batch[0], str(exc))

        self.db.submit(
            "cycle",
            lambda: self.store.job_record_and_claim(
                outcomes=batch,
                owner=self.owner,
                queues=self.settings.queues,
                count=count,
                lease_until=lease_until,
                now=wall,
            ),
            on_done=answered,
            on_error=refused,
        )

    def renew(self, now: float) -> None:
        """Every lease/3: renews, in one statement, the lease of every job
        held (running or waiting); lost ones are ended, children told the
        time left, requested cancels honoured."""
        if now < self.renew_at or self.db.busy("renew"):
            return
        self.renew_at = now + self.settings.lease / 3
        if not self.attempts.all() and not self.attempts.outcomes:
            return
        lease_until = self.clock.now() + self.settings.lease

        def renewed(renewal: Renewal) -> None:
            self.events.emit(events.Renewed(held=len(renewal.alive)))
            self.limits.renewed(alive=renewal.alive, lease_until=lease_until)
            self.attempts.cancel(renewal.cancel_requested)

        self.db.submit(
            "renew",
            lambda: self.store.job_renew_leases(owner=self.owner, lease_until=lease_until),
            on_done=renewed,
        )

    def poll_cancels(self, now: float) -> None:
        """Looks for requested cancels of held jobs, every min(poll, 1 s)."""
        if not self.attempts.all() or now < self.cancels_at or not self.db.ok(now):
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
        del self.attempts.outcomes[: len(batch)]
        if self._solo:
            self._solo = max(0, self._solo - len(batch))
        for id_ in lost:
            log.warning(
                "job %d: outcome not recorded, its lease was lost to another supervisor", id_
            )

    def _dispatch(self, cycle: Cycle, lease_until: float) -> None:
        """Spreads the claimed jobs over the windows with room, one per child
        in turn, emptiest first."""
        room = self.room()
        order = sorted(room, key=lambda i: (self.attempts.held(i), i))
        places: list[int] = []
        while any(room[i] for i in order):
            for i in order:
                if room[i]:
                    places.append(i)
                    room[i] -= 1
        wall = self.clock.now()
        for n, job in enumerate(cycle.claimed):
            waited = max(0.0, wall - job.run_at)
            self.events.emit(events.Claimed(job.id, job.name, job.queue, job.attempt, waited))
            if n < len(places):
                self.attempts.start(places[n], job, lease_until=lease_until)
            else:
                self._hand_back_unstarted(job)

    def _hand_back_unstarted(self, job: models.ClaimedJob) -> None:
        """A claimed job no child can take now goes back, its attempt unspent."""
        self.attempts.outcomes.append(
            models.Outcome(
                id=job.id,
                attempt=job.attempt,
                state=models.JobState.PENDING,
                run_at=self.clock.now(),
                refund=True,
            )
        )

    def _refused(self, outcome: models.Outcome, words: str) -> None:
        """The database refused `outcome` (the first queued): that attempt
        fails instead, so one job's value never blocks the others."""
        if self.attempts.outcomes and self.attempts.outcomes[0] is outcome:
            self.attempts.outcomes[0] = models.Outcome(
                id=outcome.id,
                attempt=outcome.attempt,
                state=models.JobState.FAILED,
                error=f"the outcome could not be stored: {words}",
            )
