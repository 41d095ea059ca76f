"""One line per database outage: calls to the store that fail are logged
once when the outage starts and once when it ends, and retried with
backoff instead of every loop pass."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from procqueue import _clock, errors

log = logging.getLogger("procqueue.supervisor")

_BACKOFF_MIN_S = 0.25
_BACKOFF_MAX_S = 5.0


class DbGuard:
    """Wraps store calls of one supervisor; `on_recover` runs when the database is back."""

    def __init__(self, clock: _clock.Clock, on_recover: Callable[[], None]) -> None:
        self.clock = clock
        self.on_recover = on_recover
        self.down_since: float | None = None
        self.retry_at = 0.0
        self._backoff = _BACKOFF_MIN_S

    def ok(self, now: float) -> bool:
        """Whether store calls should be tried at monotonic time `now`."""
        return self.down_since is None or now >= self.retry_at

    def __call__(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """Calls a store method; on a database error backs off and returns None.

        `errors.StoreRejected` (the database refused a value) is no outage:
        it propagates for the caller to turn into the job's failure.
        """
        try:
            result = fn(**kwargs)
        except errors.StoreRejected:
            raise
        except errors.StoreError as exc:
            now = self.clock.monotonic()
            if self.down_since is None:
                self.down_since = now
                log.error("database unavailable, retrying with backoff: %s", first_line(str(exc)))
            else:
                self._backoff = min(self._backoff * 2, _BACKOFF_MAX_S)
            self.retry_at = now + self._backoff
            return None
        if self.down_since is not None:
            log.warning("database back after %.1fs", self.clock.monotonic() - self.down_since)
            self.down_since = None
            self._backoff = _BACKOFF_MIN_S
            self.on_recover()
        return result


def first_line(text: str | None) -> str:
    """The first non-blank line of `text` ('' if none)."""
    stripped = (text or "").strip()
    return stripped.splitlines()[0] if stripped else ""
