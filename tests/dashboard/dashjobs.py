"""Jobs the dashboard's browser tests run in real children (imported by each child)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from procqueue import App, Context

app = App()


def _wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(0.01)


@app.job(max_attempts=1)
def flaky(marker: str, message: str = "the marker file is missing") -> str:
    """Fails (no retry) until `marker` exists, then succeeds."""
    if not Path(marker).exists():
        raise RuntimeError(message)
    return "recovered"


@app.job
def stepped(cx: Context, gate: str) -> str:
    """Reports 20%, waits for ``gate.1``; reports 80%, waits for ``gate.2``; done."""
    cx.progress("first half", 0.2)
    _wait_for(Path(f"{gate}.1"))
    cx.progress("second half", 0.8)
    _wait_for(Path(f"{gate}.2"))
    return "finished"


@app.job(max_attempts=1)
def block(cx: Context, marker: str) -> None:
    """Runs until `marker` exists (or it is cancelled)."""
    cx.progress("blocked", None)
    _wait_for(Path(marker))


def tile_gate(batch: str) -> Path:
    return Path(tempfile.gettempdir()) / f"procqueue-dashboard-{batch}"


@app.job(name="app.jobs.render_tile")
def render_tile(cx: Context, x: int, y: int, zoom: int, batch: str) -> dict[str, int]:
    """A screenshot prop: progress like a real job, done once `tile_gate(batch)` exists."""
    cx.progress(f"tile {x},{y}", 0.15 + (x * 7 + y * 13) % 70 / 100)
    _wait_for(tile_gate(batch))
    return {"x": x, "y": y, "zoom": zoom}
