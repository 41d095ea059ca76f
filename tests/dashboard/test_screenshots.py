"""Screenshots of every page over a lifelike queue (for docs/dashboard.md).

They go to a temporary folder; ``PROCQUEUE_SCREENSHOTS=docs/img`` writes the
documentation's copies instead::

    PROCQUEUE_SCREENSHOTS=docs/img .venv/bin/pytest tests/dashboard -k screenshots
"""

from __future__ import annotations

import math
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

from procqueue import App, JobState
from procqueue.testing import supervising, wait_until
from tests.dashboard import dashjobs
from tests.dashboard.conftest import Serve, Tab
from tests.dashboard.factory import finish, insert, start

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips (or fails) with the reason
    expect = None  # type: ignore[assignment]

ERRORS = [
    "RuntimeError: ghostscript exited with code 1\n"
    '  File "app/jobs.py", line 88, in render_pdf\n    raise RuntimeError(...)',
    "child killed by SIGSEGV while running app.jobs.thumbnail",
    "timed out after 30.0s: SIGTERM, then SIGKILL",
    "exceeded max_memory (512 MB)",
    "ValueError: cannot identify image file 'uploads/8841.heic'",
]


CRASH_STACK = (
    "child process killed by SIGSEGV\n"
    "Fatal Python error: Segmentation fault\n\n"
    "Current thread 0x00007f3a2c1ff740 (most recent call first):\n"
    '  File "app/imaging.py", line 41 in decode_heic\n'
    '  File "app/jobs.py", line 27 in thumbnail'
)


def history(app: App, rng: random.Random) -> dict[str, int]:
    """Fifteen minutes of finished work, recorded as a supervisor would have."""
    now = time.time()
    ids: dict[str, int] = {}
    names = [("thumbnails", "app.jobs.thumbnail"), ("reports", "app.jobs.render_pdf")]
    failures = 0
    for minute in range(15, 0, -1):
        count = int(9 + 6 * math.sin(minute / 2.3) + rng.randint(0, 4))
        for i in range(count):
            t = now - minute * 60 + rng.uniform(0, 55)
            queue, name = names[i % 3 == 0]
            args = {"path": f"uploads/{rng.randint(1000, 9999)}.png", "width": 256}
            fails = rng.random() < 0.08
            job = insert(app, name, args, queue=queue, now=t - 2, max_attempts=1 if fails else 3)
            start(app, job, now=t - rng.uniform(0.3, 2))
            if fails:
                failures += 1
                error = ERRORS[failures % len(ERRORS)]
                finish(app, job, JobState.FAILED, error=error, now=t)
            else:
                result = {"path": args["path"], "bytes": rng.randint(9000, 90000)}
                finish(app, job, JobState.DONE, result=result, now=t)
            ids[f"failed{failures % len(ERRORS)}" if fails else "done"] = job
    ids["crashed"] = crashed = insert(
        app, "app.jobs.thumbnail", {"path": "uploads/8841.heic", "width": 256}, now=now - 95
    )
    crashes = [
        ("SIGSEGV", CRASH_STACK, now - 90),
        ("SIGKILL", "timed out after 30s (child process killed by SIGKILL)", now - 55),
    ]
    for exit_reason, error, t in crashes:
        start(app, crashed, now=t - 3)
        finish(app, crashed, JobState.PENDING, error=error, now=t, exit_reason=exit_reason)
    start(app, crashed, now=now - 12)
    finish(
        app,
        crashed,
        JobState.FAILED,
        error=ERRORS[4] + "\n(gave up after 3 attempts)",
        now=now - 10,
    )
    for n in range(3):
        job = insert(app, "app.jobs.send_digest", {"user": 100 + n}, queue="email", now=now - 200)
        app.cancel(job)
    for n in range(4):
        later = now + 600 * (n + 1)
        insert(app, "app.jobs.render_pdf", {"report": f"q{n + 1}"}, queue="reports", run_at=later)
    for n in range(12):
        insert(app, "app.jobs.reindex", {"shard": n}, queue="bulk", priority=-1, now=now - 340)
    app.pause("bulk")
    return ids


def test_screenshots_of_every_page(serve: Serve, tab: Tab, tmp_path: Path) -> None:
    out = Path(os.environ.get("PROCQUEUE_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    dsn = f"sqlite:///{tmp_path}/screens.db"
    app = dashjobs.app.using(dsn)
    ids = history(app, random.Random(7))
    batch = uuid.uuid4().hex[:8]
    page = tab.page
    try:
        with supervising(app, "tests.dashboard.dashjobs", workers=4), serve(dsn) as url:
            tiles = [
                app.enqueue("app.jobs.render_tile", args, queue="tiles")
                for args in (
                    {"x": x, "y": y, "zoom": 3, "batch": batch}
                    for x, y in [(0, 0), (3, 1), (5, 4), (2, 6), (6, 6), (7, 2)]
                )
            ]
            # (each child holds a window of claimed jobs: some tiles wait in a pipe)
            wait_until(
                lambda: sum(app.get(t).fraction is not None for t in tiles) >= 3,
                what="tiles running",
            )
            wait_until(lambda: app.supervisors(), what="the supervisor's heartbeat")
            shots: list[tuple[str, str, Any]] = [
                (
                    "queues",
                    "/",
                    lambda: expect(page.locator('tr[data-key="tiles"]')).to_be_visible(),
                ),
                (
                    "running",
                    "/running",
                    lambda: expect(page.locator(f'tr[data-key="{tiles[0]}"]')).to_be_visible(),
                ),
                ("pending", "/pending", lambda: None),
                ("failed", "/failed", lambda: None),
                ("job", f"/jobs/{ids['crashed']}", lambda: None),
                (
                    "supervisors",
                    "/supervisors",
                    lambda: expect(page.locator(".status")).to_have_text("alive"),
                ),
            ]
            for name, path, ready in shots:
                page.goto(url + path)
                ready()
                expect(page.locator(".live")).to_have_text("live")
                bottom = page.evaluate("document.querySelector('main').scrollHeight + 56")
                tallest = 1500 if name == "job" else 860  # the job's attempts, below its record
                page.screenshot(
                    path=out / f"dashboard-{name}.png",
                    clip={"x": 0, "y": 0, "width": 1360, "height": min(tallest, bottom)},
                    animations="disabled",
                    full_page=name == "job",
                )
            dashjobs.tile_gate(batch).write_text("done")
            for t in tiles:
                app.wait(t, timeout=30)
    finally:
        dashjobs.tile_gate(batch).unlink(missing_ok=True)
        app.close()
    for name, *_ in shots:
        assert (out / f"dashboard-{name}.png").stat().st_size > 10_000
