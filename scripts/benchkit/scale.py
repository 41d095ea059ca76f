"""Claims against a large table (``--extras scale``, PostgreSQL): a no-op drain of
`WINDOW` jobs with an otherwise empty table, with a million pending jobs behind them in
claim order, and with a million finished jobs beside them; each with the claim query's
``EXPLAIN (ANALYZE, BUFFERS)`` plan just before the drain.

The supervisor is stopped (SIGSTOP) while the table is filled. Finished rows are enqueued
and then marked done in one UPDATE of the benchmark's own schema; every case ends its
filling with ``VACUUM ANALYZE``, as autovacuum would in the steady state.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from benchkit.measurement import Tracker, proc_cpu_fine_s, wait_records
from benchkit.settings import Sizes
from benchkit.workloads import one_line, running, warm_up

WINDOW = 5000


def _fill(adapter: Any, rows: int, first_seq: int) -> float:
    """Enqueues `rows` no-op jobs in chunks; the rate, jobs/s."""
    t0 = time.monotonic()
    chunk = 50_000
    for i in range(0, rows, chunk):
        top = min(rows, i + chunk)
        adapter.enqueue_batch("noop", [{"seq": first_seq + s} for s in range(i, top)])
    return rows / (time.monotonic() - t0)


def _plan(schema: str) -> tuple[list[str], float | None]:
    """The claim query's plan now (its row locks rolled back) and its execution ms: the
    generic plan, made once per connection, that a supervisor's claims run (`Tx.plan_once`)."""
    import psycopg
    from bench_peers import base
    from psycopg import sql

    from procqueue.store.postgres import _Q

    query = _Q["job_candidates"]
    for n, name in enumerate(("now", "queues", "limit"), 1):
        query = query.replace(f"%({name})s", f"${n}")
    with psycopg.connect(base.pg_conninfo(schema)) as conn:
        # as a supervisor's claim runs: a generic plan, and no JIT (the store's sessions)
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.execute("SET LOCAL jit = off")
        conn.execute(f"PREPARE procqueue_candidates (float8, text[], bigint) AS {query}")
        explain = sql.SQL(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE procqueue_candidates ({}, NULL, 32)"
        )  # a utility statement: no parameters, the value as a literal
        rows = conn.execute(explain.format(sql.Literal(time.time()))).fetchall()
        conn.rollback()
    lines = [r[0] for r in rows]
    ms = next(
        (float(x.split(":")[1].split()[0]) for x in lines if x.startswith("Execution Time")),
        None,
    )
    return lines, ms


def _vacuum(schema: str) -> None:
    import psycopg
    from bench_peers import base

    with psycopg.connect(base.pg_conninfo(schema), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE jobs")


def _finish_all(schema: str, at: float | None = None) -> None:
    """Marks every pending job of the benchmark's schema done, finished at `at` (epoch
    seconds; default now)."""
    import psycopg
    from bench_peers import base

    with psycopg.connect(base.pg_conninfo(schema), autocommit=True) as conn:
        conn.execute(
            "UPDATE jobs SET state = 'done', finished_at = %s, attempts = 1 "
            "WHERE state = 'pending'",
            (time.time() if at is None else at,),
        )


def _window(tracker: Tracker) -> list[Any]:
    tracker.poll()
    return [r for r in tracker.records if r.kind == "noop" and 0 <= r.seq < WINDOW]


def run_scale(name: str, cls: Any, work_dir: Path, sizes: Sizes, rows: int) -> list[dict[str, Any]]:
    """The three cases in turn, with `rows` pending or finished rows."""
    return [
        run_scale_case(name, cls, work_dir, sizes, case, rows)
        for case in ("empty", "pending", "finished")
    ]


def run_scale_case(
    name: str, cls: Any, work_dir: Path, sizes: Sizes, case: str, rows: int
) -> dict[str, Any]:
    """One case (``empty``, ``pending`` or ``finished``): the window's drain rate and the
    supervisor's CPU per job, with the claim plan."""
    result: dict[str, Any] = {"system": name, "case": case, "rows": rows if case != "empty" else 0}
    started = time.monotonic()
    try:
        with running(cls, work_dir, f"{name}-scale-{case}") as adapter:
            tracker = Tracker(adapter.bench_dir)
            warm_up(adapter, tracker, sizes)
            schema = adapter.schema
            pid = adapter.main_pid()
            # the supervisor is held off every job until the table is filled
            adapter.procs[0].send_signal(signal.SIGSTOP)
            try:
                if case == "finished":
                    result["fill_jobs_s"] = _fill(adapter, rows, 10_000_000)
                    _finish_all(schema)
                _fill(adapter, WINDOW, 0)
                if case == "pending":  # behind the window in claim order
                    result["fill_jobs_s"] = _fill(adapter, rows, 1_000_000)
                _vacuum(schema)
                result["plan"], result["plan_ms"] = _plan(schema)
            finally:
                adapter.procs[0].send_signal(signal.SIGCONT)
            cpu0, t0 = proc_cpu_fine_s(pid), time.monotonic()
            waited = wait_records(
                tracker,
                lambda: len(_window(tracker)) >= WINDOW,
                adapter=adapter,
                timeout=sizes.drain_timeout_s * 8,
                stall_s=sizes.stall_s,
            )
            done = _window(tracker)
            first = min((r.start for r in done), default=t0)
            last = max((r.end for r in done), default=t0)
            result["status"] = waited.status
            result["drain_jobs_s"] = len(done) / max(last - first, 1e-9)
            result["supervisor_cpu_us_per_job"] = (
                (proc_cpu_fine_s(pid) - cpu0) / max(1, len(done)) * 1e6
            )
            result["index_driven"] = not any("Seq Scan on jobs" in x for x in result["plan"])
    except Exception as exc:
        result.update(status="error", error=one_line(exc))
    result["seconds"] = time.monotonic() - started
    return result
