"""Flow control in the chaos run, enabled by ``--flow-jobs N``.

N jobs of `jobs.paced` (``rate_limit="5/s"``) and N of `jobs.tenant` (queue
``tenants``, ``group_limit=2``), enqueued as the chaos starts: one big
tenant's backlog first (most of the N), then a few small tenants of 3 jobs
each, two of which also carry ``group_rate="2/s"``. They run under every
fault of the run.

The invariants are computed from the attempt history of each job, which the
claim and the outcome write: an attempt holds its group's slot, and counts
a start against its rates, from its ``claimed_at`` (written under the claim
lock) to its ``ended_at`` (its outcome, or its rescue once its lease lapsed:
a killed supervisor's slot is free only then). The
side log's start/end
stamps come milliseconds later and miss the ends of killed runs, so they
give figures only.
"""

from __future__ import annotations

import bisect
import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from procqueue import App, JobInfo
from procqueue.models import AttemptInfo
from scripts.chaoskit.batch import J, Plan
from scripts.chaoskit.sidelog import Record, peak_concurrency
from scripts.chaoskit.workflow import Check, verdict
from tests.chaos.jobs import GROUP_LIMIT, PACED_RATE

SMALL_GROUPS = 6
"""Small tenants enqueued behind the big one's backlog, 3 jobs each."""
GROUP_RATE = "2/s"
RATED_GROUPS = ("small-0", "small-1")
"""The small tenants whose jobs also carry `GROUP_RATE`."""


def per_window(rate: str) -> tuple[int, float]:
    """``"5/s"`` as (5, 1.0): starts allowed, window seconds."""
    n, _, unit = rate.partition("/")
    return int(n), {"s": 1.0, "m": 60.0, "h": 3600.0}[unit]


def most_in_window(times: list[float], period: float) -> tuple[int, float]:
    """The most of `times` in any half-open window of `period` seconds, and where it starts."""
    ordered = sorted(times)
    best, at = 0, 0.0
    for i, t in enumerate(ordered):
        n = bisect.bisect_left(ordered, t + period) - i
        if n > best:
            best, at = n, t
    return best, at


