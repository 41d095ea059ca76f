"""Huey on Redis: ``huey_consumer -w N -k process`` (blocking reads), results off.

Configurations swept: 2, 4 and 8 worker processes (threads would share one GIL
and give up the isolation this comparison is about).

The consumer's health check restarts a dead worker process; its interval is
set to 1 s (default 10 s) so a segfaulting job costs the least time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from huey import RedisHuey

from bench_peers import base

huey = RedisHuey("bench", url=base.REDIS_URL, results=False)


def consumer_argv(instance: str, slots: int, kind: str, *options: str) -> list[str]:
    """``huey_consumer`` for the Huey at `instance` (``module.attribute``): `slots`
    workers of `kind` (process or thread), a health check every second, quiet; then
    `options`."""
    argv = [base.bin_path("huey_consumer"), instance, "-w", str(slots), "-k", kind]
    return [*argv, "-c", "1", *options, "-q"]


TASKS = base.register_jobs(lambda name: huey.task(name=name))


@dataclass
class HueyAdapter(base.RedisAdapter):
    name: ClassVar[str] = "huey-redis"
    title: ClassVar[str] = "Huey (huey_consumer -k process, Redis)"
    packages: ClassVar[tuple[str, ...]] = ("huey", "redis")
    notes: ClassVar[str] = "health check every 1 s (-c 1); no batch API: one call per job"
    configs: ClassVar[tuple[dict[str, Any], ...]] = (
        {"workers": 2},
        {"workers": 4},
        {"workers": 8},
    )

    @classmethod
    def label(cls, knobs: dict[str, Any]) -> str:
        return f"-w {knobs['workers']} -k process"

    def start(self) -> None:
        self.spawn(consumer_argv("bench_peers.huey_peer.huey", self.slots, "process"))

    def enqueue(self, kind: str, job: base.Job) -> None:
        TASKS[kind](**job)
