"""Helpers for testing code that uses procqueue: a clock tests move, a fault
injector, waiting on conditions, and a supervisor in a background thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from procqueue.clock import ManualClock
from procqueue.producer.app import App
from procqueue.supervisor.faults import Faults
from procqueue.supervisor.loop import Supervisor
from procqueue.supervisor.settings import Settings

T = TypeVar("T")

__all__ = ["Faults", "ManualClock", "supervising", "wait_until"]


def wait_until(
    predicate: Callable[[], T], *, timeout: float = 10.0, interval: float = 0.01, what: str = ""
) -> T:
    """Polls `predicate` until it returns something truthy and returns it;
    AssertionError after `timeout` seconds."""
    give_up = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= give_up:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


@contextmanager
def supervising(
    app: App, spec: str, *, faults: Faults | None = None, **settings: Any
) -> Iterator[Supervisor]:
    """Runs a Supervisor for `app` in a thread; on exit drains it and joins,
    re-raising anything the supervisor raised."""
    defaults: dict[str, Any] = {
        "workers": 2,
        "poll": 0.05,
        "lease": 10.0,
        "grace": 5.0,
        "kill_grace": 0.5,
    }
    supervisor = Supervisor(
        app, spec=spec, settings=Settings(**{**defaults, **settings}), faults=faults
    )
    failure: list[BaseException] = []

    def run() -> None:
        try:
            supervisor.run()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name="procqueue-supervisor", daemon=True)
    thread.start()
    try:
        yield supervisor
    finally:
        supervisor.request_stop()
        thread.join(timeout=60)
        if thread.is_alive():
            supervisor.request_stop()
            thread.join(timeout=30)
    if failure:
        raise failure[0]
