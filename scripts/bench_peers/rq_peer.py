"""RQ: ``rq worker-pool -n N`` (each worker forks a work horse per job), Redis.

Configurations swept: 2 and 4 workers.

Jobs are the plain functions of ``bench_jobs``, referenced by import path.
The workers load this module as their settings (``-c bench_peers.rq_peer``),
which imports ``bench_jobs`` before forking, as RQ's performance notes advise:
without it every work horse imports the job module again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import redis
from rq import Queue

from bench_peers import base

QUEUE = "bench"
FUNCS = base.SHARED_JOBS


@dataclass
class RqAdapter(base.RedisAdapter):
    name: ClassVar[str] = "rq"
    title: ClassVar[str] = "RQ (worker-pool, fork per job, Redis)"
    packages: ClassVar[tuple[str, ...]] = ("rq", "redis")
    batch_api: ClassVar[str | None] = "Queue.enqueue_many"
    notes: ClassVar[str] = "default Worker class: a forked work horse per job"
    configs: ClassVar[tuple[dict[str, Any], ...]] = ({"workers": 2}, {"workers": 4})

    @classmethod
    def label(cls, knobs: dict[str, Any]) -> str:
        return f"-n {knobs['workers']}"

    _queue: Any = None

    @property
    def queue(self) -> Queue:
        if self._queue is None:
            self._queue = Queue(QUEUE, connection=redis.Redis.from_url(base.REDIS_URL))
        return self._queue

    def start(self) -> None:
        self.spawn(
            [
                base.bin_path("rq"),
                "worker-pool",
                "-n",
                str(self.slots),
                "-u",
                base.REDIS_URL,
                "-c",
                "bench_peers.rq_peer",
                "-l",
                "WARNING",
                QUEUE,
            ]
        )

    def enqueue(self, kind: str, job: base.Job) -> None:
        self.queue.enqueue(FUNCS[kind], kwargs=job)

    def enqueue_batch(self, kind: str, jobs: list[base.Job]) -> None:
        func = FUNCS[kind]
        for i in range(0, len(jobs), 1000):
            self.queue.enqueue_many(
                [Queue.prepare_data(func, kwargs=job) for job in jobs[i : i + 1000]]
            )

    def close_client(self) -> None:
        if self._queue is not None:
            self._queue.connection.close()
            self._queue = None
