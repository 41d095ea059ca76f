"""Jobs for the fork server tests (tests/supervisor/test_forkserver.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from procqueue import App

app = App()

COUNT = 0
"""Module state a job mutates: a child forked later must not see it."""


@app.job
def noop() -> None:
    return None


@app.job
def bump() -> int:
    global COUNT
    COUNT += 1
    return COUNT


@app.job
def say(text: str) -> int:
    print(f"out: {text}")
    print(f"err: {text}", file=sys.stderr)
    return os.getpid()


@app.job
def gate(path: str) -> str:
    """Waits until `path` exists."""
    Path(path + ".started").write_text(str(os.getpid()))
    while not Path(path).exists():
        time.sleep(0.01)
    return "through"


@app.job
def tree(marker: str) -> None:
    """Starts two `sleep`s (one in a new session), writes their pids to
    `marker`, then sleeps until killed."""
    procs = [
        subprocess.Popen(["sleep", "300"]),
        subprocess.Popen(["sleep", "300"], start_new_session=True),
    ]
    Path(marker).write_text(" ".join(str(p.pid) for p in procs))
    while True:
        time.sleep(0.05)


@app.job
def loaded(prefixes: list[str]) -> list[str]:
    """The modules loaded whose names start with one of `prefixes`."""
    return sorted(m for m in sys.modules if m.startswith(tuple(prefixes)))
