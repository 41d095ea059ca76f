"""The sections of docs/benchmarks.md under "procqueue alone": the procqueue-only parts."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchkit.formatting import fmt


def children(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """No-op drain rates by number of children."""
    sizes = result["sizes"]
    out: list[str] = []
    add = out.append
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
                f"| {r['system']} | {r['workers']} | {fmt(r.get('drain_jobs_s'))} "
                f"| {fmt(r.get('enqueue_jobs_s'))} | {fmt(r.get('supervisor_cpu_us_per_job'))} |"
            )
        add("")
    return out


def backlog(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """A large backlog pending before the supervisor starts."""
    sizes = result["sizes"]
    out: list[str] = []
    add = out.append
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
                f"| {b['system']} | {b['completed']:,} | {fmt(b.get('enqueue_jobs_s'))} "
                f"| {fmt(b.get('drain_jobs_s'))} "
                f"| {fmt(b.get('first_window_jobs_s'))} → {fmt(b.get('last_window_jobs_s'))} "
                f"| {b['rss_mb_first']:.1f} → {b['rss_mb_at_10pct']:.1f} → {b['rss_mb_last']:.1f} "
                f"({b['rss_mb_max']:.1f}) | {fmt(b.get('supervisor_cpu_us_per_job'))} |"
            )
        add("")
    return out


def scaling_chart(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """The chart of the children table."""
    out: list[str] = []
    add = out.append
    for chart in charts:
        if chart.name == "bench-scaling.png":
            add(f"![{chart.stem}]({os.path.relpath(chart, md_dir)})\n")
    return out


def pending(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """Supervisor CPU and memory by jobs pending per child."""
    out: list[str] = []
    add = out.append
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
                f"| {fmt(r.get('drain_jobs_s'))}{mark} "
                f"| {fmt(r.get('supervisor_cpu_us_per_job'))} "
                f"| {fmt(r.get('rss_mb_idle'), 1)} | {fmt(r.get('rss_mb_pending'), 1)} "
                f"| {fmt(r.get('supervisor_rss_mb_max'), 1)} |"
            )
        add("")
        for chart in charts:
            if chart.name == "bench-pending.png":
                add(f"![{chart.stem}]({os.path.relpath(chart, md_dir)})\n")
    return out


def storm(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """The progress storm: its CPU cost and other jobs' latency meanwhile."""
    sizes = result["sizes"]
    out: list[str] = []
    add = out.append
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
                f"| {r['system']} | {fmt(r.get('progress_calls_per_s'))} "
                f"| {fmt(r['idle_cpu_pct'], 1)} → {fmt(r['storm_cpu_pct'], 1)} "
                f"(**{fmt(r['storm_cost_pct'], 1)}**) "
                f"| {fmt(r.get('storm_with_probes_cpu_pct'), 1)} "
                f"| {fmt(r.get('probes_alone_cpu_pct'), 1)} "
                f"| {fmt(r.get('probe_p50_ms_during_storm'), 2)} / "
                f"{fmt(r.get('probe_p99_ms_during_storm'), 2)} "
                f"(n={r.get('probes_during_storm')}) "
                f"| {fmt(r.get('probe_p50_ms_without_storm'), 2)} / "
                f"{fmt(r.get('probe_p99_ms_without_storm'), 2)} "
                f"(n={r.get('probes_without_storm')}) |"
            )
        add("")
    return out


def long_jobs(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """Overhead per job of 1-second jobs on 8 children."""
    out: list[str] = []
    add = out.append
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
                f"| {r['ideal_s']:.2f} | {fmt(r.get('wall_over_ideal'), 4)} "
                f"| {fmt(r.get('overhead_per_job_ms'), 2)} "
                f"| {'-' if frac is None else f'{frac * 100:.3f}%'} "
                f"| {fmt(r.get('gap_p50_ms'), 2)} / {fmt(r.get('gap_p99_ms'), 2)} "
                f"| {fmt(r.get('supervisor_cpu_us_per_job'))} "
                f"({fmt(r.get('supervisor_cpu_pct'), 2)}%) "
                f"| {fmt(r.get('supervisor_rss_mb_max'), 1)} |"
            )
        add("")
    return out


