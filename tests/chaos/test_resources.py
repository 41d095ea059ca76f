"""Resource faults with real supervisor processes: SQLite on a full
filesystem, a SQLite file locked by another process, a child flooding its
stdout."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from procqueue import JobState, StoreError
from procqueue.testing import wait_until
from scripts.chaoskit.flood import flood_check
from tests.chaos import cluster, procfs
from tests.chaos.hostile import app as hostile_app

SPEC = "tests.chaos.hostile"
H = "tests.chaos.hostile."


def integrity(path: Path) -> str:
    db = sqlite3.connect(path, timeout=60)
    try:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        db.close()


def table(path: Path) -> list[tuple[int, str, int]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60)
    try:
        return db.execute("SELECT id, state, attempts FROM jobs ORDER BY id").fetchall()
    finally:
        db.close()


def runs(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (skips the test if mounting is not allowed)."""
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(path: Path) -> int:
    """Writes `path` until the filesystem is full; bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 16, 1 << 12, 1 << 9, 1):
            block = b"\0" * chunk
            while True:
                try:
                    written += f.write(block) or 0
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return written


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sqlite_on_a_full_filesystem_refuses_keeps_the_file_intact_and_resumes(
    tmp_path: Path,
) -> None:
    with small_tmpfs(tmp_path / "small", "2m") as mnt:
        dsn = f"sqlite:///{mnt}/queue.db"
        db_path = mnt / "queue.db"
        app = hostile_app.using(dsn)
        gate, log = tmp_path / "gate", tmp_path / "runs"
        args = {"gate": str(gate), "log": str(log), "result_kb": 96}
        ids = app.enqueue_many([(H + "gated", args, {}) for _ in range(6)])
        sup = cluster.start_supervisor(
            dsn, spec=SPEC, log_path=tmp_path / "sup.log", workers=3, lease=60
        )
        try:
            wait_until(lambda: len(runs(log)) == 3, timeout=30, what="three jobs running")
            filled = fill(mnt / "filler")
            assert filled > 0

            # an enqueue that needs space fails with one StoreError, writing nothing
            before = len(app.jobs(limit=1000))
            with pytest.raises(StoreError) as refused:
                app.enqueue(H + "echo", {"value": "x" * 400_000})
            assert str(db_path) in str(refused.value) and "\n" not in str(refused.value)
            assert len(app.jobs(limit=1000)) == before

            # the running jobs finish; their 96 KiB results cannot be written, and
            # the supervisor waits out the outage instead of dying
            gate.touch()
            wait_until(
                lambda: b"database unavailable" in (tmp_path / "sup.log").read_bytes(),
                timeout=30,
                what="the supervisor to report the outage",
            )
            # (jobs claimed ahead start as these end: the log may already say more)
            wait_until(lambda: len(runs(log)) >= 6, timeout=30, what="three jobs to end")
            assert sup.poll() is None, sup.log_tail()
            assert integrity(db_path) == "ok"
            states = Counter(app.get(i).state for i in ids)
            assert states[JobState.DONE] == 0 and states[JobState.FAILED] == 0, states

            # space returns: everything is recorded, nothing lost, nothing run twice
            (mnt / "filler").unlink()
            infos = [app.wait(i, timeout=60) for i in ids]
            assert [i.state for i in infos] == [JobState.DONE] * 6
            assert all(i.result == "r" * 96 * 1024 for i in infos)
            assert all(i.attempts == 1 for i in infos), [i.attempts for i in infos]
            assert Counter(r[0] for r in runs(log) if r[3] == "start") == {str(i): 1 for i in ids}
            assert app.wait(app.enqueue(H + "echo", {"value": 7}), timeout=30).result == 7
            assert integrity(db_path) == "ok"
            sup.terminate()
            assert sup.wait(timeout=30) == 0, sup.log_tail()
        finally:
            if sup.poll() is None:
                sup.kill()
                sup.wait(timeout=10)
            app.close()


LOCKER = """
import sqlite3, sys, time
path, seconds, marker = sys.argv[1], float(sys.argv[2]), sys.argv[3]
db = sqlite3.connect(path, isolation_level=None, timeout=60)
db.execute("BEGIN EXCLUSIVE")
with open(marker, "a") as f:
    f.write(f"locked {time.time()}\\n")
time.sleep(seconds)  # the fault itself: the lock is held this long
with open(marker, "a") as f:
    f.write(f"released {time.time()}\\n")
