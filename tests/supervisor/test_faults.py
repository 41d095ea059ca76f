"""Promises that must hold when production misbehaves, on both backends,
with real parts: process trees, drains, fast allocators, a database that
stalls (a held SQLite write lock, a PostgreSQL table lock), a supervisor
that is killed or frozen."""

from __future__ import annotations

import contextlib
import signal
import socket
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from procqueue import App, JobState, models
from procqueue.testing import supervising, wait_until
from tests.helpers import pid_alive, read_pid
from tests.jobs import faults
from tests.procs import start_supervisor

FSPEC = "tests.jobs.faults"
FJOB = "tests.jobs.faults."


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = faults.app.using(dsn)
    yield a
    a.close()


def read_pids(marker: Path) -> list[int]:
    wait_until(lambda: marker.exists() and marker.read_text().strip(), what=str(marker))
    return [int(p) for p in marker.read_text().split()]


def none_alive(pids: list[int]) -> bool:
    return not any(pid_alive(p) for p in pids)


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


# -- a job's process tree is one unit ---------------------------------------------


@pytest.mark.parametrize("escape", [False, True], ids=["group", "setsid"])
def test_a_timeout_ends_the_jobs_whole_tree(app: App, tmp_path: Path, escape: bool) -> None:
    marker = tmp_path / "pids"
    with supervising(app, FSPEC, workers=1, kill_grace=0.3):
        job_id = app.enqueue(
            FJOB + "spawn_tree", {"marker": str(marker), "escape": escape}, timeout=1.0
        )
        pids = read_pids(marker)
        info = app.wait(job_id, timeout=20)
        wait_until(lambda: none_alive(pids), timeout=3, what="the grandchildren to end")
    assert info.state == JobState.FAILED and "timed out" in (info.error or "")


