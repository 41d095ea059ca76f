"""What job code sees of its run: `Context`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import msgspec

from procqueue.jobs.options import non_finite
from procqueue.models import MAX_SECONDS

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

    def parent_results(self) -> dict[int, bytes]:
        """The JSON results of the job's done dependencies, by id."""
        ...

    def step_clock(self, name: str, timeout: float | None) -> None:
        """Step `name` started with `timeout` seconds (None: it ended without a result)."""
        ...


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
        self._parents: dict[int, Any] | None = None

    @property
    def parent_results(self) -> dict[int, Any]:
        """The results of the jobs this one was enqueued `after`, by id, as
        decoded from JSON: every one that is done (with ``allow_failure``,
        a failed or cancelled dependency has none). Empty for a job with no
        dependencies.

        Raises:
            ValueError: a stored result is not JSON (the attempt fails).
        """
        if self._parents is None:
            try:
                decoded = {
                    id_: msgspec.json.decode(raw)
                    for id_, raw in self._channel.parent_results().items()
                }
            except msgspec.DecodeError as exc:
                raise ValueError(f"a dependency's stored result is not JSON: {exc}") from None
            self._parents = decoded
        return dict(self._parents)

    @property
    def cancelled(self) -> bool:
        """True once a cancel (or timeout) was requested; the child is killed
        shortly after, so checking it lets a job stop cleanly."""
        return self._channel.cancelled()

    def progress(self, text: str | None = None, fraction: float | None = None) -> None:
        """Reports progress; the supervisor writes it at most ~4 times a second.

        Raises:
            TypeError: `text` is not a str, or `fraction` not a number (None keeps either).
            ValueError: `fraction` is outside [0, 1].
        """
        if text is not None and not isinstance(text, str):
            raise TypeError(f"progress text must be a str or None, got {type(text).__name__}")
        if fraction is not None:
            if isinstance(fraction, bool) or not isinstance(fraction, int | float):
                raise TypeError(f"fraction must be a number or None, got {type(fraction).__name__}")
            if not 0.0 <= fraction <= 1.0:
                raise ValueError("fraction must be between 0 and 1")
            fraction = float(fraction)
        self._channel.progress(text, fraction)

    def step(self, name: str, fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        """Runs `fn(*args)` once across attempts: its result is saved in the
        job's row as soon as it returns, and a later attempt gets the saved
        result back without running `fn` again.

        With `timeout` (seconds), a step still running past it ends the job's
        process tree, whatever the step does (the supervisor kills it, as for
        the job's own timeout): the attempt fails with "step 'NAME' timed out
        after S s" and is retried per the job's policy, resuming after the
        last step saved. One step's timeout is armed at a time: a step with
        a timeout inside another replaces the outer one's.

        The result must be JSON-encodable (NaN and infinity are a ValueError);
        it is returned as decoded from JSON on a retry, so return plain
        values (or convert them back).
        """
        if not name or '"' in name or len(name) > 200:
            raise ValueError("a step name is 1-200 characters without '\"'")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or not 0 < timeout <= MAX_SECONDS
        ):
            raise ValueError(f"a step's timeout is a number of seconds > 0, got {timeout!r}")
        saved = self._channel.step_saved(name)
        if saved is not None:
            value: T = msgspec.json.decode(saved)
            return value
        if timeout is None:
            result = fn(*args)
        else:
            self._channel.step_clock(name, float(timeout))
            try:
                result = fn(*args)
            except BaseException:
                self._channel.step_clock(name, None)
                raise
        encoded = msgspec.json.encode(result)
        # JSON has no NaN/Infinity and msgspec writes them as null: a retry
        # would get a different value back, so the step fails instead
        if b"null" in encoded and non_finite(msgspec.to_builtins(result)):
            raise ValueError(f"step {name!r} returned NaN or infinity, which JSON cannot carry")
        self._channel.step_done(name, encoded)
        return result
