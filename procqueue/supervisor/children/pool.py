"""The supervisor's children: N slots, each a long-lived child process;
spawning, sending, killing, reaping, replacing and retiring them.

The pool knows processes and pipes, not jobs or the database: it says
which children can take work, hands frames in and out, and reports deaths.
What a child is running, and what its death means, belongs to
`running.Attempts`. It keeps the promises of `slots.Children`.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
from dataclasses import dataclass, field

from procqueue import errors, events, protocol
from procqueue.clock import Clock
from procqueue.supervisor.children import credentials, process
from procqueue.supervisor.children.slots import Death
from procqueue.supervisor.children.spawner import Spawner
from procqueue.supervisor.settings import Settings

log = logging.getLogger("procqueue.supervisor")

STARTUP_FAILURES_MAX = 5
"""Children that die before saying hello, in a row, before the supervisor gives up."""


PARTIAL_FRAME_S = 5.0
"""A frame's bytes are written at once (a big one streams without pause): one
still unfinished this long after its last bytes came is job code's doing."""


@dataclass
class _Slot:
    index: int
    process: process.ChildBase | None = None
    jobs_run: int = 0
    retiring: bool = False
    """Told to shut down after its job (recycling): takes no new job."""
    killing: bool = False
    """A kill was started: takes no new job, is replaced once reaped."""
    kill_at: float | None = None
    """Monotonic time SIGTERM turns into SIGKILL."""
    dead: bool = False
    """Its protocol pipe closed: reap it soon."""
    partial_since: float | None = None
    """Monotonic time its pipe's unfinished frame last grew (None: it holds none)."""
    partial_bytes: int = 0
    out: bytearray = field(default_factory=bytearray)
    """Frames not yet written to it (written by `flush`, as the pipe takes them)."""
    writing: bool = False
    """Its pipe is registered for writability (`out` did not fit)."""


