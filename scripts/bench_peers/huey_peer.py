"""Huey on Redis: ``huey_consumer -w 2 -k process`` (blocking reads), results off.

The consumer's health check restarts a dead worker process; its interval is
set to 1 s (default 10 s) so a segfaulting job costs the least time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import bench_jobs
from huey import RedisHuey

from bench_peers import base

huey = RedisHuey("bench", url=base.REDIS_URL, results=False)


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
class HueyAdapter(base.Adapter):
    name: ClassVar[str] = "huey-redis"
    title: ClassVar[str] = "Huey (consumer -w 2 -k process, Redis)"
    store: ClassVar[str] = "redis"
    packages: ClassVar[tuple[str, ...]] = ("huey", "redis")
    notes: ClassVar[str] = "health check every 1 s (-c 1); no batch API: one call per job"

    def setup(self) -> None:
        base.flush_redis()

    def start(self) -> None:
        self.spawn(
            [
                base.bin_path("huey_consumer"),
                "bench_peers.huey_peer.huey",
                "-w",
                str(self.slots),
                "-k",
                "process",
                "-c",
                "1",
                "-q",
            ]
        )

    def enqueue(self, kind: str, job: base.Job) -> None:
        TASKS[kind](**job)

    def teardown(self) -> None:
        base.flush_redis()
