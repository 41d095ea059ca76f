"""Rates of flow control: at most N starts per sliding window of a second,
a minute or an hour, written ``"N/s"``, ``"N/m"``, ``"N/h"``. Pure data, no I/O."""

from __future__ import annotations

import msgspec

from procqueue.models import INT32

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
    expected = f'a rate is "N/s", "N/m" or "N/h" with N from 1 to {INT32[1]}, got {text!r}'
    if not isinstance(text, str) or text.count("/") != 1:
        raise ValueError(expected)
    count, unit = text.split("/")
    if not count.isascii() or not count.isdigit() or unit not in PERIODS:
        raise ValueError(expected)
    if not 1 <= int(count) <= INT32[1]:
        raise ValueError(expected)
    return Rate(int(count), PERIODS[unit])