class Pool:
    """N slots whose children are registered in the supervisor's selector
    with data ``(index, "proto" | "out" | "err")``; the fork server's socket
    with ``(0, "fork")``."""

    def __init__(
        self,
        *,
        spec: str,
        settings: Settings,
        clock: Clock,
        selector: selectors.BaseSelector,
        events: events.EventStream,
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.clock = clock
        self.selector = selector
        self.events = events
        self._slots = [_Slot(index=i + 1) for i in range(settings.workers)]
        self._startup_failures = 0
        self._respawn = True
        """Whether a child that exits is replaced (not while stopping)."""
        self.spawner = Spawner(
            spec=spec, clock=clock, selector=selector, env=credentials.child_env(settings.job_user)
        )

    def start(self) -> None:
        self.spawner.start()
        for slot in self._slots:
            self._spawn(slot)

    def _slot(self, index: int) -> _Slot:
        return self._slots[index - 1]

    def _spawn(self, slot: _Slot) -> None:
        child = self.spawner.new_child(slot.index)
        os.set_blocking(child.wfd, False)  # frames go through `out`: a full pipe never blocks
        slot.process = child
        slot.out.clear()
        slot.dead = slot.retiring = slot.killing = False
        slot.jobs_run = 0
        slot.kill_at = None
        for fd, kind in zip(child.fds(), ("proto", "out", "err"), strict=True):
            self.selector.register(fd, selectors.EVENT_READ, (slot.index, kind))
        self.events.emit(events.ChildStarted(child=slot.index, pid=child.pid))

    def _release(self, slot: _Slot, job_id: int | None) -> None:
        child = slot.process
        if child is None:
            return
        for fd in (*child.fds(), *([child.wfd] if slot.writing else [])):
            try:
                self.selector.unregister(fd)
            except (KeyError, ValueError):
                pass
        slot.writing = False
        slot.out.clear()
        self.relay_all(slot.index, job_id)
        child.close()
        slot.process = None

    # -- queries ------------------------------------------------------------

    def pid(self, index: int) -> int:
        child = self._slot(index).process
        return 0 if child is None else child.pid

    def available(self) -> list[int]:
        """Slots whose child is ready and may take a job (busy ones included:
        the caller knows which run a job)."""
        return [
            s.index
            for s in self._slots
            if s.process is not None and s.process.ready and not (s.dead or s.retiring or s.killing)
        ]

    def jobs_left(self, index: int) -> int | None:
        """How many more jobs the child may be given before it is recycled
        (None: no limit); jobs it holds count as given."""
        limit = self.settings.max_jobs_per_child
        return None if limit is None else max(0, limit - self._slot(index).jobs_run)

    def stopping(self, index: int) -> bool:
        """Whether the child was told to stop or killed (it takes no new job)."""
        return self._slot(index).killing

    def all_ready(self) -> bool:
        """Whether every slot's child has said hello (none is starting)."""
        return all(s.process is not None and s.process.ready for s in self._slots)

    def any_dead(self) -> bool:
        return any(s.dead for s in self._slots)

    def next_kill(self) -> float | None:
        """The earliest pending SIGKILL escalation or unfinished-frame
        deadline (monotonic), if any."""
        due = [s.kill_at for s in self._slots if s.kill_at is not None]
        due += [s.partial_since + PARTIAL_FRAME_S for s in self._slots if s.partial_since]
        return min(due) if due else None

    def unfinished(self, now: float) -> list[int]:
        """Children whose pipe has held an unfinished frame, unchanged, for
        `PARTIAL_FRAME_S` (job code wrote a header and not its body), each
        told once: what they write next can't be read."""
        late = []
        for slot in self._slots:
            since = slot.partial_since
            if since is not None and now - since >= PARTIAL_FRAME_S:
                slot.partial_since = None
                late.append(slot.index)
        return late

    def rss_mb(self, index: int) -> float:
        """Resident memory of the child and every process it started, in MB."""
        child = self._slot(index).process
        return 0.0 if child is None else child.tree_rss_mb()

    # -- frames and output ----------------------------------------------------

    def send(self, index: int, message: protocol.Message) -> bool:
        """Queues one frame for the child (written by `flush`, in order);
        False if the child is gone."""
        slot = self._slot(index)
        if slot.process is None or slot.dead:
            return False
        slot.out += protocol.encode(message)
        return True

    def flush(self, index: int | None = None) -> None:
        """Writes queued frames (of one child, or all) as far as their pipes
        take them without blocking; the rest waits for writability, so a
        child that doesn't read never stalls the supervisor."""
        for slot in self._slots if index is None else [self._slot(index)]:
            child = slot.process
            if not slot.out or child is None:
                continue
            try:
                del slot.out[: os.write(child.wfd, slot.out)]
            except BlockingIOError:
                pass
            except OSError:  # gone: its death is reaped
                slot.out.clear()
                slot.dead = True
            want = bool(slot.out)
            if want != slot.writing:
                slot.writing = want
                if want:
                    self.selector.register(child.wfd, selectors.EVENT_WRITE, (slot.index, "in"))
                else:
                    self.selector.unregister(child.wfd)

    def read(self, index: int) -> tuple[list[protocol.Message], str | None]:
        """The frames the child wrote, its Hello handled here; and the protocol
        error that makes the rest of its pipe unreadable, if any.

        Raises ConfigError when the child could not import the app.
        """
        slot = self._slot(index)
        child = slot.process
        if child is None:
            return [], None
        problem = None
        try:
            messages = child.read_messages()
        except errors.ProtocolError as exc:
            messages, problem = [], f"protocol error: {exc}"
        pending = child.reader.pending()
        if not pending:
            slot.partial_since = None
        elif slot.partial_since is None or pending != slot.partial_bytes:
            slot.partial_since = self.clock.monotonic()
        slot.partial_bytes = pending
        out: list[protocol.Message] = []
        for message in messages:
            if not isinstance(message, protocol.Hello):
                out.append(message)
            elif child.ready:  # only a child's first frame may be Hello: job code wrote this
                problem = problem or "protocol error: a second Hello"
                break  # what follows it is not to be trusted either
            elif message.error is not None:
                raise errors.ConfigError(message.error)
            elif message.version != protocol.PROTOCOL_VERSION:
                raise errors.ProtocolError(f"child speaks protocol {message.version}")
            else:
                child.ready = True
                self._startup_failures = 0
                self.events.emit(events.ChildReady(child=index, pid=child.pid))
        if child.eof:
            try:
                self.selector.unregister(child.rfd)
            except (KeyError, ValueError):
                pass
            slot.dead = True
        return out, problem

    def relay(self, index: int, fd: int, job_id: int | None) -> None:
        """Logs what the child wrote on `fd` (stdout/stderr), tagged with its job."""
        child = self._slot(index).process
        if child is None:
            return
        tag = f"job {job_id}" if job_id is not None else f"child {index}"
        if child.relay_output(fd, tag=tag, now=self.clock.monotonic(), job_id=job_id):
            self.selector.unregister(fd)

    def relay_all(self, index: int, job_id: int | None) -> None:
        """Logs everything the child has written so far (before an outcome)."""
        child = self._slot(index).process
        if child is None:
            return
        tag = f"job {job_id}" if job_id is not None else f"child {index}"
        for fd in (child.out_fd, child.err_fd):
            child.relay_output(fd, tag=tag, now=self.clock.monotonic(), job_id=job_id)

    def end_output(self, index: int, job_id: int) -> None:
        """The child replied for `job_id`: what it wrote before the reply
        (it flushes first), a last unterminated line included, is logged
        under that job, never under the next one."""
        self.relay_all(index, job_id)
        child = self._slot(index).process
        if child is not None:
            child.end_output(tag=f"job {job_id}", now=self.clock.monotonic(), job_id=job_id)

    # -- actions ------------------------------------------------------------

    def stop(self, index: int, job_id: int, *, grace: float | None) -> None:
        """Asks the child to end job `job_id` (a Stop frame: the job's tree
        gets SIGTERM, the job sees `cx.cancelled`, and with a `grace` its code
        gets `Stopped`), and SIGKILLs the tree
        after `grace` seconds unless it ended (None: no escalation; at once
        when 0). The child takes no new job and is replaced once reaped."""
        slot = self._slot(index)
        if slot.process is None:
            return
        slot.killing = True
        if grace is not None and grace <= 0:
            self.kill(index)
            return
        if not self.send(index, protocol.Stop(job_id=job_id, kill_in=grace)):
            self.kill(index)
            return
        if grace is not None and slot.kill_at is None:
            slot.kill_at = self.clock.monotonic() + grace

    def kill(self, index: int) -> None:
        """SIGKILLs the child's whole process tree at once."""
        slot = self._slot(index)
        if slot.process is None:
            return
        slot.killing = True
        slot.kill_at = None
        slot.process.signal_tree(signal.SIGKILL)

    def escalate(self, now: float) -> None:
        """SIGKILLs the trees of children whose grace after SIGTERM has passed."""
        for slot in self._slots:
            if slot.process is not None and slot.kill_at is not None and now >= slot.kill_at:
                slot.process.signal_tree(signal.SIGKILL)
                slot.kill_at = None

    def job_done(self, index: int) -> None:
        """The child finished a job and lives on; recycles it if it is due."""
        slot = self._slot(index)
        slot.jobs_run += 1
        child = slot.process
        if child is None or slot.killing:
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

    def reap(self, job_of: dict[int, int]) -> list[Death]:
        """Children that exited: released, replaced, and reported.
        `job_of` maps a slot to the job it runs, to tag the last output.

        Raises ConfigError when children keep dying before they start.
        """
        deaths = []
        for slot in self._slots:
            child = slot.process
            if child is None:
                continue
            code = child.poll()
            if code is None:
                continue
            reason = process.exit_reason(code)
            if not child.ready:
                self._startup_failures += 1
                if self._startup_failures >= STARTUP_FAILURES_MAX:
                    raise errors.ConfigError(
                        f"children keep dying before they start ({reason}); "
                        f"is {self.spec!r} importable?"
                    )
            # What the job started may outlive it: a tree ends with its child.
            child.signal_tree(signal.SIGKILL)
            # What it wrote last is acted on before its death; a protocol
            # error there changes nothing: the death ends its attempt.
            frames, _ = self.read(slot.index) if child.ready else ([], None)
            deaths.append(
                Death(slot.index, child.pid, reason, slot.retiring, slot.killing, tuple(frames))
            )
            self._release(slot, job_of.get(slot.index))
            if self._respawn:
                self._spawn(slot)
        return deaths

    def stop_respawning(self) -> None:
        """From now on a child that exits is not replaced (a drain, the close)."""
        self._respawn = False

    def pump(self) -> None:
        """Moves the fork server's answers along (its socket is readable)."""
        self.spawner.pump()

    def shutdown(self, *, wait: float) -> None:
        """Stops every child: Shutdown, then SIGKILL of each tree still
        there after `wait` s."""
        for slot in self._slots:
            if slot.process is not None:
                self.send(slot.index, protocol.Shutdown())
        self.flush()
        give_up = self.clock.monotonic() + wait
        for slot in self._slots:
            child = slot.process
            if child is None:
                continue
            child.wait(timeout=max(0.0, give_up - self.clock.monotonic()))
            child.signal_tree(signal.SIGKILL)
            child.wait()
            self._release(slot, None)
        self.spawner.close()
