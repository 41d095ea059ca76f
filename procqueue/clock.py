"""Time, from one place, so tests can move it.

Every decision about time (run_at, leases, deadlines, cron ticks) goes
through a `Clock`; SQL never asks the database for the time.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Wall time as UNIX seconds; what is written to and compared in the database."""
        ...

    def monotonic(self) -> float:
        """Seconds for measuring intervals inside one process."""
        ...

    def sleep(self, seconds: float) -> None:
        """Waits `seconds` of this clock's monotonic time."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class ManualClock:
    """The system clock moved forward by hand (tests).

    The offset may live in a file so that a supervisor in another process
    (started with ``PROCQUEUE_TEST_CLOCK=<file>``) sees the same time as the
    test that advances it. Only wall time moves: leases, deadlines and cron
    are all decided on wall time, while the monotonic clock (timeouts of a
    running child) stays real, since a child's real run time cannot jump.
    """

    def __init__(self, path: str | None = None) -> None:
        self._path = path
        self._offset = 0.0
        self._lock = threading.Lock()
        if path is not None and not os.path.exists(path):
            self._write(0.0)

    def _write(self, offset: float) -> None:
        assert self._path is not None
        tmp = f"{self._path}.tmp{os.getpid()}.{threading.get_ident()}"
        with open(tmp, "w") as f:
            f.write(repr(offset))
        os.replace(tmp, self._path)

    def offset(self) -> float:
        if self._path is None:
            return self._offset
        with open(self._path) as f:
            return float(f.read() or 0.0)

    def advance(self, seconds: float) -> None:
        """Moves wall time forward by `seconds`."""
        with self._lock:
            if self._path is None:
                self._offset += seconds
            else:
                self._write(self.offset() + seconds)

    def now(self) -> float:
        return time.time() + self.offset()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class FakeClock:
    """Wall time, monotonic time and sleeping, all moved by hand (tests that
    step a supervisor with `Supervisor.tick`).

    `advance` moves both clocks together; `sleep` advances instead of
    waiting, so code that sleeps on this clock runs at once. Safe to share
    between threads.
    """

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self._lock = threading.Lock()
        self._wall = start
        self._mono = 1_000.0

    def now(self) -> float:
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        """Moves wall and monotonic time forward by `seconds` (>= 0)."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        with self._lock:
            self._wall += seconds
            self._mono += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))


def from_env() -> Clock:
    """The clock a process should use: manual when a test set ``PROCQUEUE_TEST_CLOCK``."""
    path = os.environ.get("PROCQUEUE_TEST_CLOCK")
    return ManualClock(path) if path else SystemClock()
