"""One child process as the supervisor sees it: spawn, frames in and out,
its output relayed to the log, kill escalation, and why it died."""

from __future__ import annotations

import abc
import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys

from procqueue import errors, models, protocol
from procqueue.child import proctree

log = logging.getLogger("procqueue.child")

MAX_LINE = 4096
"""Longer output lines are cut: a flood without newlines can't grow a buffer."""
LINES_PER_SECOND = 200
"""Output lines logged per child per second; the rest are counted and dropped."""
_FIRST_READ_SIZE = 1 << 16
_READ_SIZE = 1 << 20
_OUTPUT_READ_SIZE = 1 << 16
"""Bytes asked of a pipe per read. A read that returns fewer found the pipe
empty: one read a frame, not a second one that says so. A frame pipe is read
64 KiB first (most frames fit, and a buffer that size comes from the heap,
not a fresh mapping of its own), then 1 MiB a read while reads come back full."""


def _nonblocking(fd: int) -> None:
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)


STATUS_LOST = -256
"""`poll()` of a forked child that ended while its fork server's template
was dead or stuck: its exit status could not be collected (not a signal
number)."""


def exit_reason(returncode: int) -> str:
    """Human words for a `Popen.returncode` (or `STATUS_LOST`)."""
    if returncode == STATUS_LOST:
        return "child process ended; its exit status was lost with its fork server"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"child process killed by {name}"
    if returncode == protocol.FENCE_EXIT:
        return (
            f"child process exited with code {returncode}: it ended its job itself, its lease"
            " having run out (the supervisor was cut off from the database or gone)"
        )
    return f"child process exited with code {returncode}"


