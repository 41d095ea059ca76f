"""Jobs for the Stopped and async job tests: loops that never look at
`cx.cancelled`, each with a `finally:` that leaves a marker file."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from procqueue import App, Context, Stopped

app = App()


def _spin(marker: str) -> None:
    Path(marker).write_text(str(os.getpid()))
    try:
        while True:
            pass
    finally:
        Path(marker + ".finally").write_text("ran")


@app.job(max_attempts=1, timeout=1)
def spin_with_timeout(marker: str) -> None:
    """A CPU loop past its timeout."""
    _spin(marker)


@app.job(max_attempts=1)
def spin(marker: str) -> None:
    """A CPU loop that runs until it is ended."""
    _spin(marker)


@app.job(max_attempts=1)
def spin_and_swallow_stop(marker: str) -> str:
    """Catches Stopped and returns as if it had finished."""
    try:
        _spin(marker)
    except Stopped:
        return "finished anyway"
    return "unreachable"


@app.job(max_attempts=1)
async def add_async(cx: Context, a: int, b: int) -> dict[str, Any]:
    """Awaits, reports progress, and says which loop it ran on."""
    cx.progress("adding", 0.5)
    await asyncio.sleep(0.01)
    return {"sum": a + b, "id": cx.id, "loop": id(asyncio.get_running_loop())}


@app.job(max_attempts=1, timeout=1)
async def await_forever(marker: str) -> None:
    """Waits forever past its timeout."""
    Path(marker).write_text(str(os.getpid()))
    try:
        await asyncio.Event().wait()
    finally:
        Path(marker + ".finally").write_text("ran")


@app.job(max_attempts=1, timeout=1)
async def spin_async(marker: str) -> None:
    """An async job whose loop never awaits, past its timeout."""
    await asyncio.sleep(0)
    _spin(marker)


@app.job(max_attempts=1)
async def wait_async(marker: str) -> None:
    """Waits until it is ended."""
    Path(marker).write_text(str(os.getpid()))
    try:
        await asyncio.sleep(3600)
    finally:
        Path(marker + ".finally").write_text("ran")


async def _later() -> int:
    return 1


@app.job(max_attempts=1)
def returns_coroutine() -> Any:
    """A sync function that hands back a coroutine."""
    return _later()
