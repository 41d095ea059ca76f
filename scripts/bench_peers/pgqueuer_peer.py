"""pgqueuer: one worker process, in the configuration a sweep found fastest.

Started as ``python -m bench_peers.pgqueuer_peer --batch-size B
--max-concurrent-tasks N`` (N 0: unbounded), which calls the documented
entrypoint ``pgqueuer.run(factory, batch_size=B, max_concurrent_tasks=N)``
(what ``pgq run`` does): in pgqueuer 1.6.0 with typer 0.29 ``pgq run`` itself
fails at start ("'str' object has no attribute 'name'" from its --log-level
parser). One asyncio process on an asyncpg connection (the documented set-up).
pgqueuer entrypoints must be async: the blocking bodies (gate, cpu) run
through ``asyncio.to_thread`` as its docs advise; the no-op and crashy
bodies (a few microseconds) are called directly on the event loop, which is
the fastest way pgqueuer can run them.

Configurations swept: its defaults (unbounded concurrency, batch size 10),
batch sizes 50 and 200, and the 2-slot one (``max_concurrent_tasks=2``, which
pgqueuer allows only with batch size 1: it requires at least twice the batch).
Unbounded, the 2 gate jobs hold 2 threads while the event loop keeps taking
jobs; the CPU-heavy jobs then all run at once in threads of one process.
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
    title: ClassVar[str] = "pgqueuer (pgqueuer.run, one process, PostgreSQL)"
    schema: ClassVar[str] = SCHEMA
    packages: ClassVar[tuple[str, ...]] = ("pgqueuer", "asyncpg", "psycopg")
    batch_api: ClassVar[str | None] = "SyncQueries.enqueue(lists)"
    notes: ClassVar[str] = "one asyncio process; async entrypoints (gate/cpu via asyncio.to_thread)"
    configs: ClassVar[tuple[dict[str, Any], ...]] = (
        {"max_concurrent_tasks": 2, "batch_size": 1},
        {"max_concurrent_tasks": None, "batch_size": 10},
        {"max_concurrent_tasks": None, "batch_size": 50},
        {"max_concurrent_tasks": None, "batch_size": 200},
    )
    _conn: Any = None
    _queries: Any = None

    @classmethod
    def label(cls, knobs: dict[str, Any]) -> str:
        tasks = knobs["max_concurrent_tasks"]
        cap = f"max_concurrent_tasks={tasks}" if tasks else "unbounded concurrency"
        return f"{cap}, batch_size={knobs['batch_size']}"

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
        self.spawn(
            [
                sys.executable,
                "-m",
                "bench_peers.pgqueuer_peer",
                "--max-concurrent-tasks",
                str(self.knobs["max_concurrent_tasks"] or 0),
                "--batch-size",
                str(self.knobs["batch_size"]),
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


def _main() -> None:
    import argparse

    import pgqueuer

    parser = argparse.ArgumentParser()
    parser.add_argument("--max-concurrent-tasks", type=int, default=0, help="0: unbounded")
    parser.add_argument("--batch-size", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(
        pgqueuer.run(
            create,
            max_concurrent_tasks=args.max_concurrent_tasks or None,
            batch_size=args.batch_size,
        )
    )


if __name__ == "__main__":
    _main()
