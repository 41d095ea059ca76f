"""The run's verdict: each invariant printed, and the figures and invariants written as a JSON
report.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from scripts.chaoskit.state import ChaosState


class Report(ChaosState):
    """The run's verdict printed and written as a JSON report."""

    def _print(self) -> None:
        f = self.figures
        stalls, freezes = f.get("stalls", {}), f.get("freezes", {})
        lines = [
            "",
            f"== chaos run on {self.cfg.backend} (seed {self.seed}) ==",
            f"faults injected: {f.get('faults')}",
            f"jobs: {f.get('jobs')} {f.get('jobs_by_kind')}  states: {f.get('states')}",
            f"attempts: {f.get('attempts')}  runs started: {f.get('runs_started')}",
            f"ran more than once (allowed): {f.get('ran_more_than_once')} "
            f"({f.get('ran_more_than_once_by_chaos')} because of the chaos)",
            f"duplicate attempts: {f.get('duplicate_attempts')}  lost (must be 0): {f.get('lost')}",
            f"queue concurrency: {f.get('queue')}",
            f"orphaned job ran again after (chaos): {f.get('orphan_rerun_s')}; pending "
            f"jobs during the chaos {f.get('pending_during_chaos')} (a rescued job queues "
            "behind them)",
            f"orphaned job ran again after (quiet probe, lease {self.cfg.lease:g}s): "
            f"{f.get('orphan_probe_s')}",
            f"slowest child death after its supervisor's kill -9: {f.get('child_death_max_s')}s",
            f"database stalls: {stalls.get('count')} (held {stalls.get('seconds')}s)"
            + (f" errors {stalls['errors']}" if stalls.get("errors") else ""),
            f"frozen supervisors (SIGSTOP): {freezes.get('count')} ({freezes.get('seconds')}s, "
            f"jobs held {freezes.get('jobs_held')}, run again elsewhere while frozen "
            f"{freezes.get('held_jobs_run_again_while_frozen')})",
            f"overlap-run records (must be 0): {f.get('overlap_runs')}",
            f"settled in {f.get('settle_s')}s after the chaos",
        ]
        if "workflow" in f:
            wf = f["workflow"]
            lines.append(f"workflow: {wf['seconds']}s, faults meanwhile {wf['faults']}")
        if "bulk" in f:
            lines.append(f"bulk operations on the batch: {f['bulk']}")
        if "flow" in f:
            lines.append(f"flow control: {f['flow']}")
        if "flood" in f:
            lines.append(f"flood: {f['flood']['summary']}")
        lines.append("")
        for inv in self.invariants:
            lines.append(f"[{'PASS' if inv.ok else 'FAIL'}] {inv.name}\n       {inv.detail}")
        if not self.cfg.quiet:
            print("\n".join(lines), flush=True)

    def _write_report(self, ok: bool) -> None:
        if not self.cfg.report:
            return
        doc = {
            "ok": ok,
            "config": asdict(self.cfg),
            "figures": self.figures,
            "invariants": [asdict(i) for i in self.invariants],
            "work": str(self.work),
        }
        Path(self.cfg.report).write_text(json.dumps(doc, indent=2, default=str))