class FlowPart:
    """The rate-limited and grouped jobs of a run, and their invariants."""

    def __init__(self, app: App, jobs: int, say: Callable[[str], None]) -> None:
        self.app = app
        self.jobs = jobs
        self.say = say
        self.groups: dict[int, str] = {}
        """Job id -> its group (tenant jobs only)."""
        self.paced: list[int] = []
        self.figures: dict[str, Any] = {}

    def plan(self, seed: int) -> Plan:
        rng = random.Random(seed + 3)
        out: Plan = []
        for n in range(self.jobs):
            key = f"flow:{seed}:paced:{n}"
            args = {"n": n, "seconds": rng.uniform(0.01, 0.3)}
            out.append((J + "paced", args, {"key": key}, key))
        small = [(f"small-{g}", k) for g in range(SMALL_GROUPS) for k in range(3)]
        big = [("big", k) for k in range(max(0, self.jobs - len(small)))]
        for group, k in big + small:
            key = f"flow:{seed}:{group}:{k}"
            options: dict[str, Any] = {"key": key, "group": group}
            if group in RATED_GROUPS:
                options["group_rate"] = GROUP_RATE
            args = {"group": group, "seconds": rng.uniform(0.05, 0.4)}
            out.append((J + "tenant", args, options, key))
        return out

    def enqueue(self, seed: int, enqueue: Callable[[Plan], dict[str, int]]) -> None:
        """Enqueues the part (nothing when off): the paced jobs, then the big backlog, then
        the small tenants."""
        if self.jobs <= 0:
            return
        plan = self.plan(seed)
        ids = enqueue(plan)
        for name, args, _, key in plan:
            if name.endswith(".paced"):
                self.paced.append(ids[key])
            else:
                self.groups[ids[key]] = args["group"]
        self.say(f"flow: {len(self.paced)} paced ({PACED_RATE}), {len(self.groups)} tenant jobs")

    def check(self, infos: dict[int, JobInfo], by_id: dict[int, list[Record]]) -> list[Check]:
        """The flow invariants from the histories and the side log; none when off."""
        if self.jobs <= 0:
            return []
        history = {i: self.app.get(i).history for i in [*self.paced, *self.groups]}
        self._fairness(history)
        return [
            self._rates(history, by_id),
            self._group_limit(history, by_id),
            self._no_attempt_spent(infos, history, by_id),
        ]

    def _rates(
        self, history: dict[int, list[AttemptInfo]], by_id: dict[int, list[Record]]
    ) -> Check:
        """Starts by `claimed_at` per sliding window: the paced jobs' rate, each rated group's."""
        keys: dict[str, tuple[str, list[int]]] = {"job paced": (PACED_RATE, self.paced)}
        for g in RATED_GROUPS:
            keys[f"group {g}"] = (GROUP_RATE, [i for i, x in self.groups.items() if x == g])
        problems, seen, missing = [], [], 0
        for key, (rate, ids) in keys.items():
            n, period = per_window(rate)
            claims = [a.claimed_at.timestamp() for i in ids for a in history[i] if a.claimed_at]
            missing += sum(1 for i in ids for a in history[i] if a.claimed_at is None)
            most, at = most_in_window(claims, period)
            if most > n:
                inside = [
                    f"{i}/{a.attempt} {a.outcome} claimed {a.claimed_at:%H:%M:%S.%f} "
                    f"by {a.supervisor_pid}"
                    for i in ids
                    for a in history[i]
                    if a.claimed_at and at <= a.claimed_at.timestamp() < at + period
                ]
                problems.append(f"{key}: {most} claims in {period:g}s: {', '.join(inside)}")
            runs = [r.t for i in ids for r in by_id[i] if r.event == "start"]
            side, _ = most_in_window(runs, period)
            seen.append(f"{key} {rate}: {most} claims max in a window of {len(claims)}")
            self.figures[f"most_starts_per_window {key}"] = {"claims": most, "side_log": side}
        return verdict(
            "never over the rate (claims per sliding window, by the attempts' claimed_at)",
            problems + ([f"{missing} attempts without claimed_at"] if missing else []),
            "; ".join(seen),
        )

    def _group_limit(
        self, history: dict[int, list[AttemptInfo]], by_id: dict[int, list[Record]]
    ) -> Check:
        """At no instant more than the limit of one group's attempts between claim and end."""
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        held: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
        side: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for i, g in self.groups.items():
            for a in history[i]:
                if a.claimed_at is not None:
                    span = (a.claimed_at.timestamp(), a.ended_at.timestamp())
                    spans[g].append(span)
                    held[g].append((*span, f"{i}/{a.attempt} {a.outcome} by {a.supervisor_pid}"))
            starts = {(r.attempt, r.pid): r.t for r in by_id[i] if r.event == "start"}
            for r in by_id[i]:
                if r.event == "end" and (r.attempt, r.pid) in starts:
                    side[g].append((starts[(r.attempt, r.pid)], r.t))
        peaks = {g: peak_concurrency(s) for g, s in spans.items()}
        self.figures["group_peaks"] = {
            "history": peaks,
            "side_log": {g: peak_concurrency(s) for g, s in side.items()},
        }
        over = [
            f"{g} held {p}: " + ", ".join(_held_at_peak(held[g]))
            for g, p in peaks.items()
            if p > GROUP_LIMIT
        ]
        return verdict(
            f"never over the group limit ({GROUP_LIMIT} held per group, claim to end)",
            over,
            f"peak held per group {peaks}",
        )

    def _no_attempt_spent(
        self,
        infos: dict[int, JobInfo],
        history: dict[int, list[AttemptInfo]],
        by_id: dict[int, list[Record]],
    ) -> Check:
        """A paced job whose every attempt succeeded spent one attempt and ran once."""
        clean = [
            i for i in self.paced if history[i] and all(a.outcome == "done" for a in history[i])
        ]
        wrong = [
            f"{i}: {infos[i].attempts} attempts, {len(history[i])} recorded, "
            f"{sum(1 for r in by_id[i] if r.event == 'start')} runs"
            for i in clean
            if not infos[i].attempts
            == len(history[i])
            == sum(1 for r in by_id[i] if r.event == "start")
        ]
        return verdict(
            "throttled jobs spent no attempt (a paced job never failed: attempts = runs)",
            wrong,
            f"{len(clean)} of {len(self.paced)} paced jobs never failed",
        )

    def _fairness(self, history: dict[int, list[AttemptInfo]]) -> None:
        """A figure, not an invariant: at which claim of the tenants' queue each small group
        was first served."""
        claims = sorted(
            (a.claimed_at.timestamp(), self.groups[i])
            for i in self.groups
            for a in history[i]
            if a.claimed_at is not None
        )
        first: dict[str, int] = {}
        for n, (_, g) in enumerate(claims, 1):
            first.setdefault(g, n)
        self.figures["first_claim_of_small_groups"] = {
            g: n for g, n in sorted(first.items()) if g != "big"
        }


def _held_at_peak(spans: list[tuple[float, float, str]]) -> list[str]:
    """The attempts (claimed, ended, name) held together at the first instant most were."""
    best: list[str] = []
    for t, _, _ in spans:
        now = [f"{n} {c % 60:.3f}-{e % 60:.3f}" for c, e, n in spans if c <= t < e]
        if len(now) > len(best):
            best = now
    return best
