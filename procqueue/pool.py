"""The supervisor's children: N slots, each a long-lived child process that
runs one job at a time; spawning, replacing, recycling and killing them.

The pool knows processes and pipes, not the database: it reports what
happened (a message, a death) and the supervisor decides what to record.
"""

from __future__ import annotations

import logging
import selectors
import signal
from dataclasses import dataclass

from procqueue import _clock, config, errors, models, protocol
from procqueue._process import ChildProcess, exit_reason

log = logging.getLogger("procqueue.supervisor")

STARTUP_FAILURES_MAX = 5
"""Children that die before saying hello, in a row, before the supervisor gives up."""


@dataclass
class Slot:
    """One place a job can run, and the child serving it."""

    index: int
    child: ChildProcess | None = None
    job: models.ClaimedJob | None = None
    started: float = 0.0
    """Monotonic start of the current job."""
    timeout_at: float | None = None
    kill_reason: tuple[str, str] | None = None
    """(kind, words): why the child is being killed; the attempt's outcome follows from it."""
    kill_at: float | None = None
    """When SIGTERM turns into SIGKILL."""
    jobs_run: int = 0
    progress: tuple[str | None, float | None] | None = None
    progress_written: float = 0.0
    memory_checked: float = 0.0
    pid_written: bool = False
    dead: bool = False
    retiring: bool = False

    @property
    def tag(self) -> str:
        return f"job {self.job.id}" if self.job else f"child {self.index}"


class Pool:
    """N slots whose children are registered in the supervisor's selector."""

    def __init__(
        self,
        *,
        spec: str,
        settings: config.Settings,
        clock: _clock.Clock,
        selector: selectors.BaseSelector,
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.clock = clock
        self.selector = selector
        self.slots = [Slot(index=i + 1) for i in range(settings.workers)]
        self.startup_failures = 0

    def start(self) -> None:
        for slot in self.slots:
            self._spawn(slot)

    def _spawn(self, slot: Slot) -> None:
        child = ChildProcess(spec=self.spec, index=slot.index)
        slot.child = child
        slot.dead = False
        slot.retiring = False
        slot.jobs_run = 0
        slot.kill_reason = None
        slot.kill_at = None
        for fd, kind in zip(child.fds(), ("proto", "out", "err"), strict=True):
            self.selector.register(fd, selectors.EVENT_READ, (slot, kind))

    def _release(self, slot: Slot) -> None:
        child = slot.child
        if child is None:
            return
        for fd in child.fds():
            try:
                self.selector.unregister(fd)
            except (KeyError, ValueError):
                pass
        self.relay_output(slot)
        child.close()
        slot.child = None

    def relay_output(self, slot: Slot) -> None:
        """Logs what the slot's child has written so far, tagged with its job."""
        child = slot.child
        if child is None:
            return
        now = self.clock.monotonic()
        job_id = slot.job.id if slot.job else None
        for fd in (child.out_fd, child.err_fd):
            child.relay_output(fd, tag=slot.tag, now=now, job_id=job_id)

    # -- queries ------------------------------------------------------------

    def idle(self) -> list[Slot]:
        """Slots ready to take a job now."""
        return [
            s
            for s in self.slots
            if s.child is not None
            and s.child.ready
            and s.job is None
            and not s.dead
            and not s.retiring
        ]

    def busy(self) -> list[Slot]:
        return [s for s in self.slots if s.job is not None]

    # -- actions ------------------------------------------------------------

    def dispatch(self, slot: Slot, job: models.ClaimedJob) -> bool:
        """Hands `job` to `slot`'s child; False if the child is gone."""
        assert slot.child is not None and slot.job is None
        slot.job = job
        slot.started = self.clock.monotonic()
        slot.timeout_at = None if job.timeout is None else slot.started + job.timeout
        slot.progress = None
        slot.pid_written = False
        message = protocol.Run(
            job_id=job.id,
            attempt=job.attempt,
            name=job.name,
            args=job.args,
            steps={name: bytes(raw) for name, raw in job.steps.items()},
        )
        return slot.child.send(message)

    def kill(self, slot: Slot, kind: str, words: str, *, hard: bool = False) -> None:
        """Starts killing `slot`'s child: SIGTERM, then SIGKILL after the grace.

        The first reason given wins; it decides the attempt's outcome.
        """
        if slot.child is None:
            return
        if slot.kill_reason is None:
            slot.kill_reason = (kind, words)
        if hard or self.settings.kill_grace == 0:
            slot.child.signal(signal.SIGKILL)
            slot.kill_at = None
        elif slot.kill_at is None:
            slot.child.signal(signal.SIGTERM)
            slot.kill_at = self.clock.monotonic() + self.settings.kill_grace

    def escalate(self) -> None:
        """SIGKILLs children whose grace after SIGTERM has passed."""
        now = self.clock.monotonic()
        for slot in self.slots:
            if slot.child is not None and slot.kill_at is not None and now >= slot.kill_at:
                slot.child.signal(signal.SIGKILL)
                slot.kill_at = None

    def finished_job(self, slot: Slot) -> None:
        """The slot's job ended normally; recycles the child if it is due."""
        slot.job = None
        slot.jobs_run += 1
        child = slot.child
        if child is None:
            return
        limit = self.settings.max_jobs_per_child
        memory = self.settings.max_memory_per_child
        reason = None
        if limit is not None and slot.jobs_run >= limit:
            reason = f"ran {slot.jobs_run} jobs"
        elif memory is not None and (rss := child.rss_mb()) > memory:
            reason = f"RSS {rss:.0f} MB > {memory:.0f} MB"
        if reason is not None:
            log.info("recycling child %d (pid %d): %s", slot.index, child.pid, reason)
            slot.retiring = True
            child.send(protocol.Shutdown())

    def reap(self, slot: Slot) -> str | None:
        """If `slot`'s child has exited: releases it, spawns a fresh one and
        returns why it died (None while it still runs)."""
        child = slot.child
        if child is None:
            return None
        code = child.poll()
        if code is None:
            return None
        reason = exit_reason(code)
        if not child.ready:
            self.startup_failures += 1
            if self.startup_failures >= STARTUP_FAILURES_MAX:
                raise errors.ConfigError(
                    f"children keep dying before they start ({reason}); "
                    f"is {self.spec!r} importable?"
                )
        elif not slot.retiring:
            log.warning("child %d (pid %d) died: %s", slot.index, child.pid, reason)
        self._release(slot)
        slot.kill_reason = None
        slot.kill_at = None
        self._spawn(slot)
        return reason

    def shutdown(self, *, wait: float) -> None:
        """Stops every child: Shutdown, then SIGKILL what is left after `wait` s."""
        for slot in self.slots:
            if slot.child is not None:
                slot.child.send(protocol.Shutdown())
        give_up = self.clock.monotonic() + wait
        for slot in self.slots:
            child = slot.child
            if child is None:
                continue
            try:
                child.popen.wait(timeout=max(0.0, give_up - self.clock.monotonic()))
            except Exception:
                child.signal(signal.SIGKILL)
                child.popen.wait()
            self._release(slot)
