"""Huey on PostgreSQL: ``huey_consumer -w 2 -k process`` with Huey's SQL storage.

``huey.contrib.sql_huey.SqlHuey`` (peewee, psycopg2) on the benchmark database,
tables in a schema of their own; results off. A worker takes one job per
transaction (``SELECT ... FOR UPDATE SKIP LOCKED`` then ``DELETE``). The SQL
storage has no wake-up, so an idle worker polls: every 5 ms here (``-d 0.005
-m 0.005 -b 1``, no back-off; Huey's default is 0.1 s growing to 10 s), its
fastest practical setting for latency; a busy worker does not wait between
jobs. Health check every 1 s as for Huey on Redis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import bench_jobs
from huey.contrib.sql_huey import SqlHuey
from peewee import PostgresqlDatabase

from bench_peers import base

SCHEMA = "bench_huey"
POLL_S = 0.005

database = PostgresqlDatabase(
    base.PG_DATABASE,
    host=base.PG_HOST,
    port=base.PG_PORT,
    options=f"-csearch_path={SCHEMA}",
)
huey = SqlHuey("bench", database=database, create_tables=False, results=False)


@huey.task(name="bench.noop")
def noop(seq: int) -> None:
    bench_jobs.noop(seq)


@huey.task(name="bench.gate")
def gate(seq: int) -> None:
    bench_jobs.gate(seq)


@huey.task(name="bench.cpu")
def cpu(seq: int, n: int) -> None:
    bench_jobs.cpu(seq, n)


@huey.task(name="bench.crashy")
def crashy(seq: int, crash: bool) -> None:
    bench_jobs.crashy(seq, crash)


TASKS: dict[str, Any] = {"noop": noop, "gate": gate, "cpu": cpu, "crashy": crashy}


@dataclass
class HueyPgAdapter(base.Adapter):
    name: ClassVar[str] = "huey-pg"
    title: ClassVar[str] = "Huey (consumer -w 2 -k process, SqlHuey on PostgreSQL)"
    store: ClassVar[str] = "postgres"
    packages: ClassVar[tuple[str, ...]] = ("huey", "peewee", "psycopg2-binary")
    notes: ClassVar[str] = (
        f"SQL storage (peewee, psycopg2); idle workers poll every {POLL_S * 1000:.0f} ms "
        "(no wake-up); health check every 1 s (-c 1); no batch API: one call per job"
    )

    def setup(self) -> None:
        base.fresh_pg_schema(SCHEMA)
        huey.storage.create_tables()
        huey.storage.close()

    def start(self) -> None:
        self.spawn(
            [
                base.bin_path("huey_consumer"),
                "bench_peers.huey_pg_peer.huey",
                "-w",
                str(self.slots),
                "-k",
                "process",
                "-c",
                "1",
                "-d",
                str(POLL_S),
                "-m",
                str(POLL_S),
                "-b",
                "1",
                "-q",
            ]
        )

    def enqueue(self, kind: str, job: base.Job) -> None:
        TASKS[kind](**job)

    def close_client(self) -> None:
        huey.storage.close()

    def teardown(self) -> None:
        base.drop_pg_schema(SCHEMA)
