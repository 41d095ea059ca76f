"""Running a job's code so that a stop reaches it: `Guard` raises `Stopped`
in the thread running a sync job, or cancels an async job's task, and
`EventLoop` is the one asyncio loop a process runs its async jobs on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator
from types import FrameType
from typing import Any

from procqueue.errors import Stopped

LEFTOVER_WAIT_S = 1.0
"""How long the tasks an async job left behind get to end once cancelled."""


class Guard:
    """The stop of one attempt. `stop` is called in the thread running the
    job (the child's SIGTERM handler, in its main thread), at most one stop
    is delivered, and only to the job's own code: never to procqueue's
    bookkeeping around it, never to an attempt that has finished."""

    def __init__(self) -> None:
        self._requested = False
        self._delivered = False
        self._running = False
        self._async = False
        self._task: asyncio.Task[Any] | None = None
        self._frame: FrameType | None = None

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for this attempt."""
        return self._requested

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The block runs the job's code: a stop asked before it raises
        `Stopped` at once, one asked during it raises `Stopped` wherever
        the code is."""
        if self._requested:
            self._delivered = True
            raise Stopped()
        self._running = True
        try:
            yield
        finally:
            self._running = False

    def watch(self, task: asyncio.Task[Any] | None, frame: FrameType | None) -> None:
        """The async job's task (None once it ended) and its coroutine's frame."""
        self._async = True
        self._task = task
        self._frame = frame

    def stop(self, frame: FrameType | None) -> None:
        """Delivers the stop, given the frame the thread was interrupted in.

        A sync job gets `Stopped` raised here (so in its code). An async job
        whose code is executing (a loop that never awaits) gets `Stopped`
        the same way; one that waits has its task cancelled, so its await
        raises CancelledError. Before the job's code starts, it is
        remembered for `running`; after it ended, nothing happens.
        """
        self._requested = True
        if self._delivered or not self._running:
            return
        task = self._task
        if not self._async:
            self._delivered = True
            raise Stopped()
        if task is None or task.done():  # ended: the loop cleans up after it
            return
        self._delivered = True
        if self._frame is not None and _on_stack(self._frame, frame):
            raise Stopped()
        task.cancel("the job was told to stop")
        with contextlib.suppress(RuntimeError):  # wakes the loop if it waits
            task.get_loop().call_soon_threadsafe(lambda: None)


def _on_stack(target: FrameType, frame: FrameType | None) -> bool:
    while frame is not None:
        if frame is target:
            return True
        frame = frame.f_back
    return False


class EventLoop:
    """One asyncio event loop (an `asyncio.Runner`), made on first use and
    reused by every async job this process runs, one at a time."""

    def __init__(self) -> None:
        self._runner: asyncio.Runner | None = None

    def run(self, coro: Coroutine[Any, Any, Any], guard: Guard) -> Any:
        """Runs `coro` as a task to its end and returns its result or raises
        its exception (`Stopped` for a task cancelled by a stop). Tasks it
        left running are cancelled and given `LEFTOVER_WAIT_S` to end, so
        none of them runs into the next job.

        Raises RuntimeError (having closed `coro`) when called from a running loop.
        """
        if loop_running():
            coro.close()
            raise RuntimeError(
                "an async job can't be run from inside a running event loop; "
                "run it from synchronous code (e.g. with asyncio.to_thread)"
            )
        if self._runner is None:
            self._runner = asyncio.Runner()
        loop = self._runner.get_loop()
        task = loop.create_task(coro)
        guard.watch(task, getattr(coro, "cr_frame", None))
        try:
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            if guard.requested:
                raise Stopped() from None
            raise
        finally:
            guard.watch(None, None)
            _cancel_leftovers(loop)

    def close(self) -> None:
        """Closes the loop (cancelling what still runs on it)."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None


def loop_running() -> bool:
    """Whether this thread is running an event loop now."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    left = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not left:
        return
    for task in left:
        task.cancel()
    with contextlib.suppress(BaseException):
        loop.run_until_complete(asyncio.wait(left, timeout=LEFTOVER_WAIT_S))
    for task in left:  # retrieved, so the loop does not log them as never retrieved
        if task.done() and not task.cancelled():
            task.exception()
