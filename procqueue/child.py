"""The child process: imports the app once, then runs jobs one at a time as
the supervisor sends them over its pipe.

Started clean by the supervisor (``python -m procqueue.child``), never
forked, so it inherits no database connection; it never opens one either.

A child fences itself: a reader thread owns the pipe from the supervisor,
and when that pipe ends (the supervisor is gone, ``kill -9`` included) or
the running job's lease runs out (the supervisor could not renew it: the
database is away, or the supervisor is frozen), the child ends the job's
whole process tree and exits, so a rescued job never overlaps this run.
The child is a subreaper, so what a job starts stays among its
descendants; what a job leaves running when it returns is ended too.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sys
import threading
import time
from typing import Any

import msgspec

from procqueue import _proctree, errors, protocol, runner
from procqueue.app import App, load_app

PROGRESS_EVERY_S = 0.25
"""At most one progress frame per job per this many seconds; the last value
always travels with the outcome."""
FENCE_EXIT = 70
"""Exit code of a child that ended its job because its lease ran out or its
supervisor was gone."""


def _set_title(text: str) -> None:
    try:
        import setproctitle

        setproctitle.setproctitle(text)
    except ImportError:
        pass


def _raise_oom_score() -> None:
    """Offers this process (and what it starts) to the kernel's OOM killer
    first, so that memory pressure never picks the supervisor."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")


def _end_tree_and_exit(why: str) -> None:
    """Kills every process below this one, then exits at once (any thread)."""
    with contextlib.suppress(OSError):
        os.write(2, f"procqueue child {os.getpid()}: {why}; ending the job\n".encode())
    for _ in range(3):  # a process may fork while the tree is being killed
        _proctree.signal_tree(os.getpid(), signal.SIGKILL, include_root=False)
    os._exit(FENCE_EXIT)


class Fence:
    """Ends the job when its lease runs out, by this process's monotonic clock."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        threading.Thread(target=self._watch, name="procqueue-fence", daemon=True).start()

    def arm(self, deadline: float | None) -> None:
        """The running job may run until monotonic `deadline` (None: no lease to keep)."""
        with self._cond:
            self._deadline = deadline
            self._cond.notify()

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left <= 0:
                    _end_tree_and_exit(
                        "the job's lease ran out (its supervisor could not renew it)"
                    )
                self._cond.wait(left)


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
            self._current = job_id
            self._pending.discard(job_id or 0)
            while not self.steps.empty():  # answers meant for an earlier run
                self.steps.get_nowait()
            if job_id is not None and job_id in self._revoked:
                self._revoked.discard(job_id)
                self._leases.pop(job_id, None)
                self._current = None
                return False
            self._fence.arm(None if job_id is None else self._leases.get(job_id))
            return True

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
            if message.job_id in self._pending:
                self._revoked.add(message.job_id)
                return
            running = message.job_id == self._current
        if running and isinstance(message, protocol.Stop):
            # the job's whole tree, this process included: its handler sets cx.cancelled
            _proctree.signal_tree(os.getpid(), signal.SIGTERM)

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

    def __init__(self, inbox: Inbox, wfd: int, job_id: int, steps: dict[str, bytes]) -> None:
        self._inbox = inbox
        self._wfd = wfd
        self._job_id = job_id
        self._steps = steps
        self._sent_at = -PROGRESS_EVERY_S
        self.last: tuple[str | None, float | None] | None = None
        self._unsent = False
        self.cancel_requested = False

    def send(self, message: protocol.Message) -> None:
        protocol.write_all(self._wfd, protocol.encode(message, limit=protocol.MAX_REPLY))

    def progress(self, text: str | None, fraction: float | None) -> None:
        """Keeps the latest value; sends at most every PROGRESS_EVERY_S."""
        old_text, old_fraction = self.last or (None, None)
        self.last = (
            text if text is not None else old_text,
            fraction if fraction is not None else old_fraction,
        )
        self._unsent = True
        now = time.monotonic()
        if now - self._sent_at >= PROGRESS_EVERY_S:
            self._sent_at = now
            self._unsent = False
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

    def outcome(self, reply: protocol.Done | protocol.Failed) -> protocol.Done | protocol.Failed:
        """`reply` with the job's last progress, when some was not sent yet."""
        if not self._unsent or self.last is None:
            return reply
        text, fraction = self.last
        return msgspec.structs.replace(reply, progress=text, fraction=fraction)


