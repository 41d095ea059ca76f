"""Huey on PostgreSQL: ``huey_consumer -w N -k KIND`` with Huey 3's own ``PostgresHuey``.

``huey.PostgresHuey`` (psycopg 3) on the benchmark database, tables in a schema
of their own; results off. A worker takes one job per statement (``DELETE ...
WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING``); an enqueue
commits the row with a ``pg_notify``, and an idle worker waits on its own
``LISTEN`` connection (blocking reads, Huey's default) instead of polling.
Health check every 1 s as for Huey on Redis. Configurations swept: 2, 4 and 8
worker processes, 4 and 8 worker threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from huey import PostgresHuey

from bench_peers import base
from bench_peers.huey_peer import consumer_argv

SCHEMA = "bench_huey"

huey = PostgresHuey(
    "bench",
    dsn=base.pg_conninfo(SCHEMA),
    create_tables=False,
    results=False,
)


TASKS = base.register_jobs(lambda name: huey.task(name=name))


@dataclass
class HueyPgAdapter(base.PgSchemaAdapter):
    name: ClassVar[str] = "huey-pg"
    title: ClassVar[str] = "Huey (huey_consumer, PostgresHuey on PostgreSQL)"
    schema: ClassVar[str] = SCHEMA
    packages: ClassVar[tuple[str, ...]] = ("huey", "psycopg")
    notes: ClassVar[str] = (
        "PostgresHuey: pg_notify wake-up, SKIP LOCKED; health check every 1 s (-c 1); "
        "no batch API: one call per job"
    )
    configs: ClassVar[tuple[dict[str, Any], ...]] = (
        {"workers": 2, "worker_type": "process"},
        {"workers": 4, "worker_type": "process"},
        {"workers": 8, "worker_type": "process"},
        {"workers": 4, "worker_type": "thread"},
        {"workers": 8, "worker_type": "thread"},
    )

    @classmethod
    def label(cls, knobs: dict[str, Any]) -> str:
        return f"-w {knobs['workers']} -k {knobs['worker_type']}"

    def setup(self) -> None:
        super().setup()
        huey.storage.initialize_schema()
        huey.storage.close()

    def start(self) -> None:
        self.spawn(
            consumer_argv("bench_peers.huey_pg_peer.huey", self.slots, self.knobs["worker_type"])
        )

    def enqueue(self, kind: str, job: base.Job) -> None:
        TASKS[kind](**job)

    def close_client(self) -> None:
        huey.storage.close()
