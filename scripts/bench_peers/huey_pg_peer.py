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
from typing import ClassVar

from huey.contrib.sql_huey import SqlHuey
from peewee import PostgresqlDatabase

from bench_peers import base
from bench_peers.huey_peer import consumer_argv

SCHEMA = "bench_huey"
POLL_S = 0.005

database = PostgresqlDatabase(
    base.PG_DATABASE,
    host=base.PG_HOST,
    port=base.PG_PORT,
    options=f"-csearch_path={SCHEMA}",
)
huey = SqlHuey("bench", database=database, create_tables=False, results=False)


TASKS = base.register_jobs(lambda name: huey.task(name=name))


@dataclass
class HueyPgAdapter(base.PgSchemaAdapter):
    name: ClassVar[str] = "huey-pg"
    title: ClassVar[str] = "Huey (consumer -w 2 -k process, SqlHuey on PostgreSQL)"
    schema: ClassVar[str] = SCHEMA
    packages: ClassVar[tuple[str, ...]] = ("huey", "peewee", "psycopg2-binary")
    notes: ClassVar[str] = (
        f"SQL storage (peewee, psycopg2); idle workers poll every {POLL_S * 1000:.0f} ms "
        "(no wake-up); health check every 1 s (-c 1); no batch API: one call per job"
    )

    def setup(self) -> None:
        super().setup()
        huey.storage.create_tables()
        huey.storage.close()

    def start(self) -> None:
        self.spawn(
            consumer_argv(
                "bench_peers.huey_pg_peer.huey",
                self.slots,
                *("-d", str(POLL_S), "-m", str(POLL_S), "-b", "1"),
            )
        )

    def enqueue(self, kind: str, job: base.Job) -> None:
        TASKS[kind](**job)

    def close_client(self) -> None:
        huey.storage.close()
