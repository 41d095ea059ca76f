"""The fork server (procqueue.supervisor.children.forkserver): real templates and real forked
children, driven over the real protocol as the supervisor drives them."""

from __future__ import annotations

import collections
import contextlib
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from procqueue import protocol
from procqueue.supervisor.children import process as _process
from procqueue.supervisor.children.forkserver import (
    REPORT_GRACE,
    ForkedChild,
    ForkServer,
    ForkServerError,
)
from procqueue.testing import wait_until
from tests.chaos import procfs

ROOT = Path(__file__).resolve().parents[2]
SPEC = "tests.jobs.forked"
J = SPEC + "."
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


class Talk:
    """The supervisor's side of one forked child's protocol pipe."""

    def __init__(self, child: ForkedChild) -> None:
        self.child = child
        self.pending: collections.deque[protocol.Message] = collections.deque()
        self.jobs = 0

    def next(self, timeout: float = 10.0) -> protocol.Message:
        give_up = time.monotonic() + timeout
        while not self.pending:
            self.pending.extend(self.child.read_messages())
            if self.pending:
                break
            assert not self.child.eof, "the child closed its pipe"
            left = give_up - time.monotonic()
            assert left > 0, "no frame from the child in time"
            select.select([self.child.rfd], [], [], left)
        return self.pending.popleft()

    def hello(self) -> protocol.Hello:
        hello = self.next()
        assert isinstance(hello, protocol.Hello) and hello.error is None, hello
        assert hello.pid == self.child.pid
        return hello

    def start(self, name: str, **args: Any) -> None:
        """Sends a job to run."""
        self.jobs += 1
        run = protocol.Run(
            job_id=self.jobs, attempt=1, name=J + name, args=msgspec.json.encode(args), steps={}
        )
        assert self.child.send(run)

    def run(self, name: str, **args: Any) -> protocol.Message:
        """Runs a job: its outcome."""
        self.start(name, **args)
        return self.next()

    def result(self, name: str, **args: Any) -> Any:
        done = self.run(name, **args)
        assert isinstance(done, protocol.Done), done
        return msgspec.json.decode(done.result)


@contextlib.contextmanager
def forked(server: ForkServer, index: int = 1) -> Iterator[Talk]:
    """A child forked for slot `index` that said Hello; closed after."""
    child = server.spawn(index)
    try:
        talk = Talk(child)
        talk.hello()
        yield talk
    finally:
        child.close()


@pytest.fixture
def server() -> Iterator[ForkServer]:
    fs = ForkServer(SPEC, env=ENV)
    try:
        yield fs
    finally:
        fs.close()


def _drain(fd: int) -> bytes:
    """What the child wrote to `fd` so far."""
    out = b""
    while select.select([fd], [], [], 0)[0]:
        data = os.read(fd, 1 << 16)
        if not data:
            break
        out += data
    return out


def test_a_forked_child_says_hello_runs_jobs_and_exits_0_on_shutdown(server: ForkServer) -> None:
    with forked(server, 3) as talk:
        child = talk.child
        assert child.poll() is None
        assert procfs.parent(child.pid) == server.pid
        assert os.getsid(child.pid) == child.pid and os.getpgid(child.pid) == child.pid
        assert Path(f"/proc/{child.pid}/oom_score_adj").read_text().strip() == "1000"
        wait_until(lambda: procfs.title(child.pid) == "procqueue child 3 idle", what="its title")
        assert talk.result("say", text="hi") == child.pid
        assert wait_until(lambda: _drain(child.out_fd), what="stdout") == b"out: hi\n"
        assert wait_until(lambda: _drain(child.err_fd), what="stderr") == b"err: hi\n"
        assert talk.result("bump") == 1
        assert talk.result("bump") == 2  # the same child keeps its state between its jobs
        assert child.rss_mb() > 0 and child.tree_rss_mb() >= child.rss_mb()
        assert child.send(protocol.Shutdown())
        # A loop selects on the fork server's socket to learn of exits at once.
        assert select.select([server.fileno()], [], [], 10)[0]
        server.pump()
        assert child.poll() == 0
        assert child.wait(10) == 0
        assert child.read_messages() == [] and child.eof


def test_a_forked_child_holds_no_database_code(server: ForkServer) -> None:
    with forked(server) as talk:
        prefixes = ["procqueue.store", "procqueue.producer.client", "psycopg", "sqlite3"]
        assert talk.result("loaded", prefixes=prefixes) == []


