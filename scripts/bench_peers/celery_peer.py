"""Celery: prefork pool, Redis broker, results off.

``celery -A bench_peers.celery_peer worker --pool=prefork --concurrency=N``
(plus ``--without-gossip --without-mingle --without-heartbeat``, which only
skip cluster chatter at start-up). Default acking. Configurations swept:
concurrency 2 and 4, each with the default prefetch (4 per process) and with
``-O fair`` (a job goes only to a process that is free).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

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
    title: ClassVar[str] = "Celery (prefork, Redis broker)"
    packages: ClassVar[tuple[str, ...]] = ("celery", "kombu", "redis")
    notes: ClassVar[str] = "results off; no batch API: apply_async per job"
    configs: ClassVar[tuple[dict[str, Any], ...]] = (
        {"workers": 2, "fair": False},
        {"workers": 2, "fair": True},
        {"workers": 4, "fair": False},
        {"workers": 4, "fair": True},
    )

    @classmethod
    def label(cls, knobs: dict[str, Any]) -> str:
        prefetch = "-O fair" if knobs["fair"] else "default prefetch"
        return f"--concurrency {knobs['workers']}, {prefetch}"

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
                *(["-O", "fair"] if self.knobs["fair"] else []),
            ]
        )

    def enqueue(self, kind: str, job: base.Job) -> None:
        TASKS[kind].apply_async(kwargs=job)

    def close_client(self) -> None:
        app.close()
