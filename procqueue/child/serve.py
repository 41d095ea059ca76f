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
import signal
import sys
from typing import Any

from procqueue import errors, protocol
from procqueue.child import crashlog, loading, proctree
from procqueue.child.pipes import Fence, Flusher, Inbox, PipeChannel, StdStreams
from procqueue.jobs import runner
from procqueue.jobs.stopping import EventLoop, Guard
from procqueue.producer.app import App


def set_title(text: str) -> None:
    try:
        import setproctitle

        setproctitle.setproctitle(text)
    except ImportError:
        pass


def raise_oom_score() -> None:
    """Offers this process (and what it starts) to the kernel's OOM killer
    first, so that memory pressure never picks the supervisor."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")


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


def become_job_user(ids: str | None) -> None:
    """Switches this process to `ids` (``UID:GID``; None: stays), groups
    first, for good: no job code can take the supervisor's rights back.

    Raises OSError when this process may not switch, ValueError for ids
    that aren't ``UID:GID``."""
    if ids is None:
        return
    uid_text, gid_text = ids.split(":")
    uid, gid = int(uid_text), int(gid_text)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid):  # a switch must never be half made
        raise OSError(f"still uid {os.getresuid()}")
    os.environ.pop(protocol.CHILD_IDS_ENV, None)  # not for what jobs start


def _reap_leftovers() -> None:
    """Ends what the job left running and collects the zombies (this child is
    their subreaper). A child with no child process at all, alive or zombie,
    has no descendant either (orphans below it are adopted by it): one
    `waitpid` then says so, without reading /proc (most jobs start nothing)."""
    try:
        os.waitpid(-1, os.WNOHANG)  # collects a zombie, if one is there
    except ChildProcessError:
        return
    proctree.signal_tree(os.getpid(), signal.SIGKILL, include_root=False)
    proctree.reap_zombies()


def serve(spec: str, index: int, rfd: int, wfd: int) -> int:
    """The child's life: hello, then jobs until Shutdown or EOF. Returns the exit code."""
    set_title(f"procqueue child {index} starting")
    raise_oom_score()
    proctree.become_subreaper()
    crashlog.enable()  # a fatal signal's Python stack, for the attempt's error
    try:
        app = loading.load(spec)
    except errors.ProcqueueError as exc:
        hello = protocol.Hello(pid=os.getpid(), version=protocol.PROTOCOL_VERSION, error=str(exc))
        protocol.write_all(wfd, protocol.encode(hello))
        return 1
    return serve_app(app, spec, index, rfd, wfd)


def serve_app(app: App, spec: str, index: int, rfd: int, wfd: int) -> int:
    """The child's life once `app` is loaded (`serve`, or forked from a fork
    server's template): the job user's ids, hello, then jobs until Shutdown
    or EOF. A child that can't become the job user says so in its Hello and
    runs no job."""
    try:
        become_job_user(os.environ.get(protocol.CHILD_IDS_ENV))
    except (OSError, ValueError) as exc:
        words = f"cannot switch to the job user {os.environ.get(protocol.CHILD_IDS_ENV)}: {exc}"
        hello = protocol.Hello(pid=os.getpid(), version=protocol.PROTOCOL_VERSION, error=words)
        protocol.write_all(wfd, protocol.encode(hello))
        return 1
    proctree.continue_when_orphaned()
    protocol.write_all(
        wfd, protocol.encode(protocol.Hello(pid=os.getpid(), version=protocol.PROTOCOL_VERSION))
    )
    fence = Fence()
    inbox = Inbox(rfd, fence)
    flusher = Flusher()
    streams = StdStreams()
    loop = EventLoop()  # every async job of this child runs on it
    current: list[tuple[int, PipeChannel, Guard]] = []

    def on_term(signum: int, frame: Any) -> None:
        # Running: the job sees cx.cancelled and, once its kill is decided,
        # Stopped (the supervisor SIGKILLs after its kill grace). Idle: exit now.
        if not current:
            raise SystemExit(0)
        job_id, channel, guard = current[0]
        channel.cancel_requested = True
        if inbox.must_stop(job_id):
            guard.stop(frame)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides
    set_title(f"procqueue child {index} idle")
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
        channel = PipeChannel(
            inbox, wfd, message.job_id, dict(message.steps), dict(message.parents)
        )
        channel.flusher = flusher
        channel.cancel_requested = inbox.stop_asked(message.job_id)
        guard = Guard()
        job = app.registry.get(message.name)
        set_title(f"procqueue child {index} {message.name}#{message.job_id}")
        current.append((message.job_id, channel, guard))
        if inbox.must_stop(message.job_id):  # its kill was decided before it started
            guard.stop(None)
        try:
            if job is None:  # a rolling deploy: a newer supervisor may know it
                reply: protocol.Done | protocol.Failed = protocol.Failed(
                    job_id=message.job_id,
                    kind="error",
                    error=f"unknown job {message.name!r} in {spec}",
                )
            else:
                reply = runner.execute(job, message, channel=channel, guard=guard, loop=loop)
            _reap_leftovers()
            streams.restore()
            channel.send(channel.outcome(_oversized(reply)))
        finally:
            current.clear()
            inbox.running(None)
        if channel.cancel_requested:
            return 0
        set_title(f"procqueue child {index} idle")


def main(argv: list[str]) -> int:
    """``python -m procqueue.child SPEC INDEX PARENT RFD WFD``: serves jobs
    until the pipe ends; returns the exit code."""
    spec, index, parent, rfd, wfd = argv
    if os.getppid() != int(parent):  # the supervisor died before we started
        return 1
    try:
        return serve(spec, int(index), int(rfd), int(wfd))
    except (BrokenPipeError, errors.ProtocolError) as exc:
        print(f"procqueue child: {exc}", file=sys.stderr)
        return 3


def forked_main(app: App, spec: str, index: int, rfd: int, wfd: int) -> int:
    """A child forked from a fork server's template (``supervisor.children.forkserver``),
    which loaded `app` and never ran a job: what `main` and `serve` do around
    `serve_app`, without loading the app again. Returns the exit code."""
    set_title(f"procqueue child {index} starting")
    raise_oom_score()  # inherited from the template, but not to rely on
    proctree.become_subreaper()  # never inherited across fork
    crashlog.enable()  # its own file, by its own pid
    try:
        return serve_app(app, spec, index, rfd, wfd)
    except (BrokenPipeError, errors.ProtocolError) as exc:
        print(f"procqueue child: {exc}", file=sys.stderr)
        return 3
