"""What the dashboard shows, as plain dicts of display values.

The same dicts feed the server-rendered HTML (Jinja, autoescaped) and the
JSON the page polls (filled in with ``textContent``), so every value is
formatted once, here, and never interpreted as markup anywhere.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, urlencode

import msgspec

from procqueue import models
from procqueue.models import HELD_STATES, JobInfo, JobState, QueueInfo, Throughput

STATES = [s.value for s in JobState]
PREVIEW_CHARS = 160
ERROR_LINE_CHARS = 300
CHART_MINUTES = 15
"""Throughput is counted over the newest this-many done and failed jobs."""
RATE_WINDOW = dt.timedelta(seconds=60)
"""The rate shown as "now": jobs finished in the last minute, per second (a
15-minute average would hide a batch that runs right now)."""
ERROR_TITLE_CHARS = 4000
"""How much of an error a list shows on hover: a list of 100 jobs with 5 MB
errors stays a page, and the job's own page shows more."""
ERROR_PAGE_CHARS = 200_000
"""How much of an error the job's page shows; ``procqueue show ID --json`` has it all."""

View = dict[str, Any]


# -- formatting --------------------------------------------------------------


def duration(seconds: float | None) -> str:
    """A short human duration: ``850ms``, ``12s``, ``3m 05s``, ``2h 10m``, ``3d 4h``."""
    if seconds is None or math.isnan(seconds):
        return ""
    s = max(0.0, seconds)
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 60:
        return f"{s:.1f}s" if s < 10 else f"{s:.0f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m {sec:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h {m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d {h}h"


def relative(when: dt.datetime | None, now: dt.datetime) -> str:
    """``12s ago`` or ``in 3m 05s``; empty for no time."""
    if when is None:
        return ""
    delta = (now - when).total_seconds()
    if abs(delta) < 0.5:
        return "now"
    return f"{duration(delta)} ago" if delta > 0 else f"in {duration(-delta)}"


def iso(when: dt.datetime | None) -> str:
    return when.isoformat(timespec="seconds").replace("+00:00", "Z") if when else ""


def to_json_text(value: Any, *, indent: int = 0) -> str:
    text = msgspec.json.encode(value)
    return msgspec.json.format(text, indent=indent).decode() if indent else text.decode()