class OutputRelay:
    """Turns a child's raw stdout/stderr bytes into bounded, tagged log lines."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self._partial = b""
        self._window = 0.0
        self._lines = 0
        self.dropped = 0

    def feed(self, data: bytes, *, tag: str, now: float, job_id: int | None = None) -> None:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()[:MAX_LINE]
        for line in lines:
            self._emit(line, tag, now, job_id)

    def flush(self, *, tag: str, now: float, job_id: int | None = None) -> None:
        if self._partial:
            self._emit(self._partial, tag, now, job_id)
            self._partial = b""
        self._report_dropped(tag)

    def _emit(self, line: bytes, tag: str, now: float, job_id: int | None) -> None:
        if now - self._window >= 1.0:
            self._report_dropped(tag)
            self._window = now
            self._lines = 0
        if self._lines >= LINES_PER_SECOND:
            self.dropped += 1
            return
        self._lines += 1
        # escaped: a line can't move the cursor to overprint (forge) another
        text = models.printable(line[:MAX_LINE].decode("utf-8", "replace"))
        log.info("%s %s: %s", tag, self.stream, text, extra={"job_id": job_id})

    def _report_dropped(self, tag: str) -> None:
        if self.dropped:
            log.warning("%s %s: %d lines dropped (rate limit)", tag, self.stream, self.dropped)
            self.dropped = 0


class ChildPipes:
    """The four pipes between the supervisor and one child: the protocol both
    ways, and the child's stdout and stderr. The supervisor keeps its ends
    (non-blocking where it reads); the child's ends are passed to the child,
    then closed here by `close_child_ends`."""

    def __init__(self) -> None:
        self.to_child_r, self.wfd = os.pipe()
        self.rfd, self.from_child_w = os.pipe()
        self.out_fd, self.out_w = os.pipe()
        self.err_fd, self.err_w = os.pipe()

    def child_ends(self) -> tuple[int, int, int, int]:
        """(reads frames, writes frames, stdout, stderr): what the child gets."""
        return (self.to_child_r, self.from_child_w, self.out_w, self.err_w)

    def close_child_ends(self) -> None:
        """Once the child has them (a second call does nothing)."""
        for fd in self.child_ends():
            if fd >= 0:
                os.close(fd)
        self.to_child_r = self.from_child_w = self.out_w = self.err_w = -1

    def close_all(self) -> None:
        """When no child came of them."""
        self.close_child_ends()
        for fd in (self.wfd, self.rfd, self.out_fd, self.err_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class ChildBase(abc.ABC):
    """A started child as the supervisor sees it: its pid and the
    supervisor's ends of its pipes, frames in and out, output relayed to the
    log, its process tree. Subclasses say how it was started and how it ends
    (`poll`, `wait`)."""

    def __init__(self, *, index: int, pid: int, pipes: ChildPipes) -> None:
        self.index = index
        self.pid = pid
        self.wfd = pipes.wfd
        self.rfd = pipes.rfd
        self.out_fd = pipes.out_fd
        self.err_fd = pipes.err_fd
        for fd in (self.rfd, self.out_fd, self.err_fd):
            _nonblocking(fd)
        self.reader = protocol.FrameReader(to_child=False)
        self.relays = {self.out_fd: OutputRelay("stdout"), self.err_fd: OutputRelay("stderr")}
        self.ready = False
        self.eof = False
        self.closed = False

    def fds(self) -> tuple[int, int, int]:
        return (self.rfd, self.out_fd, self.err_fd)

    def send(self, message: protocol.Message) -> bool:
        """Writes one frame; False if the child is gone."""
        try:
            protocol.write_all(self.wfd, protocol.encode(message))
        except (BrokenPipeError, OSError):
            return False
        return True

    def read_messages(self) -> list[protocol.Message]:
        """Drains the protocol pipe; sets `eof` when the child closed it.

        Raises ProtocolError on a malformed frame.
        """
        out: list[protocol.Message] = []
        size = _FIRST_READ_SIZE
        while True:
            try:
                data = os.read(self.rfd, size)
            except BlockingIOError:
                return out
            if not data:
                self.eof = True
                if self.reader.pending():
                    raise errors.ProtocolError(f"truncated frame ({self.reader.pending()} bytes)")
                return out
            out.extend(self.reader.feed(data))
            if len(data) < size:  # the pipe is empty: what comes later makes it readable
                return out
            size = _READ_SIZE

    def relay_output(self, fd: int, *, tag: str, now: float, job_id: int | None = None) -> bool:
        """Logs what the child wrote to stdout/stderr, bounded per call;
        True at EOF."""
        for _ in range(16):  # at most 1 MiB per call: the loop must go on
            try:
                data = os.read(fd, _OUTPUT_READ_SIZE)
            except BlockingIOError:
                return False
            except OSError:
                return True
            if not data:
                self.relays[fd].flush(tag=tag, now=now, job_id=job_id)
                return True
            self.relays[fd].feed(data, tag=tag, now=now, job_id=job_id)
            if len(data) < _OUTPUT_READ_SIZE:  # empty now (its end shows as readable)
                return False
        return False

    def end_output(self, *, tag: str, now: float, job_id: int | None) -> None:
        """Logs the unterminated last lines of stdout and stderr under `tag`."""
        for relay in self.relays.values():
            relay.flush(tag=tag, now=now, job_id=job_id)

    def rss_mb(self) -> float:
        """Resident memory of the child process alone, in MB (0 when it is gone)."""
        return proctree.rss_mb([self.pid])

    def tree_rss_mb(self) -> float:
        """Resident memory of the child and everything it started, in MB."""
        return proctree.rss_mb([self.pid, *proctree.descendants(self.pid)])

    def signal_tree(self, sig: signal.Signals) -> None:
        """Signals the child's process group and every process below it
        (also those that left the group); gone processes are fine."""
        proctree.signal_tree(self.pid, sig)

    @abc.abstractmethod
    def poll(self) -> int | None:
        """The exit status once the child has ended (`Popen.returncode`
        convention: negative for a signal), else None. Never blocks."""

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> int | None:
        """Waits up to `timeout` s (None: for ever) for the child to end; its
        `poll()` status, or None if it still runs."""

    def close(self) -> None:
        """Closes the supervisor's ends (a still-running child sees EOF and
        exits). Once: a second close must not hit a reused fd number."""
        if self.closed:
            return
        self.closed = True
        for fd in (self.wfd, self.rfd, self.out_fd, self.err_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def popen_child(
    args: list[str],
    *,
    env: dict[str, str] | None,
    pass_fds: tuple[int, ...],
    stdout: int,
    stderr: int | None,
) -> subprocess.Popen[bytes]:
    """``python -m procqueue.child ARGS``, started clean in its own session
    with only `pass_fds` (and /dev/null, `stdout`, `stderr`) open."""
    child_env = dict(os.environ if env is None else env)
    child_env["PYTHONUNBUFFERED"] = "1"
    return subprocess.Popen(
        [sys.executable, "-m", "procqueue.child", *args],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        pass_fds=pass_fds,
        start_new_session=True,  # its own group: a terminal's ^C reaches only us
        close_fds=True,
        env=child_env,
    )


class ChildProcess(ChildBase):
    """A child spawned clean: a fresh interpreter that imports the app."""

    def __init__(self, *, spec: str, index: int, env: dict[str, str] | None = None) -> None:
        pipes = ChildPipes()
        to_child_r, from_child_w, out_w, err_w = pipes.child_ends()
        try:
            self.popen = popen_child(
                [spec, str(index), str(os.getpid()), str(to_child_r), str(from_child_w)],
                env=env,
                pass_fds=(to_child_r, from_child_w),
                stdout=out_w,
                stderr=err_w,
            )
        except BaseException:
            pipes.close_all()
            raise
        pipes.close_child_ends()
        super().__init__(index=index, pid=self.popen.pid, pipes=pipes)

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
