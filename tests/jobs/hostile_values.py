"""Jobs whose values are hostile to the supervisor: deeply nested results,
step values and frames, values JSON can't carry, progress of the wrong type."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import msgspec

from procqueue import App, Context

app = App()


def nested(depth: int) -> list[Any]:
    """A list nested `depth` deep."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@app.job(max_attempts=1)
def echo(value: Any) -> Any:
    return value


@app.job(max_attempts=3)
def deep_result(depth: int) -> list[Any]:
    return nested(depth)


@app.job(max_attempts=3)
def deep_step(cx: Context, depth: int) -> str:
    cx.step("deep", nested, depth)
    return "stepped"


@app.job(max_attempts=3)
def deep_frame(cx: Context, depth: int) -> str:
    """Writes a Progress frame by hand whose unknown field is nested
    `depth` deep (the child's own encoder never sends that)."""
    body = msgspec.msgpack.encode(
        {"type": "Progress", "job_id": cx.id, "text": "t", "fraction": None, "x": nested(depth)}
    )
    frame = b"PQ" + len(body).to_bytes(4, "big") + body
    os.write(int(sys.argv[5]), frame)
    time.sleep(0.5)
    return "wrote"


@app.job(max_attempts=1)
def bad_step(cx: Context, kind: str) -> str:
    """A step value JSON can't carry: NaN or infinity."""
    cx.step("s", lambda: {"nan": float("nan"), "inf": float("inf")}[kind])
    return "stepped"


@app.job(max_attempts=1)
def bad_result(kind: str) -> Any:
    return {"nan": float("nan"), "inf": [1.0, float("-inf")]}[kind]


@app.job(max_attempts=1)
def bad_progress(cx: Context, kind: str) -> str:
    """`cx.progress` called wrongly; the TypeError's text is the result."""
    try:
        if kind == "int":
            cx.progress(123)  # type: ignore[arg-type]
        else:
            cx.progress(fraction=True)
    except TypeError as exc:
        return f"TypeError: {exc}"
    return "accepted"


HOP = """
import os, sys, time
log = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
end = time.time() + 60
while time.time() < end:
    os.write(log, b"%d\\n" % os.getpid())
    time.sleep(0.001)
    if os.fork():
        os._exit(0)
    os.setsid()
"""
"""A chain of processes: each generation logs its pid, forks, leaves its
session and exits (for a minute at most, should a test's cleanup fail)."""


@app.job(max_attempts=1)
def hop_chain(log: str, then: str) -> str:
    """Starts a pid-hopping chain that appends to file `log`, then, once it
    hopped, returns or sleeps until it is ended."""
    import subprocess

    subprocess.Popen(
        [sys.executable, "-c", HOP, log], start_new_session=True, stdout=subprocess.DEVNULL
    )
    while not os.path.exists(log) or os.path.getsize(log) < 100:
        time.sleep(0.01)  # a few generations: it has hopped away from the job's tree
    if then == "sleep":
        time.sleep(300)
    return "started"


EVIL = "\x1b]0;PWN\x07\x1b[2J\r"
"""Retitles and clears a terminal, then returns the cursor to overprint a line."""


@app.job(max_attempts=1)
def evil_output(cx: Context) -> str:
    """Writes control characters to stdout and stderr, and fails with them."""
    print(EVIL + f"job {cx.id} done", flush=True)
    print(EVIL + "err", file=sys.stderr, flush=True)
    cx.progress(EVIL + "progress")
    raise RuntimeError(EVIL + "boom")


@app.job(max_attempts=1)
def close_output() -> str:
    """Closes the child's stdout and stderr (fds 1 and 2)."""
    os.close(1)
    os.close(2)
    return "closed"


@app.job(max_attempts=1)
def say(text: str) -> str:
    print(text, flush=True)
    print(text + " on stderr", file=sys.stderr, flush=True)
    return text


@app.job(max_attempts=1)
def huge_error(mb: int) -> None:
    raise RuntimeError("E" * (mb * 1024 * 1024))


def _crash_here() -> None:
    import ctypes

    ctypes.string_at(0)  # SIGSEGV


@app.job(max_attempts=1)
def segfault() -> None:
    _crash_here()


@app.job(max_attempts=2, backoff={"base": 0.0, "jitter": False})
def fails(why: str) -> None:
    raise ValueError(why)


@app.job(max_attempts=1)
def sleeps(seconds: float) -> None:
    time.sleep(seconds)
