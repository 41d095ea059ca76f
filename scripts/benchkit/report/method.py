"""The closing sections of docs/benchmarks.md: method, systems, versions, how to reproduce."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchkit.settings import EXTRAS


def how_measured(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """How every figure is measured."""
    sizes = result["sizes"]
    out: list[str] = []
    add = out.append
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
    return out


def systems_table(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """Each system's configuration and batch API."""
    out: list[str] = []
    add = out.append
    add("## Systems\n")
    add("| system | configuration | batch enqueue | notes |")
    add("| --- | --- | --- | --- |")
    for name, info in result["systems"].items():
        add(
            f"| {name} | {info['title']} "
            f"| {info['batch_api'] or 'none (one call per job)'} | {info['notes']} |"
        )
    add("")
    return out


def versions(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """The versions of everything measured."""
    out: list[str] = []
    add = out.append
    add("## Versions\n")
    add(", ".join(f"{k} {v}" for k, v in result["versions"].items()) + "\n")
    return out


def reproducing(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """How to run the benchmark again."""
    out: list[str] = []
    add = out.append
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
    return out
