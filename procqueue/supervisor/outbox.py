"""The outcomes a supervisor has decided and not yet written.

`Outbox` is the only writer of that queue. `running.Attempts` adds what
children, deaths and kills decide and drops what a renewal says is no longer
this supervisor's; `claims.Claims` carries the queue into each
record-and-claim cycle and says what the database took. Outcomes stay in the
order they were decided, and one is only removed when the database answered
for it (recorded, fenced off, or no longer ours), so none is lost to a
failed call.
"""

from __future__ import annotations

from procqueue import models
from procqueue.supervisor.attempt import refused


class Outbox:
    """Decided outcomes, in order, until the database answers for them."""

    def __init__(self) -> None:
        self._outcomes: list[models.Outcome] = []

    def add(self, outcome: models.Outcome) -> None:
        """Queues `outcome` behind every one decided before it."""
        self._outcomes.append(outcome)

    def unwritten(self, limit: int | None = None) -> list[models.Outcome]:
        """The first `limit` (else all) outcomes not yet written, in order."""
        return self._outcomes[:limit]

    def waiting(self) -> bool:
        """Whether any outcome is waiting to be written."""
        return bool(self._outcomes)

    def attempts(self) -> set[tuple[int, int]]:
        """(id, attempt) of every outcome waiting."""
        return {(o.id, o.attempt) for o in self._outcomes}

    def written(self, batch: list[models.Outcome]) -> None:
        """The database took `batch` (recorded, or fenced off as lost)."""
        taken = {id(o) for o in batch}
        self._outcomes = [o for o in self._outcomes if id(o) not in taken]

    def refused(self, outcome: models.Outcome, words: str) -> None:
        """The database refused `outcome` (the first queued): that attempt
        fails instead, so one job's value never blocks the others."""
        if self._outcomes and self._outcomes[0] is outcome:
            self._outcomes[0] = refused(outcome, words)

    def keep(self, alive: set[tuple[int, int]]) -> None:
        """Drops the outcomes of attempts not in `alive` (id, attempt): their
        jobs are no longer this supervisor's, so nothing of theirs may be written."""
        self._outcomes = [o for o in self._outcomes if (o.id, o.attempt) in alive]
