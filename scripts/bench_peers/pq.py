"""procqueue: the jobs (imported by its children) and the adapter (SQLite and PostgreSQL).

The supervisor runs as its own process, as in production:
``procqueue supervise bench_peers.pq:app --dsn DSN --workers N --poll 0.5``.
Jobs have ``max_attempts=1`` in every system: a crash is one failed job, not
a retry.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar

import bench_jobs

from bench_peers import base
from procqueue import App, Context

app = App()
POLL_S = 0.5
SCHEMA = "bench_procqueue"
TASKS = base.register_jobs(lambda name: app.job(name=name, max_attempts=1))


@app.job(name="bench.sleep", max_attempts=1)
def sleep(seq: int, seconds: float) -> None:
    bench_jobs.sleep(seq, seconds)


@app.job(name="bench.storm", max_attempts=1)
def storm(cx: Context, seq: int, seconds: float) -> None:
    bench_jobs.storm(seq, seconds, lambda fraction: cx.progress(fraction=fraction))


@dataclass
class _Procqueue(base.Adapter):
    packages: ClassVar[tuple[str, ...]] = ("procqueue", "msgspec", "psycopg")
    batch_api: ClassVar[str | None] = "app.enqueue_many"
    supervise_args: list[str] = field(default_factory=list)
    """More ``procqueue supervise`` options, e.g. ``["--max-jobs-per-child", "1"]``."""
    counted: bool = False
    """Run the supervisor under ``benchkit.counted`` (statement, commit and frame counts)."""
    supervisors: int = 1
    """``procqueue supervise`` processes started on the one DSN, each with `slots` children."""
    _client: App | None = None

    @property
    def dsn(self) -> str:
        raise NotImplementedError

    @property
    def client(self) -> App:
        if self._client is None:
            self._client = app.using(self.dsn)
        return self._client

    @classmethod
    def label(cls, knobs: dict[str, Any]) -> str:
        return f"supervise --workers 2 --poll {POLL_S}"

    def start(self) -> None:
        command = (
            [sys.executable, "-m", "benchkit.counted"]
            if self.counted
            else [base.bin_path("procqueue")]
        )
        argv = [
            *command,
            "supervise",
            "bench_peers.pq:app",
            "--dsn",
            self.dsn,
            "--workers",
            str(self.slots),
            "--poll",
            str(POLL_S),
            "--log-level",
            "warning",
            "--grace",
            "5",
            *self.supervise_args,
        ]
        env = dict(self.env(), BENCH_COUNTS=str(self.bench_dir / "counts.json"))
        for _ in range(self.supervisors):
            self.spawn(argv, env=env)

    def main_pid(self) -> int | None:
        return self.procs[0].pid if self.procs else None

    def enqueue(self, kind: str, job: base.Job) -> None:
        self.client.enqueue(f"bench.{kind}", job)

    def enqueue_batch(self, kind: str, jobs: list[base.Job]) -> None:
        name = f"bench.{kind}"
        self.client.enqueue_many([(name, job, None) for job in jobs])

    def close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def failed_count(self) -> int:
        """Jobs in state failed (crashes recorded by the supervisor)."""
        return sum(q.failed for q in self.client.stats().values())


@dataclass
class ProcqueueSqlite(_Procqueue):
    name: ClassVar[str] = "procqueue-sqlite"
    title: ClassVar[str] = "procqueue (SQLite, supervisor process, 2 children)"
    store: ClassVar[str] = "sqlite"
    notes: ClassVar[str] = (
        "SQLite WAL file; the producer is another process, so no in-process wake-up: "
        f"the supervisor finds new jobs by its --poll {POLL_S}"
    )

    @property
    def dsn(self) -> str:
        return f"sqlite:///{self.bench_dir / 'procqueue.db'}"


@dataclass
class ProcqueuePg(base.PgSchemaAdapter, _Procqueue):
    name: ClassVar[str] = "procqueue-pg"
    title: ClassVar[str] = "procqueue (PostgreSQL, supervisor process, 2 children)"
    schema: ClassVar[str] = SCHEMA
    notes: ClassVar[str] = f"LISTEN/NOTIFY wake-up, --poll {POLL_S}"

    @property
    def dsn(self) -> str:
        return f"{base.PG_DSN}?schema={SCHEMA}"
