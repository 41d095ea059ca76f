"""Jobs for the batch tests: members that succeed, crash or wait, and the
handlers, which append one JSON line per call to the log named in the
batch's meta (with the type of the argument they were given)."""

from __future__ import annotations

import ctypes
import json
import time

import msgspec

from procqueue import App, BatchInfo, Context

app = App()


def _log(info: BatchInfo, kind: str) -> None:
    line = {"kind": kind, "type": type(info).__name__, **msgspec.to_builtins(info)}
    with open(info.meta["log"], "a") as f:
        f.write(json.dumps(line) + "\n")


@app.job
def on_done(info: BatchInfo) -> None:
    _log(info, "complete")


@app.job
def on_ok(info: BatchInfo) -> None:
    _log(info, "success")


@app.job
def square(n: int) -> int:
    return n * n


@app.job(max_attempts=2, backoff={"base": 0.01, "jitter": False})
def segfault(n: int) -> None:
    ctypes.string_at(0)  # SIGSEGV on every attempt


@app.job
def wait_cancelled(cx: Context, n: int) -> None:
    while not cx.cancelled:
        time.sleep(0.02)


@app.job
def pair(a: int, b: int) -> int:
    """Takes two arguments: not a batch handler."""
    return a + b
