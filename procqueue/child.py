"""The child process: imports the app once, then runs jobs one at a time as
the supervisor sends them over its pipe.

Started clean by the supervisor (``python -m procqueue.child``), never
forked, so it inherits no database connection; it never opens one either.
It dies with its supervisor: PR_SET_PDEATHSIG, and EOF on its pipe.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from typing import Any

from procqueue import errors, protocol, runner
from procqueue.app import load_app

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """Asks the kernel to SIGKILL this process when its parent dies (Linux;
    elsewhere pipe EOF still ends an idle child)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _set_title(text: str) -> None:
    try:
        import setproctitle

        setproctitle.setproctitle(text)
    except ImportError:
        pass


class PipeChannel:
    """A Context's channel over the protocol pipe."""

    def __init__(self, rfd: int, wfd: int, job_id: int, steps: dict[str, bytes]) -> None:
        self._rfd = rfd
        self._wfd = wfd
        self._job_id = job_id
        self._steps = steps
        self.cancel_requested = False

    def send(self, message: protocol.Message) -> None:
        protocol.write_all(self._wfd, protocol.encode(message))

    def progress(self, text: str | None, fraction: float | None) -> None:
        self.send(protocol.Progress(job_id=self._job_id, text=text, fraction=fraction))

    def step_saved(self, name: str) -> bytes | None:
        return self._steps.get(name)

    def step_done(self, name: str, value: bytes) -> None:
        self.send(protocol.Step(job_id=self._job_id, name=name, value=value))
        reply = protocol.read_message(self._rfd, to_child=True)
        if not isinstance(reply, protocol.StepSaved) or reply.name != name:
            raise errors.ProtocolError(f"expected StepSaved for {name!r}, got {reply!r}")
        self._steps[name] = value

    def cancelled(self) -> bool:
        return self.cancel_requested


def serve(spec: str, index: int, rfd: int, wfd: int) -> int:
    """The child's life: hello, then jobs until Shutdown or EOF. Returns the exit code."""
    _set_title(f"procqueue child {index} starting")
    try:
        app = load_app(spec)
    except errors.ProcqueueError as exc:
        protocol.write_all(
            wfd,
            protocol.encode(
                protocol.Hello(pid=os.getpid(), version=protocol.PROTOCOL_VERSION, error=str(exc))
            ),
        )
        return 1
    protocol.write_all(
        wfd, protocol.encode(protocol.Hello(pid=os.getpid(), version=protocol.PROTOCOL_VERSION))
    )
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
        message = protocol.read_message(rfd, to_child=True)
        if message is None or isinstance(message, protocol.Shutdown):
            return 0
        if isinstance(message, protocol.StepSaved):
            continue  # the answer to a Step frame job code wrote by hand: the next job must not pay
        if not isinstance(message, protocol.Run):
            raise errors.ProtocolError(f"unexpected {type(message).__name__} while idle")
        channel = PipeChannel(rfd, wfd, message.job_id, dict(message.steps))
        job = app.registry.get(message.name)
        _set_title(f"procqueue child {index} {message.name}#{message.job_id}")
        current.append(channel)
        try:
            if job is None:
                reply: protocol.Message = protocol.Failed(
                    job_id=message.job_id,
                    kind="permanent",
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
            sys.stdout.flush()
            sys.stderr.flush()
            channel.send(reply)
        finally:
            current.clear()
        if channel.cancel_requested:
            return 0
        _set_title(f"procqueue child {index} idle")


def main(argv: list[str]) -> int:
    spec, index, parent, rfd, wfd = argv
    _die_with_parent(int(parent))
    try:
        return serve(spec, int(index), int(rfd), int(wfd))
    except (BrokenPipeError, errors.ProtocolError) as exc:
        print(f"procqueue child: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
