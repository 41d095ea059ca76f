"""The jobs of `procqueue demo`: Mandelbrot tiles, a few of them broken on purpose.

Every job computes one tile of a picture of the Mandelbrot set in pure
Python (CPU-bound, reporting progress every few rows) and returns the
tile's mean escape time, from which the demo draws the picture at the end.
Which tiles misbehave depends only on their index (`plan`), so the summary
of a run is reproducible:

- ``flaky_tile`` raises on its first attempt and succeeds on the retry;
- ``crash_once_tile`` segfaults on its first attempt, then succeeds;
- ``segfault_tile`` segfaults every time (failed after 2 attempts);
- ``runaway_tile`` hangs past its 1 s timeout and is killed, twice;
- ``exit_tile`` calls ``os._exit(3)`` as a misbehaving C library might.

The tiles are enqueued as one batch whose completion handler,
``assemble``, runs once every tile has ended, reads their results and
assembles the picture the demo prints.

The supervisor's children import this module (``procqueue.demo.tiles``); it
opens no database: `procqueue.demo` runs `app.using(...)` on its SQLite file.
"""

from __future__ import annotations

import ctypes
import math
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from procqueue import App, Backoff, BatchInfo, Context, JobInfo

app = App()

REGION = (-2.15, 0.65, -1.2, 1.2)
"""The part of the complex plane the picture shows: x0, x1, y0, y1."""
SIZE = 44
"""Pixels per tile side."""
MAX_ITER = 700
"""Iterations before a point is taken to be in the set."""
_BAND = 4
"""Rows between two progress reports."""
SHADES = " .:-=+*#%@"
"""Tile results from outside the set (light) to inside it (dark)."""
_ASPECT = 2.4
"""Columns per row of the tile grid: the picture's width/height in terminal cells."""

_QUICK = Backoff(base=0.2, factor=2.0, jitter=False)


def _render(cx: Context, col: int, row: int, cols: int, rows: int, stop_at: int) -> float:
    """Computes rows [0, stop_at) of a tile, reporting progress; returns the
    mean escape time as a fraction of MAX_ITER."""
    x0, x1, y0, y1 = REGION
    width, height = (x1 - x0) / cols, (y1 - y0) / rows
    total = 0
    for py in range(stop_at):
        if py % _BAND == 0:
            cx.progress(f"row {py}/{SIZE}", py / SIZE)
        ci = y0 + (row + (py + 0.5) / SIZE) * height
        for px in range(SIZE):
            cr = x0 + (col + (px + 0.5) / SIZE) * width
            zr = zi = 0.0
            n = 0
            while n < MAX_ITER and zr * zr + zi * zi <= 4.0:
                zr, zi = zr * zr - zi * zi + cr, 2.0 * zr * zi + ci
                n += 1
            total += n
    cx.progress(f"row {stop_at}/{SIZE}", stop_at / SIZE)
    return total / (max(stop_at, 1) * SIZE * MAX_ITER)


def _segfault() -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV, the child dies on the spot


@app.job(max_attempts=3, backoff=_QUICK)
def mandelbrot_tile(cx: Context, col: int, row: int, cols: int, rows: int) -> float:
    """One well-behaved tile."""
    return _render(cx, col, row, cols, rows, SIZE)


