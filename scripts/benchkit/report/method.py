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
- Each peer runs in the configuration `python scripts/bench.py --sweep` found fastest for the
  no-op drain (every configuration its adapter lists, short drains, interleaved
  repetitions; see Peer configurations): worker counts above the 2 cores are allowed, so a
  peer may use more processes or threads than procqueue's 2 children. Where that is not its
  2-slot configuration, the 2-slot one runs as an extra `-2slot` row (no-op drain and latency
  only), never as the headline. CPU-heavy and crashy run each peer's configuration with 2
  workers (the workloads are defined for 2 slots). Huey on PostgreSQL is Huey 3's own
  `PostgresHuey` (`pg_notify` wake-up, `SKIP LOCKED`); see Systems.
- A drain counts from the gate's opening or from the first no-op's start, whichever is
  earlier (pgqueuer with unbounded concurrency runs no-ops beside its gate jobs).
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
    add("| system | set-up | configuration | batch enqueue | notes |")
    add("| --- | --- | --- | --- | --- |")
    for name, info in result["systems"].items():
        add(
            f"| {name} | {info['title']} | {info.get('config', '')} "
            f"| {info['batch_api'] or 'none (one call per job)'} | {info['notes']} |"
        )
    add("")
    return out


def configurations(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """What each peer's sweep measured per configuration, and which one the run used."""
    sweep = result.get("sweep")
    out: list[str] = []
    add = out.append
    add("## Peer configurations\n")
    if not sweep:
        add(
            "No sweep was found (`--sweep-json`): every peer ran its first, 2-slot "
            "configuration, which is not necessarily its fastest.\n"
        )
        return out
    add(
        f"From `python scripts/bench.py --sweep` on {sweep['generated']} "
        f"({sweep['reps']} interleaved repetitions of a {sweep['noop_jobs']:,}-job no-op drain "
        f"per configuration, {sweep['elapsed_s']:.0f} s; "
        "[benchmarks-sweep.json](benchmarks-sweep.json)). The fastest median of each peer "
        "(**bold**) is the configuration of its row above.\n"
    )
    add("| peer | configuration | no-op drain jobs/s | runs finished |")
    add("| --- | --- | ---: | ---: |")
    for system, configs in sweep["configs"].items():
        for label, e in configs.items():
            rate = "-" if e["median"] is None else f"{e['median']:,.0f}"
            if e["median"] is not None and e["min"] != e["max"]:
                rate += f" <sub>[{e['min']:,.0f}-{e['max']:,.0f}]</sub>"
            if e["knobs"] == sweep["winners"].get(system):
                label, rate = f"**{label}**", f"**{rate}**"
            add(f"| {system} | {label} | {rate} | {e['finished']} of {e['runs']} |")
    add("")
    return out


def not_measured(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """What issue 20 asks for that this page does not measure yet, and the parts skipped."""
    out: list[str] = []
    add = out.append
    add("## Not measured here\n")
    skipped = [x for x in EXTRAS if not _ran(result, x)]
    if skipped:
        add(f"- procqueue-only parts not run in this run (`--extras`): {', '.join(skipped)}.")
    scale = [what for extra, what in SCALE_PARTS.items() if not _ran(result, extra)]
    if scale:
        add(f"- Scale (issue 20, deliver 4), not run in this run: {'; '.join(scale)}.")
    if not skipped and not scale:
        add("- Every procqueue-only part ran in this run.")
    add("")
    return out


SCALE_PARTS = {
    "scale": "claims against a million pending or finished rows (`--extras scale`)",
    "prune": "retention pruning of a million rows in bounded batches beside claims "
    "(`--extras prune`)",
    "cluster": "4 supervisors on one PostgreSQL against 1 (`--extras cluster`)",
}
"""What issue 20's scale deliverable asks for, by the extra that measures it."""


def _ran(result: dict[str, Any], extra: str) -> bool:
    key = {"profile": "profiles", "fresh_child": "fresh_child"}.get(extra, extra)
    return bool(result.get(key))


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
python scripts/bench.py --sweep    # each peer's fastest configuration, about 10 minutes
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
