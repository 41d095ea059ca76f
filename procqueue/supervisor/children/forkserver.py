"""A fork server: children taken warm from a template process.

A clean child (``python -m procqueue.child``) pays for a new interpreter
and the app's imports, ~50-100 ms of CPU. With ``--max-jobs-per-child 1``
(a fresh process per job) and on every replacement after a crash, that is
most of the cost of a job. A fork server pays it once:

- The **template** is started clean, like a child (``python -m
  procqueue.child --template SPEC PARENT_PID SOCKET_FD``, its own session),
  imports the app with `load_app`, opens no database connection (nothing a
  child imports can), runs no job, and waits for spawn requests on a Unix
  socket pair (SOCK_SEQPACKET) from the supervisor.
- A spawn request carries the child's ends of its four pipes (protocol both
  ways, stdout, stderr; SCM_RIGHTS). The template forks; the new process
  closes the template's socket and wake-up pipe, resets the signal handlers
  the template set, puts the passed pipes on its stdout and stderr, starts
  its own session and process group (``os.setsid``, as
  ``start_new_session=True`` does for a clean child: the supervisor ends a
  child's tree with ``killpg(pid)``), and runs the ordinary child job loop
  (`child.serve.forked_main`: subreaper, ``oom_score_adj``, Hello, jobs) with the
  app already loaded. The template replies with the pid and a pidfd of it.
- The forked child is the template's child, so the template reaps it and
  reports ``(pid, returncode)`` over the socket; `ForkedChild.poll` reads
  those reports without blocking.
- The template ends with the supervisor: at the end of its socket (the
  supervisor's ``kill -9`` included) it exits. What it forked are ordinary
  children: each ends its job tree and exits when its own pipe from the
  supervisor ends, whether or not the template still lives. If the template
  dies, `ForkServer.spawn` raises `ForkServerError` (the pool falls back to
  a clean child); its children run on, and when one ends its status is
  lost with the template (`poll` says `process.STATUS_LOST`; also when a
  stuck template does not report an exit the pidfd shows within
  `REPORT_GRACE`).
- The supervision loop selects on `ForkServer.fileno` and calls `pump` to
  take exits in as they come; `poll` and `wait` pump too.

Clean: every child forks from a template that never ran a job, so no job
sees what another job did. What the app's modules build *at import* is
copied into each child, as Celery's prefork pool does (and as a clean child
builds it again): module-level objects, open files, threads started at
import (a fork keeps only the forking thread: an app whose import starts
threads, or opens a connection, should not use a fork server). Job code
runs only after the fork, in the child. The template freezes its objects
(`gc.freeze`) so that children's collections do not copy its pages.

A forked child differs from a clean one in what Python does at its start
and end: its ``sys.argv`` is the template's (``__main__`` is
``procqueue.child`` in both), its random generators are reseeded by the
fork (as Python does on every fork), and it exits without tearing down the
objects it was forked with (that would copy every page of them): it joins
non-daemon threads, runs ``atexit`` functions and flushes its output, as
the interpreter does, then ``os._exit``.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import time

from procqueue import errors
from procqueue.child import forkwire
from procqueue.supervisor.children import process

REPORT_GRACE = 1.0
"""How long a forked child may be seen ended (its pidfd) before its exit is
reported; past it, its status is `process.STATUS_LOST` (a stuck template)."""
SPAWN_TIMEOUT = 30.0
"""How long `ForkServer.spawn` waits by default, the template's start included."""


class ForkServerError(errors.ProcqueueError):
    """The fork server cannot spawn a child (its template failed to load the
    app, died, or did not answer): start a clean child instead."""


# -- the template (its own process) -----------------------------------------


