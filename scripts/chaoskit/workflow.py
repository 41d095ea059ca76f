"""The chaos run's workflow, enabled by ``--workflow-nodes N``.

N nodes (`jobs.node`) in one ``app.batch(on_complete=...)``, enqueued at the
start of the chaos, level by level, with ``after=``: parallel chains of
diamonds (a hub, a fan-out of 8 that each depend on it, the next hub
depending on the whole fan: a fan-in), some fan nodes also depending on
their twin of the diamond before. About 1 fan node in 50 fails for good
(``Permanent``); a hub after it waits with ``allow_failure`` more often than
not, else it is cancelled and the cancel runs down the chain, where a fan
node with ``allow_failure`` (1 in 10) runs anyway and may revive it.

What each node must end as follows from the graph alone (`expected`), so
the invariants are checked from the jobs' own records against it: the rows,
their attempt history and the side log (each run's start, with the
dependencies whose results it was handed, and its end or failure).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from procqueue import App, BatchInfo, JobInfo, JobState
from procqueue.models import AttemptInfo
from scripts.chaoskit.batch import HANDLER, BatchPart, J, Plan
from scripts.chaoskit.sidelog import Record

WIDTH = 8
"""Fan-out of each diamond."""
CHAIN = 100
"""Nodes per chain of diamonds (the chains run side by side)."""
Check = tuple[str, bool, str]


def verdict(name: str, problems: list[str], detail: str) -> Check:
    """An invariant: held when `problems` is empty; the detail names the first few."""
    return name, not problems, detail + (": " + "; ".join(problems[:6]) if problems else "")


@dataclass
class Node:
    """One node of the planned graph; `parents` are indices into the plan."""

    index: int
    level: int
    parents: list[int]
    fail: bool = False
    allow_failure: bool = False
    seconds: float = 0.02
    id: int = 0
    """Its job id, once enqueued."""
    key: str = field(default="")


def shape(nodes: int, seed: int) -> list[Node]:
    """The graph: `nodes` in chains of diamonds side by side, parents first."""
    rng = random.Random(seed + 21)
    out: list[Node] = []
    chains = max(1, round(nodes / CHAIN))
    for chain in range(chains):
        size, start = (nodes - len(out)) // (chains - chain), len(out)
        level, fan = 0, list[int]()
        while len(out) - start < size:
            # a hub: the fan-in of the diamond before (the chain's first has no parent)
            failed = any(out[p].fail for p in fan)
            out.append(
                Node(len(out), level, fan, allow_failure=rng.random() < (0.6 if failed else 0.3))
            )
            hub, before, fan = len(out) - 1, fan, []
            level += 1
            for i in range(min(WIDTH, size - (len(out) - start))):
                twin = [before[i]] if i < len(before) and rng.random() < 0.3 else []
                out.append(
                    Node(
                        len(out),
                        level,
                        [hub, *twin],
                        fail=rng.random() < 0.02,
                        allow_failure=rng.random() < 0.1,
                        seconds=rng.uniform(0.02, 0.12),
                    )
                )
                fan.append(len(out) - 1)
            level += 1
    return out


def expected(plan: list[Node]) -> list[JobState]:
    """What each node must end as: cancelled when a dependency failed or was
    cancelled (unless allow_failure), failed when it fails by design, done."""
    states: list[JobState] = []
    for n in plan:
        bad = any(states[p] != JobState.DONE for p in n.parents)
        if bad and not n.allow_failure:
            states.append(JobState.CANCELLED)
        else:
            states.append(JobState.FAILED if n.fail else JobState.DONE)
    return states


class WorkflowPart(BatchPart):
    """The chaos workflow: its graph, enqueued as one batch, and its invariants."""

    def __init__(self, app: App, nodes: int, say: Callable[[str], None]) -> None:
        super().__init__(app, nodes, say)
        self.nodes: list[Node] = []
        self.span = (0.0, 0.0)
        """(made, completed) of the batch, UNIX times, once checked."""

    def enqueue_graph(self, seed: int, enqueue: Callable[[Plan], dict[str, int]]) -> None:
        """Enqueues the graph as one batch, one level per call of `enqueue`
        (the harness's, retried through outages: keys make a retry idempotent;
        it returns the id of every key it has enqueued)."""
        if self.members <= 0:
            return
        self.nodes = shape(self.members, seed)
        for n in self.nodes:
            n.key = f"chaos:{seed}:node:{n.index}"
        levels: dict[int, list[Node]] = {}
        for n in self.nodes:
            levels.setdefault(n.level, []).append(n)

        def fill() -> None:
            # level by level: a level's ids are known before the next names them
            for level in sorted(levels):
                plan: Plan = [
                    (
                        J + "node",
                        {"seconds": n.seconds, "fail": n.fail},
                        {
                            "key": n.key,
                            "after": [self.nodes[p].id for p in n.parents],
                            "allow_failure": n.allow_failure,
                        },
                        n.key,
                    )
                    for n in levels[level]
                ]
                ids = enqueue(plan)
                for n in levels[level]:
                    n.id = ids[n.key]

        self.open("chaos workflow", fill)
        edges = sum(len(n.parents) for n in self.nodes)
        self.say(f"workflow batch {self.id}: {len(self.nodes)} nodes, {edges} edges")

    # -- the invariants ---------------------------------------------------------

    def _history(self, id: int) -> list[AttemptInfo]:
        info: JobInfo = self._retrying(lambda: self.app.get(id))
        return info.history

    def check_graph(self, infos: dict[int, JobInfo], by_id: dict[int, list[Record]]) -> list[Check]:
        """The workflow's invariants, from the rows (`infos`), the histories and
        the side log (`by_id`); none when off."""
        if self.id is None or not self.nodes:
            return []
        want = expected(self.nodes)
        rows = {n.index: infos.get(n.id) for n in self.nodes}
        histories = {n.index: self._history(n.id) for n in self.nodes}
        return [
            self._endings(want, rows),
            self._once(want, rows, histories, by_id),
            self._order(rows, by_id),
            self._cancelled_never_ran(want, rows, by_id),
            self._results(want, rows),
            self._handler(infos),
        ]

    def _endings(self, want: list[JobState], rows: dict[int, JobInfo | None]) -> Check:
        wrong = [
            f"node {n.index} (job {n.id}) {r.state if r else 'missing'}, expected {want[n.index]}"
            for n in self.nodes
            if (r := rows[n.index]) is None or r.state != want[n.index]
        ]
        counts = Counter(str(s) for s in want)
        return verdict(
            "workflow: every node ended as its dependencies dictate, none left blocked, "
            "pending or running",
            wrong,
            f"{len(self.nodes)} nodes ({dict(counts)} expected)",
        )

    def _once(
        self,
        want: list[JobState],
        rows: dict[int, JobInfo | None],
        histories: dict[int, list[AttemptInfo]],
        by_id: dict[int, list[Record]],
    ) -> Check:
        """A done node has one done attempt in its history and no run after it."""
        bad, reran = [], 0
        for n in self.nodes:
            row, history = rows[n.index], histories[n.index]
            dones = sum(1 for a in history if a.outcome == "done")
            if dones != (1 if want[n.index] == JobState.DONE else 0):
                bad.append(f"node {n.index} (job {n.id}): {dones} done attempts")
            ends = [r for r in by_id.get(n.id, []) if r.event == "end"]
            reran += len(ends) > 1
            if row is not None and row.finished_at is not None:
                late = [r for r in by_id.get(n.id, []) if r.t > row.finished_at.timestamp()]
                if late:
                    bad.append(f"node {n.index} (job {n.id}) {late[0].event} after it ended")
        return verdict(
            "workflow: no node succeeded twice, none ran again after it ended",
            bad,
            f"{sum(want[n.index] == JobState.DONE for n in self.nodes)} done nodes; "
            f"{reran} ran to their end more than once (an outcome lost to a kill: at least once)",
        )

    def _order(self, rows: dict[int, JobInfo | None], by_id: dict[int, list[Record]]) -> Check:
        """No run of a node started before its last dependency ended, and no
        dependency ran again after a dependent started."""
        early, starts = [], 0
        for n in self.nodes:
            runs = [r for r in by_id.get(n.id, []) if r.event == "start"]
            if not runs or not n.parents:
                continue
            starts += len(runs)
            first = min(r.t for r in runs)
            for p in n.parents:
                parent = self.nodes[p]
                row = rows[p]
                ended = row.finished_at.timestamp() if row and row.finished_at else None
                if ended is None or first <= ended:
                    early.append(
                        f"node {n.index} (job {n.id}) started at {first:.3f}, "
                        f"dependency {parent.id} ended at {ended}"
                    )
                late = [r for r in by_id.get(parent.id, []) if r.t > first]
                if late:
                    early.append(f"dependency {parent.id} {late[0].event} after {n.id} started")
        return verdict(
            "workflow: no node started before its last dependency ended",
            early,
            f"{starts} runs of nodes with dependencies checked against "
            f"{sum(len(n.parents) for n in self.nodes)} edges",
        )

    def _cancelled_never_ran(
        self, want: list[JobState], rows: dict[int, JobInfo | None], by_id: dict[int, list[Record]]
    ) -> Check:
        bad = []
        cancelled = [n for n in self.nodes if want[n.index] == JobState.CANCELLED]
        for n in cancelled:
            row = rows[n.index]
            if by_id.get(n.id):
                bad.append(f"node {n.index} (job {n.id}) ran")
            if row is None or not (row.error or "").startswith("dependency "):
                bad.append(f"node {n.index} (job {n.id}) error {row.error if row else None!r}")
        return verdict(
            "workflow: a node whose dependency failed (without allow_failure) was cancelled, "
            "transitively, naming it, and never ran",
            bad,
            f"{len(cancelled)} nodes cancelled, "
            f"{sum(n.fail for n in self.nodes)} failing by design",
        )

    def _results(self, want: list[JobState], rows: dict[int, JobInfo | None]) -> Check:
        bad = []
        for n in self.nodes:
            row = rows[n.index]
            if row is None or want[n.index] != JobState.DONE:
                continue
            done = sorted(self.nodes[p].id for p in n.parents if want[p] == JobState.DONE)
            if row.result != done:
                bad.append(f"node {n.index} (job {n.id}) got {row.result}, expected {done}")
        return verdict(
            "workflow: each node was handed the results of exactly its done dependencies",
            bad,
            f"{sum(1 for s in want if s == JobState.DONE)} done nodes",
        )

    def _handler(self, infos: dict[int, JobInfo]) -> Check:
        """The batch completed once, after its last node, and its on_complete
        handler was enqueued once and done once, with the final counts."""
        assert self.id is not None
        batch_id = self.id
        batch: BatchInfo = self._retrying(lambda: self.app.batch_info(batch_id))
        handlers = [i for i in infos.values() if i.key and i.key.startswith(f"batch:{self.id}:")]
        problems = []
        if batch.state != "complete" or batch.completions != 1:
            problems.append(f"state {batch.state}, completions {batch.completions}")
        kinds = ["complete", "success"] if batch.succeeded else ["complete"]
        if sorted(h.key or "" for h in handlers) != [f"batch:{self.id}:1:{k}" for k in kinds]:
            problems.append(f"handlers {[h.key for h in handlers]}, expected {kinds}")
        for h in handlers:
            history = self._history(h.id)
            # What the completing transaction saw: every node ended, as they are now.
            fired = msgspec.convert(h.args.get("info"), BatchInfo)
            seen = (fired.done, fired.failed, fired.cancelled, fired.pending + fired.running)
            if seen != (batch.done, batch.failed, batch.cancelled, 0) or fired.blocked:
                problems.append(f"{h.key} got {seen}")
            if h.state != JobState.DONE or sum(a.outcome == "done" for a in history) != 1:
                problems.append(f"{h.key} is {h.state} after {len(history)} attempts")
        made = batch.created_at.timestamp()
        self.span = (made, batch.finished_at.timestamp() if batch.finished_at else made)
        took = f"{self.span[1] - made:.1f}s" if batch.finished_at else "never"
        return verdict(
            "workflow: the batch completed once, after its last node; on_complete enqueued "
            "once and done once",
            problems,
            f"batch {self.id}: {batch.done} done, {batch.failed} failed, "
            f"{batch.cancelled} cancelled, complete {took} after it was made; "
            f"handler {HANDLER.rsplit('.', 1)[-1]}",
        )
