"""Cron schedules: pure functions of an expression and instants (croniter).

Each tick is enqueued with the key ``cron:NAME:TICK``, so however many
supervisors race to enqueue it, one job exists per tick.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from typing import Any

import msgspec
from croniter import croniter
from croniter.croniter import CroniterError

from procqueue import errors

MAX_TICKS_PER_PASS = 1000
"""Ticks of one schedule enqueued in one pass at most: a clock that jumped
far must not flood the queue (the ticks beyond are skipped)."""


class Schedule(msgspec.Struct, frozen=True):
    """A job enqueued on every tick of `expr` in `timezone`."""

    job: str
    expr: str
    timezone: str = "UTC"
    args: dict[str, Any] = {}
    queue: str | None = None


def _zone(name: str, expr: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise errors.ConfigError(f"cron {expr!r}: unknown timezone {name!r}") from None


def validate(expr: str, timezone: str) -> None:
    """Raises ConfigError quoting `expr` if it is malformed or never fires."""
    zone = _zone(timezone, expr)
    if not isinstance(expr, str) or not croniter.is_valid(expr):
        raise errors.ConfigError(f"malformed cron expression {expr!r}")
    try:
        croniter(expr, dt.datetime(2000, 1, 1, tzinfo=zone)).get_next(dt.datetime)
    except CroniterError:
        raise errors.ConfigError(f"cron expression {expr!r} never fires") from None


def ticks_between(
    schedule: Schedule, after: float, until: float, limit: int = MAX_TICKS_PER_PASS
) -> list[float]:
    """Ticks in ``(after, until]`` as UNIX seconds, the first `limit` of them."""
    zone = _zone(schedule.timezone, schedule.expr)
    it = croniter(schedule.expr, dt.datetime.fromtimestamp(after, tz=zone))
    out: list[float] = []
    while len(out) < limit:
        try:
            tick = it.get_next(float)
        except CroniterError:
            break
        if tick > until:
            break
        out.append(tick)
    return out


def previous_tick(schedule: Schedule, at: float) -> float | None:
    """The last tick at or before `at` (None if there is none)."""
    zone = _zone(schedule.timezone, schedule.expr)
    it = croniter(schedule.expr, dt.datetime.fromtimestamp(at + 1e-6, tz=zone))
    try:
        tick: float = it.get_prev(float)
    except CroniterError:
        return None
    return tick


def next_ticks(schedule: Schedule, at: float, count: int) -> list[dt.datetime]:
    """The next `count` fire times after `at`, in the schedule's timezone."""
    zone = _zone(schedule.timezone, schedule.expr)
    it = croniter(schedule.expr, dt.datetime.fromtimestamp(at, tz=zone))
    out: list[dt.datetime] = []
    for _ in range(count):
        try:
            out.append(it.get_next(dt.datetime))
        except CroniterError:
            break
    return out


def tick_key(schedule: Schedule, tick: float) -> str:
    stamp = dt.datetime.fromtimestamp(tick, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"cron:{schedule.job}:{stamp}"
