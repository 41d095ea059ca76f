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
