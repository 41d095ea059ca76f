"""Celery: prefork pool with 2 processes, Redis broker, results off.

``celery -A bench_peers.celery_peer worker --pool=prefork --concurrency=2``
(plus ``--without-gossip --without-mingle --without-heartbeat``, which only
skip cluster chatter at start-up). Default prefetching and acking.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from celery import Celery

from bench_peers import base

app = Celery("bench", broker=base.REDIS_URL)
app.conf.update(
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


TASKS = base.register_jobs(lambda name: app.task(name=name))


@dataclass
class CeleryAdapter(base.RedisAdapter):
    name: ClassVar[str] = "celery"
    title: ClassVar[str] = "Celery (prefork, concurrency 2, Redis broker)"
    packages: ClassVar[tuple[str, ...]] = ("celery", "kombu", "redis")
    notes: ClassVar[str] = (
        "results off; default prefetch (4 per process); no batch API: apply_async per job"
    )

    def start(self) -> None:
        self.spawn(
            [
                base.bin_path("celery"),
                "-A",
                "bench_peers.celery_peer",
                "worker",
                "--pool=prefork",
                "--concurrency",
                str(self.slots),
                "--loglevel",
                "WARNING",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ]
        )

    def enqueue(self, kind: str, job: base.Job) -> None:
        TASKS[kind].apply_async(kwargs=job)

    def close_client(self) -> None:
        app.close()
