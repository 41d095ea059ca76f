"""`procqueue demo`: the whole run in a real subprocess (plain, in a terminal,
and interrupted), its summary checked against the database it leaves."""

from __future__ import annotations

import argparse
import collections
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from procqueue import App, models
from procqueue.demo import run as demo
from procqueue.demo import tiles as demo_jobs

ROOT = Path(__file__).resolve().parents[2]
FAILING = {"segfault_tile", "runaway_tile", "exit_tile"}
DEATHS = {"crash_once_tile": 1, "segfault_tile": 2, "exit_tile": 2}
"""Children each kind of tile kills, over all its attempts (a runaway tile is
ended at its timeout by `Stopped`, and its child exits as told: no crash)."""


def _demo(*args: str, cwd: Path, tty: int | None = None) -> subprocess.Popen[bytes]:
    """``python -m procqueue.demo ARGS``: output to the terminal `tty` (in colour),
    else to pipes (no colour)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("NO_COLOR", None)
    if tty is None:
        env["NO_COLOR"] = "1"
    out = subprocess.PIPE if tty is None else tty
    return subprocess.Popen(
        [sys.executable, "-c", _AS_FROM_A_TERMINAL, *args], cwd=cwd, env=env, stdout=out, stderr=out
    )


_AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys; "
    "signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'procqueue.demo'; "
    "runpy.run_module('procqueue.demo', run_name='__main__', alter_sys=True)"
)
"""Runs the demo with Ctrl-C armed, as a terminal starts it. A process
inherits an ignored SIGINT, and Python then installs no KeyboardInterrupt
handler: CI runs this suite as a background job of a non-interactive shell,
which starts it with SIGINT ignored, and the demo would run to its end."""


def _count(label: str, text: str) -> int:
    match = re.search(rf"^\s+{label}\s+(\d+)\b", text, re.M)
    assert match, f"no {label!r} row in:\n{text}"
    return int(match.group(1))


@pytest.mark.slow
def test_demo_runs_every_job_to_a_final_state_and_reports_it(tmp_path: Path) -> None:
    n = 40
    proc = _demo(
        "--jobs",
        str(n),
        "--workers",
        "2",
        "--no-live",
        "--db",
        "demo.db",
        cwd=tmp_path,
    )
    out, err = proc.communicate(timeout=90)
    text, errors = out.decode(), err.decode()
    assert proc.returncode == 0, text + errors
    assert "Traceback" not in text + errors
    assert "\x1b[" not in text  # not a terminal: no cursor movement, no colour

    app = App(f"sqlite:///{tmp_path / 'demo.db'}")
    try:
        every = app.jobs(limit=10 * n)
        (batch,) = app.batches()
    finally:
        app.close()
    # The tiles are one batch; its on_complete handler assembled the picture, once.
    (handler,) = [j for j in every if j.queue == "assemble"]
    jobs = [j for j in every if j.queue != "assemble"]
    assert len(jobs) == n
    assert (batch.state, batch.total, batch.completions) == ("complete", n, 1)
    assert handler.state == "done" and handler.result["tiles"] == n
    assert "the image the batch's on_complete handler assembled" in text
    for line in handler.result["picture"]:
        assert line in text
    assert all(job.state in models.TERMINAL_STATES for job in jobs)
    done = [j for j in jobs if j.state == "done"]
    failed = [j for j in jobs if j.state == "failed"]
    assert _count("done", text) == len(done)
    assert _count("failed", text) == len(failed)
    assert _count("retried", text) == sum(1 for j in done if j.attempts > 1)

    # Every tile ended as its kind says, with the attempts it says.
    for job in jobs:
        kind = job.name.rsplit(".", 1)[1]
        assert kind == demo_jobs.kind_of(job.args["row"] * job.args["cols"] + job.args["col"])
        assert job.state == ("failed" if kind in FAILING else "done"), job
        if kind != "mandelbrot_tile":
            assert job.attempts == 2, job
    assert any("SIGSEGV" in (j.error or "") for j in failed)
    assert any("timed out after 1s" in (j.error or "") for j in failed)
    assert any(j.attempts > 1 for j in done)
    causes = collections.Counter(demo_jobs.cause(j.error) for j in failed)
    assert re.search(rf"failed\s+{len(failed)}\s+.*{causes['segfault']} segfault", text)

    kinds = collections.Counter(j.name.rsplit(".", 1)[1] for j in jobs)
    deaths = sum(DEATHS.get(kind, 0) * count for kind, count in kinds.items())
    assert f"{deaths} children crashed and were replaced" in text
    assert "died running" in text and "— replaced" in text  # the events, as they happened


@pytest.mark.slow
def test_demo_draws_a_live_view_in_a_terminal(tmp_path: Path) -> None:
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    proc = _demo(
        "--jobs",
        "20",
        "--workers",
        "2",
        "--db",
        "demo.db",
        cwd=tmp_path,
        tty=secondary,
    )
    os.close(secondary)
    raw = b""
    give_up = time.monotonic() + 90
    while time.monotonic() < give_up:
        ready, _, _ = select.select([primary], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(primary, 1 << 16)
            except OSError:  # EIO: the child side is closed
                break
            if not chunk:
                break
            raw += chunk
        elif proc.poll() is not None:
            break
    os.close(primary)
    assert proc.wait(timeout=30) == 0
    text = raw.decode("utf-8", "replace")
    frames = re.split(r"\x1b\[\d+F", text)
    assert len(frames) > 3, text  # redrawn in place, many times
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert re.search(r"child 1\s+pid \d+\s+▶ job #\d+", plain)
    assert "died running" in plain
    assert re.search(r"\] 20/20 ", plain)
    assert "children crashed and were replaced" in plain
    assert text.rstrip().endswith("never stopped.\x1b[0m")
    assert "\x1b[?25h" in text  # the cursor is shown again


@pytest.mark.slow
def test_ctrl_c_stops_the_supervisor_and_its_children(tmp_path: Path) -> None:
    proc = _demo(
        "--jobs",
        "300",
        "--workers",
        "2",
        "--no-live",
        "--db",
        "demo.db",
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        while "job #" not in proc.stdout.readline().decode():  # the first event: running
            assert proc.poll() is None
        children = _children_of(proc.pid)
        assert children
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()  # whatever happened: no pipe left for the GC to find
        proc.wait()
    assert proc.returncode == 130, err.decode()
    assert "stopped cleanly" in out.decode()
    assert "Traceback" not in err.decode()
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()]
    app = App(f"sqlite:///{tmp_path / 'demo.db'}")
    try:
        states = {j.state for j in app.jobs(limit=1000)}
    finally:
        app.close()
    assert "running" not in states  # handed back, not left claimed
    assert "pending" in states


def _children_of(parent: int) -> list[int]:
    """Pids of the child processes `parent` started (their titles replace
    their argv, so they are found by parent pid)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: fields follow the last ")"
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(int(entry.name))
    return found


