"""Jobs for the workflow tests: stages that pass results along, a failing
one, one that snoozes, and one whose step outlives its timeout."""

from __future__ import annotations

import os
import time
from typing import Any

from procqueue import App, Context, Permanent, Snooze

app = App()


@app.job
def stage(cx: Context, n: int) -> dict[str, Any]:
    """Returns `n` and the sum of its dependencies' `total`s."""
    parents = cx.parent_results
    return {"n": n, "total": n + sum(r["total"] for r in parents.values() if r)}


@app.job
def gather(cx: Context) -> dict[str, Any]:
    """The ids and results its dependencies gave it."""
    parents = cx.parent_results
    return {"ids": sorted(parents), "sum": sum(r["total"] for r in parents.values())}


@app.job
def broken() -> None:
    raise Permanent("broken on purpose")


@app.job(max_attempts=1, max_snoozes=3)
def snoozer(cx: Context, marker: str, times: int) -> int:
    """Snoozes `times` times (counted in the file `marker`), then returns its attempt."""
    done = os.path.getsize(marker) if os.path.exists(marker) else 0
    if done < times:
        with open(marker, "a") as f:
            f.write("z")
        raise Snooze(0.05, f"not yet ({done})")
    return cx.attempt


def _note(path: str) -> str:
    with open(path, "a") as f:
        f.write("x")
    return "noted"


@app.job(max_attempts=2, backoff={"base": 0.01, "jitter": False})
def slow_step(cx: Context, marker: str) -> None:
    cx.step("note", _note, marker)  # saved: runs once across both attempts
    cx.step("hang", time.sleep, 60, timeout=0.5)