def _oversized(reply: protocol.Done | protocol.Failed) -> protocol.Done | protocol.Failed:
    """Refuses, with a clear error, a result the supervisor would not accept."""
    if isinstance(reply, protocol.Done) and len(reply.result) > protocol.MAX_REPLY - 4096:
        return protocol.Failed(
            job_id=reply.job_id,
            kind="permanent",
            error=f"the result is {len(reply.result)} bytes encoded; "
            f"the limit is {protocol.MAX_REPLY - 4096}",
        )
    return reply


def _reap_leftovers() -> None:
    """Ends what the job left running and collects the zombies (this child is
    their subreaper)."""
    _proctree.signal_tree(os.getpid(), signal.SIGKILL, include_root=False)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def serve(spec: str, index: int, rfd: int, wfd: int) -> int:
    """The child's life: hello, then jobs until Shutdown or EOF. Returns the exit code."""
    _set_title(f"procqueue child {index} starting")
    _raise_oom_score()
    _proctree.become_subreaper()
    try:
        app = load_app(spec)
    except errors.ProcqueueError as exc:
        hello = protocol.Hello(pid=os.getpid(), version=protocol.PROTOCOL_VERSION, error=str(exc))
        protocol.write_all(wfd, protocol.encode(hello))
        return 1
    return serve_app(app, spec, index, rfd, wfd)


def serve_app(app: App, spec: str, index: int, rfd: int, wfd: int) -> int:
    """The child's life once `app` is loaded (`serve`, or forked from a fork
    server's template): hello, then jobs until Shutdown or EOF."""
    protocol.write_all(
        wfd, protocol.encode(protocol.Hello(pid=os.getpid(), version=protocol.PROTOCOL_VERSION))
    )
    fence = Fence()
    inbox = Inbox(rfd, fence)
    current: list[PipeChannel] = []

    def on_term(signum: int, frame: Any) -> None:
        # Running: the job may see cx.cancelled; the supervisor SIGKILLs after
        # its grace. Idle: exit now.
        if not current:
            raise SystemExit(0)
        current[0].cancel_requested = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides
    _set_title(f"procqueue child {index} idle")
    while True:
        message = inbox.frames.get()
        if message is None and inbox.error is not None:
            raise inbox.error
        if message is None or isinstance(message, protocol.Shutdown):
            return 0
        if not isinstance(message, protocol.Run):
            raise errors.ProtocolError(f"unexpected {type(message).__name__} while idle")
        if not inbox.running(message.job_id):
            skipped = protocol.Failed(job_id=message.job_id, kind="revoked", error="revoked")
            protocol.write_all(wfd, protocol.encode(skipped))
            continue
        channel = PipeChannel(inbox, wfd, message.job_id, dict(message.steps))
        job = app.registry.get(message.name)
        _set_title(f"procqueue child {index} {message.name}#{message.job_id}")
        current.append(channel)
        try:
            if job is None:  # a rolling deploy: a newer supervisor may know it
                reply: protocol.Done | protocol.Failed = protocol.Failed(
                    job_id=message.job_id,
                    kind="error",
                    error=f"unknown job {message.name!r} in {spec}",
                )
            else:
                reply = runner.execute(
                    job,
                    job_id=message.job_id,
                    attempt=message.attempt,
                    encoded=message.args,
                    channel=channel,
                )
            _reap_leftovers()
            sys.stdout.flush()
            sys.stderr.flush()
            channel.send(channel.outcome(_oversized(reply)))
        finally:
            current.clear()
            inbox.running(None)
        if channel.cancel_requested:
            return 0
        _set_title(f"procqueue child {index} idle")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--template"]:  # a fork server's template (procqueue._forkserver)
        from procqueue import _template

        return _template.template_main(argv[1:])
    spec, index, parent, rfd, wfd = argv
    if os.getppid() != int(parent):  # the supervisor died before we started
        return 1
    try:
        return serve(spec, int(index), int(rfd), int(wfd))
    except (BrokenPipeError, errors.ProtocolError) as exc:
        print(f"procqueue child: {exc}", file=sys.stderr)
        return 3


def forked_main(app: App, spec: str, index: int, rfd: int, wfd: int) -> int:
    """A child forked from a fork server's template (``procqueue._forkserver``),
    which loaded `app` and never ran a job: what `main` and `serve` do around
    `serve_app`, without loading the app again. Returns the exit code."""
    _set_title(f"procqueue child {index} starting")
    _raise_oom_score()  # inherited from the template, but not to rely on
    _proctree.become_subreaper()  # never inherited across fork
    try:
        return serve_app(app, spec, index, rfd, wfd)
    except (BrokenPipeError, errors.ProtocolError) as exc:
        print(f"procqueue child: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
