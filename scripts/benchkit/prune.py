"""Retention pruning beside claims (``--extras prune``, PostgreSQL): the no-op drain of the
`WINDOW` jobs of ``scale`` while the supervisor prunes `rows` finished jobs past their
retention, against the same drain with nothing to prune.

The supervisor runs with ``--retention-days 1`` and is stopped (SIGSTOP) while the table is
filled: the rows are enqueued, marked done two days ago in one UPDATE, the window enqueued
behind them, then ``VACUUM ANALYZE``. The supervisor took the prune chore when it started
(nothing to prune then) and takes it again only an hour later; the benchmark makes it due
again before SIGCONT, so pruning starts at the supervisor's first maintenance pass after it,
with the window's claims. The supervisor deletes in bounded batches (its ``PRUNE_BATCH``
rows a transaction) on the thread that also runs its claims.
"""

from __future__ import annotations

import signal
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from benchkit.measurement import Activity, Tracker, proc_cpu_fine_s, wait_records
from benchkit.scale import WINDOW, _fill, _finish_all, _vacuum, _window
from benchkit.settings import Sizes
from benchkit.workloads import one_line, running, warm_up

RETENTION_DAYS = 1
FINISHED_AGO_S = 2 * 86400.0
"""How long before the run the rows to prune finished: past the retention."""


def _prune_due(schema: str) -> None:
    """Makes the prune chore due at the supervisor's next maintenance pass."""
    import psycopg
    from bench_peers import base

    with psycopg.connect(base.pg_conninfo(schema), autocommit=True) as conn:
        conn.execute("UPDATE chores SET last_run = 0 WHERE name = 'prune'")


class _Expired:
    """The finished jobs of one schema past the retention, on a connection of its own."""

    def __init__(self, schema: str) -> None:
        import psycopg
        from bench_peers import base

        self.conn = psycopg.connect(base.pg_conninfo(schema), autocommit=True)
        self.before = time.time() - RETENTION_DAYS * 86400
        self.gone_at: float | None = None
        """When `poll` first found none left (monotonic), or None."""
        self.next_at = 0.0

    def count(self) -> int:
        """How many are left (an exact count)."""
        row = self.conn.execute(
            "SELECT count(*) FROM jobs WHERE state = 'done' AND finished_at < %s", (self.before,)
        ).fetchone()
        return int(row[0]) if row else 0

    def poll(self, every: float = 0.1) -> None:
        """Sets `gone_at` once none is left; asks at most every `every` seconds: one index
        probe where the prune's own scans start (their deleted entries are marked dead)."""
        now = time.monotonic()
        if self.gone_at is not None or now < self.next_at:
            return
        self.next_at = now + every
        row = self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'done' AND finished_at < %s)",
            (self.before,),
        ).fetchone()
        if row and not row[0]:
            self.gone_at = now

    def close(self) -> None:
        self.conn.close()


def run_prune(name: str, cls: Any, work_dir: Path, sizes: Sizes, rows: int) -> list[dict[str, Any]]:
    """The baseline (nothing to prune), then `rows` to prune."""
    return [run_prune_case(name, cls, work_dir, sizes, r) for r in (0, rows)]


def run_prune_case(name: str, cls: Any, work_dir: Path, sizes: Sizes, rows: int) -> dict[str, Any]:
    """The window's drain rate and the supervisor's CPU per job with `rows` to prune; with
    rows, how many were left when the window had drained, the rate of the whole prune and
    the longest prune transaction seen (``pg_stat_activity`` sampled 10 times a second: a
    lower bound of the longest)."""
    from procqueue.supervisor.maintenance import PRUNE_BATCH

    result: dict[str, Any] = {"system": name, "rows": rows, "prune_batch": PRUNE_BATCH}
    started = time.monotonic()
    try:
        with running(
            cls,
            work_dir,
            f"{name}-prune-{rows}",
            supervise_args=["--retention-days", str(RETENTION_DAYS)],
        ) as adapter:
            tracker = Tracker(adapter.bench_dir)
            warm_up(adapter, tracker, sizes)
            schema = adapter.schema
            with closing(Activity(schema)) as activity, closing(_Expired(schema)) as expired:
                # the supervisor is held off every job and chore until the table is filled
                adapter.procs[0].send_signal(signal.SIGSTOP)
                try:
                    if rows:
                        result["fill_jobs_s"] = _fill(adapter, rows, 10_000_000)
                        _finish_all(schema, at=time.time() - FINISHED_AGO_S)
                    _fill(adapter, WINDOW, 0)
                    _vacuum(schema)
                    _prune_due(schema)
                finally:
                    adapter.procs[0].send_signal(signal.SIGCONT)
                result.update(_window_beside(adapter, tracker, sizes, rows, activity, expired))
    except Exception as exc:
        result.update(status="error", error=one_line(exc))
    result["seconds"] = time.monotonic() - started
    return result


def _window_beside(
    adapter: Any,
    tracker: Tracker,
    sizes: Sizes,
    rows: int,
    activity: Activity,
    expired: _Expired,
) -> dict[str, Any]:
    """The window drained by the resumed supervisor, then (with `rows`) the prune
    awaited to its end (at least 2,000 rows/s, or it gives up)."""
    pid = adapter.main_pid()
    resumed = time.monotonic()  # SIGCONT, just sent: the prune starts with the claims
    cpu0 = proc_cpu_fine_s(pid)

    def sample() -> None:
        activity.tick()
        if rows:
            expired.poll()

    waited = wait_records(
        tracker,
        lambda: len(_window(tracker)) >= WINDOW,
        adapter=adapter,
        timeout=sizes.drain_timeout_s * 8,
        stall_s=sizes.stall_s,
        on_tick=sample,
    )
    cpu = proc_cpu_fine_s(pid) - cpu0
    done = _window(tracker)
    first = min((r.start for r in done), default=resumed)
    last = max((r.end for r in done), default=resumed)
    out: dict[str, Any] = {
        "status": waited.status,
        "drain_jobs_s": len(done) / max(last - first, 1e-9),
        "supervisor_cpu_us_per_job": cpu / max(1, len(done)) * 1e6,
    }
    if rows:
        out["left_after_window"] = expired.count()
        give_up = resumed + max(60.0, rows / 2000)
        while expired.gone_at is None and time.monotonic() < give_up:
            if not adapter.alive():
                raise RuntimeError("the supervisor died while pruning")
            sample()
            time.sleep(0.02)
        out.update(_pruned(rows, resumed, expired, activity))
    return out


def _pruned(rows: int, resumed: float, expired: _Expired, activity: Activity) -> dict[str, Any]:
    """The prune's figures: its rate from SIGCONT (`resumed`) until none was left, or the
    rows left when the wait gave up; the longest prune transaction seen."""
    longest = max(activity.prune_s.values(), default=None)
    out: dict[str, Any] = {
        "prune_transactions_seen": len(activity.prune_s),
        "longest_prune_ms_seen": None if longest is None else longest * 1000,
    }
    if expired.gone_at is None:
        left = expired.count()
        out.update(prune_status=f"{left:,} left", left_at_end=left)
    else:
        prune_s = expired.gone_at - resumed
        out.update(prune_status="ok", left_at_end=0, prune_s=prune_s, pruned_rows_s=rows / prune_s)
    return out
