"""Small helpers shared by the behavioural tests."""

from __future__ import annotations

import os
import socket
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

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
    except (FileNotFoundError, ProcessLookupError, IndexError):  # reaped meanwhile
        return False


def read_pid(marker: Path, timeout: float = 20.0) -> int:
    wait_until(lambda: marker.exists() and marker.read_text(), timeout=timeout, what=f"{marker}")
    return int(marker.read_text())


def state_is(app: App, job_id: int, state: JobState) -> bool:
    return app.get(job_id).state == state


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample a metrics endpoint serves, keyed as :func:`key` builds keys."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def key(metric: str, /, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return metric, frozenset(labels.items())
