"""Several supervisors on one PostgreSQL schema (``--extras cluster``): a drain of
`Sizes.cluster_jobs` no-op jobs by 1 supervisor with 4 children, then by 4 supervisors with 1
child each, so the same 4 children run the jobs in both.

Each configuration gets a fresh schema. Gate jobs cannot hold one child of each supervisor
(a supervisor claims jobs ahead for its children: one may run a gate and hold another), so
no-op jobs are run until every child has run one, the supervisors are stopped (SIGSTOP)
while the jobs are enqueued, and the drain counts from SIGCONT to the last job's end, as
``scale`` does. Reported per configuration: the drain rate, the supervisors' CPU (utime+stime
of each, children excluded, summed) per job, the jobs that ran twice, and how often a
connection of the schema waited for the claim lock (an advisory lock every claim takes
first), from ``pg_stat_activity`` sampled 10 times a second during the drain.
"""

from __future__ import annotations

import signal
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from benchkit.measurement import Activity, Tracker, proc_cpu_s, wait_records
from benchkit.settings import Sizes
from benchkit.workloads import one_line, running

CONFIGS = ((1, 4), (4, 1))
"""(supervisors, children each): 4 children in all in both."""
WARM_BATCH = 50


def run_cluster(name: str, cls: Any, work_dir: Path, sizes: Sizes) -> list[dict[str, Any]]:
    """Both configurations in turn; the second's drain rate also as a ratio of the first's."""
    runs = [
        run_cluster_case(name, cls, work_dir, sizes, supervisors, children)
        for supervisors, children in CONFIGS
    ]
    one, many = runs
    if one.get("drain_jobs_s") and many.get("drain_jobs_s"):
        many["drain_vs_one"] = many["drain_jobs_s"] / one["drain_jobs_s"]
    return runs


def _warm_every_child(adapter: Any, tracker: Tracker, children: int) -> None:
    """Runs no-op jobs (negative seqs) in batches until `children` distinct children ran
    one and every job enqueued ran: each supervisor is up, its children have imported the
    jobs, and nothing is left to claim."""
    enqueued = 0
    give_up = time.monotonic() + 60
    while True:
        ran = tracker.of("noop", min_seq=-(10**9))
        if len({r.pid for r in ran}) >= children and len(ran) >= enqueued:
            return
        if time.monotonic() > give_up or not adapter.alive():
            raise RuntimeError(f"only {len({r.pid for r in ran})} of {children} children ran")
        if len(ran) >= enqueued:
            adapter.enqueue_batch("noop", [{"seq": -1 - enqueued - i} for i in range(WARM_BATCH)])
            enqueued += WARM_BATCH
        time.sleep(0.05)
        tracker.poll()


def run_cluster_case(
    name: str, cls: Any, work_dir: Path, sizes: Sizes, supervisors: int, children: int
) -> dict[str, Any]:
    """One configuration: `supervisors` supervisors with `children` children each."""
    n = sizes.cluster_jobs
    result: dict[str, Any] = {
        "system": name,
        "supervisors": supervisors,
        "children": children,
        "jobs": n,
    }
    started = time.monotonic()
    try:
        with running(
            cls,
            work_dir,
            f"{name}-cluster-{supervisors}x{children}",
            slots=children,
            supervisors=supervisors,
        ) as adapter:
            tracker = Tracker(adapter.bench_dir)
            _warm_every_child(adapter, tracker, supervisors * children)
            time.sleep(0.3)  # the last outcomes are written
            with closing(Activity(adapter.schema)) as activity:
                result.update(_drain(adapter, tracker, sizes, n, activity))
    except Exception as exc:
        result.update(status="error", error=one_line(exc))
    result["seconds"] = time.monotonic() - started
    return result


def _drain(
    adapter: Any, tracker: Tracker, sizes: Sizes, n: int, activity: Activity
) -> dict[str, Any]:
    """`n` no-op jobs enqueued while every supervisor is stopped, drained from SIGCONT."""
    procs = adapter.procs
    for proc in procs:
        proc.send_signal(signal.SIGSTOP)
    try:
        adapter.enqueue_batch("noop", [{"seq": i} for i in range(n)])
        cpu0 = sum(proc_cpu_s(p.pid) for p in procs)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGCONT)
    resumed = time.monotonic()
    # distinct seqs: a job run twice must not end the wait before another ran
    waited = wait_records(
        tracker,
        lambda: len({r.seq for r in tracker.of("noop")}) >= n,
        adapter=adapter,
        timeout=sizes.drain_timeout_s * 8,
        stall_s=sizes.stall_s,
        on_tick=activity.tick,
    )
    cpu = sum(proc_cpu_s(p.pid) for p in procs) - cpu0 if adapter.alive() else None
    done = tracker.of("noop")
    seqs = [r.seq for r in done]
    last = max((r.end for r in done), default=resumed)
    return {
        "status": waited.status,
        "completed": len(set(seqs)),
        "duplicates": len(seqs) - len(set(seqs)),
        "drain_jobs_s": len(set(seqs)) / max(last - resumed, 1e-9),
        "supervisors_cpu_us_per_job": None if cpu is None else cpu / max(1, len(seqs)) * 1e6,
        "lock_samples": activity.samples,
        "claim_lock_wait_fraction": activity.claim_waits / max(1, activity.samples),
        "other_lock_wait_fraction": activity.other_waits / max(1, activity.samples),
        "child_pids": len({r.pid for r in done}),
    }
