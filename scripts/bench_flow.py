"""What flow control costs a drain: ``python scripts/bench_flow.py [--jobs N]
[--workers W] [--ms MS] [--repeat R] [--backends sqlite,postgres] [--only NAME,...]``.

Each case enqueues the same jobs (each sleeps MS milliseconds) and drains
them with one real supervisor (``procqueue supervise``, W children); the
drain's rate is jobs / (last finish - first start), from the jobs' own
timestamps in the database. The flow cases are compared with the same
drain without them ("plain"): 1,000 groups, a rate limit near the plain
drain rate, a group_limit, and a queue limited to one job at a time
against what one child does alone. This module is also the job module the
supervisor imports (``bench_flow:app``).

PostgreSQL: ``$PROCQUEUE_BENCH_PG`` (default postgresql://127.0.0.1:5432/test),
each run in a fresh schema, dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from procqueue import App

app = App()
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PG = os.environ.get("PROCQUEUE_BENCH_PG", "postgresql://127.0.0.1:5432/test")


@app.job(max_attempts=1)
def work(ms: float) -> None:
    """Sleeps `ms` milliseconds (the job's own cost, the same in every case)."""
    time.sleep(ms / 1000)


Enqueue = Callable[[App, int, float], None]


def _many(bench: App, n: int, ms: float, options: Callable[[int], dict[str, Any]]) -> None:
    for first in range(0, n, 1000):
        last = min(n, first + 1000)
        batch = [("bench_flow.work", {"ms": ms}, options(i)) for i in range(first, last)]
        bench.enqueue_many(batch)


def plain(bench: App, n: int, ms: float) -> None:
    _many(bench, n, ms, lambda i: {})


def groups(bench: App, n: int, ms: float) -> None:
    _many(bench, n, ms, lambda i: {"group": f"tenant-{i % 1000}"})


def group_limit(bench: App, n: int, ms: float) -> None:
    _many(bench, n, ms, lambda i: {"group": f"tenant-{i % 10}", "group_limit": 2})


def rated(rate: int) -> Enqueue:
    def enqueue(bench: App, n: int, ms: float) -> None:
        _many(bench, n, ms, lambda i: {"rate_limit": f"{rate}/s"})

    return enqueue


def serial_queue(bench: App, n: int, ms: float) -> None:
    bench.set_limit("one", 1, create=True)
    _many(bench, n, ms, lambda i: {"queue": "one"})


def _drain(dsn: str, enqueue: Enqueue, n: int, ms: float, workers: int, queues: str) -> float:
    """Jobs per second of one drain of `n` jobs enqueued by `enqueue`."""
    bench = App(dsn=dsn)
    bench.store.migrate(now=time.time())
    enqueue(bench, n, ms)
    _analyze(dsn)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]))
    command = [sys.executable, "-m", "procqueue", "supervise", "bench_flow:app", "--dsn", dsn]
    command += ["--workers", str(workers), "--queues", queues, "--no-cron"]
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        while bench.stats().get(queues.split(",")[0]) is None or _open(bench, queues):
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(30)
    return _rate(bench, n)


def _analyze(dsn: str) -> None:
    """PostgreSQL: the planner's statistics of the jobs just enqueued, as
    autovacuum keeps them in a database that lives longer than one case."""
    if not dsn.startswith("postgresql"):
        return
    import psycopg

    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f'SET search_path = "{dsn.rsplit("schema=", 1)[1]}"')
        conn.execute("ANALYZE jobs")
        conn.execute("ANALYZE flow_groups")


def _open(bench: App, queues: str) -> bool:
    stats = bench.stats()
    return any(q.pending + q.reserved + q.running for name, q in stats.items() if name in queues)


def _rate(bench: App, n: int) -> float:
    jobs = bench.jobs(state="done", limit=n)
    starts = [j.started_at.timestamp() for j in jobs if j.started_at is not None]
    ends = [j.finished_at.timestamp() for j in jobs if j.finished_at is not None]
    return len(jobs) / max(1e-9, max(ends) - min(starts))


@contextmanager
def _database(backend: str) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/bench.db"
        return
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    try:
        yield f"{PG}?schema={schema}"
    finally:
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


class Run:
    """The cases of one backend, each printed as it ends with its ratio."""

    def __init__(self, backend: str, args: argparse.Namespace) -> None:
        self.backend = backend
        self.args = args
        self.rates: dict[str, float] = {}

    def case(self, name: str, enqueue: Enqueue, workers: int, queues: str = "default") -> None:
        args = self.args
        if args.only and not any(name.startswith(o) for o in args.only.split(",")):
            return
        runs = []
        for _ in range(args.repeat):
            with _database(self.backend) as dsn:
                runs.append(_drain(dsn, enqueue, args.jobs, args.ms, workers, queues))
        self.rates[name] = statistics.median(runs)
        base = self.rates.get("plain" if name != "queue limited to 1" else "one child")
        ratio = f"{self.rates[name] / base:5.2f}x" if base else "     "
        print(f"{self.backend:9} {name:28} {self.rates[name]:8.1f} {ratio}", flush=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ms", type=float, default=10.0)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--only", default="", help="cases whose names start so (a,b)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each case (the median)")
    args = parser.parse_args(argv)
    print(
        f"{args.jobs} jobs of {args.ms:g} ms, {args.workers} children, "
        f"jobs/s (median of {args.repeat}; x plain)"
    )
    for backend in args.backends.split(","):
        run = Run(backend, args)
        run.case("plain", plain, args.workers)
        run.case("1000 groups", groups, args.workers)
        run.case("group_limit=2 (10 groups)", group_limit, args.workers)
        near = max(1, int(run.rates.get("plain", 100.0) * 0.9))
        run.case(f"rate_limit={near}/s", rated(near), args.workers)
        run.case("one child", plain, 1)
        run.case("queue limited to 1", serial_queue, args.workers, "one")


if __name__ == "__main__":
    main(sys.argv[1:])
