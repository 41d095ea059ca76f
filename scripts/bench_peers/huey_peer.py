"""Huey on Redis: ``huey_consumer -w 2 -k process`` (blocking reads), results off.

The consumer's health check restarts a dead worker process; its interval is
set to 1 s (default 10 s) so a segfaulting job costs the least time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from huey import RedisHuey

from bench_peers import base

huey = RedisHuey("bench", url=base.REDIS_URL, results=False)


def consumer_argv(instance: str, slots: int, *options: str) -> list[str]:
    """``huey_consumer`` for the Huey at `instance` (``module.attribute``): `slots`
    worker processes, a health check every second, quiet; then `options`."""
    argv = [base.bin_path("huey_consumer"), instance, "-w", str(slots), "-k", "process"]
    return [*argv, "-c", "1", *options, "-q"]


TASKS = base.register_jobs(lambda name: huey.task(name=name))


@dataclass
class HueyAdapter(base.RedisAdapter):
    name: ClassVar[str] = "huey-redis"
    title: ClassVar[str] = "Huey (consumer -w 2 -k process, Redis)"
    packages: ClassVar[tuple[str, ...]] = ("huey", "redis")
    notes: ClassVar[str] = "health check every 1 s (-c 1); no batch API: one call per job"

    def start(self) -> None:
        self.spawn(consumer_argv("bench_peers.huey_peer.huey", self.slots))

    def enqueue(self, kind: str, job: base.Job) -> None:
        TASKS[kind](**job)
