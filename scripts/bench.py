#!/usr/bin/env python3
"""procqueue against its peers, side by side in one run.

    python scripts/bench.py            # full run: 3 interleaved repetitions (~25 min)
    python scripts/bench.py --quick    # 1 repetition, smaller counts (< 5 min)

    # a subset: two systems, one shared workload, two procqueue-only parts
    python scripts/bench.py --quick --systems procqueue-sqlite,huey-redis \
        --workloads throughput_noop --extras storm,pending --json /tmp/b.json \
        --md /tmp/b.md --img-dir /tmp/b-img

Systems: procqueue on PostgreSQL and on SQLite (a ``procqueue supervise``
process with 2 children), pgqueuer in one process (its fastest set-up) and in
two (``pgqueuer-2p``: no-op drain and latency only), procrastinate, Celery,
RQ, Huey on Redis and Huey on PostgreSQL (its SQL storage). Shared workloads,
each run for every system in every repetition: ``throughput_noop`` (gate-held
no-op drain; procqueue's supervisor CPU per job), ``latency`` (enqueue → start
into an idle system), ``cpu_heavy`` (40 x 50 ms on 2 slots, against nominal
time and the jobs' own CPU time) and ``crashy`` (2% segfaults).

procqueue-only parts (``--extras``), once each after the repetitions:
``scaling`` (1-8 children), ``backlog`` (100,000 pending at start),
``pending`` (10, 100, 1,000 jobs pending per child: supervisor CPU per job and
RSS), ``storm`` (a job calling ``cx.progress()`` in a tight loop: the
supervisor's CPU as % of a core and other jobs' latency meanwhile),
``long_jobs`` (2,000 jobs of 1 s on 8 children: overhead per job as a fraction
of its time; 80 jobs in --quick), ``fresh_child`` (no-op drain with
``--max-jobs-per-child 1``, SQLite) and ``profile`` (py-spy on the supervisor).

Durations on the 2-core reference machine: the repetitions ~13 min, the
1-second jobs ~9 min (2 x 250 s, the bulk of the extras), the other extras
~3 min: ~25 min in all; ``--quick`` ~4-5 min.

Creates a virtual environment of its own (``--venv``, default
``/tmp/procqueue-bench-venv``), never touching the project's, and installs
procqueue (editable, from this checkout), procrastinate, pgqueuer, Celery,
RQ, Huey (with peewee and psycopg2 for its SQL storage), matplotlib and
py-spy into it; then re-runs itself with that interpreter, so every system
runs in one interpreter environment. Starts PostgreSQL and Redis if they are
down (and says so).

Every system runs the job bodies of ``scripts/bench_jobs.py``; each job
appends a 48-byte record (kind, seq, pid, start, end, cpu) to one file with one
O_APPEND write, and all figures come from those records. Writes
docs/benchmarks.json, docs/benchmarks.md and docs/img/bench-*.png.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
DEFAULT_VENV = Path("/tmp/procqueue-bench-venv")
PEER_REQUIREMENTS = [
    "procrastinate",
    "pgqueuer[asyncpg]",
    "celery[redis]",
    "rq",
    "huey",
    "peewee",
    "psycopg2-binary",
    "redis",
    "matplotlib>=3.8",
    "py-spy",
]
PG_START = "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
REDIS_START = (
    'redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" '
    "--appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log"
)

WORKLOADS = ("throughput_noop", "latency", "cpu_heavy", "crashy")
SYSTEMS = (
    "procqueue-pg",
    "procqueue-sqlite",
    "pgqueuer",
    "pgqueuer-2p",
    "procrastinate",
    "celery",
    "rq",
    "huey-redis",
    "huey-pg",
)
PQ_SYSTEMS = ("procqueue-pg", "procqueue-sqlite")
EXTRAS = ("scaling", "backlog", "pending", "storm", "long_jobs", "fresh_child", "profile")
"""The procqueue-only parts, run once each after the repetitions (``--extras``)."""
FRESH_CHILD_SYSTEMS = ("procqueue-sqlite",)
CPU_JOB_S = 0.050
CRASH_EVERY = 50  # 2 %


@dataclass(frozen=True)
class Sizes:
    reps: int
    noop_jobs: int
    latency_jobs: int
    latency_budget_s: float
    cpu_jobs: int
    crashy_jobs: int
    drain_timeout_s: float
    stall_s: float
    scaling_workers: tuple[int, ...]
    scaling_jobs: int
    backlog_jobs: int
    backlog_budget_s: float
    backlog_budget_sqlite_s: float
    profile_jobs: int
    storm_jobs: int
    """progress-storm jobs per phase (each ~storm_s), one after the other"""
    storm_s: float
    long_jobs: int
    """1-second jobs on long_children children"""
    long_children: int
    long_job_s: float
    pending_per_child: tuple[int, ...]
    fresh_child_jobs: int
    """no-op drain with --max-jobs-per-child 1"""
    count_pg_transactions: bool = True
    """pg_stat_database before/after each PostgreSQL no-op drain (costs 2.4 s a run)."""


FULL = Sizes(
    reps=3,
    noop_jobs=5000,
    latency_jobs=200,
    latency_budget_s=4.0,
    cpu_jobs=40,
    crashy_jobs=2000,
    drain_timeout_s=15.0,
    stall_s=8.0,
    scaling_workers=(1, 2, 4, 8),
    scaling_jobs=2000,
    backlog_jobs=100_000,
    backlog_budget_s=20.0,
    backlog_budget_sqlite_s=60.0,
    profile_jobs=2000,
    storm_jobs=3,
    storm_s=1.0,
    long_jobs=2000,
    long_children=8,
    long_job_s=1.0,
    pending_per_child=(10, 100, 1000),
    fresh_child_jobs=300,
)
QUICK = Sizes(
    reps=1,
    noop_jobs=1000,
    latency_jobs=30,
    latency_budget_s=1.5,
    cpu_jobs=20,
    crashy_jobs=300,
    drain_timeout_s=6.0,
    stall_s=5.0,
    scaling_workers=(1, 2, 4, 8),
    scaling_jobs=300,
    backlog_jobs=10_000,
    backlog_budget_s=5.0,
    backlog_budget_sqlite_s=10.0,
    profile_jobs=400,
    storm_jobs=2,
    storm_s=1.0,
    long_jobs=80,
    long_children=8,
    long_job_s=1.0,
    pending_per_child=(10, 100, 1000),
    fresh_child_jobs=100,
    count_pg_transactions=False,
)


def say(text: str) -> None:
    print(text, flush=True)


# -- bootstrap: services and the benchmark's own virtual environment ----------------


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def ensure_services() -> None:
    """Starts PostgreSQL and Redis when nothing listens on their ports."""
    for name, port, command, prepare in (
        ("PostgreSQL", 5432, PG_START, None),
        ("Redis", 6379, REDIS_START, ("/var/lib/redis", "/var/log/redis")),
    ):
        if _port_open(port):
            continue
        say(f"{name} is not running on 127.0.0.1:{port}: starting it: {command}")
        for folder in prepare or ():
            Path(folder).mkdir(parents=True, exist_ok=True)
        subprocess.run(command, shell=True, check=True)
        give_up = time.monotonic() + 30
        while not _port_open(port):
            if time.monotonic() > give_up:
                sys.exit(f"bench: {name} did not come up on port {port}")
            time.sleep(0.2)
        say(f"{name} started")


def wait_for_services(timeout: float = 60.0) -> None:
    """Waits (without starting anything) until PostgreSQL and Redis accept connections."""
    give_up = time.monotonic() + timeout
    while not (_port_open(5432) and _port_open(6379)) and time.monotonic() < give_up:
        time.sleep(0.5)
    time.sleep(1.0)


def ensure_venv(venv: Path, src: Path) -> Path:
    """The benchmark venv's python, creating the venv and installing into it if needed
    (procqueue editable from `src`)."""
    python = venv / "bin" / "python"
    # reinstall when procqueue's own dependencies change, too
    pyproject = (src / "pyproject.toml").read_text()
    wanted = "\n".join([f"-e {src}", *PEER_REQUIREMENTS, pyproject]) + "\n"
    stamp = venv / ".bench-requirements"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        say(f"creating the benchmark virtual environment {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    say(f"installing procqueue (editable) and the peers into {venv} ...")
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-e", str(src), *PEER_REQUIREMENTS], check=True)
    stamp.write_text(wanted)
    return python


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


# -- one run: a system, a workload, a clean state ---------------------------------------


def adapter_classes() -> dict[str, Any]:
    from bench_peers import (
        celery_peer,
        huey_peer,
        huey_pg_peer,
        pgqueuer_peer,
        pq,
        procrastinate_peer,
        rq_peer,
    )

    return {
        "procqueue-pg": pq.ProcqueuePg,
        "procqueue-sqlite": pq.ProcqueueSqlite,
        "pgqueuer": pgqueuer_peer.PgqueuerAdapter,
        "pgqueuer-2p": pgqueuer_peer.Pgqueuer2pAdapter,
        "procrastinate": procrastinate_peer.ProcrastinateAdapter,
        "celery": celery_peer.CeleryAdapter,
        "rq": rq_peer.RqAdapter,
        "huey-redis": huey_peer.HueyAdapter,
        "huey-pg": huey_pg_peer.HueyPgAdapter,
    }


@contextlib.contextmanager
def running(
    cls: Any, work_dir: Path, label: str, *, slots: int = 2, **options: Any
) -> Iterator[Any]:
    """A started system with a clean state; stopped and cleaned afterwards.
    `options` go to the adapter (e.g. procqueue's ``supervise_args``)."""
    bench_dir = work_dir / label
    shutil.rmtree(bench_dir, ignore_errors=True)
    bench_dir.mkdir(parents=True)
    os.environ["BENCH_DIR"] = str(bench_dir)
    adapter = cls(bench_dir=bench_dir, slots=slots, **options)
    adapter.setup()
    try:
        adapter.start()
        yield adapter
    finally:
        adapter.close_client()
        adapter.stop()
        with contextlib.suppress(Exception):
            adapter.teardown()
    shutil.rmtree(bench_dir, ignore_errors=True)  # kept only when the run failed


def warm_up(adapter: Any, tracker: Tracker, sizes: Sizes) -> None:
    """One no-op per slot, waited for: the workers are up and have imported the jobs."""
    for i in range(adapter.slots):
        adapter.enqueue("noop", {"seq": -1 - i})
    waited = wait_records(
        tracker,
        lambda: len(tracker.of("noop", min_seq=-(10**9))) >= adapter.slots,
        adapter=adapter,
        timeout=60,
        stall_s=60,
    )
    if waited.status != "ok":
        raise RuntimeError(
            f"workers not ready ({waited.status}): see {adapter.bench_dir}/worker.log"
        )


def hold_slots(adapter: Any, tracker: Tracker) -> None:
    """Fills every worker slot with a gate job and waits until all of them run."""
    for i in range(adapter.slots):
        adapter.enqueue("gate", {"seq": i})
    waited = wait_records(
        tracker,
        lambda: len(tracker.of("gatein")) >= adapter.slots,
        adapter=adapter,
        timeout=30,
        stall_s=30,
    )
    if waited.status != "ok":
        raise RuntimeError(f"gate jobs did not start ({waited.status})")


def open_gate(adapter: Any) -> float:
    import bench_jobs

    opened = time.monotonic()
    (adapter.bench_dir / bench_jobs.GATE_FILE).touch()
    return opened


def drain(
    adapter: Any,
    tracker: Tracker,
    sizes: Sizes,
    kind: str,
    jobs: list[dict[str, Any]],
    expected: int,
    *,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Gate-held drain: slots held, `jobs` enqueued (timed), gate opened, records awaited.
    The supervisor's (procqueue's) CPU and RSS are measured across the drain."""
    hold_slots(adapter, tracker)
    t0 = time.monotonic()
    adapter.enqueue_batch(kind, jobs)
    enqueue_s = time.monotonic() - t0
    pid = adapter.main_pid()
    count_xacts = sizes.count_pg_transactions and adapter.store == "postgres" and kind == "noop"
    if count_xacts:
        time.sleep(1.2)  # backends report their statistics about once a second
    xacts0 = pg_transactions() if count_xacts else None
    times0 = proc_times(pid) if pid else None
    fine0 = proc_cpu_fine_s(pid) if pid else None
    rss0 = proc_rss_mb(pid) if pid else None
    rss_max = rss0
    next_rss = 0.0

    def sample_rss() -> None:
        nonlocal rss_max, next_rss
        now = time.monotonic()
        if pid and now >= next_rss and adapter.alive():
            next_rss = now + 0.1
            with contextlib.suppress(OSError):
                rss_max = max(rss_max or 0.0, proc_rss_mb(pid))

    opened = open_gate(adapter)
    waited = wait_records(
        tracker,
        lambda: len(tracker.of(kind)) >= expected,
        adapter=adapter,
        timeout=timeout or sizes.drain_timeout_s,
        stall_s=sizes.stall_s,
        on_tick=sample_rss,
    )
    times1 = proc_times(pid) if pid and adapter.alive() else None
    fine1 = proc_cpu_fine_s(pid) if pid and adapter.alive() else None
    rss1 = proc_rss_mb(pid) if pid and adapter.alive() else None
    done = tracker.of(kind)
    seqs = [r.seq for r in done]
    last_end = max((r.end for r in done), default=opened)
    out: dict[str, Any] = {
        "status": waited.status,
        "enqueued": len(jobs),
        "enqueue_jobs_s": len(jobs) / enqueue_s if enqueue_s > 0 else None,
        "completed": len(set(seqs)),
        "expected": expected,
        "duplicates": len(seqs) - len(set(seqs)),
        "drain_s": last_end - opened,
        "drain_jobs_s": (len(jobs) if waited.status == "ok" else len(done))
        / max(last_end - opened, 1e-9),
        "worker_alive": adapter.alive(),
    }
    ran = max(1, len(done))  # the jobs the CPU and transactions were spent on
    if times0 is not None and times1 is not None:
        user, system = times1[0] - times0[0], times1[1] - times0[1]
        out["supervisor_cpu_us_per_job"] = (user + system) / ran * 1e6
        out["supervisor_user_us_per_job"] = user / ran * 1e6
        out["supervisor_system_us_per_job"] = system / ran * 1e6
        if fine0 is not None and fine1 is not None:
            out["supervisor_cpu_us_per_job_fine"] = (fine1 - fine0) / ran * 1e6
        out["supervisor_rss_mb"] = [rss0, rss1]
        out["supervisor_rss_mb_max"] = max(rss_max or 0.0, rss1 or 0.0)
    if xacts0 is not None:
        time.sleep(1.2)
        xacts1 = pg_transactions()
        if xacts1 is not None:
            # includes the few of the harness itself and of the gate jobs' outcomes
            out["pg_transactions_per_job"] = (xacts1 - xacts0) / ran
    return out


def w_throughput(adapter: Any, tracker: Tracker, sizes: Sizes) -> dict[str, Any]:
    n = sizes.noop_jobs
    return drain(adapter, tracker, sizes, "noop", [{"seq": i} for i in range(n)], n)


def w_latency(adapter: Any, tracker: Tracker, sizes: Sizes) -> dict[str, Any]:
    rng = random.Random(7)
    latencies: list[float] = []
    enqueue_calls: list[float] = []
    timeouts = 0
    budget_end = time.monotonic() + sizes.latency_budget_s
    for seq in range(sizes.latency_jobs):
        if time.monotonic() > budget_end:
            break
        time.sleep(rng.uniform(0.010, 0.030))  # let the system go idle
        t0 = time.monotonic()
        adapter.enqueue("noop", {"seq": seq})
        enqueue_calls.append(time.monotonic() - t0)
        found = None
        give_up = time.monotonic() + 10
        while found is None and time.monotonic() < give_up:
            if tracker.poll():
                found = next(
                    (r for r in tracker.records if r.seq == seq and r.kind == "noop"), None
                )
            if found is None:
                time.sleep(0.0003)
        if found is None:
            timeouts += 1
            if not adapter.alive():
                break
            continue
        latencies.append(found.start - t0)
        tracker.records.clear()
    ms = [x * 1000 for x in latencies]
    return {
        "status": "ok" if latencies and not timeouts else ("timeout" if timeouts else "failed"),
        "n": len(ms),
        "planned": sizes.latency_jobs,
        "timeouts": timeouts,
        "p50_ms": percentile(ms, 0.50),
        "p99_ms": percentile(ms, 0.99),
        "mean_ms": statistics.fmean(ms) if ms else None,
        "max_ms": max(ms, default=None),
        "enqueue_call_p50_ms": percentile([x * 1000 for x in enqueue_calls], 0.5),
    }


def w_cpu_heavy(adapter: Any, tracker: Tracker, sizes: Sizes, n_iter: int) -> dict[str, Any]:
    n = sizes.cpu_jobs
    t0 = time.monotonic()
    adapter.enqueue_batch("cpu", [{"seq": i, "n": n_iter} for i in range(n)])
    waited = wait_records(
        tracker,
        lambda: len(tracker.of("cpu")) >= n,
        adapter=adapter,
        timeout=max(30.0, n * CPU_JOB_S * 4),
        stall_s=sizes.stall_s,
    )
    done = tracker.of("cpu")
    wall = max((r.end for r in done), default=t0) - t0
    ideal = n * CPU_JOB_S / adapter.slots
    busy = sum(r.end - r.start for r in done)
    job_cpu = sum(r.cpu for r in done)  # the jobs' own thread CPU time
    gaps: list[float] = []  # a worker's idle time between one job's end and its next start
    by_pid: dict[int, list[Any]] = {}
    for r in done:
        by_pid.setdefault(r.pid, []).append(r)
    for runs in by_pid.values():
        runs.sort(key=lambda r: r.start)
        pid_gaps = [b.start - a.end for a, b in itertools.pairwise(runs)]
        if all(g >= 0 for g in pid_gaps):  # a process running jobs concurrently has no gaps
            gaps.extend(pid_gaps)
    return {
        "gap_p50_ms": percentile([g * 1000 for g in gaps], 0.5) if gaps else None,
        "first_start_ms": (min(r.start for r in done) - t0) * 1000 if done else None,
        "status": waited.status,
        "completed": len(done),
        "expected": n,
        "wall_s": wall,
        "ideal_s": ideal,
        "wall_over_ideal": wall / ideal if waited.status == "ok" else None,
        "mean_job_ms": statistics.fmean((r.end - r.start) * 1000 for r in done) if done else None,
        # against the jobs' own measured durations: how well the slots were kept busy
        "wall_over_measured_work": wall / (busy / adapter.slots)
        if waited.status == "ok" and busy
        else None,
        # against the CPU time the jobs' threads used (the issue's definition)
        "wall_over_job_cpu": wall / (job_cpu / adapter.slots)
        if waited.status == "ok" and job_cpu
        else None,
        "mean_job_cpu_ms": job_cpu / len(done) * 1000 if done else None,
        "worker_pids": len({r.pid for r in done}),
    }


def w_crashy(adapter: Any, tracker: Tracker, sizes: Sizes) -> dict[str, Any]:
    n = sizes.crashy_jobs
    jobs = [{"seq": i, "crash": i % CRASH_EVERY == CRASH_EVERY // 2} for i in range(n)]
    expected = sum(1 for j in jobs if not j["crash"])
    out = drain(adapter, tracker, sizes, "crashy", jobs, expected)
    out["crashing"] = n - expected
    out["all_completed"] = out["completed"] == expected
    if out["status"] in ("died", "stalled"):  # a rate up to the point it stopped would flatter it
        out["partial_drain_jobs_s"] = out.pop("drain_jobs_s")
        out["drain_jobs_s"] = None
    out.pop("supervisor_cpu_us_per_job", None)
    if hasattr(adapter, "failed_count") and adapter.alive():
        with contextlib.suppress(Exception):
            time.sleep(0.3)  # the last outcomes are written after the records
            out["failed_recorded"] = adapter.failed_count()
    return out


def run_one(
    name: str, cls: Any, workload: str, rep: int, work_dir: Path, sizes: Sizes, n_iter: int
) -> dict[str, Any]:
    started = time.monotonic()
    result: dict[str, Any] = {
        "system": name,
        "workload": workload,
        "rep": rep,
        "loadavg_1m_before": round(os.getloadavg()[0], 2),
    }
    try:
        with running(cls, work_dir, f"{name}-{workload}-{rep}") as adapter:
            tracker = Tracker(adapter.bench_dir)
            warm_up(adapter, tracker, sizes)
            result["ready_s"] = round(time.monotonic() - started, 2)
            if workload == "throughput_noop":
                metrics = w_throughput(adapter, tracker, sizes)
            elif workload == "latency":
                metrics = w_latency(adapter, tracker, sizes)
            elif workload == "cpu_heavy":
                metrics = w_cpu_heavy(adapter, tracker, sizes, n_iter)
            else:
                metrics = w_crashy(adapter, tracker, sizes)
            stopping = time.monotonic()
        result["stop_s"] = round(time.monotonic() - stopping, 2)
        result.update(metrics)
    except Exception as exc:
        result.update(status="error", error=_one_line(exc))
    result["seconds"] = time.monotonic() - started
    return result


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def describe(r: dict[str, Any]) -> str:
    w = r["workload"]
    if r.get("status") == "error":
        return f"ERROR {r['error']}"
    status = "" if r.get("status") == "ok" else f"  [{r.get('status')}]"
    if w == "throughput_noop":
        text = (
            f"drain {r['drain_jobs_s']:>8,.0f} jobs/s  enqueue {r['enqueue_jobs_s']:>8,.0f} jobs/s"
        )
        if "supervisor_cpu_us_per_job" in r:
            text += f"  supervisor {r['supervisor_cpu_us_per_job']:.0f} us/job"
    elif w == "latency":
        text = f"p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms  (n={r['n']})"
    elif w == "cpu_heavy":
        ratio = r["wall_over_ideal"]
        text = (
            f"wall {r['wall_s']:.2f} s = {ratio:.3f} x ideal"
            if ratio
            else f"wall {r['wall_s']:.2f} s"
        )
        text += f"  (job {r['mean_job_ms']:.0f} ms)" if r.get("mean_job_ms") else ""
    elif w == "crashy":
        rate = r["drain_jobs_s"] or r.get("partial_drain_jobs_s") or 0.0
        text = f"drain {rate:>8,.0f} jobs/s  completed {r['completed']}/{r['expected']}" + (
            "" if r["worker_alive"] else "  worker process gone"
        )
    else:
        text = json.dumps(r)
    return text + status


# -- procqueue alone: children scaling, a 100k backlog, a profile --------------------------


def run_scaling(name: str, cls: Any, workers: int, work_dir: Path, sizes: Sizes) -> dict[str, Any]:
    result: dict[str, Any] = {"system": name, "workers": workers}
    started = time.monotonic()
    try:
        with running(cls, work_dir, f"{name}-scaling-{workers}", slots=workers) as adapter:
            tracker = Tracker(adapter.bench_dir)
            warm_up(adapter, tracker, sizes)
            n = sizes.scaling_jobs
            result.update(drain(adapter, tracker, sizes, "noop", [{"seq": i} for i in range(n)], n))
    except Exception as exc:
        result.update(status="error", error=_one_line(exc))
    result["seconds"] = time.monotonic() - started
    return result


def run_backlog(name: str, cls: Any, work_dir: Path, sizes: Sizes) -> dict[str, Any]:
    """`backlog_jobs` pending before the supervisor starts; drained (or for a time
    budget) while sampling the supervisor's RSS and CPU."""
    n = sizes.backlog_jobs
    result: dict[str, Any] = {"system": name, "pending_at_start": n}
    started = time.monotonic()
    bench_dir = work_dir / f"{name}-backlog"
    shutil.rmtree(bench_dir, ignore_errors=True)
    bench_dir.mkdir(parents=True)
    os.environ["BENCH_DIR"] = str(bench_dir)
    adapter = cls(bench_dir=bench_dir, slots=2)
    try:
        adapter.setup()
        t0 = time.monotonic()
        chunk = 10_000
        for i in range(0, n, chunk):
            adapter.enqueue_batch("noop", [{"seq": s} for s in range(i, min(n, i + chunk))])
        result["enqueue_jobs_s"] = n / (time.monotonic() - t0)
        tracker = Tracker(bench_dir)
        adapter.start()
        pid = adapter.main_pid()
        samples: list[tuple[float, int, float, float]] = []
        next_sample = 0.0

        def sample() -> None:
            nonlocal next_sample
            now = time.monotonic()
            if now >= next_sample and adapter.alive():
                next_sample = now + 0.5
                samples.append((now, len(tracker.records), proc_rss_mb(pid), proc_cpu_s(pid)))

        first = wait_records(
            tracker, lambda: len(tracker.records) > 0, adapter=adapter, timeout=60, stall_s=60
        )
        if first.status != "ok":
            raise RuntimeError(f"no job ran ({first.status})")
        sample()
        waited = wait_records(
            tracker,
            lambda: len(tracker.records) >= n,
            adapter=adapter,
            timeout=sizes.backlog_budget_sqlite_s
            if cls.store == "sqlite"
            else sizes.backlog_budget_s,
            stall_s=sizes.stall_s,
            interval=0.05,
            on_tick=sample,
        )
        sample()
        ends = sorted(r.end for r in tracker.records)
        done = len(ends)
        windows = 10 if done >= 1000 else 1
        size = done // windows
        rates = []
        for k in range(windows):
            lo, hi = k * size, (k + 1) * size - 1
            span = ends[hi] - ends[lo] if hi > lo else float("nan")
            rates.append((hi - lo) / span if span > 0 else None)
        rss = [s[2] for s in samples]
        at10 = next((s[2] for s in samples if s[1] >= done * 0.1), rss[0])
        cpu_jobs = samples[-1][1] - samples[0][1]
        result.update(
            status="ok" if waited.status == "ok" else f"budget ({waited.status})",
            completed=done,
            drain_jobs_s=(done - 1) / (ends[-1] - ends[0]) if done > 1 else None,
            window_jobs_s=rates,
            first_window_jobs_s=rates[0],
            last_window_jobs_s=rates[-1],
            rss_mb_first=rss[0],
            rss_mb_at_10pct=at10,
            rss_mb_last=rss[-1],
            rss_mb_max=max(rss),
            rss_samples=[[round(s[0] - samples[0][0], 2), s[1], round(s[2], 2)] for s in samples],
            supervisor_cpu_us_per_job=(samples[-1][3] - samples[0][3]) / cpu_jobs * 1e6
            if cpu_jobs
            else None,
        )
    except Exception as exc:
        result.update(status="error", error=_one_line(exc))
    finally:
        adapter.close_client()
        adapter.stop()
        with contextlib.suppress(Exception):
            adapter.teardown()
    result["seconds"] = time.monotonic() - started
    return result


# -- procqueue alone: progress storm, 1-second jobs, pending per child, fresh children ------


def probe(adapter: Any, tracker: Tracker, seq: int, timeout: float = 10.0) -> float | None:
    """Enqueues one no-op and waits for it; enqueue call → job start, seconds (None: lost)."""
    t0 = time.monotonic()
    adapter.enqueue("noop", {"seq": seq})
    give_up = t0 + timeout
    while time.monotonic() < give_up:
        new = tracker.poll()
        if new:
            for r in tracker.records[-new:]:
                if r.kind == "noop" and r.seq == seq:
                    return r.start - t0
        time.sleep(0.0003)
    return None


def run_storm(name: str, cls: Any, work_dir: Path, sizes: Sizes) -> dict[str, Any]:
    """A job calling ``cx.progress()`` in a tight loop, against the supervisor (2 children).

    Four phases on one warm supervisor: idle (nothing runs); storm alone
    (`storm_jobs` storm jobs of `storm_s` each, one after the other, on one child);
    storm with probes (the same, while no-ops go one at a time, 10-30 ms apart,
    to the other child); probes alone (as long, no storm). The supervisor's
    CPU (utime+stime, children excluded) is taken over each phase's windows.
    """
    result: dict[str, Any] = {"system": name, "storm_jobs": sizes.storm_jobs}
    started = time.monotonic()
    rng = random.Random(11)
    try:
        with running(cls, work_dir, f"{name}-storm") as adapter:
            tracker = Tracker(adapter.bench_dir)
            warm_up(adapter, tracker, sizes)
            pid = adapter.main_pid()
            probe_seq = itertools.count(1)

            def probes_until(stop: Callable[[], bool], latencies: list[float]) -> int:
                lost = 0
                while not stop():
                    time.sleep(rng.uniform(0.010, 0.030))
                    if stop():
                        break
                    lat = probe(adapter, tracker, next(probe_seq))
                    if lat is None:
                        lost += 1
                        if not adapter.alive():
                            raise RuntimeError("supervisor died")
                    else:
                        latencies.append(lat)
                return lost

            # idle
            time.sleep(0.5)
            c0, t0 = proc_cpu_fine_s(pid), time.monotonic()
            time.sleep(max(1.0, sizes.storm_jobs * sizes.storm_s))
            idle_pct = (proc_cpu_fine_s(pid) - c0) / (time.monotonic() - t0) * 100

            def storms(first_seq: int, with_probes: bool) -> dict[str, Any]:
                cpu = wall = 0.0
                latencies: list[float] = []
                lost = 0
                calls = []
                for seq in range(first_seq, first_seq + sizes.storm_jobs):
                    adapter.enqueue("storm", {"seq": seq, "seconds": sizes.storm_s})
                    waited = wait_records(
                        tracker,
                        lambda seq=seq: any(r.seq == seq for r in tracker.of("stormin")),
                        adapter=adapter,
                        timeout=30,
                        stall_s=30,
                        interval=0.001,
                    )
                    if waited.status != "ok":
                        raise RuntimeError(f"storm job {seq} did not start ({waited.status})")
                    c0, t0 = proc_cpu_fine_s(pid), time.monotonic()

                    def ended(seq: int = seq) -> bool:
                        tracker.poll()
                        return any(r.seq == seq for r in tracker.of("storm"))

                    if with_probes:
                        lost += probes_until(ended, latencies)
                    waited = wait_records(
                        tracker, ended, adapter=adapter, timeout=30, stall_s=30, interval=0.001
                    )
                    if waited.status != "ok":
                        raise RuntimeError(f"storm job {seq} did not end ({waited.status})")
                    cpu += proc_cpu_fine_s(pid) - c0
                    wall += time.monotonic() - t0
                    rec = next(r for r in tracker.of("storm") if r.seq == seq)
                    calls.append(rec.cpu / max(rec.end - rec.start, 1e-9))
                    time.sleep(0.3)  # its outcome is written
                return {
                    "cpu_pct": cpu / wall * 100 if wall else None,
                    "wall_s": wall,
                    "latencies_ms": [x * 1000 for x in latencies],
                    "lost": lost,
                    "progress_calls_per_s": statistics.fmean(calls) if calls else None,
                }

            alone = storms(1, with_probes=False)
            probed = storms(1001, with_probes=True)
            # probes alone, as long as the storms with probes lasted
            base_lat: list[float] = []
            c0, t0 = proc_cpu_fine_s(pid), time.monotonic()
            until = t0 + probed["wall_s"]
            base_lost = probes_until(lambda: time.monotonic() >= until, base_lat)
            base_pct = (proc_cpu_fine_s(pid) - c0) / (time.monotonic() - t0) * 100
            lat = probed["latencies_ms"]
            result.update(
                status="ok" if not (probed["lost"] or base_lost) else "lost probes",
                idle_cpu_pct=idle_pct,
                storm_cpu_pct=alone["cpu_pct"],
                storm_cost_pct=alone["cpu_pct"] - idle_pct,
                progress_calls_per_s=alone["progress_calls_per_s"],
                storm_with_probes_cpu_pct=probed["cpu_pct"],
                probes_alone_cpu_pct=base_pct,
                probe_p50_ms_during_storm=percentile(lat, 0.5),
                probe_p99_ms_during_storm=percentile(lat, 0.99),
                probes_during_storm=len(lat),
                probe_p50_ms_without_storm=percentile([x * 1000 for x in base_lat], 0.5),
                probe_p99_ms_without_storm=percentile([x * 1000 for x in base_lat], 0.99),
                probes_without_storm=len(base_lat),
                probes_lost=probed["lost"] + base_lost,
            )
    except Exception as exc:
        result.update(status="error", error=_one_line(exc))
    result["seconds"] = time.monotonic() - started
    return result


def run_long_jobs(name: str, cls: Any, work_dir: Path, sizes: Sizes) -> dict[str, Any]:
    """`long_jobs` jobs sleeping `long_job_s` each, enqueued in one batch into a
    warm supervisor with `long_children` children; wall (first enqueue → last end)
    against the ideal n x job / children."""
    n, children, job_s = sizes.long_jobs, sizes.long_children, sizes.long_job_s
    ideal = n * job_s / children
    result: dict[str, Any] = {"system": name, "jobs": n, "children": children, "job_s": job_s}
    started = time.monotonic()
    try:
        with running(cls, work_dir, f"{name}-long", slots=children) as adapter:
            tracker = Tracker(adapter.bench_dir)
            warm_up(adapter, tracker, sizes)
            pid = adapter.main_pid()
            cpu0 = proc_cpu_fine_s(pid)
            t0 = time.monotonic()
            adapter.enqueue_batch("sleep", [{"seq": i, "seconds": job_s} for i in range(n)])
            rss_max = 0.0
            next_rss = 0.0

            def sample_rss() -> None:
                nonlocal rss_max, next_rss
                now = time.monotonic()
                if now >= next_rss and adapter.alive():
                    next_rss = now + 1.0
                    with contextlib.suppress(OSError):
                        rss_max = max(rss_max, proc_rss_mb(pid))

            waited = wait_records(
                tracker,
                lambda: len(tracker.of("sleep")) >= n,
                adapter=adapter,
                timeout=ideal * 1.5 + 30,
                stall_s=max(sizes.stall_s, job_s * 4),
                interval=0.05,
                on_tick=sample_rss,
            )
            cpu = proc_cpu_fine_s(pid) - cpu0 if adapter.alive() else None
            done = tracker.of("sleep")
            last_end = max((r.end for r in done), default=t0)
            wall = last_end - t0
            gaps: list[float] = []
            by_pid: dict[int, list[Any]] = {}
            for r in done:
                by_pid.setdefault(r.pid, []).append(r)
            for runs in by_pid.values():
                runs.sort(key=lambda r: r.start)
                gaps.extend(b.start - a.end for a, b in itertools.pairwise(runs))
            per_child = n / children
            ok = waited.status == "ok"
            result.update(
                status=waited.status,
                completed=len(done),
                wall_s=wall,
                ideal_s=ideal,
                wall_over_ideal=wall / ideal if ok else None,
                # what each job cost beyond its own time, as seen from the wall clock
                overhead_per_job_ms=(wall - ideal) / per_child * 1000 if ok else None,
                overhead_fraction=(wall - ideal) / per_child / job_s if ok else None,
                mean_job_ms=statistics.fmean((r.end - r.start) * 1000 for r in done)
                if done
                else None,
                gap_p50_ms=percentile([g * 1000 for g in gaps], 0.5) if gaps else None,
                gap_p99_ms=percentile([g * 1000 for g in gaps], 0.99) if gaps else None,
                first_start_ms=(min(r.start for r in done) - t0) * 1000 if done else None,
                supervisor_cpu_us_per_job=cpu / max(1, len(done)) * 1e6 if cpu else None,
                supervisor_cpu_pct=cpu / wall * 100 if cpu and wall > 0 else None,
                supervisor_rss_mb_max=rss_max,
                child_pids=len(by_pid),
            )
    except Exception as exc:
        result.update(status="error", error=_one_line(exc))
    result["seconds"] = time.monotonic() - started
    return result


def run_pending(
    name: str, cls: Any, per_child: int, work_dir: Path, sizes: Sizes
) -> dict[str, Any]:
    """A gate-held no-op drain of `per_child` x 2 jobs on 2 children: the
    supervisor's CPU per job and its RSS idle, with the jobs pending, and at
    its highest during the drain."""
    n = per_child * 2
    result: dict[str, Any] = {"system": name, "pending_per_child": per_child, "jobs": n}
    started = time.monotonic()
    try:
        with running(cls, work_dir, f"{name}-pending-{per_child}") as adapter:
            tracker = Tracker(adapter.bench_dir)
            warm_up(adapter, tracker, sizes)
            time.sleep(0.3)
            result["rss_mb_idle"] = proc_rss_mb(adapter.main_pid())
            out = drain(
                adapter,
                tracker,
                sizes,
                "noop",
                [{"seq": i} for i in range(n)],
                n,
                timeout=max(sizes.drain_timeout_s, n / 100),
            )
            result.update(out)
            result["supervisor_cpu_us_per_job_ticks"] = out.get("supervisor_cpu_us_per_job")
            result["supervisor_cpu_us_per_job"] = out.get(
                "supervisor_cpu_us_per_job_fine", out.get("supervisor_cpu_us_per_job")
            )
            rss = out.get("supervisor_rss_mb") or [None, None]
            result["rss_mb_pending"] = rss[0]
            result["rss_mb_after"] = rss[1]
    except Exception as exc:
        result.update(status="error", error=_one_line(exc))
    result["seconds"] = time.monotonic() - started
    return result


def run_fresh_child(name: str, cls: Any, work_dir: Path, sizes: Sizes) -> dict[str, Any]:
    """A gate-held no-op drain with ``--max-jobs-per-child 1``: a fresh process per job."""
    n = sizes.fresh_child_jobs
    result: dict[str, Any] = {"system": name, "max_jobs_per_child": 1}
    started = time.monotonic()
    try:
        with running(
            cls, work_dir, f"{name}-fresh", supervise_args=["--max-jobs-per-child", "1"]
        ) as adapter:
            tracker = Tracker(adapter.bench_dir)
            warm_up(adapter, tracker, sizes)
            out = drain(
                adapter,
                tracker,
                sizes,
                "noop",
                [{"seq": i} for i in range(n)],
                n,
                timeout=max(sizes.drain_timeout_s, n / 5),
            )
            result.update(out)
            result["child_pids"] = len({r.pid for r in tracker.of("noop")})
    except Exception as exc:
        result.update(status="error", error=_one_line(exc))
    result["seconds"] = time.monotonic() - started
    return result


def run_profile(name: str, cls: Any, work_dir: Path, sizes: Sizes) -> dict[str, Any]:
    """py-spy samples the supervisor (not its children) during a gate-held no-op drain."""
    n = sizes.profile_jobs * (10 if cls.store == "sqlite" else 1)  # SQLite drains ~10x faster
    result: dict[str, Any] = {"system": name, "jobs": n}
    try:
        with running(cls, work_dir, f"{name}-profile") as adapter:
            tracker = Tracker(adapter.bench_dir)
            warm_up(adapter, tracker, sizes)
            raw = adapter.bench_dir / "pyspy.txt"
            hold_slots(adapter, tracker)
            adapter.enqueue_batch("noop", [{"seq": i} for i in range(n)])
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "py-spy"),
                    "record",
                    "--pid",
                    str(adapter.main_pid()),
                    "--rate",
                    "250",
                    "--format",
                    "raw",
                    "--function",
                    "--threads",
                    "--nonblocking",
                    "--output",
                    str(raw),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            time.sleep(0.5)  # py-spy attaches
            opened = open_gate(adapter)
            waited = wait_records(
                tracker,
                lambda: len(tracker.of("noop")) >= n,
                adapter=adapter,
                timeout=sizes.drain_timeout_s * 2,
                stall_s=sizes.stall_s,
            )
            done = tracker.of("noop")
            spy.send_signal(signal.SIGINT)
            _, err = spy.communicate(timeout=30)
            result["status"] = waited.status
            result["drain_jobs_s_under_profiler"] = len(done) / max(
                max((r.end for r in done), default=opened) - opened, 1e-9
            )
            if not raw.exists():
                raise RuntimeError(f"py-spy wrote nothing: {err.decode(errors='replace')[-300:]}")
            result.update(summarize_profile(raw.read_text()))
    except Exception as exc:
        result.update(status="error", error=_one_line(exc))
    return result