def test_a_forked_child_killed_reports_the_signal_and_its_tree_goes_too(
    server: ForkServer, tmp_path: Path
) -> None:
    marker = tmp_path / "tree"
    with forked(server) as talk:
        child = talk.child
        talk.start("tree", marker=str(marker))
        text = wait_until(lambda: marker.exists() and marker.read_text(), what="the tree")
        grandchildren = [int(p) for p in text.split()]
        assert all(procfs.alive(p) for p in grandchildren)
        assert child.wait(0.05) is None
        child.signal_tree(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
        assert child.poll() == -signal.SIGKILL
        assert _process.exit_reason(-signal.SIGKILL) == "child process killed by SIGKILL"
        assert "its lease having run out" in _process.exit_reason(protocol.FENCE_EXIT)
        wait_until(
            lambda: not any(procfs.alive(p) for p in grandchildren),
            what="the job's processes to end",
        )


def test_a_hundred_fresh_children_each_clean(server: ForkServer) -> None:
    """A fresh process per job: spawn, hello, one job, shutdown, exit,
    one after the other. No child sees what an earlier job changed."""
    warm = server.spawn(1)  # waits for the template to load the app
    Talk(warm).hello()
    warm.send(protocol.Shutdown())
    assert warm.wait(10) == 0
    warm.close()
    pids = []
    in_spawn = 0.0
    start = time.perf_counter()
    for _ in range(100):
        before = time.perf_counter()
        child = server.spawn(1)
        talk = Talk(child)
        talk.hello()
        in_spawn += time.perf_counter() - before
        assert talk.result("bump") == 1
        assert child.send(protocol.Shutdown())
        assert child.wait(10) == 0
        child.close()
        pids.append(child.pid)
    elapsed = time.perf_counter() - start
    assert len(set(pids)) == 100
    print(
        f"\nfork server: {100 / in_spawn:.0f} spawns/s (spawn to Hello), "
        f"{100 / elapsed:.0f}/s spawn + one job + shutdown + exit"
    )


def test_killing_the_template_leaves_its_children_running_and_spawn_fails(
    server: ForkServer, tmp_path: Path
) -> None:
    with forked(server) as talk:
        child = talk.child
        gate = tmp_path / "gate"
        talk.start("gate", path=str(gate))
        wait_until(lambda: Path(f"{gate}.started").exists(), what="the job to start")
        os.kill(server.pid, signal.SIGKILL)
        server.popen.wait(10)
        wait_until(lambda: not server.alive(), what="the fork server to notice")
        with pytest.raises(ForkServerError, match=r"template is gone.*killed by SIGKILL"):
            server.spawn(2)
        assert child.poll() is None and procfs.alive(child.pid)
        gate.write_text("open")
        done = talk.next()
        assert isinstance(done, protocol.Done) and msgspec.json.decode(done.result) == "through"
        assert child.send(protocol.Shutdown())
        # Nobody is left to collect its status, but its end is known.
        assert child.wait(10) == _process.STATUS_LOST
        assert "lost" in _process.exit_reason(_process.STATUS_LOST)


def test_a_template_that_cannot_load_the_app_makes_spawn_fail() -> None:
    fs = ForkServer("tests.jobs.no_such_module", env=ENV)
    try:
        with pytest.raises(ForkServerError, match="could not load the app: cannot import"):
            fs.spawn(1)
        assert not fs.alive() and not fs.ready()
        assert fs.popen.wait(10) == 1
    finally:
        fs.close()


def test_the_template_and_its_children_end_with_the_supervisor() -> None:
    """The process holding the fork server is killed with SIGKILL: the
    template sees the end of its socket, the child the end of its pipe."""
    script = textwrap.dedent(
        f"""
        import signal
        from procqueue.supervisor.children.forkserver import ForkServer
        fs = ForkServer({SPEC!r})
        child = fs.spawn(1)
        print(fs.pid, child.pid, flush=True)
        signal.pause()
        """
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        template, child = (int(p) for p in holder.stdout.readline().split())
        assert procfs.alive(template) and procfs.alive(child)
    finally:
        holder.kill()
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()
    wait_until(lambda: not procfs.alive(template), what="the template to exit")
    wait_until(lambda: not procfs.alive(child), what="the child to exit")


@pytest.mark.parametrize("through", ["template", "spawned"])
def test_a_child_stopped_by_a_supervisor_killed_mid_kill_still_ends(through: str) -> None:
    """Killing a tree stops its root first: a supervisor killed between that
    SIGSTOP and its SIGKILL must not leave the child stopped for ever. It is
    continued when its parent dies (the supervisor, or the template ending
    with it), sees its pipe end and exits."""
    start = (
        "child = ForkServer({spec!r}).spawn(1)"
        if through == "template"
        else "child = ChildProcess(spec={spec!r}, index=1, env=None)"
    )
    script = textwrap.dedent(
        f"""
        import signal
        from procqueue.supervisor.children.forkserver import ForkServer
        from procqueue.supervisor.children.process import ChildProcess
        {start.format(spec=SPEC)}
        print(child.pid, flush=True)
        signal.pause()
        """
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        child = int(holder.stdout.readline())
        wait_until(lambda: "idle" in procfs.title(child), what="the child to be ready")
        os.kill(child, signal.SIGSTOP)  # what the supervisor's kill does first
        wait_until(lambda: procfs.stopped(child), what="the child to stop")
    finally:
        holder.kill()
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()
    try:
        wait_until(lambda: not procfs.alive(child), what="the stopped child to exit")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)  # when it failed: leave nothing stopped behind


def test_closing_the_fork_server_ends_the_template_with_0(server: ForkServer) -> None:
    assert wait_until(server.ready, what="the template to load the app")
    assert server.alive()
    server.close()
    assert server.popen.returncode == 0
    assert not server.alive()
    with pytest.raises(ForkServerError, match="closed"):
        server.spawn(1)


def test_a_stuck_template_fails_spawn_in_time_and_loses_only_exit_statuses(
    server: ForkServer,
) -> None:
    with forked(server) as talk:
        child = talk.child
        os.kill(server.pid, signal.SIGSTOP)
        try:
            assert child.send(protocol.Shutdown())
            started = time.monotonic()
            assert child.wait(10) == _process.STATUS_LOST
            assert time.monotonic() - started >= REPORT_GRACE * 0.9
            with pytest.raises(ForkServerError, match="did not fork a child in time"):
                server.spawn(2, timeout=0.2)
            assert not server.alive()
        finally:
            if server.popen.poll() is None:
                os.kill(server.pid, signal.SIGCONT)
    assert server.popen.wait(10) == -signal.SIGKILL
