"""The jobs' own records (the side log: one line per start, end, step or overlap, written with
O_APPEND) and the arithmetic over them: waits with deadlines, percentiles, peaks of
concurrency, cron tick times.
"""

from __future__ import annotations

import calendar
import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Record:
    """One line of the side log."""

    id: int
    attempt: int
    pid: int
    event: str
    t: float
    extra: str = ""


def read_side_log(path: Path) -> list[Record]:
    out: list[Record] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split(" ", 5)
        if len(parts) < 5:
            continue  # a torn line cannot happen with O_APPEND; counted by the caller if so
        out.append(
            Record(
                int(parts[0]),
                int(parts[1]),
                int(parts[2]),
                parts[3],
                float(parts[4]),
                parts[5] if len(parts) > 5 else "",
            )
        )
    return out


def kind_of(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def wait_for(
    predicate: Callable[[], Any], *, timeout: float, interval: float = 0.05, what: str = ""
) -> Any:
    """`predicate()`'s first truthy value; TimeoutError naming `what` after `timeout`."""
    give_up = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= give_up:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def tick_time(key: str) -> float:
    """The tick of a ``cron:NAME:2024-05-01T12:00:05Z`` key, as UNIX seconds."""
    text = ":".join(key.rsplit(":", 3)[-3:])
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


def peak_concurrency(spans: Iterable[tuple[float, float]]) -> int:
    events = sorted(itertools.chain.from_iterable(((s, 1), (e, -1)) for s, e in spans))
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak
