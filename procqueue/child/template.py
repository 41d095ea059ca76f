"""The template of a fork server (see `procqueue.supervisor.children.forkserver`): the process
that imported the app once and forks a fresh child for each spawn request.

Started as ``python -m procqueue.child --template SPEC PARENT_PID SOCKET_FD``.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import select
import signal
import socket
import sys
import threading
from typing import NoReturn

from procqueue import errors
from procqueue.child import forkwire, loading, serve
from procqueue.producer.app import App


def _ignore(signum: int, frame: object) -> None:
    """SIGCHLD's handler: the wake-up fd does the work."""


class _Template:
    """The template's loop: fork on request, reap, report exits. Single
    threaded, so a fork copies no other thread's half-done state."""

    def __init__(self, sock: socket.socket, app: App, spec: str) -> None:
        self.sock = sock
        self.app = app
        self.spec = spec
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, _ignore)
        signal.set_wakeup_fd(self.wake_w)

    def run(self) -> int:
        """Serves until the supervisor's end of the socket closes; returns 0
        there. A forked child never returns from here: it exits."""
        gc.collect()
        gc.freeze()
        poller = select.poll()  # no fd of its own for a child to inherit
        poller.register(self.sock, select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self.wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self.wake_r, 512):
                        pass
                self._reap()
            if self.sock.fileno() not in ready:
                continue
            try:
                data, fds = forkwire.recv(self.sock, 4)
            except OSError:
                return 0
            if not data:
                return 0  # the supervisor is gone (or closed the fork server)
            if len(data) != forkwire.SPAWN.size or data[:1] != b"S" or len(fds) != 4:
                for fd in fds:
                    os.close(fd)
                continue
            _, request, index = forkwire.SPAWN.unpack(data)
            sys.stdout.flush()
            sys.stderr.flush()
            loading.before_fork()  # no database socket shared with a child
            try:
                pid = os.fork()
            except OSError as exc:
                for fd in fds:
                    os.close(fd)
                self._send(forkwire.FAILED.pack(b"F", request) + str(exc).encode()[:1024])
                continue
            if pid == 0:
                self._become_child(index, fds)
            for fd in fds:
                os.close(fd)
            self._spawned(request, pid)

    def _spawned(self, request: int, pid: int) -> None:
        """Tells the supervisor the pid, with a pidfd (race free: the child
        is not reaped before this is sent)."""
        pidfd = None
        with contextlib.suppress(OSError, AttributeError):
            pidfd = os.pidfd_open(pid)
        try:
            self._send(forkwire.SPAWNED.pack(b"P", request, pid), [] if pidfd is None else [pidfd])
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self._send(forkwire.EXITED.pack(b"X", pid, os.waitstatus_to_exitcode(status)))

    def _send(self, data: bytes, fds: list[int] | None = None) -> None:
        """Blocks until sent; a gone supervisor ends the template."""
        try:
            socket.send_fds(self.sock, [data], fds or [])
        except OSError:
            os._exit(0)

    def _become_child(self, index: int, fds: list[int]) -> NoReturn:
        """In the forked process: drop what is the template's, be a child,
        exit. Never returns into the template's loop."""
        code = 1
        try:
            to_child_r, from_child_w, out_w, err_w = fds
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(self.wake_r)
            os.close(self.wake_w)
            self.sock.close()
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.close(out_w)
            os.close(err_w)
            os.setsid()
            code = serve.forked_main(self.app, self.spec, index, to_child_r, from_child_w)
        except SystemExit as exc:
            code = _exit_code(exc)
        except BaseException as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)
        finally:
            _exit(code)


def _exit_code(exc: SystemExit) -> int:
    """What the interpreter makes of an uncaught SystemExit."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _exit(code: int) -> NoReturn:
    """Exits as the interpreter does (non-daemon threads joined, atexit
    functions run, output flushed) but without tearing down the objects
    copied from the template: that would write to, so copy, every page of
    them (~10 ms a child, most of its life)."""
    try:
        for thread in threading.enumerate():
            if not thread.daemon and thread is not threading.current_thread():
                thread.join()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    finally:
        os._exit(code)


def template_main(argv: list[str]) -> int:
    """``python -m procqueue.child --template SPEC PARENT_PID SOCKET_FD``;
    returns the template's exit code."""
    spec, parent, sock_fd = argv
    sock = socket.socket(fileno=int(sock_fd))
    if os.getppid() != int(parent):  # the supervisor died before we started
        return 1
    serve.set_title(f"procqueue template {spec}")
    serve.raise_oom_score()  # a template is cheap to lose: the pool spawns clean
    try:
        app = loading.load(spec)  # Django set up first under --django
    except errors.ProcqueueError as exc:
        with contextlib.suppress(OSError):
            sock.send(forkwire.LOAD_ERROR + str(exc).encode()[: forkwire.MAX_MESSAGE - 1])
        return 1
    template = _Template(sock, app, spec)
    template._send(forkwire.READY)
    return template.run()


# -- the supervisor's side ------------------------------------------------------
