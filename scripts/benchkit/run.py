"""A whole run: every system through every workload, interleaved over the repetitions, then the
extras; one result dictionary.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchkit.cluster import run_cluster
from benchkit.cost import run_cost
from benchkit.environment import git_revision, machine, user_argv, versions, wait_for_services
from benchkit.extras import (
    run_backlog,
    run_fresh_child,
    run_long_jobs,
    run_pending,
    run_profile,
    run_scaling,
    run_storm,
)
from benchkit.formatting import fmt
from benchkit.measurement import summarize
from benchkit.prune import run_prune
from benchkit.scale import run_scale
from benchkit.settings import (
    CPU_JOB_S,
    FRESH_CHILD_SYSTEMS,
    FULL,
    PQ_SYSTEMS,
    QUICK,
    SYSTEMS,
    WORKLOADS,
    Sizes,
    say,
)
from benchkit.sweep import config_medians, configurations, winners
from benchkit.targets import evaluate_targets
from benchkit.workloads import TWO_SLOT, adapter_classes, describe, run_one

TWO_SLOT_WORKLOADS = ("throughput_noop", "latency")
"""What a peer's extra 2-slot row runs."""
ON_TWO_SLOTS = ("cpu_heavy", "crashy")
"""The workloads defined for 2 slots: a peer runs them in its configuration with 2 workers."""


