"""Stepping a started supervisor by hand: the helpers the stepped and loop
tests share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from procqueue import events
from procqueue.supervisor.loop import Supervisor
from procqueue.testing import wait_until


def until(sup: Supervisor, what: str, predicate: Callable[[], Any]) -> Any:
    """Steps `sup` (real I/O, fake time standing still) until `predicate` holds."""

    def stepped_predicate() -> Any:
        sup.step(timeout=0.01)
        return predicate()

    return wait_until(stepped_predicate, timeout=20, what=what)


def recorder(sup: Supervisor) -> list[events.Event]:
    seen: list[events.Event] = []
    sup.events.subscribe(seen.append)
    return seen
