"""The supervisor's database calls, run on their own thread so that the
supervision loop never waits on the database.

The loop submits calls and reacts to their answers; a call that hangs (a
table lock, a black-holed network, another process holding the SQLite
file) holds up only the calls queued behind it, never a timeout, a kill,
a drain or a signal. Calls run one at a time in the order submitted, so
outcomes are written in order; at most one call of a kind is in flight,
so nothing is written twice and the queue cannot grow during a stall.
Every call is bounded by the store's own timeouts.

Health: the first failure of an outage is one `DatabaseDown` event and the
end one `DatabaseUp`; optional calls back off in between.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from procqueue import errors, events
from procqueue.clock import Clock

log = logging.getLogger("procqueue.supervisor")

BACKOFF_MIN_S = 0.25
BACKOFF_MAX_S = 5.0


@dataclass
class _Call:
    kind: str
    fn: Callable[[], Any]
    on_done: Callable[[Any], None]
    on_error: Callable[[errors.StoreError], None] | None
    result: Any = None
    error: errors.StoreError | None = None


class DbCalls:
    """One worker thread for one supervisor's store calls.

    Args:
        clock: for the outage's start and backoff (monotonic).
        events: where DatabaseDown/DatabaseUp go.
        wake: called (from the worker thread) when an answer is ready; the
            loop then calls `deliver`.
    """

    def __init__(
        self, *, clock: Clock, events: events.EventStream, wake: Callable[[], None]
    ) -> None:
        self.clock = clock
        self.events = events
        self.wake = wake
        self.down_since: float | None = None
        self.retry_at = 0.0
        self._backoff = BACKOFF_MIN_S
        self._requests: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._answers: collections.deque[_Call] = collections.deque()
        self._in_flight: collections.Counter[str] = collections.Counter()
        self._current: tuple[str, float] | None = None
        self._thread = threading.Thread(target=self._serve, name="procqueue-db", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Lets queued calls finish for up to `timeout` s; True if the worker
        ended (False: a call still hangs; the daemon thread dies with us)."""
        self._requests.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the loop's side ----------------------------------------------------

    def submit(
        self,
        kind: str,
        fn: Callable[[], Any],
        *,
        on_done: Callable[[Any], None],
        on_error: Callable[[errors.StoreError], None] | None = None,
    ) -> None:
        """Queues `fn()`; `on_done(result)` or `on_error(exc)` runs later in
        the loop's thread, from `deliver`. An outage error not handled by
        `on_error` only counts toward health."""
        self._in_flight[kind] += 1
        self._requests.put(_Call(kind, fn, on_done, on_error))

    def busy(self, kind: str) -> bool:
        """Whether a call of `kind` is queued or running."""
        return self._in_flight[kind] > 0

    def ok(self, now: float) -> bool:
        """Whether optional calls should be submitted at monotonic `now`:
        the database is healthy, or its backoff has passed, and no call has
        been hanging for long."""
        current = self._current
        if current is not None and now - current[1] > BACKOFF_MAX_S:
            return False
        return self.down_since is None or now >= self.retry_at

    def deliver(self) -> None:
        """Runs the callbacks of every answered call, in order."""
        while self._answers:
            call = self._answers.popleft()
            self._in_flight[call.kind] -= 1
            if call.error is None:
                self._healthy()
                call.on_done(call.result)
                continue
            if not isinstance(call.error, errors.StoreRejected):
                self._failed(call.error)
            if call.on_error is not None:
                call.on_error(call.error)

    # -- health -------------------------------------------------------------

    def _failed(self, exc: errors.StoreError) -> None:
        now = self.clock.monotonic()
        if self.down_since is None:
            self.down_since = now
            self.events.emit(events.DatabaseDown(error=str(exc)))
        else:
            self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)
        self.retry_at = now + self._backoff

    def _healthy(self) -> None:
        if self.down_since is None:
            return
        after = self.clock.monotonic() - self.down_since
        self.down_since = None
        self._backoff = BACKOFF_MIN_S
        self.events.emit(events.DatabaseUp(after=after))

    # -- the worker ---------------------------------------------------------

    def _serve(self) -> None:
        while True:
            call = self._requests.get()
            if call is None:
                return
            self._current = (call.kind, self.clock.monotonic())
            try:
                call.result = call.fn()
            except errors.StoreError as exc:
                call.error = exc
            except Exception as exc:  # a bug must not kill the worker: report it as a failure
                log.exception("database call %s failed unexpectedly", call.kind)
                call.error = errors.StoreError(f"unexpected {type(exc).__name__}: {exc}")
            finally:
                self._current = None
            self._answers.append(call)
            self.wake()
