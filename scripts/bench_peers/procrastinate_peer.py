"""procrastinate: ``procrastinate worker --concurrency 2`` on PostgreSQL.

Its worker is one asyncio process: synchronous tasks run in threads of that
process (so CPU-bound jobs share one GIL, and a segfault ends the worker).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import ClassVar

import procrastinate

from bench_peers import base

SCHEMA = "bench_procrastinate"
APP_PATH = "bench_peers.procrastinate_peer.app"

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=base.pg_conninfo(SCHEMA)))


TASKS = base.register_jobs(lambda name: app.task(name=name))


@dataclass
class ProcrastinateAdapter(base.PgSchemaAdapter):
    name: ClassVar[str] = "procrastinate"
    title: ClassVar[str] = "procrastinate (worker --concurrency 2, PostgreSQL)"
    schema: ClassVar[str] = SCHEMA
    packages: ClassVar[tuple[str, ...]] = ("procrastinate", "psycopg")
    batch_api: ClassVar[str | None] = "Task.batch_defer"
    notes: ClassVar[str] = "one asyncio process; sync jobs run in its threads"
    _open: bool = False

    def setup(self) -> None:
        super().setup()
        subprocess.run(
            [base.bin_path("procrastinate"), "--app", APP_PATH, "schema", "--apply"],
            env=self.env(),
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        self.spawn(
            [
                base.bin_path("procrastinate"),
                "--app",
                APP_PATH,
                "--log-level",
                "warning",
                "worker",
                "--concurrency",
                str(self.slots),
            ]
        )

    def _ensure_open(self) -> None:
        if not self._open:
            app.open()
            self._open = True

    def enqueue(self, kind: str, job: base.Job) -> None:
        self._ensure_open()
        TASKS[kind].defer(**job)

    def enqueue_batch(self, kind: str, jobs: list[base.Job]) -> None:
        self._ensure_open()
        TASKS[kind].batch_defer(*jobs)

    def close_client(self) -> None:
        if self._open:
            app.close()
            self._open = False
