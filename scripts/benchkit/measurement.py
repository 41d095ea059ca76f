"""How figures are taken: job records read back, per-process CPU and RSS from /proc, PostgreSQL
transactions, percentiles and the medians over repetitions.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchkit.settings import PQ_SYSTEMS

# -- measuring ----------------------------------------------------------------------


class Tracker:
    """Reads the run's record file incrementally."""

    def __init__(self, bench_dir: Path) -> None:
        import bench_jobs

        self._read = bench_jobs.read_records
        self.dir = bench_dir
        self.offset = 0
        self.records: list[Any] = []
        self.last_growth = time.monotonic()

    def poll(self) -> int:
        new, self.offset = self._read(self.dir, self.offset)
        if new:
            self.records.extend(new)
            self.last_growth = time.monotonic()
        return len(new)

    def of(self, kind: str, *, min_seq: int = 0) -> list[Any]:
        return [r for r in self.records if r.kind == kind and r.seq >= min_seq]


def proc_times(pid: int) -> tuple[float, float]:
    """(utime, stime) of `pid` alone (its children excluded), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def proc_cpu_s(pid: int) -> float:
    """utime + stime of `pid` alone (its children excluded), seconds."""
    return sum(proc_times(pid))


def proc_cpu_fine_s(pid: int) -> float:
    """CPU time of `pid`'s threads (children excluded), seconds, to the nanosecond: the
    sum of ``/proc/PID/task/*/schedstat`` run times (``proc_cpu_s`` counts 10 ms ticks,
    too coarse for a short window). Threads that ended are not counted (the supervisor's
    threads live as long as it does); falls back to ``proc_cpu_s``."""
    try:
        total = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with (
                contextlib.suppress(FileNotFoundError),
                open(f"/proc/{pid}/task/{task}/schedstat") as f,
            ):
                total += int(f.read().split()[0])
        if total:
            return total / 1e9
    except (OSError, ValueError, IndexError):
        pass
    return proc_cpu_s(pid)


def pg_transactions() -> int | None:
    """Transactions committed or rolled back in the benchmark database so far."""
    try:
        import psycopg
        from bench_peers import base

        with psycopg.connect(base.PG_DSN, autocommit=True) as conn:
            row = conn.execute(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                (base.PG_DATABASE,),
            ).fetchone()
            return int(row[0]) if row else None
    except Exception:
        return None


PRUNE_STATEMENTS = (
    "DELETE FROM jobs WHERE id IN",
    "DELETE FROM job_attempts",
    "DELETE FROM job_steps",
    "DELETE FROM job_deps",
)
"""How the statements of a supervisor's prune transaction (``job_prune`` and what it
entails) begin in ``pg_stat_activity``."""


class Activity:
    """``pg_stat_activity`` of one procqueue schema's connections (its ``application_name``),
    sampled by `tick` at most every `every` seconds."""

    def __init__(self, schema: str, every: float = 0.1) -> None:
        import psycopg
        from bench_peers import base

        self.schema = schema
        self.every = every
        self.conn = psycopg.connect(base.PG_DSN, autocommit=True)
        self.next_at = 0.0
        self.samples = 0
        self.claim_waits = 0
        """Samples in which a connection waited for the claim lock (an advisory lock)."""
        self.other_waits = 0
        """Samples in which a connection waited for another lock (a row's, a table's)."""
        self.prune_s: dict[tuple[int, Any], float] = {}
        """The longest each prune transaction (pid, start) was seen running, seconds."""

    def tick(self) -> None:
        """One sample, unless the last was less than `every` seconds ago."""
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = now + self.every
        rows = self.conn.execute(
            "SELECT pid, wait_event_type, wait_event, xact_start, "
            "extract(epoch FROM clock_timestamp() - xact_start)::float8, query "
            "FROM pg_stat_activity WHERE application_name = %s",
            (f"procqueue:{self.schema}",),
        ).fetchall()
        self.samples += 1
        waits = [r[2] for r in rows if r[1] == "Lock"]
        self.claim_waits += "advisory" in waits
        self.other_waits += any(w != "advisory" for w in waits)
        for pid, _, _, xact_start, running_s, query in rows:
            if xact_start is not None and query.lstrip().startswith(PRUNE_STATEMENTS):
                key = (pid, xact_start)
                self.prune_s[key] = max(self.prune_s.get(key, 0.0), running_s)

    def close(self) -> None:
        self.conn.close()


def proc_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class Waited:
    """How a wait for records ended."""

    def __init__(self, status: str, elapsed: float) -> None:
        self.status = status
        self.elapsed = elapsed


def wait_records(
    tracker: Tracker,
    done: Callable[[], bool],
    *,
    adapter: Any,
    timeout: float,
    stall_s: float,
    interval: float = 0.01,
    on_tick: Callable[[], None] | None = None,
) -> Waited:
    """Polls the record file until `done()`; ``ok``, ``timeout``, ``stalled`` or ``died``."""
    start = time.monotonic()
    give_up = start + timeout
    tracker.last_growth = start
    while True:
        tracker.poll()
        if done():
            return Waited("ok", time.monotonic() - start)
        now = time.monotonic()
        if on_tick is not None:
            on_tick()
        if not adapter.alive() and now - tracker.last_growth > 1.0:
            return Waited("died", now - start)
        if now - tracker.last_growth > stall_s:
            return Waited("stalled", now - start)
        if now > give_up:
            return Waited("timeout", now - start)
        time.sleep(interval)


# -- summaries --------------------------------------------------------------------------

METRICS = {
    "throughput_noop": [
        ("drain_jobs_s", "drain jobs/s", True),
        ("enqueue_jobs_s", "enqueue jobs/s", True),
        ("supervisor_cpu_us_per_job", "supervisor CPU µs/job", False),
        ("supervisor_user_us_per_job", "supervisor user CPU µs/job", False),
        ("supervisor_system_us_per_job", "supervisor system CPU µs/job", False),
        ("pg_transactions_per_job", "PostgreSQL transactions/job", False),
    ],
    "latency": [("p50_ms", "p50 ms", False), ("p99_ms", "p99 ms", False)],
    "cpu_heavy": [
        ("wall_over_ideal", "wall / ideal", False),
        ("wall_over_measured_work", "wall / measured work", False),
        ("mean_job_ms", "job ms", False),
        ("wall_over_job_cpu", "wall / (jobs' CPU time / slots)", False),
        ("mean_job_cpu_ms", "job CPU ms", False),
        ("gap_p50_ms", "gap between a worker's jobs, p50 ms", False),
        ("first_start_ms", "enqueue to first start ms", False),
    ],
    "crashy": [("drain_jobs_s", "drain jobs/s", True), ("completed", "completed", True)],
}


def stats_of(values: list[float | None]) -> dict[str, float] | None:
    vals = [v for v in values if v is not None and v == v]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def summarize(runs: list[dict[str, Any]], systems: list[str]) -> dict[str, Any]:
    """Median/min/max per system, workload and metric, and procqueue/peer ratios
    computed within each repetition."""
    summary: dict[str, Any] = {}
    for workload, metrics in METRICS.items():
        for system in systems:
            mine = [r for r in runs if r["workload"] == workload and r["system"] == system]
            if not mine:
                continue
            entry = summary.setdefault(workload, {}).setdefault(system, {})
            entry["statuses"] = [r.get("status") for r in mine]
            for key, _, _ in metrics:
                stats = stats_of([r.get(key) for r in mine if r.get("status") != "error"])
                if stats:
                    entry[key] = stats
            if workload == "crashy":
                entry["all_completed"] = [bool(r.get("all_completed")) for r in mine]
                entry["worker_alive"] = [bool(r.get("worker_alive")) for r in mine]
                entry["expected"] = mine[0].get("expected")
    ratios: dict[str, Any] = {}
    for pq_name in PQ_SYSTEMS:
        for workload, metrics in METRICS.items():
            for key, _, _ in metrics[:2]:
                for peer in systems:
                    if peer in PQ_SYSTEMS:
                        continue
                    per_rep = []
                    for r in runs:
                        if r["system"] != pq_name or r["workload"] != workload:
                            continue
                        other = next(
                            (
                                o
                                for o in runs
                                if o["system"] == peer
                                and o["workload"] == workload
                                and o["rep"] == r["rep"]
                            ),
                            None,
                        )
                        a, b = r.get(key), (other or {}).get(key)
                        if a is not None and b:
                            per_rep.append(a / b)
                    stats = stats_of(per_rep)
                    if stats:
                        ratios.setdefault(pq_name, {}).setdefault(workload, {}).setdefault(key, {})[
                            peer
                        ] = stats
    return {"per_system": summary, "ratios": ratios}
