"""The shared workloads, run the same way for every system: warm-up, gate-held drains, latency
probes, CPU-heavy and crashing jobs.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import os
import random
import shutil
import statistics
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from benchkit.measurement import (
    Tracker,
    percentile,
    pg_transactions,
    proc_cpu_fine_s,
    proc_rss_mb,
    proc_times,
    wait_records,
)
from benchkit.settings import CPU_JOB_S, CRASH_EVERY, Sizes

# -- one run: a system, a workload, a clean state ---------------------------------------


ADAPTERS = {
    "procqueue-pg": ("pq", "ProcqueuePg"),
    "procqueue-sqlite": ("pq", "ProcqueueSqlite"),
    "pgqueuer": ("pgqueuer_peer", "PgqueuerAdapter"),
    "procrastinate": ("procrastinate_peer", "ProcrastinateAdapter"),
    "celery": ("celery_peer", "CeleryAdapter"),
    "rq": ("rq_peer", "RqAdapter"),
    "huey-redis": ("huey_peer", "HueyAdapter"),
    "huey-pg": ("huey_pg_peer", "HueyPgAdapter"),
}
"""Each system's adapter as (module of bench_peers, class)."""
TWO_SLOT = "-2slot"
"""The suffix of a peer's extra row in its 2-slot configuration (when a sweep found
another one faster)."""


def adapter_classes(names: Iterable[str]) -> dict[str, Any]:
    """The adapter classes of the systems named (a ``-2slot`` row is its peer's class); only
    their peers' modules are imported."""
    classes = {}
    for name in names:
        module, cls = ADAPTERS[name.removesuffix(TWO_SLOT)]
        classes[name] = getattr(importlib.import_module(f"bench_peers.{module}"), cls)
    return classes


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


def hold_slots(adapter: Any, tracker: Tracker, first_seq: int = 0) -> None:
    """Fills every worker slot with a gate job (numbered from `first_seq`) and waits until
    all of them run."""
    gates = adapter.gates()
    for i in range(gates):
        adapter.enqueue("gate", {"seq": first_seq + i})
    waited = wait_records(
        tracker,
        lambda: len(tracker.of("gatein", min_seq=first_seq)) >= gates,
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
    # a system whose gate jobs do not hold all of its capacity (pgqueuer unbounded runs
    # no-ops on its event loop beside them) starts before the gate opens: count from there
    opened = min([opened, *(r.start for r in done)])
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
    name: str,
    cls: Any,
    workload: str,
    rep: int,
    work_dir: Path,
    sizes: Sizes,
    n_iter: int,
    knobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One system through one workload in a fresh state, in the configuration `knobs`
    (default: its first); an exception becomes a result of status ``error``."""
    started = time.monotonic()
    result: dict[str, Any] = {
        "system": name,
        "workload": workload,
        "rep": rep,
        "knobs": knobs or {},
        "loadavg_1m_before": round(os.getloadavg()[0], 2),
    }
    try:
        with running(cls, work_dir, f"{name}-{workload}-{rep}", knobs=knobs or {}) as adapter:
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
        result.update(status="error", error=one_line(exc))
    result["seconds"] = time.monotonic() - started
    return result


def one_line(exc: BaseException) -> str:
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