def plan(
    systems: list[str], classes: dict[str, Any], sweep: dict[str, Any] | None
) -> dict[str, dict[str, Any]]:
    """Each system of the run with its configuration: a peer in the one its sweep found
    fastest (its first, 2-slot one without a sweep), followed by a ``-2slot`` row in its
    2-slot configuration when that is another."""
    fastest = winners(sweep["runs"]) if sweep else {}
    out: dict[str, dict[str, Any]] = {}
    for name in systems:
        cls = classes[name]
        knobs = fastest.get(name, cls.configs[0])
        out[name] = {"cls": cls, "knobs": knobs, "workloads": cls.workloads}
        if name not in PQ_SYSTEMS and knobs != cls.configs[0]:
            out[name + TWO_SLOT] = {
                "cls": cls,
                "knobs": cls.configs[0],
                "workloads": TWO_SLOT_WORKLOADS,
            }
    return out


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    sizes = QUICK if args.quick else FULL
    if args.reps:
        sizes = Sizes(**{**asdict(sizes), "reps": args.reps})
    systems = [s for s in SYSTEMS if s in args.systems]
    workloads = [w for w in WORKLOADS if w in args.workloads]
    classes = adapter_classes(set(systems) | set(PQ_SYSTEMS))
    sweep = configurations(Path(args.sweep_json))
    planned = plan(systems, classes, sweep)
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)

    import bench_jobs

    n_iter = bench_jobs.calibrate(CPU_JOB_S)
    say(
        f"bench: {'quick' if args.quick else 'full'} run, {sizes.reps} repetition(s), "
        f"systems {', '.join(systems)}; "
        f"cpu job = {n_iter:,} iterations (~{CPU_JOB_S * 1000:.0f} ms)"
    )
    began = time.monotonic()
    runs: list[dict[str, Any]] = []
    for rep in range(1, sizes.reps + 1):
        for workload in workloads:
            names = list(planned)
            order = names[rep - 1 :] + names[: rep - 1]  # rotate: no fixed position
            for name in order:
                cls, knobs, only = (planned[name][k] for k in ("cls", "knobs", "workloads"))
                if only is not None and workload not in only:
                    continue
                if workload in ON_TWO_SLOTS:
                    knobs = cls.on_two_slots(knobs)
                r = run_one(name, cls, workload, rep, work_dir, sizes, n_iter, knobs)
                if r.get("status") == "error":
                    # e.g. the database restarted under us (this machine is shared): once more
                    say(
                        f"[rep {rep}/{sizes.reps}] {workload:<15} {name:<17} "
                        f"{describe(r)}; retrying"
                    )
                    wait_for_services()
                    first_error = r["error"]
                    r = run_one(name, cls, workload, rep, work_dir, sizes, n_iter, knobs)
                    r["retried_after"] = first_error
                runs.append(r)
                say(
                    f"[rep {rep}/{sizes.reps}] {workload:<15} {name:<17} {describe(r)}"
                    f"  ({r['seconds']:.1f} s)"
                )
    scaling: list[dict[str, Any]] = []
    backlog: list[dict[str, Any]] = []
    profiles: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    storms: list[dict[str, Any]] = []
    long_jobs: list[dict[str, Any]] = []
    fresh: list[dict[str, Any]] = []
    pq_systems = [s for s in PQ_SYSTEMS if s in systems]
    extras = args.extras
    costs: list[dict[str, Any]] = []
    scale: list[dict[str, Any]] = []
    prune: list[dict[str, Any]] = []
    cluster: list[dict[str, Any]] = []
    rows = args.scale_rows or (1_000_000 if sizes.reps > 1 else 20_000)
    if "scale" in extras and "procqueue-pg" in pq_systems:
        scale = run_scale("procqueue-pg", classes["procqueue-pg"], work_dir, sizes, rows)
        for r in scale:
            say(
                f"[scale] {r['case']:<9} {r['rows']:>9,} rows: "
                + (
                    f"drain {r['drain_jobs_s']:,.0f} jobs/s, supervisor "
                    f"{r['supervisor_cpu_us_per_job']:.0f} us/job, claim query "
                    f"{r['plan_ms']} ms, index-driven {r['index_driven']}"
                    if r.get("status") != "error"
                    else f"ERROR {r.get('error')}"
                )
            )
    if "prune" in extras and "procqueue-pg" in pq_systems:
        prune = run_prune("procqueue-pg", classes["procqueue-pg"], work_dir, sizes, rows)
        for r in prune:
            text = (
                f"window drain {fmt(r.get('drain_jobs_s'))} jobs/s, supervisor "
                f"{fmt(r.get('supervisor_cpu_us_per_job'))} us/job"
            )
            if r["rows"]:
                text += (
                    f"; {fmt(r.get('left_after_window'))} left when it had drained, pruned "
                    f"{fmt(r.get('pruned_rows_s'))} rows/s [{r.get('prune_status')}], longest "
                    f"prune transaction seen {fmt(r.get('longest_prune_ms_seen'), 1)} ms"
                )
            if r.get("status") == "error":
                text = f"ERROR {r.get('error')}"
            say(f"[prune] {r['rows']:>9,} rows to prune: {text}  ({r['seconds']:.1f} s)")
    if "cluster" in extras and "procqueue-pg" in pq_systems:
        cluster = run_cluster("procqueue-pg", classes["procqueue-pg"], work_dir, sizes)
        for r in cluster:
            text = (
                f"drain {fmt(r.get('drain_jobs_s'))} jobs/s, supervisors "
                f"{fmt(r.get('supervisors_cpu_us_per_job'))} us/job, {r.get('duplicates')} "
                f"run twice, a claim-lock waiter in "
                f"{fmt((r.get('claim_lock_wait_fraction') or 0) * 100, 1)}% of "
                f"{r.get('lock_samples')} samples"
            )
            if r.get("status") == "error":
                text = f"ERROR {r.get('error')}"
            say(
                f"[cluster] {r['supervisors']} supervisor(s) x {r['children']} children: "
                f"{text}  [{r.get('status')}] ({r['seconds']:.1f} s)"
            )
    if "cost" in extras:
        for name in pq_systems:
            r = run_cost(name, classes[name], work_dir, sizes)
            costs.append(r)
            say(f"[cost] {name:<17} {json.dumps(r, default=str)[:600]}")
    if "scaling" in extras:
        for name in pq_systems:
            for workers in sizes.scaling_workers:
                r = run_scaling(name, classes[name], workers, work_dir, sizes)
                scaling.append(r)
                text = (
                    f"drain {r['drain_jobs_s']:>8,.0f} jobs/s"
                    if "drain_jobs_s" in r
                    else f"ERROR {r.get('error')}"
                )
                say(f"[scaling] {name:<17} {workers} children  {text}  ({r['seconds']:.1f} s)")
    if "backlog" in extras:
        for name in pq_systems:
            r = run_backlog(name, classes[name], work_dir, sizes)
            backlog.append(r)
            if r.get("status") == "error":
                say(f"[backlog] {name:<17} ERROR {r.get('error')}")
            else:
                say(
                    f"[backlog] {name:<17} {r['completed']:,} of {r['pending_at_start']:,} pending "
                    f"drained at {r['drain_jobs_s']:,.0f} jobs/s (first window "
                    f"{r['first_window_jobs_s'] or 0:,.0f}, "
                    f"last {r['last_window_jobs_s'] or 0:,.0f}); "
                    f"RSS {r['rss_mb_first']:.1f} -> {r['rss_mb_last']:.1f} MB; "
                    f"supervisor {r['supervisor_cpu_us_per_job'] or 0:.0f} us/job  "
                    f"({r['seconds']:.1f} s)"
                )
    if "pending" in extras:
        for name in pq_systems:
            for per_child in sizes.pending_per_child:
                r = run_pending(name, classes[name], per_child, work_dir, sizes)
                pending.append(r)
                say(
                    f"[pending] {name:<17} {per_child:>5} per child  "
                    + (
                        f"supervisor {fmt(r.get('supervisor_cpu_us_per_job'))} us/job, RSS "
                        f"{fmt(r.get('rss_mb_idle'), 1)} idle, "
                        f"{fmt(r.get('rss_mb_pending'), 1)} pending, "
                        f"{fmt(r.get('supervisor_rss_mb_max'), 1)} max MB; "
                        f"drain {fmt(r.get('drain_jobs_s'))} jobs/s"
                        if r.get("status") != "error"
                        else f"ERROR {r.get('error')}"
                    )
                    + f"  ({r['seconds']:.1f} s)"
                )
    if "storm" in extras:
        for name in pq_systems:
            r = run_storm(name, classes[name], work_dir, sizes)
            storms.append(r)
            say(
                f"[storm] {name:<17} "
                + (
                    f"supervisor {fmt(r['storm_cpu_pct'], 1)}% of a core during the storm "
                    f"(idle {fmt(r['idle_cpu_pct'], 1)}%; "
                    f"{fmt(r['progress_calls_per_s'])} progress calls/s); other jobs' p50 "
                    f"{fmt(r['probe_p50_ms_during_storm'], 2)} ms vs "
                    f"{fmt(r['probe_p50_ms_without_storm'], 2)} ms without"
                    if r.get("status") != "error"
                    else f"ERROR {r.get('error')}"
                )
                + f"  ({r['seconds']:.1f} s)"
            )
    if "long_jobs" in extras:
        for name in pq_systems:
            r = run_long_jobs(name, classes[name], work_dir, sizes)
            long_jobs.append(r)
            say(
                f"[long_jobs] {name:<17} "
                + (
                    f"{r['completed']}/{r['jobs']} x {r['job_s']:g} s on {r['children']} "
                    f"children: wall {r['wall_s']:.2f} s vs ideal {r['ideal_s']:.2f} s; "
                    f"overhead {fmt(r.get('overhead_per_job_ms'), 1)} ms/job "
                    f"({fmt((r.get('overhead_fraction') or 0) * 100, 2)}% of a job)"
                    if r.get("status") != "error"
                    else f"ERROR {r.get('error')}"
                )
                + f"  [{r.get('status')}] ({r['seconds']:.1f} s)"
            )
    if "fresh_child" in extras:
        for name in [s for s in FRESH_CHILD_SYSTEMS if s in systems]:
            r = run_fresh_child(name, classes[name], work_dir, sizes)
            fresh.append(r)
            say(
                f"[fresh_child] {name:<17} --max-jobs-per-child 1: "
                + (
                    f"drain {fmt(r.get('drain_jobs_s'))} jobs/s over {r.get('completed')} "
                    f"jobs, {r.get('child_pids')} child pids"
                    if r.get("status") != "error"
                    else f"ERROR {r.get('error')}"
                )
                + f"  [{r.get('status')}] ({r['seconds']:.1f} s)"
            )
    if "profile" in extras:
        for name in pq_systems:
            p = run_profile(name, classes[name], work_dir, sizes)
            profiles.append(p)
            if p.get("status") == "error":
                say(f"[profile] {name:<17} ERROR {p.get('error')}")
            else:
                head = ", ".join(f"{k} {v}%" for k, v in p["self_top"][:3])
                say(f"[profile] {name:<17} {p['samples']} samples; top self: {head}")
    result: dict[str, Any] = {
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python scripts/bench.py", *user_argv()]),
        "argv": sys.argv[1:],
        "mode": "quick" if args.quick else "full",
        "sizes": asdict(sizes),
        "cpu_job_iterations": n_iter,
        "revision": git_revision(args),
        "versions": versions(),
        "machine": machine(),
        "systems": {
            name: {
                "title": p["cls"].title,
                "store": p["cls"].store,
                "batch_api": p["cls"].batch_api,
                "notes": p["cls"].notes,
                "knobs": p["knobs"],
                "config": p["cls"].label(p["knobs"]),
                "config_two_slots": p["cls"].label(p["cls"].on_two_slots(p["knobs"])),
            }
            for name, p in planned.items()
        },
        "sweep": sweep
        and {
            "generated": sweep["generated"],
            "elapsed_s": sweep["elapsed_s"],
            "noop_jobs": sweep["sizes"]["noop_jobs"],
            "reps": sweep["sizes"]["reps"],
            "configs": config_medians(sweep["runs"]),
            "winners": winners(sweep["runs"]),
        },
        "runs": runs,
        "cost": costs,
        "scale": scale,
        "prune": prune,
        "cluster": cluster,
        "scaling": scaling,
        "backlog": backlog,
        "pending": pending,
        "storm": storms,
        "long_jobs": long_jobs,
        "fresh_child": fresh,
        "profiles": profiles,
        "elapsed_s": round(time.monotonic() - began, 1),
    }
    result["summary"] = summarize(runs, list(planned))
    result["targets"] = evaluate_targets(result)
    return result