@app.job(max_attempts=3, backoff=_QUICK)
def flaky_tile(cx: Context, col: int, row: int, cols: int, rows: int) -> float:
    """Fails with an exception on its first attempt (a transient error), then succeeds."""
    if cx.attempt == 1:
        _render(cx, col, row, cols, rows, SIZE // 4)
        raise ConnectionError("tile cache unreachable (on attempt 1 only)")
    return _render(cx, col, row, cols, rows, SIZE)


@app.job(max_attempts=2, backoff=_QUICK)
def crash_once_tile(cx: Context, col: int, row: int, cols: int, rows: int) -> float:
    """Segfaults halfway through its first attempt; the retry succeeds."""
    if cx.attempt == 1:
        _render(cx, col, row, cols, rows, SIZE // 2)
        _segfault()
    return _render(cx, col, row, cols, rows, SIZE)


@app.job(max_attempts=2, backoff=_QUICK)
def segfault_tile(cx: Context, col: int, row: int, cols: int, rows: int) -> float:
    """Segfaults halfway through every attempt."""
    _render(cx, col, row, cols, rows, SIZE // 2)
    _segfault()
    return math.nan  # not reached


@app.job(max_attempts=2, backoff=_QUICK, timeout=1.0)
def runaway_tile(cx: Context, col: int, row: int, cols: int, rows: int) -> float:
    """Computes its tile, then hangs: stopped at its 1 s timeout, every attempt."""
    _render(cx, col, row, cols, rows, SIZE)
    cx.progress("hanging…", 1.0)
    while True:  # ignores cx.cancelled: Stopped, raised here at the timeout, ends it
        time.sleep(0.05)


@app.job(max_attempts=2, backoff=_QUICK)
def exit_tile(cx: Context, col: int, row: int, cols: int, rows: int) -> float:
    """Calls ``os._exit(3)`` partway through, as a C library calling exit() would."""
    _render(cx, col, row, cols, rows, SIZE // 3)
    os._exit(3)


@app.job(queue="assemble", max_attempts=3, backoff=_QUICK)
def assemble(info: BatchInfo) -> dict[str, Any]:
    """The tiles' batch handler (on_complete): runs once, when every tile has
    ended, and assembles the picture from their results (read in pages from
    the database named in the batch's meta; a job opens its own connection)."""
    source = app.using(info.meta["dsn"])
    try:
        lines = picture(source.batch_results(info.id), lambda char, job: char)
    finally:
        source.close()
    return {"picture": lines, "tiles": info.total, "done": info.done, "failed": info.failed}


KINDS: dict[str, str] = {
    "mandelbrot_tile": "well-behaved",
    "flaky_tile": "raise an exception on attempt 1",
    "crash_once_tile": "segfault on attempt 1 only",
    "segfault_tile": "segfault every time",
    "runaway_tile": "hang past a 1 s timeout",
    "exit_tile": "call os._exit(3)",
}
"""Short job name -> what it does, in the order the demo lists them."""


def kind_of(index: int) -> str:
    """The short job name of tile `index`: the same for every run."""
    if index % 150 == 29:
        return "runaway_tile"
    if index % 150 == 37:
        return "exit_tile"
    if index % 50 == 17:
        return "segfault_tile"
    if index % 40 == 11:
        return "crash_once_tile"
    if index % 13 == 5:
        return "flaky_tile"
    return "mandelbrot_tile"


def grid(n: int) -> tuple[int, int]:
    """(cols, rows) of a grid holding `n` tiles, about `_ASPECT` times wider
    than tall; an exact fit when a divisor of `n` is close enough."""
    ideal = math.sqrt(n * _ASPECT)
    exact = [c for c in range(1, n + 1) if n % c == 0 and abs(c - ideal) <= 0.25 * ideal]
    cols = min(exact, key=lambda c: abs(c - ideal)) if exact else max(1, round(ideal))
    return cols, math.ceil(n / cols)


def shade(result: object) -> str:
    """The character for a tile's result (its mean escape time): darker inside the set."""
    value = float(result) if isinstance(result, int | float) and result > 0 else 0.0
    level = math.log1p(value * MAX_ITER) / math.log1p(MAX_ITER)
    return SHADES[min(len(SHADES) - 1, int(level * len(SHADES)))]


def picture(jobs: Iterable[JobInfo], paint: Callable[[str, JobInfo], str]) -> list[str]:
    """The image finished tiles computed, row by row, one character a tile
    (✖ for a failed one); `paint` may colour each character."""
    cells: dict[tuple[int, int], str] = {}
    cols = rows = 0
    for job in jobs:
        cols, rows = job.args["cols"], job.args["rows"]
        char = "✖" if job.state == "failed" else shade(job.result)
        cells[job.args["col"], job.args["row"]] = paint(char, job)
    return ["".join(cells.get((c, r), " ") for c in range(cols)) for r in range(rows)]


CAUSES = {
    "timed out": "timeout",
    "SIGSEGV": "segfault",
    "exited with": "exit code",
    "killed by": "killed",
}
"""Error text -> cause of a failure, first match wins (a timed-out child is killed
by SIGKILL); anything else is an "exception"."""


def cause(error: str | None) -> str:
    """Why a job failed, from its error text: one of `CAUSES` or "exception"."""
    return next((kind for needle, kind in CAUSES.items() if needle in (error or "")), "exception")


def plan(n: int) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """The batch of `n` tiles, ready for `App.enqueue_many`."""
    cols, rows = grid(n)
    return [
        (
            f"{__name__}.{kind_of(i)}",
            {"col": i % cols, "row": i // cols, "cols": cols, "rows": rows},
            None,
        )
        for i in range(n)
    ]
