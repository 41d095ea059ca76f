"""Jobs for the fault tests: process trees, drains, allocators, leases."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from procqueue import App, Context, Permanent

app = App()


@app.job(max_attempts=1)
def spawn_tree(cx: Context, marker: str, escape: bool = False, wait: bool = True) -> None:
    """Starts three `sleep`s (one in a new session when `escape`), writes
    their pids to `marker`, then sleeps until killed (or returns at once
    when not `wait`, leaving them behind)."""
    procs = [subprocess.Popen(["sleep", "300"]) for _ in range(2)]
    procs.append(subprocess.Popen(["sleep", "300"], start_new_session=escape))
    Path(marker).write_text(" ".join(str(p.pid) for p in procs))
    while wait:
        time.sleep(0.05)


@app.job(max_attempts=3)
def watch_cancelled(cx: Context, marker: str) -> str:
    """Runs until told to stop, then says so in `marker` and fails."""
    Path(marker).write_text(str(os.getpid()))
    while not cx.cancelled:
        time.sleep(0.01)
    Path(marker + ".stopped").write_text(f"attempt {cx.attempt}")
    raise Permanent("stopped on request")


@app.job(max_attempts=1, timeout=60)
def allocate_fast(cx: Context, step_mb: int, log: str) -> None:
    """Allocates (and touches) `step_mb` MB every millisecond forever,
    logging the total it holds."""
    held: list[bytearray] = []
    while True:
        block = bytearray(step_mb * 1024 * 1024)
        for i in range(0, len(block), 4096):
            block[i] = 1
        held.append(block)
        Path(log + ".tmp").write_text(str(len(held) * step_mb))
        os.replace(log + ".tmp", log)  # whole: the test may read it at any time
        time.sleep(0.001)


@app.job(max_attempts=3)
def heartbeat(cx: Context, log: str, seconds: float) -> int:
    """Appends `attempt wall-time` to `log` every 20 ms for `seconds`: the
    job's own record of when each attempt ran."""
    deadline = time.monotonic() + seconds
    with open(log, "a", buffering=1) as f:
        while time.monotonic() < deadline:
            f.write(f"{cx.attempt} {time.time()}\n")
            time.sleep(0.02)
    return cx.attempt


@app.job(max_attempts=1)
def final_progress(cx: Context, n: int) -> int:
    """Reports progress `n` times in a tight loop, the last value 1.0."""
    for i in range(n):
        cx.progress(f"step {i}", i / n)
    cx.progress("final", 1.0)
    return n


@app.job(max_attempts=1)
def progress_storm(cx: Context, seconds: float) -> int:
    """Reports progress in a tight loop for `seconds`; how many times."""
    end = time.monotonic() + seconds
    calls = 0
    while time.monotonic() < end:
        cx.progress(fraction=calls % 100 / 100)
        calls += 1
    return calls


@app.job(max_attempts=3)
def fail_after_gate(cx: Context, gate: str) -> None:
    """Fails (retryably) as soon as `gate` exists."""
    Path(gate + ".running").write_text(str(cx.attempt))
    while not Path(gate).exists():
        time.sleep(0.01)
    raise RuntimeError("failing after the gate")
