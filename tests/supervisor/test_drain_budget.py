"""A drain ends within --grace + --kill-grace + --outcome-wait of SIGTERM
whatever the database does: here while a test holds SQLite's write lock
(``BEGIN EXCLUSIVE``) or an ACCESS EXCLUSIVE lock on PostgreSQL's jobs
table. The outcome it could not write is left to lease rescue."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from procqueue import App, JobState
from procqueue.testing import supervising
from tests.helpers import JOB, SPEC, read_pid
from tests.jobs import basic
from tests.procs import ROOT
from tests.supervisor.test_faults import Stall

GRACE, KILL_GRACE, OUTCOME_WAIT, LEASE = 1.0, 1.0, 2.0, 3.0
EXIT_S = 3.0
"""Allowed beyond the budget for the process to end once the supervisor is
done (the interpreter's own exit, on a shared machine)."""


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = basic.app.using(dsn)
    yield a
    a.close()


def test_a_drain_ends_within_its_budget_while_the_database_is_locked(
    app: App, dsn: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pid"
    job_id = app.enqueue(JOB + "stall_first", {"marker": str(marker)})
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCQUEUE_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "procqueue",
            "supervise",
            SPEC,
            "--dsn",
            dsn,
            "--workers",
            "1",
            "--lease",
            f"{LEASE:g}",
            "--grace",
            f"{GRACE:g}",
            "--kill-grace",
            f"{KILL_GRACE:g}",
            "--outcome-wait",
            f"{OUTCOME_WAIT:g}",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        read_pid(marker)  # attempt 1 runs, and stalls
        with Stall(dsn):
            proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            deadline = signalled + GRACE + KILL_GRACE + OUTCOME_WAIT + EXIT_S
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    with proc.stderr:
        log = proc.stderr.read().decode(errors="replace")
    assert proc.returncode == 0, log
    assert f"not written in time (jobs {job_id})" in log, log
    # Its hand-back was never written: the job is rescued once its lease passes.
    with supervising(app, SPEC, workers=1, lease=LEASE):
        info = app.wait(job_id, timeout=30)
    assert info.state == JobState.DONE and info.result == 2