def test_what_a_job_leaves_running_is_ended_when_it_returns(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    with supervising(app, FSPEC, workers=1):
        job_id = app.enqueue(
            FJOB + "spawn_tree", {"marker": str(marker), "escape": True, "wait": False}
        )
        assert app.wait(job_id, timeout=20).state == JobState.DONE
        pids = read_pids(marker)
        wait_until(lambda: none_alive(pids), timeout=3, what="the leftovers to end")


def test_kill_9_of_the_supervisor_leaves_no_process_of_a_job(dsn: str, tmp_path: Path) -> None:
    app = faults.app.using(dsn)
    marker = tmp_path / "pids"
    sup = start_supervisor(dsn, spec=FSPEC, workers=1)
    try:
        app.enqueue(FJOB + "spawn_tree", {"marker": str(marker), "escape": True})
        pids = read_pids(marker)
        child = parent_of(pids[0])
        sup.send_signal(signal.SIGKILL)
        sup.wait(timeout=10)
        wait_until(lambda: none_alive([child, *pids]), timeout=5, what="every process of the job")
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()
        app.close()


# -- drain asks before it kills ---------------------------------------------------


def test_a_drain_tells_the_job_first_and_hands_it_back(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    with supervising(app, FSPEC, workers=1, grace=20.0):
        job_id = app.enqueue(FJOB + "watch_cancelled", {"marker": str(marker)})
        read_pid(marker)
        started = time.monotonic()
    # the job saw cx.cancelled and stopped long before the grace ran out
    assert (tmp_path / "pid.stopped").read_text() == "attempt 1"
    assert time.monotonic() - started < 15
    info = app.get(job_id)
    assert info.state == JobState.PENDING and info.attempts == 0  # handed back, not spent


# -- memory of the whole tree -----------------------------------------------------


def test_a_fast_allocator_is_stopped_under_three_times_its_ceiling(
    app: App, tmp_path: Path
) -> None:
    log = tmp_path / "held"
    with supervising(app, FSPEC, workers=1):
        job_id = app.enqueue(
            FJOB + "allocate_fast", {"step_mb": 1, "log": str(log)}, max_memory=200
        )
        info = app.wait(job_id, timeout=60)
    assert info.state == JobState.FAILED and "exceeded max_memory" in (info.error or "")
    assert int(log.read_text()) < 3 * 200


# -- the final progress -----------------------------------------------------------


def test_the_last_progress_is_recorded_with_the_outcome(app: App) -> None:
    with supervising(app, FSPEC, workers=1):
        job_id = app.enqueue(FJOB + "final_progress", {"n": 200})
        info = app.wait(job_id, timeout=20)
    assert info.state == JobState.DONE
    assert (info.progress, info.fraction) == ("final", 1.0)


def test_a_job_reporting_progress_in_a_tight_loop_ends_on_time(app: App) -> None:
    """Progress held back for its turn is sent by the child's flusher thread
    while the job keeps calling: neither may wait for the other."""
    with supervising(app, FSPEC, workers=1):
        job_id = app.enqueue(FJOB + "progress_storm", {"seconds": 1.5})
        info = app.wait(job_id, timeout=30)
    assert info.state == JobState.DONE and info.result > 1000


# -- a database that stalls -------------------------------------------------------


class Stall:
    """Holds the database: SQLite's write lock from another connection, or
    an ACCESS EXCLUSIVE lock on PostgreSQL's jobs table."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.sqlite: sqlite3.Connection | None = None
        self.pg: psycopg.Connection[tuple[object, ...]] | None = None

    def __enter__(self) -> Stall:
        if self.dsn.startswith("sqlite"):
            self.sqlite = sqlite3.connect(self.dsn.removeprefix("sqlite:///"), isolation_level=None)
            self.sqlite.execute("BEGIN EXCLUSIVE")
        else:
            url, schema = self.dsn.split("?schema=")
            self.pg = psycopg.connect(url)
            self.pg.execute(f'LOCK TABLE "{schema}".jobs IN ACCESS EXCLUSIVE MODE')
        return self

    def __exit__(self, *_: object) -> None:
        if self.sqlite is not None:
            self.sqlite.execute("ROLLBACK")
            self.sqlite.close()
        if self.pg is not None:
            self.pg.rollback()
            self.pg.close()


def test_a_timeout_is_enforced_while_the_database_stalls(
    app: App, dsn: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pid"
    with supervising(app, FSPEC, workers=1, kill_grace=0.5, lease=60.0):
        job_id = app.enqueue(FJOB + "watch_cancelled", {"marker": str(marker)}, timeout=3.0)
        pid = read_pid(marker)
        with Stall(dsn):
            started = time.monotonic()
            wait_until(lambda: not pid_alive(pid), timeout=10, what="the timed-out child to end")
            assert time.monotonic() - started < 3.0 + 0.5 + 1.0
        info = app.wait(job_id, timeout=30)  # written once the database answers
    assert "timed out after 3s" in (info.error or "")


def test_sigterm_reaches_running_jobs_while_the_database_stalls(
    app: App, dsn: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pid"
    with supervising(app, FSPEC, workers=1, grace=30.0) as sup:
        app.enqueue(FJOB + "watch_cancelled", {"marker": str(marker)})
        read_pid(marker)
        with Stall(dsn):
            sup.request_stop()
            wait_until(
                lambda: (tmp_path / "pid.stopped").exists(),
                timeout=5,
                what="the job to be told to stop",
            )


# -- a frozen supervisor ----------------------------------------------------------


def test_a_frozen_supervisor_never_lets_a_job_run_twice_at_once(dsn: str, tmp_path: Path) -> None:
    app = faults.app.using(dsn)
    log = tmp_path / "beats"
    first = start_supervisor(dsn, spec=FSPEC, workers=1, lease=3.0)
    second = None
    try:
        job_id = app.enqueue(FJOB + "heartbeat", {"log": str(log), "seconds": 8.0})
        wait_until(lambda: log.exists() and log.read_text(), what="attempt 1 to beat")
        second = start_supervisor(dsn, spec=FSPEC, workers=1, lease=3.0)
        first.send_signal(signal.SIGSTOP)
        info = app.wait(job_id, timeout=60)
        first.send_signal(signal.SIGCONT)
    finally:
        for sup in (first, second):
            if sup is not None:
                sup.send_signal(signal.SIGCONT)
                sup.terminate()
                sup.wait(timeout=30)
        app.close()
    beats: dict[int, list[float]] = {}
    for line in log.read_text().split("\n"):
        if line:
            attempt, at = line.split()
            beats.setdefault(int(attempt), []).append(float(at))
    assert info.state == JobState.DONE and info.result == 2
    assert max(beats[1]) < min(beats[2])  # attempt 1 had ended before attempt 2 began


# -- cancels survive; unknown names are retried -----------------------------------


def test_a_cancel_survives_a_retryable_failure_of_its_attempt(app: App, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    # poll 5 s and lease 30 s: the supervisor's next cancel check is seconds away
    with supervising(app, FSPEC, workers=1, poll=5.0, lease=30.0):
        job_id = app.enqueue(FJOB + "fail_after_gate", {"gate": str(gate)})
        wait_until(lambda: Path(f"{gate}.running").exists(), what="the job to run")
        assert app.cancel(job_id) == JobState.RUNNING
        gate.write_text("go")  # the attempt fails before its supervisor sees the cancel
        info = app.wait(job_id, timeout=20)
    assert info.state == JobState.CANCELLED and info.attempts == 1


def test_a_job_name_this_build_does_not_know_is_retried(app: App) -> None:
    now = app.clock.now()
    backoff = models.Backoff(base=0.01, jitter=False)
    [job_id] = app.store.job_insert_many(
        jobs=[
            models.NewJob(
                name=FJOB + "from_a_newer_build", args=b"{}", max_attempts=2, backoff=backoff
            )
        ],
        now=now,
    )
    with supervising(app, FSPEC, workers=1):
        info = app.wait(job_id, timeout=20)
    assert info.state == JobState.FAILED and info.attempts == 2
    assert "unknown job" in (info.error or "")


# -- fast rescue on one host ------------------------------------------------------


def test_a_gone_supervisor_on_this_host_has_its_jobs_rescued_long_before_its_lease(
    dsn: str, tmp_path: Path
) -> None:
    app = faults.app.using(dsn)
    log = tmp_path / "beats"
    first = start_supervisor(dsn, spec=FSPEC, workers=1, lease=60.0)
    second = None
    try:
        job_id = app.enqueue(FJOB + "heartbeat", {"log": str(log), "seconds": 1.0})
        wait_until(lambda: log.exists() and log.read_text(), what="attempt 1 to beat")
        second = start_supervisor(dsn, spec=FSPEC, workers=1, lease=60.0)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        killed = time.monotonic()
        info = app.wait(job_id, timeout=30)
        rescued_after = time.monotonic() - killed
    finally:
        for sup in (first, second):
            if sup is not None and sup.poll() is None:
                sup.terminate()
                sup.wait(timeout=30)
        app.close()
    assert info.state == JobState.DONE and info.result == 2
    assert rescued_after < 20  # its lease had 60 s to run


# -- a network path that drops packets (PostgreSQL) ---------------------------------


class BlackHole:
    """A TCP proxy to PostgreSQL that can stop forwarding, as a network path
    that silently drops packets does: connections stay open, nothing arrives."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open = threading.Event()
        self.open.set()
        self.closed = False
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self.open.wait()  # black-holed: held back, not refused
                if self.closed:
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed = True
        self.open.set()
        self.listener.close()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def test_a_timeout_is_enforced_while_the_network_to_postgres_drops_everything(
    pg_available: None, tmp_path: Path
) -> None:
    from tests.conftest import PG_URL, drop_pg_schema, make_pg_dsn

    url, schema = make_pg_dsn()
    parts = urllib.parse.urlsplit(PG_URL)
    hole = BlackHole((parts.hostname or "127.0.0.1", parts.port or 5432))
    dsn = url.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{hole.port}")
    app = faults.app.using(dsn)
    marker = tmp_path / "pid"
    try:
        with supervising(app, FSPEC, workers=1, kill_grace=0.5, lease=60.0) as sup:
            job_id = app.enqueue(FJOB + "watch_cancelled", {"marker": str(marker)}, timeout=3.0)
            pid = read_pid(marker)
            hole.open.clear()
            started = time.monotonic()
            wait_until(lambda: not pid_alive(pid), timeout=10, what="the timed-out child to end")
            assert time.monotonic() - started < 3.0 + 0.5 + 1.0
            sup.request_stop()  # SIGTERM's equivalent is acted on during the outage
            wait_until(lambda: sup.attempts.running == {}, timeout=5, what="the drain")
            hole.open.set()
            wait_until(  # written once the path carries again (a retry: attempts are left)
                lambda: "timed out after 3s" in (app.get(job_id).error or ""),
                timeout=60,
                what="the outcome written",
            )
    finally:
        hole.close()
        app.close()
        drop_pg_schema(schema)