class ForkedChild(process.ChildBase):
    """A child forked from a fork server's template: the interface of
    `process.ChildProcess` (no ``popen``: use `wait`)."""

    def __init__(
        self,
        *,
        server: ForkServer,
        index: int,
        pid: int,
        pipes: process.ChildPipes,
        pidfd: int | None,
    ) -> None:
        super().__init__(index=index, pid=pid, pipes=pipes)
        self._server = server
        self._pidfd = pidfd
        self.returncode: int | None = None
        self._gone_at: float | None = None
        """When the process was first seen ended without its exit reported."""

    def _exited(self, returncode: int) -> None:
        self.returncode = returncode
        self._close_pidfd()

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def _gone(self) -> bool:
        """Whether the process has ended (never blocks)."""
        if self._pidfd is not None:
            return bool(select.select([self._pidfd], [], [], 0)[0])
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False  # a zombie the template did not reap yet is not gone

    def poll(self) -> int | None:
        if self.returncode is None:
            self._server._pump(0.0)
        if self.returncode is None and self._gone():
            # Ended, but not reported: the template is gone, or stuck.
            now = time.monotonic()
            if self._gone_at is None:
                self._gone_at = now
            if self._server.dead or now - self._gone_at >= REPORT_GRACE:
                self._exited(process.STATUS_LOST)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        give_up = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            step = REPORT_GRACE if give_up is None else min(give_up - time.monotonic(), 1.0)
            if step <= 0:
                return None
            watch = [] if self._server.dead else [self._server.fileno()]
            if self._pidfd is not None and self._gone_at is None:
                watch.append(self._pidfd)
            if watch:
                select.select(watch, [], [], step)
            else:
                time.sleep(min(step, 0.01))
        return self.returncode

    def close(self) -> None:
        super().close()
        if self.returncode is None and not self._server.dead:
            return  # the pidfd goes when the template reports the exit
        self._close_pidfd()


