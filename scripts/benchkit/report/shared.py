"""The sections of docs/benchmarks.md over every system: header, goals, results and the
per-workload details.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

from benchkit.formatting import cell, fmt
from benchkit.settings import PQ_SYSTEMS


def header(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """The title, the command and revision measured, the machine and its load."""
    reps = result["sizes"]["reps"]
    out: list[str] = []
    add = out.append
    add("# Benchmarks: procqueue and its peers\n")
    add(
        f"Produced by `{result['command']}` on {result['generated']} ({result['mode']} run: "
        f"{reps} repetition{'s' if reps > 1 else ''}, interleaved; {result['elapsed_s']:.0f} s). "
        f"procqueue revision {result['revision']}. Raw figures of every run: "
        "[benchmarks.json](benchmarks.json). Numbers are `median [min-max]` over the "
        "repetitions. procqueue runs 2 children on the 2-core machine; each peer runs in the "
        "configuration its sweep found fastest for the no-op drain (named in every row, see "
        "Peer configurations), with its 2-slot configuration as an extra `-2slot` row where "
        "that is another; CPU-heavy and crashy run every system on 2 workers.\n"
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
    return out


def goals(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """Each goal with the value measured and its verdict."""
    out: list[str] = []
    add = out.append
    add("## Goals\n")
    add(
        "Each goal with the value measured in this run and whether it is met. *issue 20*: the "
        "goals of the speed issue against every peer at its fastest (ratios from the same "
        "repetition); a goal not met names the figures of the cost table (Where the time "
        "goes) that bound it. *reference*: a goal stated for later work (not expected to hold "
        "yet); *earlier*: targets of earlier issues that issue 20 did not replace.\n"
    )
    add("| goal | measured | verdict | from |")
    add("| --- | --- | --- | --- |")
    for t in result["targets"]:
        verdict = {True: "**met**", False: "**not met**", None: "not measured"}[t["met"]]
        value = "-" if t["value"] is None else t["value"]
        add(f"| {t['target']} | {value} ({t['detail']}) | {verdict} | {t.get('source', '')} |")
    add("")
    return out


def results(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """One row per system over the shared workloads, and the shared charts."""
    s = result["summary"]
    systems = list(result["systems"])
    out: list[str] = []
    add = out.append
    add("## Results\n")
    add(
        "| system | configuration | store | no-op drain jobs/s | enqueue jobs/s "
        "| supervisor CPU µs/job | latency p50 ms | latency p99 ms | cpu_heavy wall/ideal "
        "| crashy drain jobs/s | crashy: non-crashing jobs done |"
    )
    add("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
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
            lo, hi = fmt(done["min"]), fmt(done["max"])
            counted = f"{lo} of {expected}" if lo == hi else f"{lo}-{hi} of {expected}"
            verdict = (
                f"all in {sum(flags)} of {len(flags)} runs; {counted}" if any(flags) else counted
            )
            if any(st == "timeout" for st in crash.get("statuses", [])):
                verdict += " when cut"
            if not all(crash.get("worker_alive", [True])):
                verdict += ", worker process died"
        info = result["systems"][name]
        config = info.get("config", "")
        if info.get("config_two_slots", config) != config and not name.endswith("-2slot"):
            config += f" (cpu_heavy, crashy: {info['config_two_slots']})"
        add(
            f"| {name} | {config} | {info['store']} "
            f"| {cell(s, 'throughput_noop', name, 'drain_jobs_s')} "
            f"| {cell(s, 'throughput_noop', name, 'enqueue_jobs_s')} "
            f"| {cell(s, 'throughput_noop', name, 'supervisor_cpu_us_per_job')} "
            f"| {cell(s, 'latency', name, 'p50_ms', 2)} "
            f"| {cell(s, 'latency', name, 'p99_ms', 2)} "
            f"| {cell(s, 'cpu_heavy', name, 'wall_over_ideal', 2)} "
            f"| {cell(s, 'crashy', name, 'drain_jobs_s')} | {verdict} |"
        )
    add("")
    add(
        "† a run of this workload did not finish (cut at its time limit, stalled, or the "
        "worker process died): a rate then counts the jobs done in the time the run had, "
        "except in crashy, where no rate is given for a run whose workers died or stalled. "
        "See the per-run tables below and the JSON. Supervisor CPU is procqueue's supervisor "
        "process alone (children excluded) over the no-op drain; the peers have no such "
        "process apart from their workers, so it is not given for them. A `-2slot` row runs "
        "only the no-op drain and latency workloads.\n"
    )
    for chart in charts:
        if chart.name not in ("bench-scaling.png", "bench-pending.png"):
            add(f"![{chart.stem}]({os.path.relpath(chart, md_dir)})\n")
    return out


def ratios(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """procqueue's figures over each peer's, within the same repetition."""
    s = result["summary"]
    systems = list(result["systems"])
    out: list[str] = []
    add = out.append
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
    return out


def cost_per_job(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """Supervisor CPU and PostgreSQL transactions per no-op job."""
    s = result["summary"]
    systems = list(result["systems"])
    out: list[str] = []
    add = out.append
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
            cell(s, "throughput_noop", name, key, digits)
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
    return out


def cpu_heavy(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """Where the cpu_heavy wall time goes, per system."""
    s = result["summary"]
    systems = list(result["systems"])
    out: list[str] = []
    add = out.append
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
            else cell(s, "cpu_heavy", name, "gap_p50_ms", 1)
        )
        add(
            f"| {name} | {cell(s, 'cpu_heavy', name, 'wall_over_ideal', 2)} "
            f"| {cell(s, 'cpu_heavy', name, 'wall_over_measured_work', 2)} "
            f"| {cell(s, 'cpu_heavy', name, 'wall_over_job_cpu', 2)} "
            f"| {cell(s, 'cpu_heavy', name, 'mean_job_ms', 0)} "
            f"| {cell(s, 'cpu_heavy', name, 'mean_job_cpu_ms', 0)} "
            f"| {gap} | {cell(s, 'cpu_heavy', name, 'first_start_ms', 1)} |"
        )
    add("")
    return out


def crashy(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """Every crashy run: what completed, what was lost, how it ended."""
    out: list[str] = []
    add = out.append
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
    return out


def failed_runs(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """The runs that raised, if any."""
    out: list[str] = []
    add = out.append
    errors = [r for r in result["runs"] if r.get("status") == "error"]
    if errors:
        add("### Runs that failed\n")
        for r in errors:
            add(f"- {r['system']} {r['workload']} rep {r['rep']}: {r['error']}")
        add("")
    return out
