"""Several supervisors on one database, and supervisors that die: real processes."""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from procqueue import App, JobState
from procqueue.testing import ManualClock, supervising, wait_until
from tests.helpers import JOB, SPEC, finished, pid_alive, read_pid
from tests.jobs import basic
from tests.procs import start_supervisor


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = basic.app.using(dsn)
    yield a
    a.close()


def test_kill_9_of_the_supervisor_leaves_no_child_and_the_job_runs_again(
    dsn: str, tmp_path: Path
) -> None:
    clock_file = tmp_path / "clock"
    app = basic.app.using(dsn, clock=ManualClock(str(clock_file)))
    marker = tmp_path / "pid"
    job_id = app.enqueue(JOB + "stall_first", {"marker": str(marker)})
    sup = start_supervisor(dsn, workers=1, lease=5, clock_file=clock_file)
    try:
        child = read_pid(marker)
        sup.send_signal(signal.SIGKILL)
        sup.wait(timeout=10)
        wait_until(lambda: not pid_alive(child), timeout=2, what="the orphaned child to die")
        assert app.get(job_id).state == JobState.RUNNING  # until its lease expires
        app.clock.advance(6)  # type: ignore[attr-defined]
        with supervising(app, SPEC, workers=1):
            info = finished(app, job_id)
    finally:
        if sup.poll() is None:
            sup.kill()
    assert (info.state, info.result, info.attempts) == (JobState.DONE, 2, 2)
    app.close()


def test_two_supervisors_share_a_queue_limit_and_never_run_an_attempt_twice(
    app: App, tmp_path: Path
) -> None:
    spans = tmp_path / "spans"
    ids = app.enqueue_many(
        [
            (JOB + "span", {"path": str(spans), "seconds": 0.05}, {"queue": "limited"})
            for _ in range(16)
        ]
    )
    sups = [start_supervisor(app.dsn or "", workers=3, limits={"limited": 2}) for _ in range(2)]
    try:
        infos = [finished(app, i, timeout=60) for i in ids]
    finally:
        for sup in sups:
            sup.send_signal(signal.SIGTERM)
        assert [sup.wait(timeout=30) for sup in sups] == [0, 0]
    assert all(i.state == JobState.DONE and i.attempts == 1 for i in infos)
    lines = spans.read_text().splitlines()
    assert len(lines) == 16  # each job ran exactly once
    events = sorted(
        itertools.chain.from_iterable(
            ((float(a), 1), (float(b), -1)) for a, b in (line.split() for line in lines)
        ),
        key=lambda e: (e[0], e[1]),
    )
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak <= 2


def test_sigterm_drains_and_exits_zero(app: App, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    job_id = app.enqueue(JOB + "sleep_forever", {"marker": str(marker)})
    sup = start_supervisor(app.dsn or "", workers=1)
    child = read_pid(marker)
    sup.send_signal(signal.SIGTERM)
    assert sup.wait(timeout=30) == 0
    info = app.get(job_id)
    assert info.state == JobState.PENDING and info.attempts == 0
    assert not pid_alive(child)
    assert os.path.exists(marker)
