"""Small helpers shared by the behavioural tests."""

from __future__ import annotations

import os
from pathlib import Path

from procqueue import App, JobInfo, JobState
from procqueue.testing import wait_until

SPEC = "tests.jobs.basic"
JOB = "tests.jobs.basic."


def finished(app: App, job_id: int, timeout: float = 20.0) -> JobInfo:
    """The job's record once it is done, failed or cancelled."""
    return app.wait(job_id, timeout=timeout)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def read_pid(marker: Path, timeout: float = 20.0) -> int:
    wait_until(lambda: marker.exists() and marker.read_text(), timeout=timeout, what=f"{marker}")
    return int(marker.read_text())


def state_is(app: App, job_id: int, state: JobState) -> bool:
    return app.get(job_id).state == state