def fresh_child(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """The no-op drain with a fresh child per job."""
    sizes = result["sizes"]
    out: list[str] = []
    add = out.append
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
        out.extend(
            _rows(
                fresh,
                lambda r: r["system"],
                lambda r, mark: [
                    f"{r.get('completed', 0):,} / {r.get('expected', 0):,}{mark}",
                    fmt(r.get("drain_jobs_s")),
                    str(r.get("child_pids")),
                    fmt(r.get("supervisor_cpu_us_per_job")),
                ],
            )
        )
        add("")
    return out


def profile(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """Where the supervisor's CPU goes, from py-spy."""
    out: list[str] = []
    add = out.append
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
    return out


COST_ROWS = (
    ("round trips", "round trips (the supervisor's waits for PostgreSQL: `poll` calls)", 2),
    ("sends", "client sends (`sendto` calls)", 2),
    ("statements", "SQL statements (an `executemany` counts each row)", 2),
    ("commits", "commits (`pg_stat_database.xact_commit` delta)", 2),
    ("transactions", "transactions (SQLite: the store's `BEGIN IMMEDIATE`s)", 2),
    ("WAL bytes", "WAL bytes (cluster-wide LSN delta: an upper bound on a shared server)", 0),
    ("supervisor µs", "supervisor CPU µs, all threads", 0),
    ("supervisor main loop µs", "… main loop thread", 0),
    ("supervisor database thread µs", "… database thread", 0),
    ("supervisor other threads µs", "… other threads", 0),
    ("children µs", "children CPU µs (job, protocol, runner)", 0),
    ("PostgreSQL backends µs", "PostgreSQL backends' CPU µs (the supervisor's and listener)", 0),
    ("frames to children", "protocol frames to children", 2),
    ("frames from children", "protocol frames from children", 2),
)


def cost(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """Where the time goes per job: counts and CPU, drained and at idle."""
    runs = [r for r in result.get("cost", []) if r.get("status") == "ok"]
    out: list[str] = []
    add = out.append
    if not runs and not result.get("cost"):
        return out
    add("### Where the time goes, per job\n")
    add(
        "From `--extras cost`: the supervisor runs under `scripts/benchkit/counted.py` "
        "(statement, commit and frame counters, read with SIGUSR1); CPU is each thread's "
        "`/proc/PID/task/TID/schedstat` run time, the children's and the PostgreSQL "
        "backends' likewise (the backends whose client port is one of the supervisor's "
        "sockets). "
        "*drained*: a gate-held drain of "
        f"{runs[0]['jobs'] if runs else '-':,} no-op jobs; *idle*: "
        f"{runs[0]['idle_jobs'] if runs else '-'} jobs enqueued one at a time into an idle "
        "supervisor (enqueue → start → outcome). Round trips and sends come from a second "
        "pass under `strace` (no CPU taken from it).\n"
    )
    for r in result.get("cost", []):
        if r.get("status") != "ok":
            add(f"- {r['system']}: {r.get('error', r.get('status'))}")
    if not runs:
        add("")
        return out
    head = " | ".join(f"{r['system']} {phase}" for r in runs for phase in ("drained", "idle"))
    add(f"| per job | {head} |")
    add("| --- |" + " ---: |" * (2 * len(runs)))
    for key, label, digits in COST_ROWS:
        cells = [
            fmt(r.get(phase, {}).get(key), digits) for r in runs for phase in ("drain", "idle")
        ]
        if any(c != "-" for c in cells):
            add(f"| {label} | " + " | ".join(cells) + " |")
    add("")
    return out


def scale(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """Claims with a million pending or finished rows in the table, and their plans."""
    runs = result.get("scale", [])
    out: list[str] = []
    add = out.append
    if not runs:
        return out
    add("### Claims against a large table (PostgreSQL)\n")
    add(
        "From `--extras scale`: a no-op drain of the 5,000 jobs of a window with the table "
        "otherwise empty, with pending jobs behind them in claim order, and with finished "
        "jobs beside them (as many as the first column says; marked done in one UPDATE, then "
        "`VACUUM ANALYZE` as autovacuum would); the supervisor is stopped (SIGSTOP) while the "
        "table fills. "
        "*claim query ms*: `EXPLAIN (ANALYZE, BUFFERS)` of `job_candidates` (LIMIT 32) just "
        "before the drain, in its generic plan and without JIT (`plan_cache_mode = "
        "force_generic_plan`, `jit = off`, as a supervisor's claims run it: planned once per "
        "connection, whatever the parameters).\n"
    )
    add(
        "| table | drain jobs/s | supervisor CPU µs/job | claim query ms | index-driven "
        "(no Seq Scan on jobs) |"
    )
    add("| --- | ---: | ---: | ---: | --- |")
    out.extend(
        _rows(
            runs,
            _table,
            lambda r, mark: [
                fmt(r.get("drain_jobs_s")) + mark,
                fmt(r.get("supervisor_cpu_us_per_job")),
                fmt(r.get("plan_ms"), 2),
                "yes" if r.get("index_driven") else "**no**",
            ],
        )
    )
    add("")
    for r in runs:
        if r.get("plan"):
            what = _table(r)
            add(f"<details><summary>plan, {what}</summary>\n\n```")
            add("\n".join(r["plan"]))
            add("```\n</details>\n")
    return out


def prune(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """Claims while retention pruning deletes finished rows, against claims alone."""
    runs = result.get("prune", [])
    out: list[str] = []
    add = out.append
    if not runs:
        return out
    add("### Claims while retention pruning runs (PostgreSQL)\n")
    add(
        "From `--extras prune`: the supervisor (2 children, `--retention-days 1`) drains the "
        "5,000 no-op jobs of a window while it prunes finished jobs that are past their "
        "retention (enqueued, marked done two days ago in one UPDATE, then `VACUUM ANALYZE`; "
        "the supervisor is stopped with SIGSTOP meanwhile, and its prune chore made due for "
        "its first maintenance pass after SIGCONT); the first row is the same drain with "
        "nothing to prune, in the same run. The supervisor deletes in bounded batches "
        f"({_prune_batch(runs)} rows a transaction) on the thread that also runs its claims "
        "and outcomes. "
        "*rows pruned/s*: the rows over the time from SIGCONT until none is left (polled 10 "
        "times a second); *left*: the rows past their retention still there when the window "
        "had drained; *longest prune transaction seen*: the longest a prune transaction was "
        "seen running in `pg_stat_activity` sampled 10 times a second (a lower bound of the "
        "longest).\n"
    )
    add(
        "| rows to prune | drain jobs/s | vs nothing to prune | supervisor CPU µs/job "
        "| rows pruned/s | left when the window had drained | longest prune transaction "
        "seen ms |"
    )
    add("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = next((r.get("drain_jobs_s") for r in runs if r["rows"] == 0), None)
    out.extend(
        _rows(
            runs,
            lambda r: f"{r['rows']:,}",
            lambda r, mark: [
                fmt(r.get("drain_jobs_s")) + mark,
                fmt(r["drain_jobs_s"] / base, 2) if base and r.get("drain_jobs_s") else "-",
                fmt(r.get("supervisor_cpu_us_per_job")),
                fmt(r.get("pruned_rows_s"))
                + ("" if r.get("prune_status", "ok") == "ok" else f" ({r['prune_status']})"),
                fmt(r.get("left_after_window")),
                fmt(r.get("longest_prune_ms_seen"), 1),
            ],
        )
    )
    add("")
    return out


def _prune_batch(runs: list[dict[str, Any]]) -> str:
    """The supervisor's prune batch as the runs recorded it."""
    return next((f"{r['prune_batch']:,}" for r in runs if r.get("prune_batch")), "-")


def cluster(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """4 supervisors on one schema against 1, with the same children in all."""
    runs = result.get("cluster", [])
    out: list[str] = []
    add = out.append
    if not runs:
        return out
    add("### Several supervisors on one PostgreSQL\n")
    add(
        f"From `--extras cluster`: a no-op drain of {runs[0]['jobs']:,} jobs by 1 supervisor "
        "with 4 children, then by 4 supervisors with 1 child each on the same schema (a fresh "
        "one for each): the same 4 children in all. Gate jobs cannot hold one child of each "
        "supervisor (a supervisor claims jobs ahead for its children), so no-op jobs run "
        "until every child has run one, the supervisors are stopped (SIGSTOP) while the "
        "jobs are enqueued, and the drain counts from SIGCONT to the last job's end. "
        "*supervisors' CPU*: utime+stime of every supervisor process (`/proc/PID/stat`, "
        "children excluded), summed, over the drain; *run twice*: seqs recorded more than "
        "once (must be 0); *claim-lock waits*: the share of `pg_stat_activity` samples (10 a "
        "second, during the drain) in which a connection of the schema waited for the "
        "advisory lock every claim takes first.\n"
    )
    add(
        "| supervisors x children | drain jobs/s | vs 1 supervisor | supervisors' CPU µs/job "
        "| run twice | samples with a claim-lock waiter |"
    )
    add("| --- | ---: | ---: | ---: | ---: | ---: |")
    out.extend(
        _rows(
            runs,
            lambda r: f"{r['supervisors']} x {r['children']}",
            lambda r, mark: [
                fmt(r.get("drain_jobs_s")) + mark,
                "1.00" if r["supervisors"] == 1 else fmt(r.get("drain_vs_one"), 2),
                fmt(r.get("supervisors_cpu_us_per_job")),
                "**0**" if r.get("duplicates") == 0 else f"**{r.get('duplicates')}** (not 0)",
                f"{fmt(r.get('claim_lock_wait_fraction', 0) * 100, 1)}% of {r.get('lock_samples')}",
            ],
        )
    )
    add("")
    return out


def _table(r: dict[str, Any]) -> str:
    """A scale case's table in words."""
    return "empty" if r["case"] == "empty" else f"{r['rows']:,} {r['case']}"


def _rows(
    runs: list[dict[str, Any]],
    first: Callable[[dict[str, Any]], str],
    cells: Callable[[dict[str, Any], str], list[str]],
) -> list[str]:
    """A table row per run: `first`, then `cells` (given the run's status mark, empty
    when it ended ok), or its error across the row."""
    rows = []
    for r in runs:
        if r.get("status") == "error":
            rows.append(f"| {first(r)} | error: {r.get('error')} |")
            continue
        mark = "" if r.get("status") == "ok" else f" ({r.get('status')})"
        rows.append(f"| {first(r)} | " + " | ".join(cells(r, mark)) + " |")
    return rows