class ForkServer:
    """Starts a template for `spec` (with `env`, default ``os.environ``) and
    forks children from it. Not thread-safe: the supervision loop owns it.

    `spawn` blocks until the template has loaded the app (once, at the
    start: see `ready`) and for the fork's round trip (about a millisecond).
    """

    def __init__(self, spec: str, env: dict[str, str] | None = None) -> None:
        self.spec = spec
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.popen = process.popen_child(
                ["--template", spec, str(os.getpid()), str(theirs.fileno())],
                env=env,
                pass_fds=(theirs.fileno(),),
                stdout=subprocess.DEVNULL,
                stderr=None,  # the supervisor's: what goes wrong before a child exists
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        self._eof = False
        self._started = False
        self._error: str | None = None
        """Why spawning no longer works, once it does not."""
        self._requests = 0
        self._replies: dict[int, tuple[int, int | None] | str] = {}
        self._children: dict[int, ForkedChild] = {}
        """pid -> forked child whose exit was not reported yet."""

    @property
    def pid(self) -> int:
        """The template's pid."""
        return self.popen.pid

    @property
    def dead(self) -> bool:
        """Whether the template is gone (or failed to start): no report will come."""
        return self._error is not None

    @property
    def error(self) -> str | None:
        """Why the fork server is unusable (None while it works)."""
        return self._error

    def fileno(self) -> int:
        """The socket to the template: readable when it has something to say
        (an exit to report, its end); a loop may select on it, then call
        `pump`. Valid until `close` (unregister it first); once `dead`, it
        stays readable: unregister it then."""
        return self._sock.fileno()

    def pump(self) -> None:
        """Takes in what the template said (exits, its death), without blocking."""
        self._pump(0.0)

    def ready(self) -> bool:
        """Whether the template has loaded the app (`spawn` will not wait for
        it). Never blocks."""
        self._pump(0.0)
        return self._started and not self.dead

    def alive(self) -> bool:
        """Whether the template runs (starting or ready). Never blocks."""
        self._pump(0.0)
        return not self.dead and self.popen.poll() is None

    def spawn(self, index: int, timeout: float = SPAWN_TIMEOUT) -> ForkedChild:
        """A new child for slot `index`, forked from the template.

        Raises ForkServerError when the template failed to load the app, is
        gone, or did not answer within `timeout` s (it is killed then).
        """
        give_up = time.monotonic() + timeout
        while not self._started and not self.dead:
            self._pump_until(give_up, "load the app")
        self._check()
        self._requests += 1
        request = self._requests
        pipes = process.ChildPipes()
        try:
            try:
                socket.send_fds(
                    self._sock, [forkwire.SPAWN.pack(b"S", request, index)], pipes.child_ends()
                )
            except OSError as exc:
                self._died(f"its socket failed ({exc})")
                self._check()
            pipes.close_child_ends()
            while request not in self._replies:
                self._check()
                self._pump_until(give_up, "fork a child")
        except BaseException:
            pipes.close_all()
            raise
        reply = self._replies.pop(request)
        if isinstance(reply, str):
            pipes.close_all()
            raise ForkServerError(f"the fork server's template could not fork: {reply}")
        pid, pidfd = reply
        forked = ForkedChild(server=self, index=index, pid=pid, pipes=pipes, pidfd=pidfd)
        self._children[pid] = forked
        return forked

    def close(self, timeout: float = 5.0) -> None:
        """Ends the template (its children run on). Wait for the children
        first: their exits are not reported after this."""
        if self._error is None:
            self._error = "the fork server is closed"
        self._sock.close()
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        for pidfd in (r[1] for r in self._replies.values() if not isinstance(r, str)):
            if pidfd is not None:
                os.close(pidfd)
        self._replies.clear()

    # -- the socket -------------------------------------------------------------

    def _check(self) -> None:
        if self._error is not None:
            raise ForkServerError(f"the fork server for {self.spec!r} is unusable: {self._error}")

    def _died(self, why: str) -> None:
        if self._error is None:
            code = self.popen.poll()
            if code is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = self.popen.wait(timeout=1.0)
            if code is not None:
                why += f" (its template {process.exit_reason(code).removeprefix('child ')})"
            self._error = why

    def _pump_until(self, give_up: float, what: str) -> None:
        left = give_up - time.monotonic()
        if left <= 0:
            self.popen.kill()
            self._died(f"its template did not {what} in time")
            self._check()
        self._pump(left)

    def _pump(self, timeout: float | None) -> None:
        """Handles the messages waiting, after waiting up to `timeout` s
        (None: for ever) for the first; stops after a spawn's reply, so that
        the child is known before its exit is read."""
        if self._eof or self._sock.fileno() < 0:
            return
        if timeout != 0.0 and not select.select([self._sock], [], [], timeout)[0]:
            return
        while True:
            try:
                data, fds = forkwire.recv(self._sock, 1, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError as exc:
                self._eof = True
                self._died(f"its socket failed ({exc})")
                return
            if not data:  # the socket stays open (and selectable) until close()
                self._eof = True
                self._died("its template is gone")
                return
            if self._handle(data, fds):
                return

    def _handle(self, data: bytes, fds: list[int]) -> bool:
        """Takes one message in; True if it answered the spawn waiting."""
        kind = data[:1]
        if kind == b"X" and len(data) == forkwire.EXITED.size:
            _, pid, code = forkwire.EXITED.unpack(data)
            forked = self._children.pop(pid, None)
            if forked is not None:
                forked._exited(code)
        elif kind == b"P" and len(data) == forkwire.SPAWNED.size:
            _, request, pid = forkwire.SPAWNED.unpack(data)
            if request == self._requests:  # not one whose spawn gave up
                self._replies[request] = (pid, fds[0] if fds else None)
                return True
        elif kind == b"F" and len(data) >= forkwire.FAILED.size:
            _, request = forkwire.FAILED.unpack(data[: forkwire.FAILED.size])
            if request == self._requests:
                self._replies[request] = data[forkwire.FAILED.size :].decode("utf-8", "replace")
                return True
        elif kind == forkwire.READY:
            self._started = True
        elif kind == forkwire.LOAD_ERROR:
            why = data[1:].decode("utf-8", "replace")
            self._died(f"its template could not load the app: {why}")
        for fd in fds:  # a reply nobody waits for any more
            os.close(fd)
        return False
