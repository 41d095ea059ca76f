"""The run's figures, written beside the invariants in the report: jobs, runs, attempts,
faults, stalls, freezes, orphan re-run times; and the Evidence they and the invariants
are computed from.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from procqueue import JobInfo
from scripts.chaoskit.config import (
    SHOULD_FAIL,
)
from scripts.chaoskit.sidelog import (
    Record,
    percentile,
)
from scripts.chaoskit.state import ChaosState


@dataclass
class Evidence:
    """What the invariants are checked against: the jobs' rows by id (probes left
    out), their side-log records in order and by job id, and each job's kind."""

    infos: dict[int, JobInfo]
    records: list[Record]
    by_id: dict[int, list[Record]]
    kinds: dict[int, str]


class Figures(ChaosState):
    """The figures of a run, computed once its invariants are checked."""

    def _record_figures(
        self, ev: Evidence, lost: int, dups: dict[tuple[int, int], list[int]]
    ) -> None:
        """The run's figures, beside the invariants in the report."""
        cfg = self.cfg
        infos, records, by_id, kinds = ev.infos, ev.records, ev.by_id, ev.kinds
        starts_per_job = Counter(r.id for r in records if r.event == "start")
        by_design = {"crash_once"} | SHOULD_FAIL
        again = [i for i, n in starts_per_job.items() if n > 1]
        again_chaos = [i for i in again if kinds[i] not in by_design or starts_per_job[i] > 2]
        orphan_times = self._orphan_times(by_id)
        self.figures.update(
            {
                "backend": cfg.backend,
                "seed": self.seed,
                "chaos_minutes": cfg.minutes,
                "jobs": len(infos),
                "jobs_by_kind": dict(Counter(kinds.values())),
                "states": dict(Counter(str(i.state) for i in infos.values())),
                "attempts": sum(i.attempts for i in infos.values()),
                "runs_started": sum(starts_per_job.values()),
                "ran_more_than_once": len(again),
                "ran_more_than_once_by_chaos": len(again_chaos),
                "duplicate_attempts": len(dups),
                "lost": lost,
                "faults": dict(self.faults),
                "supervisor_processes": len(self.history),
                "backends_terminated": self.terminated,
                "server_restart_s": [round(x, 1) for x in self.restart_seconds],
                "stalls": {
                    "count": len(self.stall_held),
                    "seconds": [round(x, 1) for x in self.stall_held],
                    "errors": self.stall_errors,
                },
                "freezes": {
                    "count": len(self.freeze_windows),
                    "seconds": [round(w["thawed"] - w["t"], 1) for w in self.freeze_windows],
                    "jobs_held": [len(w["held"]) for w in self.freeze_windows],
                    "held_jobs_run_again_while_frozen": self._rescued_while_frozen(by_id),
                },
                "enqueue_retries": self.enqueue_retries,
                "orphan_rerun_s": orphan_times,
                "pending_during_chaos": {
                    "mean": round(statistics.mean(self.backlog), 1) if self.backlog else None,
                    "max": max(self.backlog, default=None),
                },
            }
        )

    def _rescued_while_frozen(self, by_id: dict[int, list[Record]]) -> int:
        """Jobs a frozen supervisor held that another run started before it was thawed."""
        n = 0
        for w in self.freeze_windows:
            for job_id, pid in w["held"].items():
                rs = by_id.get(job_id, [])
                if any(
                    x.event == "start" and x.pid != pid and w["t"] < x.t < w["thawed"] for x in rs
                ):
                    n += 1
        return n

    def _orphan_times(self, by_id: dict[int, list[Record]]) -> dict[str, Any]:
        """From the chaos: kill -9 of a supervisor to the next start of each job it ran."""
        deltas = []
        for e in self.events:
            if e["kind"] != "kill_supervisor":
                continue
            for job_id, pid in e["held"].items():
                rs = by_id.get(job_id, [])
                if any(r.pid == pid and r.event == "end" and r.t < e["t"] for r in rs):
                    continue
                nxt = [r.t for r in rs if r.event == "start" and r.t > e["t"]]
                if nxt:
                    deltas.append(min(nxt) - e["t"])
        if not deltas:
            return {"n": 0}
        return {
            "n": len(deltas),
            "p50": round(statistics.median(deltas), 2),
            "p95": round(percentile(deltas, 0.95), 2),
            "max": round(max(deltas), 2),
        }
