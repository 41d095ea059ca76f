"""A child flooding its output: one supervisor whose children write without end, its RSS
sampled; the figures of docs/reliability.md's flood row.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from procqueue import JobState
from tests.chaos import cluster, procfs


def flood_check(
    backend: str,
    seconds: float,
    folder: Path,
    *,
    url: str = cluster.PG_URL,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """One supervisor whose children flood stdout (lines, and no newlines at all)
    for `seconds`; its RSS sampled from /proc. Returns the figures."""
    from tests.chaos import hostile

    folder.mkdir(parents=True, exist_ok=True)
    db = cluster.Database.create(backend, folder, url)
    app = hostile.app.using(db.dsn)
    app.store.migrate(now=app.clock.now())
    sup = cluster.start_supervisor(
        db.dsn, spec="tests.chaos.hostile", log_path=folder / "flood.log", workers=3, lease=10
    )
    try:
        warm = app.enqueue("tests.chaos.hostile.echo", {"value": "warm"})
        app.wait(warm, timeout=60)
        baseline = procfs.status_kb(sup.pid, "VmRSS") or 0
        say(f"flood: supervisor pid {sup.pid} RSS {baseline / 1024:.1f} MB before")
        floods = [
            app.enqueue("tests.chaos.hostile.flood", {"seconds": seconds, "newlines": nl})
            for nl in (True, False)
        ]
        rss: list[int] = []
        latencies: list[float] = []
        end = time.monotonic() + seconds
        next_probe = time.monotonic()
        while time.monotonic() < end + 1:
            kb = procfs.status_kb(sup.pid, "VmRSS")
            if kb is not None:
                rss.append(kb)
            if time.monotonic() >= next_probe:
                next_probe = time.monotonic() + 1.0
                t0 = time.monotonic()
                probe = app.enqueue("tests.chaos.hostile.echo", {"value": 1})
                app.wait(probe, timeout=30)
                latencies.append(time.monotonic() - t0)
            time.sleep(0.1)
        results = [app.wait(i, timeout=60) for i in floods]
        peak = procfs.status_kb(sup.pid, "VmHWM") or 0
        after = procfs.status_kb(sup.pid, "VmRSS") or 0
    finally:
        sup.terminate()
        sup.wait(timeout=30)
        app.close()
        db.drop()
    log_bytes = (folder / "flood.log").stat().st_size
    bytes_out = [r.result for r in results]
    growth_mb = (peak - baseline) / 1024
    bounded = growth_mb < 64 and all(r.state == JobState.DONE for r in results)
    written = ", ".join(f"{b / 1e9:.2f} GB" for b in bytes_out if isinstance(b, int))
    summary = (
        f"{seconds:g}s of flooding ({written} written); supervisor RSS "
        f"{baseline / 1024:.1f} MB before, peak {peak / 1024:.1f} MB "
        f"(VmHWM), {after / 1024:.1f} MB after; log {log_bytes / 1e6:.1f} MB; a short job "
        f"meanwhile took p50 {statistics.median(latencies) if latencies else math.nan:.3f}s, "
        f"max {max(latencies) if latencies else math.nan:.3f}s"
    )
    say("flood: " + summary)
    return {
        "seconds": seconds,
        "rss_before_mb": round(baseline / 1024, 1),
        "rss_peak_mb": round(peak / 1024, 1),
        "rss_after_mb": round(after / 1024, 1),
        "rss_sampled_max_mb": round(max(rss, default=0) / 1024, 1),
        "bytes_written": bytes_out,
        "log_mb": round(log_bytes / 1e6, 1),
        "probe_latency_max_s": round(max(latencies, default=math.nan), 3),
        "bounded": bounded,
        "summary": summary,
    }
