"""A child's side of its pipes: the inbox thread that reads what the
supervisor sends, the fence that ends a job whose lease runs out, the
progress flusher, the channel a job's `Context` writes through, and the
child's own stdout and stderr, restored after each job.

A child fences itself: when the pipe from the supervisor ends (the
supervisor is gone, ``kill -9`` included) or the running job's lease runs
out (the supervisor could not renew it: the database is away, or the
supervisor is frozen), it ends the job's whole process tree and exits, so
a rescued job never overlaps this run.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sys
import threading
import time
from typing import TextIO

import msgspec

from procqueue import errors, protocol
from procqueue.child import proctree

PROGRESS_EVERY_S = 0.25
"""At most one progress frame per job per this many seconds; the last value
always travels with the outcome."""


def _end_tree_and_exit(why: str) -> None:
    """Kills every process below this one, then exits at once (any thread)."""
    with contextlib.suppress(OSError):
        os.write(2, f"procqueue child {os.getpid()}: {why}; ending the job\n".encode())
    proctree.signal_tree(os.getpid(), signal.SIGKILL, include_root=False)
    os._exit(protocol.FENCE_EXIT)


class StdStreams:
    """The child's stdout and stderr (fds 1 and 2, which the supervisor
    reads) as they were when it started: a job that closes or redirects
    them silences only itself, never the jobs after it in this child."""

    def __init__(self) -> None:
        self._saved = {1: os.dup(1), 2: os.dup(2)}  # not inherited by what jobs start

    def restore(self) -> None:
        """fds 1 and 2, `sys.stdout` and `sys.stderr` as at start, with what
        the job left buffered written out."""
        for fd, saved in self._saved.items():
            with contextlib.suppress(OSError):
                os.dup2(saved, fd)
        sys.stdout = _open_stream(sys.__stdout__, 1)
        sys.stderr = _open_stream(sys.__stderr__, 2)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


def _open_stream(stream: TextIO | None, fd: int) -> TextIO:
    """`stream`, or a new one on `fd` if a job closed it."""
    if stream is not None and not stream.closed:
        return stream
    return open(fd, "w", buffering=1, closefd=False, errors="backslashreplace")


_WRITING = threading.Lock()
"""Frames of a job come from its thread and from the progress flusher."""


class Fence:
    """Ends the job when its lease runs out, by this process's monotonic clock."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._wake_at: float | None = None
        """When the watcher wakes up next (None: only when told). A deadline
        no earlier than that needs no wake-up: the watcher reads the deadline
        again when it wakes, so a job that ends before its lease costs the
        watcher nothing."""
        threading.Thread(target=self._watch, name="procqueue-fence", daemon=True).start()

    def arm(self, deadline: float | None) -> None:
        """The running job may run until monotonic `deadline` (None: no lease to keep)."""
        with self._cond:
            self._deadline = deadline
            if deadline is not None and (self._wake_at is None or deadline < self._wake_at):
                self._cond.notify()

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._wake_at = None
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left <= 0:
                    _end_tree_and_exit(
                        "the job's lease ran out (its supervisor could not renew it)"
                    )
                self._wake_at = self._deadline
                self._cond.wait(left)


