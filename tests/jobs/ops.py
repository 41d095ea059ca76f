"""Jobs of the operations tests: numpy in and out, the app's own
types through its codec hooks, crashes whose stack must reach the history,
and an on_failure handler with no annotation."""

from __future__ import annotations

import ctypes
import enum
import os
import pathlib
import time
from pathlib import Path
from typing import Any

import numpy as np

from procqueue import App, Context, JobInfo


class Point:
    """A type of the app's own, encoded by its hooks."""

    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y


def enc_hook(value: Any) -> Any:
    if isinstance(value, Point):
        return {"x": value.x, "y": value.y}
    raise NotImplementedError


def dec_hook(kind: type, value: Any) -> Any:
    if kind is Point:
        return Point(value["x"], value["y"])
    raise NotImplementedError


app = App(enc_hook=enc_hook, dec_hook=dec_hook)


class Color(enum.Enum):
    RED = "red"


class Opaque:
    """Nobody encodes this."""


@app.job
def numpy_stats(values: list[float]) -> dict[str, Any]:
    arr = np.asarray(values)
    return {"mean": arr.mean(), "max": arr.max().astype(np.int64), "doubled": arr * 2}


@app.job
def describe(data: Any, where: pathlib.Path, point: Point) -> dict[str, Any]:
    return {
        "data": data,
        "where": where,
        "is_path": isinstance(where, pathlib.Path),
        "point": point,
        "sum": point.x + point.y,
        "color": Color.RED,
        "tags": {"only"},
    }


@app.job(max_attempts=1)
def unencodable() -> dict[str, Any]:
    return {"stats": [1, 2, Opaque()]}


def _deep_in_the_job() -> None:
    ctypes.string_at(0)


@app.job(max_attempts=2)
def crash_once(cx: Context) -> int:
    if cx.attempt == 1:
        _deep_in_the_job()
    return cx.attempt


def failure_seen(info):  # type: ignore[no-untyped-def]  # deliberately unannotated
    Path(os.environ["OPS_TEST_DIR"], f"handled-{info.id}").write_text(
        f"{type(info).__name__} {info.state} {isinstance(info, JobInfo)}"
    )


@app.job(max_attempts=1, on_failure=failure_seen)
def fails_with_handler() -> None:
    raise RuntimeError("for the handler")


@app.job(max_attempts=1)
def sleeper(marker: str) -> None:
    Path(marker).write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)


@app.job(max_attempts=1)
def boom(n: int) -> None:
    raise ValueError(f"boom {n}")
