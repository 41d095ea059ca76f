"""pgqueuer: one worker process with at most 2 concurrent tasks (its fastest set-up
here), and, for reference, two such processes.

Started as ``python -m bench_peers.pgqueuer_peer --max-concurrent-tasks 2``,
which calls the documented entrypoint ``pgqueuer.run(factory,
max_concurrent_tasks=2)`` (what ``pgq run`` does): in pgqueuer 1.6.0 with
typer 0.29 ``pgq run`` itself fails at start ("'str' object has no
attribute 'name'" from its --log-level parser). One asyncio process on an
asyncpg connection (the documented set-up).
pgqueuer entrypoints must be async: the blocking bodies (gate, cpu) run
through ``asyncio.to_thread`` as its docs advise; the no-op and crashy
bodies (a few microseconds) are called directly on the event loop, which is
the fastest way pgqueuer can run them.

``pgqueuer-2p`` runs two of those processes. pgqueuer refuses
``max_concurrent_tasks`` below twice its batch size (at least 1), so each
process keeps 2 tasks in flight: 4 slots in all, and 4 gate jobs hold them.
It runs only the no-op drain and the latency workloads (on 2 cores its 4
slots would make the CPU-heavy ideal meaningless).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, ClassVar

import bench_jobs

from bench_peers import base

SCHEMA = "bench_pgqueuer"
os.environ.setdefault("PGQUEUER_SCHEMA", SCHEMA)


@contextlib.asynccontextmanager
async def create() -> AsyncIterator[Any]:
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.models import Job as PgqJob

    connection = await asyncpg.connect(base.PG_DSN)
    pgq = PgQueuer.from_asyncpg_connection(connection)

    def args(job: PgqJob) -> dict[str, Any]:
        return dict(json.loads(job.payload or b"{}"))

    @pgq.entrypoint("noop")
    async def noop(job: PgqJob) -> None:
        bench_jobs.noop(**args(job))

    @pgq.entrypoint("gate")
    async def gate(job: PgqJob) -> None:
        await asyncio.to_thread(bench_jobs.gate, **args(job))

    @pgq.entrypoint("cpu")
    async def cpu(job: PgqJob) -> None:
        await asyncio.to_thread(bench_jobs.cpu, **args(job))

    @pgq.entrypoint("crashy")
    async def crashy(job: PgqJob) -> None:
        bench_jobs.crashy(**args(job))

    try:
        yield pgq
    finally:
        await connection.close()


@dataclass
class PgqueuerAdapter(base.PgSchemaAdapter):
    name: ClassVar[str] = "pgqueuer"
    title: ClassVar[str] = "pgqueuer (pgqueuer.run, max_concurrent_tasks=2, PostgreSQL)"
    schema: ClassVar[str] = SCHEMA
    packages: ClassVar[tuple[str, ...]] = ("pgqueuer", "asyncpg", "psycopg")
    batch_api: ClassVar[str | None] = "SyncQueries.enqueue(lists)"
    notes: ClassVar[str] = (
        "one asyncio process; async entrypoints (gate/cpu via asyncio.to_thread); "
        "batch size 1 (it requires max_concurrent_tasks >= 2 x batch size)"
    )
    processes: ClassVar[int] = 1
    _conn: Any = None
    _queries: Any = None

    def __post_init__(self) -> None:
        # each process takes max_concurrent_tasks = 2 x batch size (>= 2) jobs at most
        self.per_process = max(2, self.slots // self.processes)
        self.slots = self.per_process * self.processes

    def env(self) -> dict[str, str]:
        return dict(super().env(), PGQUEUER_SCHEMA=SCHEMA)

    def setup(self) -> None:
        super().setup()
        subprocess.run(
            [base.bin_path("pgq"), "--pg-dsn", base.PG_DSN, "--schema", SCHEMA, "install"],
            env=self.env(),
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        for _ in range(self.processes):
            self.spawn(
                [
                    sys.executable,
                    "-m",
                    "bench_peers.pgqueuer_peer",
                    "--max-concurrent-tasks",
                    str(self.per_process),
                ]
            )

    @property
    def queries(self) -> Any:
        if self._queries is None:
            import psycopg
            from pgqueuer.adapters.persistence.queries import SyncQueries
            from pgqueuer.db import SyncPsycopgDriver

            self._conn = psycopg.connect(base.PG_DSN, autocommit=True)
            self._queries = SyncQueries(SyncPsycopgDriver(self._conn))
        return self._queries

    def enqueue(self, kind: str, job: base.Job) -> None:
        self.queries.enqueue(kind, json.dumps(job).encode())

    def enqueue_batch(self, kind: str, jobs: list[base.Job]) -> None:
        for i in range(0, len(jobs), 5000):
            chunk = jobs[i : i + 5000]
            self.queries.enqueue(
                [kind] * len(chunk), [json.dumps(j).encode() for j in chunk], [0] * len(chunk)
            )

    def close_client(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = self._queries = None


@dataclass
class Pgqueuer2pAdapter(PgqueuerAdapter):
    name: ClassVar[str] = "pgqueuer-2p"
    title: ClassVar[str] = "pgqueuer (2 processes, max_concurrent_tasks=2 each, PostgreSQL)"
    processes: ClassVar[int] = 2
    workloads: ClassVar[tuple[str, ...] | None] = ("throughput_noop", "latency")
    notes: ClassVar[str] = (
        "two asyncio processes of 2 tasks each (pgqueuer's minimum at batch size 1): "
        "4 slots, held by 4 gate jobs; no-op drain and latency only"
    )


def _main() -> None:
    import argparse

    import pgqueuer

    parser = argparse.ArgumentParser()
    parser.add_argument("--max-concurrent-tasks", type=int, default=2)
    args = parser.parse_args()
    # pgqueuer requires max_concurrent_tasks >= 2 x batch_size
    batch_size = max(1, args.max_concurrent_tasks // 2)
    asyncio.run(
        pgqueuer.run(create, max_concurrent_tasks=args.max_concurrent_tasks, batch_size=batch_size)
    )


if __name__ == "__main__":
    _main()