class Flusher:
    """Sends a throttled progress value once its turn comes, so the latest
    progress of a job that goes quiet is not held back until its outcome."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: tuple[float, PipeChannel] | None = None
        threading.Thread(target=self._watch, name="procqueue-progress", daemon=True).start()

    def at(self, when: float, channel: PipeChannel) -> None:
        with self._cond:
            if self._due is None or self._due[1] is not channel:
                self._due = (when, channel)
                self._cond.notify()

    def _watch(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._due is None:
                        self._cond.wait()
                        continue
                    when, channel = self._due
                    left = when - time.monotonic()
                    if left > 0:
                        self._cond.wait(left)
                        continue
                    self._due = None
                    break
            # Sent with the condition released: a job's `progress` holds its
            # channel's lock while it calls `at`, so the two locks are never
            # held in the other order (that order deadlocked a job that
            # reported progress in a tight loop).
            with contextlib.suppress(OSError):
                channel.flush_progress()


class Inbox:
    """The pipe from the supervisor, read by its own thread: lease renewals
    go to the fence at once (the main thread is busy running the job), the
    other frames wait here for the main thread. The end of the pipe ends
    the job."""

    def __init__(self, rfd: int, fence: Fence) -> None:
        self._rfd = rfd
        self._fence = fence
        self._lock = threading.Lock()
        self._current: int | None = None
        self._leases: dict[int, float] = {}
        """Job id -> monotonic time its lease (less the margin) runs out, for
        the job running and those waiting in the pipe."""
        self._revoked: set[int] = set()
        self._pending: set[int] = set()
        """Jobs received and not started yet."""
        self._stopped: set[int] = set()
        """Jobs told to stop before they started: they start cancelled."""
        self._ending: set[int] = set()
        """Jobs whose kill is decided (a Stop with `kill_in`): their code gets Stopped."""
        self.steps: queue.SimpleQueue[protocol.StepSaved | None] = queue.SimpleQueue()
        """Answers to the running job's Step frames (kept apart from the Run
        frames of the jobs waiting behind it)."""
        self.error: errors.ProtocolError | None = None
        """Why the pipe stopped being readable, if it was not a clean end."""
        self.frames: queue.SimpleQueue[protocol.Message | None] = queue.SimpleQueue()
        threading.Thread(target=self._read, name="procqueue-inbox", daemon=True).start()

    def running(self, job_id: int | None) -> bool:
        """Marks `job_id` as the job running now (None: idle) and arms the
        fence with its lease; False if the job was revoked (skip it)."""
        with self._lock:
            if self._current is not None:
                self._leases.pop(self._current, None)
                self._ending.discard(self._current)
            self._current = job_id
            self._pending.discard(job_id or 0)
            while not self.steps.empty():  # answers meant for an earlier run
                self.steps.get_nowait()
            if job_id is not None and job_id in self._revoked:
                self._revoked.discard(job_id)
                self._ending.discard(job_id)
                self._leases.pop(job_id, None)
                self._current = None
                return False
            self._fence.arm(None if job_id is None else self._leases.get(job_id))
            return True

    def stop_asked(self, job_id: int) -> bool:
        """Whether the job was told to stop before it started."""
        with self._lock:
            if job_id in self._stopped:
                self._stopped.discard(job_id)
                return True
            return False

    def must_stop(self, job_id: int) -> bool:
        """Whether the job's kill is decided, so its code is to get `Stopped`.

        Takes no lock: the SIGTERM handler asks, in the main thread, which
        may hold the lock when the signal comes (a set's lookup is atomic).
        """
        return job_id in self._ending

    def _read(self) -> None:
        try:
            while True:
                message = protocol.read_message(self._rfd, to_child=True)
                if message is None:
                    break
                if isinstance(message, (protocol.Run, protocol.Lease)):
                    self._lease(message)
                    if isinstance(message, protocol.Lease):
                        continue
                elif isinstance(message, protocol.StepSaved):
                    if message.job_id == self._current:
                        self.steps.put(message)
                    continue  # else the answer to a Step a finished job wrote by hand
                elif isinstance(message, (protocol.Stop, protocol.Revoke)):
                    self._stop(message)
                    continue
                self.frames.put(message)
        except errors.ProtocolError as exc:
            self.error = exc
        except OSError:
            pass  # the pipe is gone: as its end
        if self._current is not None:
            why = "its supervisor is gone" if self.error is None else f"a bad frame ({self.error})"
            _end_tree_and_exit(why)
        self.frames.put(None)
        self.steps.put(None)

    def _stop(self, message: protocol.Stop | protocol.Revoke) -> None:
        with self._lock:
            known = message.job_id in self._pending or message.job_id == self._current
            if known and isinstance(message, protocol.Stop) and message.kill_in is not None:
                self._ending.add(message.job_id)  # before the SIGTERM that delivers it
            if message.job_id in self._pending:
                if isinstance(message, protocol.Stop):  # it starts already told to stop
                    self._stopped.add(message.job_id)
                else:  # taken back: skipped when its turn comes (and said so)
                    self._revoked.add(message.job_id)
                return
            running = message.job_id == self._current
        if running and isinstance(message, protocol.Stop):
            # the job's whole tree, this process included: its handler sets
            # cx.cancelled and, when the kill is decided, raises Stopped in the job
            proctree.signal_tree(os.getpid(), signal.SIGTERM)

    def _lease(self, message: protocol.Run | protocol.Lease) -> None:
        seconds = message.lease if isinstance(message, protocol.Run) else message.left
        with self._lock:
            if isinstance(message, protocol.Run):
                self._pending.add(message.job_id)
            if isinstance(message, protocol.Lease) and message.job_id not in self._leases:
                return  # ended meanwhile
            deadline = time.monotonic() + seconds if seconds > 0 else None
            if deadline is None:
                self._leases.pop(message.job_id, None)
            else:
                self._leases[message.job_id] = deadline
            if message.job_id == self._current:
                self._fence.arm(deadline)


class PipeChannel:
    """A Context's channel over the protocol pipe."""

    def __init__(
        self,
        inbox: Inbox,
        wfd: int,
        job_id: int,
        steps: dict[str, bytes],
        parents: dict[int, bytes] | None = None,
    ) -> None:
        self._inbox = inbox
        self._wfd = wfd
        self._job_id = job_id
        self._steps = steps
        self._parents = parents or {}
        self._sent_at = -PROGRESS_EVERY_S
        self.last: tuple[str | None, float | None] | None = None
        self._unsent = False
        self._progress_lock = threading.Lock()
        self.flusher: Flusher | None = None
        self.done = False
        """The outcome is being sent: nothing more for this job."""
        self.cancel_requested = False

    def send(self, message: protocol.Message) -> None:
        """Writes one frame, whole: the job's thread and the progress flusher both send."""
        frame = protocol.encode(message, limit=protocol.MAX_REPLY)
        with _WRITING:
            protocol.write_all(self._wfd, frame)

    def progress(self, text: str | None, fraction: float | None) -> None:
        """Keeps the latest value; sends at most every PROGRESS_EVERY_S (a
        held-back value goes when its turn comes, or with the outcome)."""
        with self._progress_lock:
            old_text, old_fraction = self.last or (None, None)
            self.last = (
                text if text is not None else old_text,
                fraction if fraction is not None else old_fraction,
            )
            self._unsent = True
            due = self._sent_at + PROGRESS_EVERY_S
            if time.monotonic() < due:
                if self.flusher is not None:
                    self.flusher.at(due, self)
                return
        self.flush_progress()

    def flush_progress(self) -> None:
        """Sends the latest progress if it was held back."""
        with self._progress_lock:
            if not self._unsent or self.last is None or self.done:
                return
            self._sent_at = time.monotonic()
            self._unsent = False
            text, fraction = self.last
            self.send(protocol.Progress(job_id=self._job_id, text=text, fraction=fraction))

    def step_saved(self, name: str) -> bytes | None:
        return self._steps.get(name)

    def step_done(self, name: str, value: bytes) -> None:
        if len(value) > protocol.MAX_REPLY - 1024:
            raise ValueError(
                f"step {name!r} returned {len(value)} bytes encoded; "
                f"the limit is {protocol.MAX_REPLY - 1024}"
            )
        self.send(protocol.Step(job_id=self._job_id, name=name, value=value))
        while True:
            reply = self._inbox.steps.get()
            if reply is None:
                raise errors.ProtocolError(f"the supervisor did not save step {name!r}")
            if reply.name == name:
                break
        self._steps[name] = value

    def cancelled(self) -> bool:
        return self.cancel_requested

    def parent_results(self) -> dict[int, bytes]:
        return self._parents

    def step_clock(self, name: str, timeout: float | None) -> None:
        self.send(protocol.StepClock(job_id=self._job_id, name=name, timeout=timeout))

    def outcome(self, reply: protocol.Done | protocol.Failed) -> protocol.Done | protocol.Failed:
        """`reply` with the job's last progress, when some was not sent yet."""
        with self._progress_lock:
            self.done = True
        if not self._unsent or self.last is None:
            return reply
        text, fraction = self.last
        return msgspec.structs.replace(reply, progress=text, fraction=fraction)