def _frame_name(frame: str) -> tuple[str, str]:
    """("function", "file") of a py-spy raw frame ``function (path:line)``."""
    func, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0].rstrip(")")
    if "/procqueue/" in path and "site-packages/" not in path:  # the checkout measured
        return func.strip(), "procqueue/" + path.split("/procqueue/", 1)[1]
    for marker in ("site-packages/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return func.strip(), path


def summarize_profile(raw: str, top: int = 15) -> dict[str, Any]:
    """Self and inclusive shares of the sampled (on-CPU) stacks of the supervisor's main
    thread (the one running its loop)."""
    self_counts: dict[str, int] = {}
    incl_counts: dict[str, int] = {}
    file_counts: dict[str, int] = {}
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        if "Supervisor.run (" not in stack:
            continue  # psycopg_pool's worker threads, idle but not always seen so by py-spy
        total += count
        frames = [_frame_name(f) for f in stack.split(";") if "(" in f]
        if not frames:
            continue
        func, path = frames[-1]
        self_counts[f"{func} ({path})"] = self_counts.get(f"{func} ({path})", 0) + count
        top_file = path.split("/")[0] if "/" in path else path
        file_counts[top_file] = file_counts.get(top_file, 0) + count
        for key in {f"{f} ({p})" for f, p in frames}:
            incl_counts[key] = incl_counts.get(key, 0) + count

    def ranked(counts: dict[str, int], n: int = top) -> list[list[Any]]:
        best = sorted(counts.items(), key=lambda kv: -kv[1])[:n]
        return [[k, round(100 * v / total, 1)] for k, v in best]

    roots = (
        "main (",
        "_run (",
        "cmd_supervise (",
        "Supervisor.run (",
        "Supervisor._step (",
        "<module> (",
        "thread (",
    )
    loop_incl = {k: v for k, v in incl_counts.items() if not k.startswith(roots)}
    return {
        "samples": total,
        "self_top": ranked(self_counts) if total else [],
        "inclusive_top": ranked(loop_incl, 22) if total else [],
        "self_by_package": ranked(file_counts) if total else [],
    }


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


def _stats(values: list[float | None]) -> dict[str, float] | None:
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
                stats = _stats([r.get(key) for r in mine if r.get("status") != "error"])
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
                    stats = _stats(per_rep)
                    if stats:
                        ratios.setdefault(pq_name, {}).setdefault(workload, {}).setdefault(key, {})[
                            peer
                        ] = stats
    return {"per_system": summary, "ratios": ratios}


def _med(summary: dict[str, Any], workload: str, system: str, key: str) -> float | None:
    entry = summary["per_system"].get(workload, {}).get(system, {}).get(key)
    return entry["median"] if entry else None


def evaluate_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every goal with its measured value and verdict (met: True/False, None: not measured).

    ``source`` is ``issue 13`` for the goals of the speed issue, ``earlier`` for
    targets of earlier issues that it did not replace, ``reference`` for figures
    with a stated goal that is not yet expected to hold."""
    s = result["summary"]
    ratios = s["ratios"]
    runs = result["runs"]
    targets: list[dict[str, Any]] = []

    def add(name: str, value: Any, met: bool | None, detail: str, source: str) -> None:
        targets.append(
            {"target": name, "value": value, "met": met, "detail": detail, "source": source}
        )

    def drain_ratio(
        pq_name: str, peer: str, goal: float, label: str, source: str, peer_label: str = ""
    ) -> None:
        stat = ratios.get(pq_name, {}).get("throughput_noop", {}).get("drain_jobs_s", {}).get(peer)
        cut = sum(
            1
            for run in runs
            if run["workload"] == "throughput_noop"
            and run["system"] in (peer, pq_name)
            and run.get("status") != "ok"
        )
        mine = _med(s, "throughput_noop", pq_name, "drain_jobs_s")
        theirs = _med(s, "throughput_noop", peer, "drain_jobs_s")
        if stat is None:
            detail = "not measured"
        elif stat["n"] > 1:
            detail = (
                f"median of {stat['n']} per-repetition ratios, range "
                f"{stat['min']:.2f}-{stat['max']:.2f}; {mine or 0:,.0f} vs {theirs or 0:,.0f} "
                "jobs/s"
            )
        else:
            detail = f"{mine or 0:,.0f} vs {theirs or 0:,.0f} jobs/s, one repetition"
        if cut:
            detail += f"; {cut} of the runs compared did not finish (rate over the time run)"
        add(
            f"no-op drain, {label} >= {goal:g}x {peer_label or peer}",
            stat and round(stat["median"], 2),
            None if stat is None else stat["median"] >= goal,
            detail,
            source,
        )

    drain_ratio("procqueue-pg", "pgqueuer", 1.0, "PostgreSQL", "issue 13", "pgqueuer (one process)")
    drain_ratio(
        "procqueue-pg", "huey-pg", 1.5, "PostgreSQL", "issue 13", "Huey on PostgreSQL (huey-pg)"
    )
    drain_ratio(
        "procqueue-sqlite", "huey-redis", 2.0, "SQLite", "issue 13", "Huey on Redis (huey-redis)"
    )
    for system, limit in (("procqueue-pg", 1.5), ("procqueue-sqlite", 1.0)):
        v = _med(s, "latency", system, "p50_ms")
        add(
            f"enqueue → start p50 <= {limit} ms while idle ({system})",
            v and round(v, 2),
            None if v is None else v <= limit,
            "enqueue call to job start, one job at a time, median over repetitions",
            "issue 13",
        )
    for system in PQ_SYSTEMS:
        v = _med(s, "throughput_noop", system, "supervisor_cpu_us_per_job")
        add(
            f"supervisor CPU <= 100 µs per no-op job ({system})",
            v and round(v),
            None if v is None else v <= 100,
            "utime+stime of the supervisor process alone over the no-op drain",
            "issue 13",
        )
    for st in result.get("storm", []):
        v = st.get("storm_cost_pct")
        ok = st.get("status") != "error" and v is not None
        add(
            f"a job calling cx.progress() in a tight loop costs the supervisor <= 5% of a core "
            f"({st['system']})",
            round(v, 2) if ok else None,
            v <= 5.0 if ok else None,
            f"{st['storm_cpu_pct']:.1f}% during the storm minus {st['idle_cpu_pct']:.1f}% idle; "
            f"{st['progress_calls_per_s'] or 0:,.0f} progress calls/s"
            if ok
            else f"not measured: {st.get('error', st.get('status'))}",
            "issue 13",
        )
    for system in PQ_SYSTEMS:
        v = _med(s, "cpu_heavy", system, "wall_over_job_cpu")
        job = _med(s, "cpu_heavy", system, "mean_job_cpu_ms")
        add(
            f"CPU-heavy batch wall <= 1.05x the jobs' CPU time / children ({system})",
            v and round(v, 3),
            None if v is None else v <= 1.05,
            f"{result['sizes']['cpu_jobs']} jobs of ~{job or 0:.0f} ms CPU over 2 children; "
            "wall = first enqueue → last end",
            "issue 13",
        )
    for r in result.get("fresh_child", []):
        v = r.get("drain_jobs_s") if r.get("status") != "error" else None
        add(
            f"no-op drain with --max-jobs-per-child 1 >= 200 jobs/s ({r['system']})",
            v and round(v),
            None if v is None else v >= 200,
            f"a fresh child process per job, {r.get('completed', 0)} jobs; "
            "the goal once a fork server lands",
            "reference",
        )
    drain_ratio("procqueue-pg", "procrastinate", 4.0, "PostgreSQL", "earlier")
    v = _med(s, "latency", "procqueue-pg", "p99_ms")
    add(
        "enqueue → start p99 <= 5.0 ms while idle (procqueue-pg)",
        v and round(v, 2),
        None if v is None else v <= 5.0,
        "enqueue call to job start, median over repetitions",
        "earlier",
    )
    v = _med(s, "throughput_noop", "procqueue-pg", "enqueue_jobs_s")
    add(
        "enqueue_many >= 50,000 jobs/s on PostgreSQL",
        v and round(v),
        None if v is None else v >= 50_000,
        "one app.enqueue_many call for the whole batch",
        "earlier",
    )
    for b in result.get("backlog", []):
        if b.get("status") == "error" or "rss_mb_last" not in b:
            continue
        growth = b["rss_mb_last"] - b["rss_mb_at_10pct"]
        add(
            f"supervisor RSS flat over {b['completed']:,} jobs ({b['system']})",
            round(growth, 1),
            growth <= max(2.0, 0.05 * b["rss_mb_at_10pct"]),
            f"{b['rss_mb_at_10pct']:.1f} MB after 10% of the jobs, {b['rss_mb_last']:.1f} MB at "
            f"the end (max {b['rss_mb_max']:.1f}); flat = grew <= max(2 MB, 5%)",
            "earlier",
        )
    return targets


# -- environment description -------------------------------------------------------------


def versions() -> dict[str, str]:
    from importlib import metadata

    names = [
        "procqueue",
        "procrastinate",
        "pgqueuer",
        "celery",
        "kombu",
        "rq",
        "huey",
        "peewee",
        "redis",
        "psycopg",
        "psycopg2-binary",
        "psycopg-pool",
        "asyncpg",
        "msgspec",
        "matplotlib",
        "py-spy",
    ]
    out: dict[str, str] = {"python": platform.python_version()}
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    with contextlib.suppress(Exception):
        import psycopg

        with psycopg.connect("postgresql://127.0.0.1:5432/test") as conn:
            row = conn.execute("SHOW server_version").fetchone()
            out["postgresql"] = str(row[0]) if row else "?"
            for setting in ("fsync", "synchronous_commit"):
                row = conn.execute(f"SHOW {setting}").fetchone()
                out[f"postgresql {setting}"] = str(row[0]) if row else "?"
    with contextlib.suppress(Exception):
        import redis

        client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
        out["redis-server"] = str(client.info("server")["redis_version"])
        client.close()
    return out


def machine() -> dict[str, Any]:
    model = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        mem = f"{int(f.readline().split()[1]) / 1024 / 1024:.1f} GiB"
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "memory": mem,
        "kernel": platform.release(),
        "loadavg_at_start": os.getloadavg(),
    }


def user_argv() -> list[str]:
    """The arguments the user gave (without those the re-run in the venv adds)."""
    out: list[str] = []
    argv = iter(sys.argv[1:])
    for arg in argv:
        if arg == "--in-venv":
            continue
        if arg == "--procqueue-src" and "--procqueue-rev" in sys.argv:
            next(argv, None)
            continue
        out.append(arg)
    return out


def export_revision(rev: str) -> Path:
    """A copy of procqueue at git revision `rev` (git archive), made once."""
    full = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", rev],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dest = Path("/tmp/procqueue-bench-src") / full
    if not (dest / "pyproject.toml").exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", full],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        say(f"exported procqueue at {full} to {dest}")
    return dest


def git_revision(args: argparse.Namespace) -> str:
    if args.procqueue_rev:
        return f"{Path(args.procqueue_src).name} (git archive of {args.procqueue_rev})"
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "procqueue"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return rev + (" (procqueue/ has uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


# -- the run --------------------------------------------------------------------------------


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    sizes = QUICK if args.quick else FULL
    if args.reps:
        sizes = Sizes(**{**asdict(sizes), "reps": args.reps})
    systems = [s for s in SYSTEMS if s in args.systems]
    workloads = [w for w in WORKLOADS if w in args.workloads]
    classes = adapter_classes()
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
            order = systems[rep - 1 :] + systems[: rep - 1]  # rotate: no fixed position
            for name in order:
                if classes[name].workloads is not None and workload not in classes[name].workloads:
                    continue
                r = run_one(name, classes[name], workload, rep, work_dir, sizes, n_iter)
                if r.get("status") == "error":
                    # e.g. the database restarted under us (this machine is shared): once more
                    say(
                        f"[rep {rep}/{sizes.reps}] {workload:<15} {name:<17} "
                        f"{describe(r)}; retrying"
                    )
                    wait_for_services()
                    first_error = r["error"]
                    r = run_one(name, classes[name], workload, rep, work_dir, sizes, n_iter)
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
                        f"supervisor {_fmt(r.get('supervisor_cpu_us_per_job'))} us/job, RSS "
                        f"{_fmt(r.get('rss_mb_idle'), 1)} idle, "
                        f"{_fmt(r.get('rss_mb_pending'), 1)} pending, "
                        f"{_fmt(r.get('supervisor_rss_mb_max'), 1)} max MB; "
                        f"drain {_fmt(r.get('drain_jobs_s'))} jobs/s"
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
                    f"supervisor {_fmt(r['storm_cpu_pct'], 1)}% of a core during the storm "
                    f"(idle {_fmt(r['idle_cpu_pct'], 1)}%; "
                    f"{_fmt(r['progress_calls_per_s'])} progress calls/s); other jobs' p50 "
                    f"{_fmt(r['probe_p50_ms_during_storm'], 2)} ms vs "
                    f"{_fmt(r['probe_p50_ms_without_storm'], 2)} ms without"
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
                    f"overhead {_fmt(r.get('overhead_per_job_ms'), 1)} ms/job "
                    f"({_fmt((r.get('overhead_fraction') or 0) * 100, 2)}% of a job)"
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
                    f"drain {_fmt(r.get('drain_jobs_s'))} jobs/s over {r.get('completed')} "
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
                "title": classes[name].title,
                "store": classes[name].store,
                "batch_api": classes[name].batch_api,
                "notes": classes[name].notes,
            }
            for name in systems
        },
        "runs": runs,
        "scaling": scaling,
        "backlog": backlog,
        "pending": pending,
        "storm": storms,
        "long_jobs": long_jobs,
        "fresh_child": fresh,
        "profiles": profiles,
        "elapsed_s": round(time.monotonic() - began, 1),
    }
    result["summary"] = summarize(runs, systems)
    result["targets"] = evaluate_targets(result)
    return result


# -- report: charts and markdown -----------------------------------------------------------

COLORS = {"procqueue-pg": "#1f6feb", "procqueue-sqlite": "#58a6ff"}
PEER_COLOR = "#8b949e"


def _fmt(v: float | None, digits: int = 0) -> str:
    if v is None or v != v:
        return "-"
    return f"{v:,.{digits}f}"


def _cell(summary: dict[str, Any], workload: str, system: str, key: str, digits: int = 0) -> str:
    """`median [min-max]`, with a dagger when a run of it did not finish (see the notes)."""
    per = summary["per_system"].get(workload, {}).get(system, {})
    entry = per.get(key)
    cut = any(st not in ("ok", None) for st in per.get("statuses", []))
    mark = " †" if cut else ""
    if not entry:
        return "-" + mark
    if entry["n"] == 1 or _fmt(entry["min"], digits) == _fmt(entry["max"], digits):
        return _fmt(entry["median"], digits) + mark
    return (
        f"{_fmt(entry['median'], digits)} "
        f"<sub>[{_fmt(entry['min'], digits)}-{_fmt(entry['max'], digits)}]</sub>{mark}"
    )


def write_charts(result: dict[str, Any], img_dir: Path) -> list[Path]:
    """bench-throughput.png, bench-latency.png, bench-scaling.png and bench-pending.png
    in `img_dir`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    img_dir.mkdir(parents=True, exist_ok=True)
    per = result["summary"]["per_system"]
    systems = list(result["systems"])
    written: list[Path] = []
    subtitle = f"{result['mode']} run, {result['sizes']['reps']} rep(s); median, bars = min-max"

    def bars(ax: Any, workload: str, key: str, title: str) -> None:
        names = [s for s in systems if per.get(workload, {}).get(s)]
        stats = [per[workload][s].get(key) for s in names]
        med = [st["median"] if st else 0.0 for st in stats]
        lo = [m - st["min"] if st else 0.0 for st, m in zip(stats, med, strict=True)]
        hi = [st["max"] - m if st else 0.0 for st, m in zip(stats, med, strict=True)]
        colors = [COLORS.get(s, PEER_COLOR) for s in names]
        ax.barh(names, med, xerr=[lo, hi], color=colors, capsize=3)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        floor = min((m for m in med if m > 0), default=1.0) / 3
        ax.set_xlim(left=floor, right=max(m + h for m, h in zip(med, hi, strict=True)) * 2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("jobs/s (log scale)")
        for y, (name, v, top) in enumerate(zip(names, med, hi, strict=True)):
            if v > 0:
                ax.text((v + top) * 1.04, y, f"{v:,.0f}", va="center", fontsize=8)
            else:
                alive = per[workload][name].get("worker_alive", [True])
                why = "worker process died" if not all(alive) else "did not finish"
                ax.text(floor * 1.05, y, f" {why}", va="center", fontsize=8, color="#b3261e")
        ax.grid(axis="x", which="both", alpha=0.3)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    bars(axes[0], "throughput_noop", "drain_jobs_s", "No-op drain (2 worker slots; pgqueuer-2p 4)")
    bars(axes[1], "crashy", "drain_jobs_s", "Crashy drain: 2% of jobs segfault")
    fig.suptitle(f"Throughput — {subtitle}", fontsize=10)
    fig.tight_layout()
    path = img_dir / "bench-throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    names = [s for s in systems if per.get("latency", {}).get(s, {}).get("p50_ms")]
    if names:
        fig, ax = plt.subplots(figsize=(10, 4.2))
        xs = range(len(names))
        for offset, key, alpha in ((-0.2, "p50_ms", 1.0), (0.2, "p99_ms", 0.55)):
            med = [per["latency"][s][key]["median"] for s in names]
            ax.bar(
                [x + offset for x in xs],
                med,
                width=0.4,
                color=[COLORS.get(s, PEER_COLOR) for s in names],
                alpha=alpha,
                label=key[:3],
            )
            for x, v in zip(xs, med, strict=True):
                ax.text(x + offset, v, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(list(xs), names, fontsize=9)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_ylabel("enqueue call → job start, ms (log)")
        ax.set_title(
            "Latency into an idle system: p50 (solid), p99 (light) — "
            f"{result['mode']} run, median of {result['sizes']['reps']} rep(s)",
            fontsize=10,
        )
        ax.grid(axis="y", which="both", alpha=0.3)
        fig.tight_layout()
        path = img_dir / "bench-latency.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    if result.get("scaling"):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4))
        for name in PQ_SYSTEMS:
            pts = [
                (r["workers"], r["drain_jobs_s"])
                for r in result["scaling"]
                if r["system"] == name and r.get("drain_jobs_s")
            ]
            if pts:
                axes[0].plot(*zip(*pts, strict=True), marker="o", label=name, color=COLORS[name])
        axes[0].set_xscale("log", base=2)
        axes[0].set_xticks(list(result["sizes"]["scaling_workers"]))
        axes[0].xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        axes[0].set_xlabel("children")
        axes[0].set_ylabel("no-op drain jobs/s")
        axes[0].set_title("procqueue: drain rate by number of children", fontsize=10)
        axes[0].legend()
        axes[0].grid(alpha=0.3)
        for b in result.get("backlog", []):
            rates = b.get("window_jobs_s") or []
            if rates:
                step = b["completed"] / len(rates)
                xs2 = [step * (k + 0.5) for k in range(len(rates))]
                axes[1].plot(
                    xs2, rates, marker="o", label=f"{b['system']} (rate)", color=COLORS[b["system"]]
                )
        axes[1].set_xlabel(f"jobs done, of {result['sizes']['backlog_jobs']:,} pending at start")
        axes[1].set_ylabel("drain jobs/s per window")
        axes[1].set_ylim(bottom=0)
        axes[1].set_title("procqueue: drain rate while a large backlog shrinks", fontsize=10)
        axes[1].grid(alpha=0.3)
        axes[1].legend(loc="center right")
        fig.tight_layout()
        path = img_dir / "bench-scaling.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    pending = [r for r in result.get("pending", []) if r.get("status") != "error"]
    if pending:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4))
        for name in PQ_SYSTEMS:
            mine = sorted(
                (r for r in pending if r["system"] == name), key=lambda r: r["pending_per_child"]
            )
            if not mine:
                continue
            xs3 = [r["pending_per_child"] for r in mine]
            cpu = [r.get("supervisor_cpu_us_per_job") or float("nan") for r in mine]
            axes[0].plot(xs3, cpu, marker="o", label=name, color=COLORS[name])
            for key, style, what in (
                ("supervisor_rss_mb_max", "-", "max during the drain"),
                ("rss_mb_pending", "--", "with the jobs pending"),
            ):
                axes[1].plot(
                    xs3,
                    [r.get(key) or float("nan") for r in mine],
                    marker="o",
                    linestyle=style,
                    label=f"{name}, {what}",
                    color=COLORS[name],
                )
        for ax in axes:
            ax.set_xscale("log")
            ax.set_xticks(list(result["sizes"]["pending_per_child"]))
            ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_xlabel("jobs pending per child (2 children)")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        axes[0].set_ylabel("supervisor CPU µs per job")
        axes[0].set_title("procqueue: supervisor CPU per job by backlog", fontsize=10)
        axes[1].set_ylabel("supervisor RSS MB")
        axes[1].set_title("procqueue: supervisor memory by backlog", fontsize=10)
        fig.tight_layout()
        path = img_dir / "bench-pending.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def render_markdown(result: dict[str, Any], charts: list[Path], md_dir: Path) -> str:
    s = result["summary"]
    systems = list(result["systems"])
    sizes = result["sizes"]
    reps = sizes["reps"]
    out: list[str] = []
    add = out.append
    add("# Benchmarks: procqueue and its peers\n")
    add(
        f"Produced by `{result['command']}` on {result['generated']} ({result['mode']} run: "
        f"{reps} repetition{'s' if reps > 1 else ''}, interleaved; {result['elapsed_s']:.0f} s). "
        f"procqueue revision {result['revision']}. Raw figures of every run: "
        "[benchmarks.json](benchmarks.json). Numbers are `median [min-max]` over the "
        "repetitions; every system had 2 worker slots on a 2-core machine (pgqueuer-2p: 4, "
        "see Systems).\n"
    )
    m = result["machine"]
    add(
        f"**Machine:** {m['nproc']} CPUs ({m['cpu_model']}), {m['memory']}, Linux {m['kernel']}; "
        f"load average at start {', '.join(f'{x:.2f}' for x in m['loadavg_at_start'])}.\n"
    )
    loads = sorted(r["loadavg_1m_before"] for r in result["runs"] if "loadavg_1m_before" in r)
    if loads:
        add(
            f"The 1-minute load average before each run ranged {loads[0]:.2f}-{loads[-1]:.2f} "
            f"(median {statistics.median(loads):.2f}); anything above ~0.5 means other work "
            "shared the 2 cores with the benchmark, which slows every system and widens the "
            "spread between repetitions.\n"
        )
    add("## Goals\n")
    add(
        "Each goal with the value measured in this run and whether it is met. *issue 13*: the "
        "goals of the speed issue; *reference*: a goal stated for later work (not expected "
        "to hold yet); *earlier*: targets of earlier issues that issue 13 did not replace.\n"
    )
    add("| goal | measured | verdict | from |")
    add("| --- | --- | --- | --- |")
    for t in result["targets"]:
        verdict = {True: "**met**", False: "**not met**", None: "not measured"}[t["met"]]
        value = "-" if t["value"] is None else t["value"]
        add(f"| {t['target']} | {value} ({t['detail']}) | {verdict} | {t.get('source', '')} |")
    add("")
    add("## Results\n")
    add(
        "| system | store | no-op drain jobs/s | enqueue jobs/s | supervisor CPU µs/job "
        "| latency p50 ms | latency p99 ms | cpu_heavy wall/ideal | crashy drain jobs/s "
        "| crashy: non-crashing jobs done |"
    )
    add("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name in systems:
        crash = s["per_system"].get("crashy", {}).get(name, {})
        expected = crash.get("expected")
        done = crash.get("completed")
        flags = crash.get("all_completed", [])
        if not done:
            verdict = "-"
        elif all(flags):
            verdict = "all"
        else:
            lo, hi = _fmt(done["min"]), _fmt(done["max"])
            counted = f"{lo} of {expected}" if lo == hi else f"{lo}-{hi} of {expected}"
            verdict = (
                f"all in {sum(flags)} of {len(flags)} runs; {counted}" if any(flags) else counted
            )
            if any(st == "timeout" for st in crash.get("statuses", [])):
                verdict += " when cut"
            if not all(crash.get("worker_alive", [True])):
                verdict += ", worker process died"
        add(
            f"| {name} | {result['systems'][name]['store']} "
            f"| {_cell(s, 'throughput_noop', name, 'drain_jobs_s')} "
            f"| {_cell(s, 'throughput_noop', name, 'enqueue_jobs_s')} "
            f"| {_cell(s, 'throughput_noop', name, 'supervisor_cpu_us_per_job')} "
            f"| {_cell(s, 'latency', name, 'p50_ms', 2)} "
            f"| {_cell(s, 'latency', name, 'p99_ms', 2)} "
            f"| {_cell(s, 'cpu_heavy', name, 'wall_over_ideal', 2)} "
            f"| {_cell(s, 'crashy', name, 'drain_jobs_s')} | {verdict} |"
        )
    add("")
    add(
        "† a run of this workload did not finish (cut at its time limit, stalled, or the "
        "worker process died): a rate then counts the jobs done in the time the run had, "
        "except in crashy, where no rate is given for a run whose workers died or stalled. "
        "See the per-run tables below and the JSON. Supervisor CPU is procqueue's supervisor "
        "process alone (children excluded) over the no-op drain; the peers have no such "
        "process apart from their workers, so it is not given for them. pgqueuer-2p runs only "
        "the no-op drain and latency workloads.\n"
    )
    for chart in charts:
        if chart.name not in ("bench-scaling.png", "bench-pending.png"):
            add(f"![{chart.stem}]({os.path.relpath(chart, md_dir)})\n")
    add("### procqueue / peer, within the same repetition\n")
    add(
        "Each ratio is procqueue's figure divided by the peer's figure from the same "
        "repetition; throughput above 1 favours procqueue, latency and wall time below 1 do.\n"
    )
    columns = [
        ("throughput_noop", "drain_jobs_s", "no-op drain"),
        ("throughput_noop", "enqueue_jobs_s", "enqueue"),
        ("latency", "p50_ms", "latency p50"),
        ("latency", "p99_ms", "latency p99"),
        ("cpu_heavy", "wall_over_ideal", "cpu_heavy wall"),
        ("crashy", "drain_jobs_s", "crashy drain"),
    ]
    for pq_name in PQ_SYSTEMS:
        table = s["ratios"].get(pq_name)
        if not table:
            continue
        add(f"**{pq_name} / peer**\n")
        add("| peer | " + " | ".join(c[2] for c in columns) + " |")
        add("| --- |" + " ---: |" * len(columns))
        for peer in systems:
            if peer in PQ_SYSTEMS:
                continue
            cells = []
            for workload, key, _ in columns:
                st = table.get(workload, {}).get(key, {}).get(peer)
                if not st:
                    cells.append("-")
                elif st["n"] == 1:
                    cells.append(f"{st['median']:.2f}x")
                else:
                    cells.append(
                        f"{st['median']:.2f}x <sub>[{st['min']:.2f}-{st['max']:.2f}]</sub>"
                    )
            add(f"| {peer} | " + " | ".join(cells) + " |")
        add("")
    add("### Cost per no-op job (throughput_noop)\n")
    add(
        "Supervisor CPU is procqueue's supervisor process alone (user + system time from "
        "`/proc/PID/stat`, children excluded) over the drain. PostgreSQL transactions per job "
        "are the benchmark database's `xact_commit + xact_rollback` (pg_stat_database) over "
        "the drain, for every system on PostgreSQL.\n"
    )
    add(
        "| system | supervisor CPU µs/job | of which user | of which system | PG transactions/job |"
    )
    add("| --- | ---: | ---: | ---: | ---: |")
    for name in systems:
        cells = [
            _cell(s, "throughput_noop", name, key, digits)
            for key, digits in (
                ("supervisor_cpu_us_per_job", 0),
                ("supervisor_user_us_per_job", 0),
                ("supervisor_system_us_per_job", 0),
                ("pg_transactions_per_job", 2),
            )
        ]
        if any(c.strip("† ") not in ("-", "") for c in cells):
            add(f"| {name} | " + " | ".join(cells) + " |")
    add("")
    add("### cpu_heavy in detail\n")
    add(
        "wall / ideal uses the nominal 50 ms per job; wall / measured work uses the jobs' own "
        "durations as recorded inside the workers (sum / 2 slots), so it shows how well the "
        "system kept both slots busy; job ms above 50 means the job itself ran slower "
        "(CPU contention: another process of the system, or of the machine, on the cores). "
        "wall / job CPU uses the CPU time each job's thread spent (`time.thread_time()`, "
        "sum / 2 slots): the issue's definition, which does not count a job's waits for a "
        "core as work.\n"
    )
    add(
        "| system | wall / ideal | wall / measured work | wall / job CPU | job ms | job CPU ms "
        "| gap between a worker's jobs, p50 ms | enqueue → first start ms |"
    )
    add("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in systems:
        one_process = any(
            r.get("worker_pids") == 1
            for r in result["runs"]
            if r["system"] == name and r["workload"] == "cpu_heavy"
        )
        gap = (
            "n/a (one process runs both slots)"
            if one_process
            else _cell(s, "cpu_heavy", name, "gap_p50_ms", 1)
        )
        add(
            f"| {name} | {_cell(s, 'cpu_heavy', name, 'wall_over_ideal', 2)} "
            f"| {_cell(s, 'cpu_heavy', name, 'wall_over_measured_work', 2)} "
            f"| {_cell(s, 'cpu_heavy', name, 'wall_over_job_cpu', 2)} "
            f"| {_cell(s, 'cpu_heavy', name, 'mean_job_ms', 0)} "
            f"| {_cell(s, 'cpu_heavy', name, 'mean_job_cpu_ms', 0)} "
            f"| {gap} | {_cell(s, 'cpu_heavy', name, 'first_start_ms', 1)} |"
        )
    add("")
    add("### Crashy runs in detail\n")
    add(
        "| system | rep | completed / expected | not completed | duplicates "
        "| worker alive at end | ended |"
    )
    add("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    for r in result["runs"]:
        if r["workload"] != "crashy" or r.get("status") == "error":
            continue
        extra = f"; {r['failed_recorded']} recorded as failed" if "failed_recorded" in r else ""
        add(
            f"| {r['system']} | {r['rep']} | {r['completed']} / {r['expected']} "
            f"| {r['expected'] - r['completed']} | {r['duplicates']} "
            f"| {'yes' if r['worker_alive'] else '**no**'} | {r['status']}{extra} |"
        )
    add("")
    errors = [r for r in result["runs"] if r.get("status") == "error"]
    if errors:
        add("### Runs that failed\n")
        for r in errors:
            add(f"- {r['system']} {r['workload']} rep {r['rep']}: {r['error']}")
        add("")
    add("## procqueue alone\n")
    if result.get("scaling"):
        add("### Children\n")
        add(
            f"No-op drain of {sizes['scaling_jobs']:,} jobs, gate-held as above, with 1-8 "
            "children (one run each).\n"
        )
        add("| backend | children | drain jobs/s | enqueue jobs/s | supervisor CPU µs/job |")
        add("| --- | ---: | ---: | ---: | ---: |")
        for r in result["scaling"]:
            add(
                f"| {r['system']} | {r['workers']} | {_fmt(r.get('drain_jobs_s'))} "
                f"| {_fmt(r.get('enqueue_jobs_s'))} | {_fmt(r.get('supervisor_cpu_us_per_job'))} |"
            )
        add("")
    if result.get("backlog"):
        add(f"### {sizes['backlog_jobs']:,} jobs pending before the supervisor starts\n")
        add(
            f"The jobs are enqueued (app.enqueue_many, 10,000 a call) into a fresh store, then "
            "a supervisor with 2 children starts. Rates are per tenth of the jobs done; the "
            "supervisor's RSS is sampled every 0.5 s. A run is cut after "
            f"{sizes['backlog_budget_s']:.0f} s on PostgreSQL and "
            f"{sizes['backlog_budget_sqlite_s']:.0f} s on SQLite (then only part of the backlog "
            "is done).\n"
        )
        add(
            "| backend | done | enqueue jobs/s | drain jobs/s | first → last window jobs/s "
            "| RSS MB: start → 10% → end (max) | supervisor CPU µs/job |"
        )
        add("| --- | ---: | ---: | ---: | --- | --- | ---: |")
        for b in result["backlog"]:
            if b.get("status") == "error":
                add(f"| {b['system']} | error: {b.get('error')} | | | | | |")
                continue
            add(
                f"| {b['system']} | {b['completed']:,} | {_fmt(b.get('enqueue_jobs_s'))} "
                f"| {_fmt(b.get('drain_jobs_s'))} "
                f"| {_fmt(b.get('first_window_jobs_s'))} → {_fmt(b.get('last_window_jobs_s'))} "
                f"| {b['rss_mb_first']:.1f} → {b['rss_mb_at_10pct']:.1f} → {b['rss_mb_last']:.1f} "
                f"({b['rss_mb_max']:.1f}) | {_fmt(b.get('supervisor_cpu_us_per_job'))} |"
            )
        add("")
    for chart in charts:
        if chart.name == "bench-scaling.png":
            add(f"![{chart.stem}]({os.path.relpath(chart, md_dir)})\n")
    pending = result.get("pending") or []
    if pending:
        add("### Supervisor CPU and memory by jobs pending per child\n")
        add(
            "A fresh store and a warm supervisor with 2 children for each size; both children "
            "held by gate jobs while 2 x N no-op jobs are enqueued (N pending per child), then "
            "the gate opens and they drain. Supervisor CPU is the run time of the supervisor "
            "process's threads (children excluded; `/proc/PID/task/*/schedstat`, to the "
            "nanosecond) over the drain, per job, the two gate jobs' outcomes included; RSS "
            "idle (before the enqueue), with the "
            "jobs pending (just before the gate opens) and the highest sampled every 0.1 s "
            "during the drain.\n"
        )
        add(
            "| backend | pending per child | jobs | drain jobs/s | supervisor CPU µs/job "
            "| RSS MB idle | RSS MB pending | RSS MB max |"
        )
        add("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in pending:
            if r.get("status") == "error":
                add(
                    f"| {r['system']} | {r['pending_per_child']:,} | error: {r.get('error')} "
                    "| | | | | |"
                )
                continue
            mark = "" if r.get("status") == "ok" else f" ({r.get('status')})"
            add(
                f"| {r['system']} | {r['pending_per_child']:,} | {r['jobs']:,} "
                f"| {_fmt(r.get('drain_jobs_s'))}{mark} "
                f"| {_fmt(r.get('supervisor_cpu_us_per_job'))} "
                f"| {_fmt(r.get('rss_mb_idle'), 1)} | {_fmt(r.get('rss_mb_pending'), 1)} "
                f"| {_fmt(r.get('supervisor_rss_mb_max'), 1)} |"
            )
        add("")
        for chart in charts:
            if chart.name == "bench-pending.png":
                add(f"![{chart.stem}]({os.path.relpath(chart, md_dir)})\n")
    storms = result.get("storm") or []
    if storms:
        add("### Progress storm\n")
        add(
            f"A job that calls `cx.progress(fraction=...)` in a tight loop for "
            f"{sizes['storm_s']:g} s, {sizes['storm_jobs']} of them one after the other, on a "
            "warm supervisor with 2 children (the storm job holds one). Supervisor CPU is the "
            "run time of the supervisor process's threads (children excluded; schedstat, to "
            "the nanosecond) as % of one core over the storm jobs' run time; the cost of the "
            "storm is that minus the supervisor's idle CPU (measured for as long before). The "
            "other jobs' latency is measured by no-op probes sent one at a time (10-30 ms "
            "apart) to the other child during a second series of storm jobs, and compared "
            "with the same probes without a storm. procqueue only: none of the peers has an "
            "equivalent. Where a peer's job can report progress at all (Celery's "
            "`update_state`, RQ's `job.meta` and `save_meta()`), the job writes to the broker "
            "or result backend itself, with no supervising process in between whose cost "
            "could be compared.\n"
        )
        add(
            "| backend | progress calls/s | supervisor % of a core: idle → storm (cost) "
            "| storm + probes | probes alone | other jobs' p50 / p99 ms during storm "
            "| without storm |"
        )
        add("| --- | ---: | --- | ---: | ---: | --- | --- |")
        for r in storms:
            if r.get("status") == "error":
                add(f"| {r['system']} | error: {r.get('error')} | | | | | |")
                continue
            add(
                f"| {r['system']} | {_fmt(r.get('progress_calls_per_s'))} "
                f"| {_fmt(r['idle_cpu_pct'], 1)} → {_fmt(r['storm_cpu_pct'], 1)} "
                f"(**{_fmt(r['storm_cost_pct'], 1)}**) "
                f"| {_fmt(r.get('storm_with_probes_cpu_pct'), 1)} "
                f"| {_fmt(r.get('probes_alone_cpu_pct'), 1)} "
                f"| {_fmt(r.get('probe_p50_ms_during_storm'), 2)} / "
                f"{_fmt(r.get('probe_p99_ms_during_storm'), 2)} "
                f"(n={r.get('probes_during_storm')}) "
                f"| {_fmt(r.get('probe_p50_ms_without_storm'), 2)} / "
                f"{_fmt(r.get('probe_p99_ms_without_storm'), 2)} "
                f"(n={r.get('probes_without_storm')}) |"
            )
        add("")
    long_runs = result.get("long_jobs") or []
    if long_runs:
        first = long_runs[0]
        add(f"### {first['jobs']:,} jobs of {first['job_s']:g} s on {first['children']} children\n")
        add(
            f"Each job sleeps {first['job_s']:g} s (no CPU to compete for on 2 cores). All are "
            f"enqueued in one batch into a warm supervisor with {first['children']} children; "
            "wall = first enqueue → last end; ideal = jobs x job time / children. The "
            "overhead per job is (wall - ideal) / (jobs per child): the time each job costs "
            "beyond its own, as a fraction of the job's time. The gap is a child's idle time "
            "between the end of one job and the start of its next.\n"
        )
        add(
            "| backend | done | wall s | ideal s | wall / ideal | overhead per job ms "
            "| overhead / job time | gap p50 / p99 ms | supervisor CPU µs/job (% of a core) "
            "| supervisor RSS max MB |"
        )
        add("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |")
        for r in long_runs:
            if r.get("status") == "error":
                add(f"| {r['system']} | error: {r.get('error')} | | | | | | | | |")
                continue
            frac = r.get("overhead_fraction")
            mark = "" if r.get("status") == "ok" else f" ({r.get('status')})"
            add(
                f"| {r['system']} | {r['completed']:,}{mark} | {r['wall_s']:.2f} "
                f"| {r['ideal_s']:.2f} | {_fmt(r.get('wall_over_ideal'), 4)} "
                f"| {_fmt(r.get('overhead_per_job_ms'), 2)} "
                f"| {'-' if frac is None else f'{frac * 100:.3f}%'} "
                f"| {_fmt(r.get('gap_p50_ms'), 2)} / {_fmt(r.get('gap_p99_ms'), 2)} "
                f"| {_fmt(r.get('supervisor_cpu_us_per_job'))} "
                f"({_fmt(r.get('supervisor_cpu_pct'), 2)}%) "
                f"| {_fmt(r.get('supervisor_rss_mb_max'), 1)} |"
            )
        add("")
    fresh = result.get("fresh_child") or []
    if fresh:
        add("### A fresh process per job (`--max-jobs-per-child 1`)\n")
        add(
            f"The no-op drain (gate-held, 2 children) of {sizes['fresh_child_jobs']:,} jobs "
            "with `procqueue supervise --max-jobs-per-child 1`: every job runs in a child "
            "started for it. The goal, once a fork server lands, is >= 200 jobs/s.\n"
        )
        add("| backend | done | drain jobs/s | child processes | supervisor CPU µs/job |")
        add("| --- | ---: | ---: | ---: | ---: |")
        for r in fresh:
            if r.get("status") == "error":
                add(f"| {r['system']} | error: {r.get('error')} | | | |")
                continue
            mark = "" if r.get("status") == "ok" else f" ({r.get('status')})"
            add(
                f"| {r['system']} | {r.get('completed', 0):,} / {r.get('expected', 0):,}{mark} "
                f"| {_fmt(r.get('drain_jobs_s'))} | {r.get('child_pids')} "
                f"| {_fmt(r.get('supervisor_cpu_us_per_job'))} |"
            )
        add("")
    if result.get("profiles"):
        add("### Where the supervisor's CPU goes\n")
        add(
            "py-spy (`record --nonblocking --function --threads`, 250 Hz; idle samples "
            "excluded, so the shares are of on-CPU time) sampled the supervisor process during "
            "a gate-held drain of no-op jobs (a run of its own, not "
            "one of the measured ones). Only the main thread, which runs the supervisor's loop, "
            "is counted. Time inside `Connection.wait` is psycopg's C code driving libpq "
            "(sending, receiving and parsing), spent per round trip to the server.\n"
        )
        for p in result["profiles"]:
            if p.get("status") == "error":
                add(f"- {p['system']}: profile failed: {p.get('error')}")
                continue
            add(
                f"**{p['system']}** — {p['jobs']:,} jobs, {p['samples']:,} samples; "
                "drain under the profiler "
                f"{p['drain_jobs_s_under_profiler']:,.0f} jobs/s.\n"
            )
            add("| self time: function (file) | % | | inclusive (callees included) | % |")
            add("| --- | ---: | --- | --- | ---: |")
            left, right = p["self_top"][:15], p["inclusive_top"][:22]
            for i in range(max(len(left), len(right))):
                a = f"`{left[i][0]}` | {left[i][1]}" if i < len(left) else " | "
                b = f"`{right[i][0]}` | {right[i][1]}" if i < len(right) else " | "
                add(f"| {a} | | {b} |")
            add("")
            add(
                "Self time by package: "
                + ", ".join(f"{k} {v}%" for k, v in p["self_by_package"][:8])
                + "\n"
            )
    add("## How it is measured\n")
    add(
        f"""- Every system runs the same job bodies (`scripts/bench_jobs.py`), registered through
  its own API; each job appends one 48-byte record (kind, seq, pid, start and end by
  `time.monotonic()`, the CPU-heavy job's CPU time) to one file with a single `O_APPEND`
  write, and every figure below is computed from those records, so the measurement path is
  identical for all systems.
- Each run gets a clean state — a fresh PostgreSQL schema, a flushed Redis database (db 9), a
  fresh SQLite file — and its own worker processes, which are started, warmed with one
  no-op per slot, and stopped afterwards. Repetitions are interleaved (every system once, then
  again) with a rotated order.
- **throughput_noop**: {sizes["noop_jobs"]:,} no-op jobs are enqueued while both slots are
  held by gate jobs (they wait for a file); the gate opens; drain jobs/s = jobs /
  (last end - gate open). Enqueue jobs/s is the producer's rate, through the batch API where
  the system has one (see below). procqueue's supervisor CPU per job is utime+stime of the
  supervisor process alone (`/proc/PID/stat`, children excluded) across the drain.
- **latency**: one no-op at a time into an idle, warm system (a random 10-30 ms pause
  before each); enqueue call → job start; p50/p99 over up to {sizes["latency_jobs"]} jobs
  (cut after {sizes["latency_budget_s"]:.0f} s of a slow system).
- **cpu_heavy**: {sizes["cpu_jobs"]} jobs of ~50 ms pure-Python CPU each (calibrated loop:
  {result["cpu_job_iterations"]:,} iterations); wall = last end - first enqueue; ideal =
  {sizes["cpu_jobs"]} x 50 ms / 2 slots (see "cpu_heavy in detail" for what the rest is).
- **crashy**: {sizes["crashy_jobs"]:,} short jobs of which every 50th (2%) segfaults
  (`ctypes.string_at(0)`), gate-held like throughput_noop. Every system runs jobs with no
  retries (procqueue `max_attempts=1`). A run ends when every non-crashing job is recorded,
  when the worker processes are gone, after {sizes["stall_s"]:.0f} s without progress, or after
  {sizes["drain_timeout_s"]:.0f} s; what had not completed by then is reported as not
  completed (lost when the workers died; merely late when the run was cut).
- Peers run in their fastest configuration for 2 slots: pgqueuer in one process
  (pgqueuer-2p, two processes, is shown for reference), Huey both on Redis (blocking reads)
  and on PostgreSQL (its SQL storage, polling every 5 ms when idle); see Systems.
- The procqueue-only parts (below "procqueue alone") run once each, after the repetitions:
  children scaling, a large backlog, jobs pending per child, the progress storm, the
  {sizes.get("long_jobs", 2000):,} jobs of {sizes.get("long_job_s", 1.0):g} s on
  {sizes.get("long_children", 8)} children, a fresh process per job, and a py-spy profile.
- PostgreSQL and Redis run on this machine with their default durability
  (PostgreSQL fsync and synchronous_commit as listed below).
"""
    )
    add("## Systems\n")
    add("| system | configuration | batch enqueue | notes |")
    add("| --- | --- | --- | --- |")
    for name, info in result["systems"].items():
        add(
            f"| {name} | {info['title']} "
            f"| {info['batch_api'] or 'none (one call per job)'} | {info['notes']} |"
        )
    add("")
    add("## Versions\n")
    add(", ".join(f"{k} {v}" for k, v in result["versions"].items()) + "\n")
    add("## Reproducing\n")
    add(
        f"""```
python scripts/bench.py            # full: 3 repetitions, about 25 minutes
python scripts/bench.py --quick    # 1 repetition, smaller counts, under 5 minutes
```

The script creates its own virtual environment (`--venv`, default
`/tmp/procqueue-bench-venv`), installs procqueue from this checkout (editable) and the peers
into it, re-runs itself with that interpreter, and starts PostgreSQL and Redis if they are
down. `--systems` and `--workloads` select a subset of the shared workloads (an empty
`--workloads=` runs none); `--extras` selects the procqueue-only parts
({", ".join(EXTRAS)}; empty: none).
"""
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 repetition, smaller counts")
    parser.add_argument("--reps", type=int, help="repetitions (default 3, or 1 with --quick)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset")
    parser.add_argument(
        "--extras",
        default=",".join(EXTRAS),
        help="comma-separated procqueue-only parts to run (empty: none); default all: "
        + ",".join(EXTRAS),
    )
    parser.add_argument("--no-scaling", action="store_true", help="skip scaling and backlog")
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy profile")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="first wait up to S seconds for the 1-minute load average to fall below 1",
    )
    parser.add_argument("--venv", default=str(DEFAULT_VENV), help="the benchmark's own venv")
    parser.add_argument("--work-dir", default="/tmp/procqueue-bench-runs", help="per-run files")
    parser.add_argument("--json", default=str(ROOT / "docs" / "benchmarks.json"))
    parser.add_argument("--md", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--img-dir", default=str(ROOT / "docs" / "img"))
    parser.add_argument(
        "--procqueue-src",
        default=str(ROOT),
        help="procqueue checkout to install (editable) and measure; default this one",
    )
    parser.add_argument(
        "--procqueue-rev",
        help="measure this git revision of procqueue (exported with git archive) instead",
    )
    parser.add_argument(
        "--render",
        metavar="JSON",
        help="only rewrite the markdown and charts from a results file of an earlier run",
    )
    parser.add_argument("--in-venv", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    args.extras = [x.strip() for x in args.extras.split(",") if x.strip()]
    if args.no_scaling:
        args.extras = [x for x in args.extras if x not in ("scaling", "backlog")]
    if args.no_profile:
        args.extras = [x for x in args.extras if x != "profile"]
    unknown = (
        sorted(set(args.systems) - set(SYSTEMS))
        + sorted(set(args.workloads) - set(WORKLOADS))
        + sorted(set(args.extras) - set(EXTRAS))
    )
    if unknown:
        parser.error(f"unknown system, workload or extra: {', '.join(unknown)}")
    if not args.in_venv:
        ensure_services()
        extra: list[str] = []
        if args.procqueue_rev:
            args.procqueue_src = str(export_revision(args.procqueue_rev))
            extra = ["--procqueue-src", args.procqueue_src]
        python = ensure_venv(Path(args.venv), Path(args.procqueue_src).resolve())
        argv_out = [
            str(python),
            str(Path(__file__).resolve()),
            "--in-venv",
            *sys.argv[1:],
            *extra,
        ]
        os.execv(str(python), argv_out)
    sys.path.insert(0, str(SCRIPTS))
    if args.render:
        result = json.loads(Path(args.render).read_text())
        charts = write_charts(result, Path(args.img_dir))
        Path(args.md).write_text(render_markdown(result, charts, Path(args.md).parent))
        say(f"bench: rendered {args.md} and {len(charts)} charts from {args.render}")
        return 0
    ensure_services()
    if args.wait_quiet:
        give_up = time.monotonic() + args.wait_quiet
        while os.getloadavg()[0] >= 1.0 and time.monotonic() < give_up:
            say(f"bench: waiting for a quiet machine (load average {os.getloadavg()[0]:.2f})")
            time.sleep(15)
    result = run_all(args)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1, default=str) + "\n")
    charts = write_charts(result, Path(args.img_dir))
    Path(args.md).write_text(render_markdown(result, charts, Path(args.md).parent))
    say(
        f"bench: wrote {args.json}, {args.md} and {len(charts)} charts "
        f"in {result['elapsed_s']:.0f} s"
    )
    for t in result["targets"]:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        say(f"  target {verdict:<12} {t['target']}: {t['value']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