def test_the_plan_is_fixed_and_fills_a_grid() -> None:
    batch = demo_jobs.plan(300)
    assert batch == demo_jobs.plan(300)
    assert demo_jobs.grid(300) == (25, 12)
    kinds = collections.Counter(name.rsplit(".", 1)[1] for name, _, _ in batch)
    assert kinds == {
        "mandelbrot_tile": 261,
        "flaky_tile": 21,
        "crash_once_tile": 8,
        "segfault_tile": 6,
        "runaway_tile": 2,
        "exit_tile": 2,
    }
    assert {(a["col"], a["row"]) for _, a, _ in batch} == {
        (c, r) for c in range(25) for r in range(12)
    }
    for n in (1, 7, 41):
        cols, rows = demo_jobs.grid(n)
        assert cols * rows >= n > cols * (rows - 1)
    assert all(name in demo_jobs.app.registry for name, _, _ in batch)


def test_tiles_compute_and_misbehave_as_planned() -> None:
    args = {"col": 17, "row": 6, "cols": 25, "rows": 12}  # in the main cardioid
    inside = demo_jobs.app.run_inline(demo_jobs.mandelbrot_tile, **args)
    outside = demo_jobs.app.run_inline(demo_jobs.mandelbrot_tile, **{**args, "col": 0, "row": 0})
    assert 0 <= outside < inside <= 1
    assert demo_jobs.shade(inside) == "@" and demo_jobs.shade(0.0) == " "
    with pytest.raises(ConnectionError):
        demo_jobs.app.run_inline(demo_jobs.flaky_tile, **args)


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        ("child process killed by SIGSEGV\n(gave up after 2 attempts)", "segfault"),
        ("timed out after 1s (child process killed by SIGKILL)", "timeout"),
        ("child process exited with code 3", "exit code"),
        ("child process killed by SIGKILL", "killed"),
        ("ConnectionError: tile cache unreachable", "exception"),
        (None, "exception"),
    ],
)
def test_failure_causes(error: str | None, cause: str) -> None:
    assert demo_jobs.cause(error) == cause


def test_clip_counts_visible_characters_only() -> None:
    style = demo.Style(True)
    line = style("abc", demo.RED) + "def" + style("ghi", demo.GREEN)
    assert demo.clip(line, 100) == line
    clipped = demo.clip(line, 5)
    assert re.sub(r"\x1b\[[0-9;]*m", "", clipped) == "abcde"
    assert clipped.endswith("\x1b[0m")
    assert demo.clip("plain text", 5) == "plain"


def test_a_file_that_is_not_sqlite_is_not_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    precious = tmp_path / "notes.txt"
    precious.write_text("keep me")
    args = argparse.Namespace(jobs=3, workers=1, db=str(precious), no_live=True)
    assert demo.main(args) == 1
    assert precious.read_text() == "keep me"
    assert "not a SQLite file" in capsys.readouterr().err


def test_options() -> None:
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    args = parser.parse_args([])
    assert (args.jobs, args.db, args.no_live) == (300, "procqueue-demo.db", False)
    assert args.workers == (os.cpu_count() or 1)
    with pytest.raises(SystemExit):
        parser.parse_args(["--jobs", "0"])
