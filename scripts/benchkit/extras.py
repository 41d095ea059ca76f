"""The procqueue-only parts, run once each after the repetitions: children scaling, backlog, jobs
pending per child, progress storm, long jobs, a fresh child per job, the py-spy profile.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchkit.measurement import (
    Tracker,
    percentile,
    proc_cpu_fine_s,
    proc_cpu_s,
    proc_rss_mb,
    wait_records,
)
from benchkit.settings import Sizes
from benchkit.workloads import drain, hold_slots, one_line, open_gate, running, warm_up

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
        result.update(status="error", error=one_line(exc))
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
        result.update(status="error", error=one_line(exc))
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
        result.update(status="error", error=one_line(exc))
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
        result.update(status="error", error=one_line(exc))
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
        result.update(status="error", error=one_line(exc))
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
        result.update(status="error", error=one_line(exc))
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
        result.update(status="error", error=one_line(exc))
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
