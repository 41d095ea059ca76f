"""Faults a test injects into a supervisor (a seam, not a patch)."""

from __future__ import annotations

import threading


class Faults:
    """Named faults, each firing once."""

    def __init__(self) -> None:
        self._kill_in: set[str] = set()
        self._lock = threading.Lock()

    def kill_in(self, step: str) -> None:
        """Kills the child running the next step named `step` after the
        step's work, before its result is saved."""
        with self._lock:
            self._kill_in.add(step)

    def kills(self, step: str) -> bool:
        """Whether step `step` dies now; consumes the fault."""
        with self._lock:
            if step in self._kill_in:
                self._kill_in.discard(step)
                return True
            return False
