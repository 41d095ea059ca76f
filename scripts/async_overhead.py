"""Per-job overhead of running async jobs on one reused event loop (what a
child does) against `asyncio.run` per job: ``python scripts/async_overhead.py [N]``."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from procqueue.jobs.stopping import EventLoop, Guard


async def noop() -> None:
    return None


def reused(n: int) -> float:
    loop = EventLoop()
    started = time.perf_counter()
    for _ in range(n):
        loop.run(noop(), Guard())
    took = time.perf_counter() - started
    loop.close()
    return took


def fresh(n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        asyncio.run(noop())
    return time.perf_counter() - started


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv else 1000
    for name, run in (("one reused loop", reused), ("asyncio.run per job", fresh)):
        runs = [run(n) for _ in range(5)]
        per_job_us = statistics.median(runs) / n * 1e6
        print(f"{name:22} {per_job_us:8.1f} µs per job (median of 5 runs of {n})")


if __name__ == "__main__":
    main(sys.argv[1:])
