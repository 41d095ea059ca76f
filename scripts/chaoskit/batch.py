"""The chaos run's batch, enabled by ``--batch-members N``.

N more jobs, of the cheap kinds (``short``; ``crash_once``, which dies on
its first attempt; ``crash``, which dies on every attempt and fails), are
enqueued at the start of the chaos as one batch, in one call, while
supervisors are being killed (and, on PostgreSQL, their connections cut).
They are ordinary chaos jobs with keys, so every other invariant applies to
them too. Both handlers are `jobs.batch_done`. After the settle, one
invariant: the batch completed exactly once, after its last member ended,
and enqueued exactly one on_complete (and on_success only if every member
is done), whose argument holds the batch's final counts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import msgspec

from procqueue import App, BatchInfo, JobInfo, JobState, errors
from tests.chaos import jobs as chaos_jobs

Plan = list[tuple[str, dict[str, Any], dict[str, Any], str]]
HANDLER = chaos_jobs.batch_done.name
J = "tests.chaos.jobs."


class BatchPart:
    """One batch of chaos jobs and its invariant."""

    def __init__(
        self, app: App, members: int, say: Callable[[str], None], queue: str | None = None
    ) -> None:
        self.app = app
        self.members = members
        self.say = say
        self.queue = queue
        """The members' queue (None: the default one)."""
        self.reopens = False
        """Whether bulk retries may reopen the batch (so it may complete more than once)."""
        self.spread_s = 0.0
        """Members become due over this many seconds (bulk operations need some
        still pending when they come: the whole batch drains in seconds)."""
        self.id: int | None = None

    def plan(self, seed: int) -> Plan:
        """The members: mostly ``short``, 1 in 25 ``crash_once``, 1 in 100 ``crash``."""
        rng = random.Random(seed + 15)
        out: Plan = []
        for n in range(self.members):
            r = rng.random()
            how = rng.choice(["segv", "exit"])
            if r < 0.01:
                kind, args = "crash", {"how": how}
            elif r < 0.05:
                kind, args = "crash_once", {"how": how}
            else:
                kind, args = "short", {"n": n}
            key = f"chaos:{seed}:batch:{n}"
            options: dict[str, Any] = {"key": key}
            if self.queue is not None:
                options["queue"] = self.queue
            if self.spread_s:
                options["delay"] = round(self.spread_s * n / self.members, 3)
            out.append((J + kind, args, options, key))
        return out

    def enqueue(self, seed: int, enqueue: Callable[[Plan], object]) -> None:
        """Enqueues the members as one batch through `enqueue` (the
        harness's, which retries through outages; keys make a retry
        idempotent)."""
        if self.members <= 0:
            return
        head = self.plan(seed)
        self.open("chaos", lambda: enqueue(head))

    def open(self, name: str, fill: Callable[[], object]) -> None:
        """Makes the batch `name` with both handlers, fills it with `fill()`
        (members join through the App's enqueue_many inside the batch) and
        seals it, retrying through outages."""
        batch = self._retrying(
            lambda: self.app.batch(
                name, on_complete=HANDLER, on_success=HANDLER, meta={"members": self.members}
            )
        )
        self.id = batch.id
        t0 = time.monotonic()
        try:
            with batch:
                fill()
        except errors.StoreError:
            pass  # the exit's seal failed in an outage: sealed again below
        self._retrying(batch.seal)  # idempotent
        self.say(
            f"batch {batch.id}: {self.members} members enqueued in {time.monotonic() - t0:.1f}s"
        )

    @staticmethod
    def _retrying(call: Callable[[], Any]) -> Any:
        give_up = time.monotonic() + 120
        while True:
            try:
                return call()
            except errors.StoreError:
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.2)

    def check(self, infos: dict[int, JobInfo]) -> tuple[str, bool, str] | None:
        """The invariant, over every job of the run (`infos`), or None when off."""
        if self.id is None:
            return None
        batch_id = self.id
        once = "once" if not self.reopens else "once per completion"
        name = f"the batch completed {once}, after its last member, with one on_complete each time"
        batch: BatchInfo = self._retrying(lambda: self.app.batch_info(batch_id))
        members = list(self._retrying(lambda: list(self.app.batch_results(batch_id))))
        handlers = {
            i.key: i for i in infos.values() if i.key and i.key.startswith(f"batch:{self.id}:")
        }
        problems = []
        n = batch.completions
        if batch.state != "complete" or n < 1 or (n != 1 and not self.reopens):
            problems.append(f"state {batch.state}, completions {n}")
        if batch.total != self.members or len(members) != self.members:
            problems.append(f"{batch.total} members counted, {len(members)} listed")
        # "After its last member" is what each completing transaction saw (its
        # handler's counts, below), not the rows' times: each is the `now` of a
        # request, taken before its transaction waited for the database, so a
        # member can end at a later `now` in a transaction that commits first.
        final = (batch.total, batch.done, batch.failed, batch.cancelled, 0)
        wanted = set()
        for c in range(1, n + 1):
            complete = handlers.get(f"batch:{self.id}:{c}:complete")
            if complete is None:
                problems.append(f"no on_complete for completion {c}")
                continue
            fired = msgspec.convert(complete.args.get("info"), BatchInfo)
            counts = (fired.total, fired.done, fired.failed, fired.cancelled, fired.pending)
            if fired.pending or fired.running or fired.blocked or (c == n and counts != final):
                problems.append(f"completion {c} got counts {counts}, final {final}")
            wanted |= {f"batch:{self.id}:{c}:complete"}
            if fired.succeeded:
                wanted |= {f"batch:{self.id}:{c}:success"}
        if set(handlers) != wanted:
            problems.append(f"handlers {sorted(handlers)}, expected {sorted(wanted)}")
        for h in handlers.values():
            if h.state != JobState.DONE:
                problems.append(f"{h.key} is {h.state}")
        detail = (
            f"batch {self.id}: {batch.total} members ({batch.done} done, {batch.failed} failed, "
            f"{batch.cancelled} cancelled), {n} completions, {len(handlers)} handlers"
        )
        return name, not problems, detail + ("; " + "; ".join(problems[:5]) if problems else "")
