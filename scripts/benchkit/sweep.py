"""Each peer's fastest configuration: ``--sweep`` drains no-op jobs through every
configuration a peer's adapter lists (short runs, interleaved repetitions) and writes the
results with the winner per peer; a main run reads the winners back (``configurations``).
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchkit.settings import FULL, PQ_SYSTEMS, QUICK, say
from benchkit.workloads import TWO_SLOT, adapter_classes, describe, run_one

SWEEP_JOBS = 3000
"""No-op jobs per sweep run (1,000 with --quick): long enough to reach a steady rate."""


def run_sweep(args: Any, systems: list[str], n_iter: int, out: Path) -> dict[str, Any]:
    """Every configuration of every peer in `systems` through the no-op drain, `args.reps`
    (default 2) interleaved repetitions; writes and returns the sweep (runs and winners)."""
    base = QUICK if args.quick else FULL
    sizes = replace(base, reps=args.reps or 2, noop_jobs=1000 if args.quick else SWEEP_JOBS)
    peers = [s for s in systems if s not in PQ_SYSTEMS and not s.endswith(TWO_SLOT)]
    classes = adapter_classes(peers)
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    runs: list[dict[str, Any]] = []
    for rep in range(1, sizes.reps + 1):
        for name in peers:
            configs = list(classes[name].configs)
            shift = (rep - 1) % len(configs)
            for knobs in configs[shift:] + configs[:shift]:  # rotate: no fixed position
                r = run_one(
                    name, classes[name], "throughput_noop", rep, work_dir, sizes, n_iter, knobs
                )
                r["config"] = classes[name].label(knobs)
                runs.append(r)
                say(f"[sweep {rep}/{sizes.reps}] {name:<14} {r['config']:<44} {describe(r)}")
    sweep = {
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "sizes": asdict(sizes),
        "elapsed_s": round(time.monotonic() - began, 1),
        "runs": runs,
        "winners": winners(runs),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(sweep, indent=1, default=str) + "\n")
    return sweep


def config_medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per peer, per configuration label: its knobs and the median, min and max drain
    jobs/s over the sweep's runs that drained (None when none did)."""
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for r in runs:
        entry = table.setdefault(r["system"], {}).setdefault(
            r["config"], {"knobs": r["knobs"], "rates": [], "runs": 0}
        )
        entry["runs"] += 1
        # a run cut at its time limit still has a rate (jobs done over the time it ran)
        if r.get("status") in ("ok", "timeout") and r.get("drain_jobs_s"):
            entry["rates"].append(r["drain_jobs_s"])
    for configs in table.values():
        for entry in configs.values():
            rates = entry.pop("rates")
            entry["median"] = statistics.median(rates) if rates else None
            entry["min"] = min(rates, default=None)
            entry["max"] = max(rates, default=None)
            entry["finished"] = len(rates)
    return table


def winners(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per peer, the knobs of its configuration with the highest median drain rate."""
    best: dict[str, dict[str, Any]] = {}
    for system, configs in config_medians(runs).items():
        rated = [(e["median"], e["knobs"]) for e in configs.values() if e["median"]]
        if rated:
            best[system] = max(rated, key=lambda pair: pair[0])[1]
    return best


def configurations(path: Path) -> dict[str, Any] | None:
    """The sweep written at `path`, or None when there is none."""
    if not path.exists():
        return None
    return dict(json.loads(path.read_text()))
