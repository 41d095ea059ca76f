"""Bulk cancels and bulk retries of the chaos batch, enabled by
``--bulk-ops N`` (with ``--batch-members``): everything at once.

The batch's members then go to a queue of their own (`QUEUE`), so that a
filter reaches them and nothing else. During the first half of the chaos,
N operations alternate: ``cancel_where(queue=...)`` (pending and blocked
members cancelled at once, running ones stopped by their supervisors), then
``retry_where(queue=...)`` (the failed and cancelled ones run again, their
batch reopened). Each operation is one transaction racing the supervisors'
outcome writes, rescues and the batch's completion. After the chaos the
cancelled members are retried until none is left (`settle_step`), so every
member still ends as its kind dictates, and the batch has completed once
per time its last member ended; the invariant is `BatchPart.check`'s.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from procqueue import App, errors

QUEUE = "batch"
"""The queue of the batch's members when bulk operations are on."""


class BulkOps:
    """The bulk operations of a run on the batch's queue, and what they did."""

    def __init__(self, app: App, rounds: int, say: Callable[[str], None]) -> None:
        self.app = app
        self.rounds = rounds
        self.say = say
        self.done: Counter[str] = Counter()
        """Operations run, by kind."""
        self.touched: Counter[str] = Counter()
        """Members each kind of operation acted on."""
        self.log: list[dict[str, Any]] = []

    def schedule(self, t0: float, duration: float) -> list[tuple[float, str]]:
        """(monotonic time, operation) of each operation, over the chaos's first half."""
        return [
            (t0 + duration * 0.5 * (i + 1) / (self.rounds + 1), "cancel" if i % 2 == 0 else "retry")
            for i in range(self.rounds)
        ]

    def run(self, op: str) -> None:
        """One operation; an outage makes it a no-op (the next one comes)."""
        t = time.time()
        try:
            if op == "cancel":
                now, flagged = self.app.cancel_where(queue=QUEUE)
                n = now + flagged
                text = f"{now} cancelled, {flagged} running stopped"
            else:
                n = self.app.retry_where(queue=QUEUE)
                text = f"{n} retried"
        except errors.StoreError as exc:
            self.say(f"bulk {op}: database away ({exc})")
            self.done[f"{op} (database away)"] += 1
            return
        self.done[op] += 1
        self.touched[op] += n
        self.log.append({"t": t, "op": op, "n": n})
        self.say(f"bulk {op} of queue {QUEUE}: {text}")

    def settle_step(self) -> int:
        """After the chaos: retries the members still cancelled; how many
        (0 once none is left, or during an outage)."""
        if not self.rounds:
            return 0
        try:
            n = self.app.retry_where(queue=QUEUE, state="cancelled")
        except errors.StoreError:
            return 1  # not known: ask again
        if n:
            self.touched["final retry"] += n
            self.say(f"settle: {n} cancelled members retried")
        return n

    def figures(self) -> dict[str, Any]:
        return {"operations": dict(self.done), "members_acted_on": dict(self.touched)}