db.execute("COMMIT")
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sqlite_file_locked_by_another_process_for_10_s_supervisors_wait_and_lose_nothing(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "queue.db"
    dsn = f"sqlite:///{db_path}"
    app = hostile_app.using(dsn)
    log, marker = tmp_path / "runs", tmp_path / "lock"
    job: tuple[str, dict[str, Any], dict[str, Any]] = (
        H + "logged",
        {"log": str(log), "seconds": 0.3},
        {},
    )
    first = app.enqueue_many([job] * 8)
    sups = [
        cluster.start_supervisor(
            dsn, spec=SPEC, log_path=tmp_path / f"sup{i}.log", workers=2, lease=30
        )
        for i in range(2)
    ]
    locker: subprocess.Popen[bytes] | None = None
    try:
        wait_until(lambda: len(runs(log)) >= 2, timeout=30, what="jobs running")
        locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(db_path), "10", str(marker)])
        wait_until(lambda: marker.exists() and marker.read_text(), timeout=10, what="the lock")
        # a producer tries until the lock is gone: each try is bounded by the busy timeout
        second: list[int] = []

        def produce() -> None:
            while not second:
                with contextlib.suppress(StoreError):
                    second.extend(app.enqueue_many([job] * 8))

        producer = threading.Thread(target=produce)
        producer.start()
        # while the lock is held, the table does not change (read beside the lock)
        snapshots = []
        early: list[int] = []

        def released() -> bool:
            snapshots.append(table(db_path))
            through = bool(second)
            # "released" is written before the COMMIT: until it is, nobody got through
            if "released" in marker.read_text():
                return True
            if through:
                early.extend(second)
            return False

        wait_until(released, timeout=30, interval=0.2, what="the lock to be released")
        snapshots.pop()  # taken before "released" was seen, but maybe after the commit
        assert len(snapshots) >= 10 and all(t == snapshots[0] for t in snapshots), snapshots
        assert early == [], "the producer's enqueue went through a held EXCLUSIVE lock"
        producer.join(timeout=60)
        assert len(second) == 8
        assert locker.wait(timeout=30) == 0
        infos = [app.wait(i, timeout=60) for i in first + second]
        assert all(i.state == JobState.DONE and i.attempts == 1 for i in infos), [
            (i.id, i.state, i.attempts, i.error) for i in infos if i.state != JobState.DONE
        ]
        # nothing ran twice, the supervisors are still up, the file is sound
        starts = Counter(r[0] for r in runs(log) if r[3] == "start")
        assert starts == {str(i): 1 for i in first + second}
        assert all(s.poll() is None for s in sups), [s.log_tail() for s in sups]
        assert integrity(db_path) == "ok"
        for s in sups:
            s.terminate()
        assert [s.wait(timeout=30) for s in sups] == [0, 0]
    finally:
        if locker is not None and locker.poll() is None:
            locker.kill()
        for s in sups:
            if s.poll() is None:
                s.kill()
                s.wait(timeout=10)
        app.close()


@pytest.mark.timeout(60)
def test_sqlite_on_a_full_filesystem_the_error_says_the_disk_is_full(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small", "2m") as mnt:
        app = hostile_app.using(f"sqlite:///{mnt}/queue.db")
        try:
            app.enqueue(H + "echo", {"value": 1})
            fill(mnt / "filler")
            with pytest.raises(StoreError) as refused:
                app.enqueue(H + "echo", {"value": "x" * 400_000})
        finally:
            app.close()
    assert "database or disk is full" in str(refused.value)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_child_flooding_stdout_for_10_s_leaves_the_supervisor_memory_bounded(
    tmp_path: Path,
) -> None:
    figures = flood_check("sqlite", 10.0, tmp_path, say=lambda _: None)
    print(figures["summary"])
    assert all(isinstance(b, int) and b > 50_000_000 for b in figures["bytes_written"]), figures
    assert figures["rss_peak_mb"] - figures["rss_before_mb"] < 64, figures
    assert figures["probe_latency_max_s"] < 5, figures
    # the relay is rate-limited: the log holds a bounded share of the flood
    assert figures["log_mb"] < 40, figures
    assert figures["bounded"]


def test_procfs_helpers_see_a_real_child_and_its_death(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert child.pid in procfs.children(os.getpid())
        assert procfs.alive(child.pid) and procfs.parent(child.pid) == os.getpid()
        assert (procfs.status_kb(child.pid, "VmRSS") or 0) > 0
        assert procfs.kill_pid(child.pid, signal.SIGKILL, expected_parent=os.getpid())
        wait_until(lambda: not procfs.alive(child.pid), timeout=5, what="the child to die")
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