def preview(value: Any, limit: int = PREVIEW_CHARS) -> str:
    """Compact JSON of `value`, cut to `limit` characters."""
    text = to_json_text(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cut(text: str | None, limit: int) -> str:
    """`text` (or "") cut to `limit` characters, saying how many were left out."""
    text = text or ""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def first_line(text: str | None, limit: int = ERROR_LINE_CHARS) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def pid_of(info: JobInfo) -> int | None:
    """The running child's pid, once the store records it (older records lack it)."""
    pid = getattr(info, "pid", None)
    return pid if isinstance(pid, int) else None


def record(info: JobInfo) -> dict[str, Any]:
    """The full record as JSON-able data, `pid` included (None when unknown)."""
    data = msgspec.structs.asdict(info)
    data["pid"] = pid_of(info)
    return data


# -- jobs --------------------------------------------------------------------


def job_view(info: JobInfo, now: dt.datetime, *, full: bool = False) -> View:
    """Display values of one job; with `full`, also its whole args/result/error."""
    state = info.state.value
    running = state == JobState.RUNNING
    pid = pid_of(info)
    if info.finished_at and info.started_at:
        took = duration((info.finished_at - info.started_at).total_seconds())
    elif running and info.started_at:
        took = duration((now - info.started_at).total_seconds())
    else:
        took = ""
    fraction = info.fraction
    pct = None if fraction is None else max(0.0, min(100.0, fraction * 100))
    progress_text = " · ".join(
        p for p in (info.progress or "", "" if pct is None else f"{pct:.0f}%") if p
    )
    view: View = {
        "id": info.id,
        "key": str(info.id),
        "url": f"/jobs/{info.id}",
        "name": info.name,
        "queue": info.queue,
        "state": "undecodable" if info.undecodable else state,
        "priority": info.priority,
        "attempts": f"{info.attempts}/{info.max_attempts}",
        "args_preview": preview(info.args),
        "result_preview": "" if info.result is None else preview(info.result),
        "error_line": first_line(info.undecodable or info.error),
        "error_title": cut(info.error, ERROR_TITLE_CHARS),
        "progress": progress_text or ("running" if running else ""),
        "pct": "" if pct is None else f"{pct:.1f}",
        "indeterminate": "1" if running and pct is None else "",
        "is_running": "1" if running else "",
        "pid": "" if pid is None else str(pid),
        "took": took,
        "run_at": relative(info.run_at, now),
        "run_at_iso": iso(info.run_at),
        "created": relative(info.created_at, now),
        "created_iso": iso(info.created_at),
        "started": relative(info.started_at, now),
        "started_iso": iso(info.started_at),
        "finished": relative(info.finished_at, now),
        "finished_iso": iso(info.finished_at),
        "deadline": relative(info.deadline_at, now),
        "deadline_iso": iso(info.deadline_at),
        "owner": owner(info.owner) if running else "",
        "orphaned": "1" if info.orphaned else "",
        "can_cancel": "1" if state in (JobState.BLOCKED, JobState.PENDING, *HELD_STATES) else "",
        "can_retry": "1" if state in (JobState.FAILED, JobState.CANCELLED) else "",
        "cancel_url": f"/api/jobs/{info.id}/cancel",
        "retry_url": f"/api/jobs/{info.id}/retry",
    }
    if full:
        view.update(
            {
                "args_json": to_json_text(info.args, indent=2),
                "result_json": "" if info.result is None else to_json_text(info.result, indent=2),
                "error": cut(info.error, ERROR_PAGE_CHARS),
                "job_key": info.key or "",
                "serial_key": info.serial_key or "",
                "tags": ", ".join(info.tags),
                "list_url": f"/{state}",
                "history": [attempt_view(h, n) for n, h in enumerate(info.history)],
                "no_history": "" if info.history else "1",
            }
        )
    return view


def owner(text: str | None) -> str:
    """``host:pid`` of a supervisor's owner string."""
    host, pid = models.owner_parts(text)
    if host is None:
        return ""
    return host if pid is None else f"{host}:{pid}"


def attempt_view(h: models.AttemptInfo, n: int) -> View:
    """One row of a job's attempt history."""
    return {
        "key": str(n),
        "attempt": f"#{h.attempt}",
        "outcome": h.outcome,
        "where": f"{h.host or '?'}:{h.supervisor_pid or '?'}",
        "child_pid": "" if h.child_pid is None else str(h.child_pid),
        "started_iso": iso(h.started_at),
        "ended_iso": iso(h.ended_at),
        "took": duration(h.seconds),
        "exit_reason": h.exit_reason or "",
        "peak_memory": "" if h.peak_memory is None else f"{h.peak_memory:.0f} MB",
        "error": cut(h.error, ERROR_PAGE_CHARS),
    }


def supervisor_view(s: models.SupervisorInfo, now: dt.datetime) -> View:
    queues = "all" if s.queues is None else ", ".join(s.queues)
    return {
        "key": s.owner,
        "host": s.host,
        "pid": str(s.pid),
        "spec": s.spec,
        "queues": queues,
        "limits": ", ".join(f"{k}={v}" for k, v in sorted(s.limits.items())),
        "busy": f"{s.busy}/{s.workers}",
        "version": s.version,
        "started": relative(s.started_at, now),
        "started_iso": iso(s.started_at),
        "last_seen": relative(s.last_seen, now),
        "last_seen_iso": iso(s.last_seen),
        "status": "alive" if s.alive else "stale",
    }


# -- queues ------------------------------------------------------------------


def queue_view(q: QueueInfo) -> View:
    return {
        "key": q.name,
        "name": q.name,
        "url": f"/pending?{urlencode({'queue': q.name})}",
        **{s: getattr(q, s) for s in STATES},
        **{f"url_{s}": f"/{s}?{urlencode({'queue': q.name})}" for s in STATES},
        "limit": "" if q.limit is None else str(q.limit),
        "limit_by": "" if q.limit_by is None else f"{q.limit_by}, {iso(q.limit_at)}".strip(", "),
        "rate": "" if q.rate is None else q.rate,
        "rate_used": "" if q.rate is None else f"{q.rate_used} in window",
        "paused": "1" if q.paused else "",
        "active": "" if q.paused else "1",
        "status": "paused" if q.paused else "active",
        "oldest": duration(q.oldest_pending_age),
        "pause_url": f"/api/queues/{quote(q.name, safe='')}/pause",
        "resume_url": f"/api/queues/{quote(q.name, safe='')}/resume",
    }


def totals(queues: Iterable[QueueInfo]) -> View:
    """Counts per state over every queue, as ``n_<state>`` (for the nav tabs)."""
    qs = list(queues)
    return {f"n_{s}": sum(getattr(q, s) for q in qs) for s in STATES}


# -- throughput --------------------------------------------------------------


def throughput(counts: Throughput) -> View:
    """Done and failed jobs per minute, with bar geometry, and the rate over
    the last 60 s.

    The chart is a 100x40 SVG viewBox; bars are stacked (done below failed).
    """
    minutes = len(counts.done)
    start = dt.datetime.fromtimestamp(counts.first_minute * 60, tz=dt.UTC)
    done, failed = counts.done, counts.failed
    top = max([d + f for d, f in zip(done, failed, strict=True)] + [1])
    width, height, gap = 100 / minutes, 40.0, 0.6
    bars = []
    for i in range(minutes):
        label = (start + dt.timedelta(minutes=i)).strftime("%H:%M")
        h_done = height * done[i] / top
        h_failed = height * failed[i] / top
        bars.append(
            {
                "x": f"{i * width + gap / 2:.2f}",
                "w": f"{width - gap:.2f}",
                "y_done": f"{height - h_done:.2f}",
                "h_done": f"{h_done:.2f}",
                "y_failed": f"{height - h_done - h_failed:.2f}",
                "h_failed": f"{h_failed:.2f}",
                "title": f"{label} UTC: {done[i]} done, {failed[i]} failed",
            }
        )
    return {
        "bars": bars,
        "total_done": sum(done),
        "total_failed": sum(failed),
        "peak": max(done[i] + failed[i] for i in range(minutes)),
        "rate_now": f"{counts.last_60s / RATE_WINDOW.total_seconds():.1f}",
        "from_label": start.strftime("%H:%M"),
        "to_label": (start + dt.timedelta(minutes=minutes - 1)).strftime("%H:%M"),
    }


class Cached:
    """A value recomputed at most every `ttl` seconds (shared by all requests)."""

    def __init__(self, compute: Callable[[], View], ttl: float) -> None:
        self._compute = compute
        self._ttl = ttl
        self._lock = threading.Lock()
        self._value: View | None = None
        self._at = 0.0

    def get(self) -> View:
        with self._lock:
            if self._value is None or time.monotonic() - self._at >= self._ttl:
                self._value = self._compute()
                self._at = time.monotonic()
            return self._value
