"""Flow control's records: a job's flow options, and rates (at most N starts
per sliding window of a second, a minute or an hour, written ``"N/s"``,
``"N/m"``, ``"N/h"``). Pure data, no I/O."""

from __future__ import annotations

import msgspec

INT32_MAX = 2**31 - 1
"""The largest count of a rate or a group limit (PostgreSQL stores them as integer)."""

PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}


class Rate(msgspec.Struct, frozen=True):
    """At most `count` starts per sliding window of `period` seconds."""

    count: int
    period: float

    @property
    def text(self) -> str:
        unit = next(u for u, s in PERIODS.items() if s == self.period)
        return f"{self.count}/{unit}"


def parse_rate(text: object) -> Rate:
    """``"N/s"``, ``"N/m"`` or ``"N/h"`` with N from 1 to 2**31-1.

    Raises ValueError saying what is expected.
    """
    expected = f'a rate is "N/s", "N/m" or "N/h" with N from 1 to {INT32_MAX}, got {text!r}'
    if not isinstance(text, str) or text.count("/") != 1:
        raise ValueError(expected)
    count, unit = text.split("/")
    if not count.isascii() or not count.isdigit() or unit not in PERIODS:
        raise ValueError(expected)
    if not 1 <= int(count) <= INT32_MAX:
        raise ValueError(expected)
    return Rate(int(count), PERIODS[unit])


class Flow(msgspec.Struct, frozen=True):
    """A job's flow control (see docs/flow-control.md), checked at enqueue."""

    group: str | None = None
    """Claims rotate across the groups of a queue and priority."""
    group_limit: int | None = None
    """At most this many jobs of its group held (running or reserved) at once."""
    rate_limit: str | None = None
    """At most N starts of jobs of its name per window (``"N/s"``, ``"N/m"``, ``"N/h"``)."""
    group_rate: str | None = None
    """At most N starts of jobs of its group per window."""
    debounce: float | None = None
    """With a key: an enqueue finding the key pending replaces its args and
    moves its run_at to now + debounce (see `debounce_max`)."""
    debounce_max: float = 60.0
    """Seconds after the first enqueue past which debouncing never delays it."""
