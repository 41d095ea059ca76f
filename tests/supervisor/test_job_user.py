"""``--job-user``: children, so jobs, run as another user, who can't signal
the supervisor; a supervisor that can't switch users says so in one line."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from procqueue import App, JobState
from tests.helpers import JOB, SPEC, finished
from tests.jobs import basic
from tests.procs import ROOT


def _nobody() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody' on this host")


def _supervise(dsn: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCQUEUE_")}
    env["PYTHONPATH"] = str(ROOT)
    argv = [sys.executable, "-m", "procqueue", "supervise", SPEC, "--dsn", dsn, "--workers", "2"]
    with open(log, "wb") as out:
        return subprocess.Popen(
            [*argv, *extra], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs a root supervisor")
def test_jobs_run_as_the_job_user_and_cannot_signal_their_supervisor(
    dsn: str, tmp_path: Path
) -> None:
    nobody = _nobody()
    log = tmp_path / "sup.log"
    proc = _supervise(dsn, log, "--job-user", "nobody")
    app: App = basic.app.using(dsn)
    try:
        ids = [app.enqueue(JOB + "ids", {}) for _ in range(4)]  # every child, clean or forked
        for job_id in ids:
            info = finished(app, job_id, timeout=60)
            assert info.state == JobState.DONE, (info.error, log.read_text())
            assert info.result == [nobody.pw_uid, nobody.pw_gid]
        hostile = app.enqueue(JOB + "signal_process", {"pid": proc.pid})
        info = finished(app, hostile, timeout=60)
        assert (info.state, info.result) == (JobState.DONE, "refused"), log.read_text()
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        app.close()


def test_an_unknown_job_user_is_one_line_and_no_supervisor(tmp_path: Path) -> None:
    log = tmp_path / "sup.log"
    proc = _supervise(f"sqlite:///{tmp_path}/q.db", log, "--job-user", "no_such_user_x")
    assert proc.wait(timeout=60) == 2
    lines = log.read_text().strip().splitlines()
    assert lines == ["procqueue: error: --job-user: no user 'no_such_user_x' on this host"], lines
