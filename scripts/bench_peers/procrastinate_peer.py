"""procrastinate: ``procrastinate worker --concurrency N`` on PostgreSQL.

Configurations swept: concurrency 2, 10 and 50.

Its worker is one asyncio process: synchronous tasks run in threads of that
process (so CPU-bound jobs share one GIL, and a segfault ends the worker).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any, ClassVar

import procrastinate

from bench_peers import base

SCHEMA = "bench_procrastinate"
APP_PATH = "bench_peers.procrastinate_peer.app"

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=base.pg_conninfo(SCHEMA)))


TASKS = base.register_jobs(lambda name: app.task(name=name))


@dataclass
class ProcrastinateAdapter(base.PgSchemaAdapter):
    name: ClassVar[str] = "procrastinate"
    title: ClassVar[str] = "procrastinate (worker, PostgreSQL)"
    schema: ClassVar[str] = SCHEMA
    packages: ClassVar[tuple[str, ...]] = ("procrastinate", "psycopg")
    batch_api: ClassVar[str | None] = "Task.batch_defer"
    notes: ClassVar[str] = "one asyncio process; sync jobs run in its threads"
    configs: ClassVar[tuple[dict[str, Any], ...]] = (
        {"workers": 2},
        {"workers": 10},
        {"workers": 50},
    )

    @classmethod
    def label(cls, knobs: dict[str, Any]) -> str:
        return f"--concurrency {knobs['workers']}"

    def gates(self) -> int:
        # sync jobs run in the event loop's default executor: min(32, cores + 4) threads
        return min(self.slots, 32, (os.cpu_count() or 1) + 4)

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
