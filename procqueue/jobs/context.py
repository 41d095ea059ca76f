"""What job code sees of its run: `Context`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import msgspec

T = TypeVar("T")


class Channel(Protocol):
    """Where a Context sends what the job reports: the pipe in a child, memory inline."""

    def progress(self, text: str | None, fraction: float | None) -> None: ...

    def step_saved(self, name: str) -> bytes | None:
        """The saved JSON result of step `name`, or None if it never completed."""
        ...

    def step_done(self, name: str, value: bytes) -> None:
        """Makes the step's result durable before returning."""
        ...

    def cancelled(self) -> bool: ...


class Context:
    """The run of one attempt of one job.

    Attributes:
        id: the job's id.
        attempt: 1 on the first run, 2 on the first retry, ...
    """

    def __init__(self, *, id: int, attempt: int, channel: Channel) -> None:
        self.id = id
        self.attempt = attempt
        self._channel = channel

    @property
    def cancelled(self) -> bool:
        """True once a cancel (or timeout) was requested; the child is killed
        shortly after, so checking it lets a job stop cleanly."""
        return self._channel.cancelled()

    def progress(self, text: str | None = None, fraction: float | None = None) -> None:
        """Reports progress; the supervisor writes it at most ~4 times a second."""
        if fraction is not None and not 0.0 <= fraction <= 1.0:
            raise ValueError("fraction must be between 0 and 1")
        self._channel.progress(text, fraction)

    def step(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        """Runs `fn(*args)` once across attempts: its result is saved in the
        job's row as soon as it returns, and a later attempt gets the saved
        result back without running `fn` again.

        The result must be JSON-encodable; it is returned as decoded from
        JSON on a retry, so return plain values (or convert them back).
        """
        if not name or '"' in name or len(name) > 200:
            raise ValueError("a step name is 1-200 characters without '\"'")
        saved = self._channel.step_saved(name)
        if saved is not None:
            value: T = msgspec.json.decode(saved)
            return value
        result = fn(*args)
        self._channel.step_done(name, msgspec.json.encode(result))
        return result
