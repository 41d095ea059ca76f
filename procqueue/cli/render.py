"""Text the command line reads and prints: option values, tables, job records,
ages and times.

Pure functions of the records; no I/O. JSON output goes through msgspec so
that times are ISO 8601 UTC exactly as the records hold them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from procqueue import models
from procqueue.models import printable

JOB_FIELDS = tuple(models.JobInfo.__struct_fields__)
"""The fields of a job record (DESIGN.md section 5), in order."""

STATS_FIELDS = (
    "blocked",
    "pending",
    "reserved",
    "running",
    "done",
    "failed",
    "cancelled",
    "oldest_pending_age",
    "limit",
    "paused",
)
"""The keys of one queue in ``procqueue stats --json``, in order."""


def when(value: dt.datetime | None) -> str:
    """`value` as ISO 8601 UTC to the second (``2024-05-01T12:00:00Z``), or ``-``."""
    if value is None:
        return "-"
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def age(seconds: float | None) -> str:
    """A duration for people: ``0.4s``, ``12s``, ``3m05s``, ``2h03m``, ``4d02h``, or ``-``."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def progress(info: models.JobInfo) -> str:
    """``50% decoding``, ``50%``, ``decoding`` or ``-``."""
    parts = []
    if info.fraction is not None:
        parts.append(f"{info.fraction * 100:.0f}%")
    if info.progress:
        parts.append(info.progress)
    return " ".join(parts) or "-"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns aligned on the widest cell; no trailing spaces."""
    cells = [[str(h).upper() for h in headers]]
    cells += [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return printable(" ".join(str(value).split()))  # one line per row, whatever the value holds


JOB_HEADERS = ("id", "name", "queue", "state", "attempts", "progress", "created")


CRON_HEADERS = ("job", "expression", "timezone", "queue", "next")


def moment(value: dt.datetime) -> str:
    """`value` to the second in its own offset: ``...T12:00:00Z`` in UTC,
    ``...T14:00:00+02:00`` elsewhere."""
    text = value.replace(microsecond=0).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


ERROR_COLUMN_CHARS = 60


def job_headers(state: str | None) -> tuple[str, ...]:
    """JOB_HEADERS, plus the error of failed jobs or the owner of held ones."""
    if state == "failed":
        return (*JOB_HEADERS, "error")
    if state in ("reserved", "running"):
        return (*JOB_HEADERS, "owner")
    return JOB_HEADERS


def job_row(info: models.JobInfo, state: str | None = None) -> list[object]:
    shown = "undecodable" if info.undecodable else info.state.value
    if info.orphaned:
        shown += " (orphaned)"
    row: list[object] = [
        info.id,
        info.name,
        info.queue,
        shown,
        f"{info.attempts}/{info.max_attempts}",
        progress(info),
        when(info.created_at),
    ]
    if state == "failed":
        row.append(first_line(info.error, ERROR_COLUMN_CHARS))
    elif state in ("reserved", "running"):
        row.append(owner(info.owner))
    return row


def first_line(text: str | None, limit: int) -> str:
    """The first non-empty line of `text`, cut to `limit` characters (``-`` if none)."""
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    if not line:
        return "-"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def owner(text: str | None) -> str:
    """``host:pid`` of a supervisor's owner string (its token left out)."""
    host, pid = models.owner_parts(text)
    if host is None:
        return "-"
    return host if pid is None else f"{host}:{pid}"


def history_lines(history: Sequence[models.AttemptInfo]) -> list[str]:
    """One line per attempt (then its error, indented): what ``show`` prints."""
    lines = []
    for h in history:
        host = printable(h.host or "?")
        parts = [f"#{h.attempt}", printable(h.outcome), f"on {host}:{h.supervisor_pid or '?'}"]
        if h.child_pid is not None:
            parts.append(f"child {h.child_pid}")
        parts.append(f"started {when(h.started_at)}" if h.started_at else "never started")
        if h.seconds is not None:
            parts.append(f"ran {age(h.seconds)}")
        parts.append(f"ended {when(h.ended_at)}")
        if h.exit_reason:
            parts.append(f"exit: {printable(h.exit_reason)}")
        if h.peak_memory is not None:
            parts.append(f"peak {h.peak_memory:.0f} MB")
        lines.append("  ".join(parts))
        lines += ["    " + printable(line) for line in (h.error or "").splitlines()]
    return lines


def job_detail(info: models.JobInfo) -> str:
    """Every field of the record, one per line; multi-line values indented."""
    width = max(len(f) for f in JOB_FIELDS) + 1
    lines = []
    for field in JOB_FIELDS:
        if field == "history":
            continue  # last, as a list
        value = getattr(info, field)
        text = _detail_value(field, value).replace("\n", "\n" + " " * (width + 1))
        lines.append(f"{field + ':':<{width}} {text}")
    attempts = history_lines(info.history)
    lines.append(f"{'history:':<{width}} {'-' if not attempts else ''}".rstrip())
    lines += ["  " + line for line in attempts]
    return "\n".join(lines)


def _detail_value(field: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if field in ("args", "result", "tags"):
        return printable(msgspec.json.encode(value).decode())
    return printable(str(value), lines=field in MULTI_LINE_FIELDS)


MULTI_LINE_FIELDS = frozenset({"error"})
"""Fields `show` prints on several lines; every other one stays on its own."""


def job_json(info: models.JobInfo) -> str:
    return msgspec.json.encode(info).decode()


def stats_document(queues: Iterable[models.QueueInfo]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"queues": {NAME: {"pending": ..., ..., "paused": ...}}}``."""
    return {"queues": {q.name: {f: getattr(q, f) for f in STATS_FIELDS} for q in queues}}


STATS_TABLE = STATS_FIELDS[: STATS_FIELDS.index("oldest_pending_age") + 1]
"""The columns of ``procqueue stats`` after the queue's name."""

STATS_HEADERS = ("queue", *(f.removesuffix("_age").replace("_", " ") for f in STATS_TABLE))


def stats_row(q: models.QueueInfo) -> list[object]:
    """One line of ``procqueue stats``, in the order of `STATS_HEADERS`."""
    cells: list[object] = [getattr(q, f) for f in STATS_TABLE]
    cells[-1] = age(q.oldest_pending_age)
    return [q.name, *cells]


QUEUE_HEADERS = (
    "queue",
    "limit",
    "limit set by",
    "rate",
    "paused",
    "pending",
    "reserved",
    "running",
    "oldest pending",
    "done",
    "failed",
    "cancelled",
)


def queue_row(q: models.QueueInfo) -> list[object]:
    limit = "none" if q.limit is None else q.limit
    by = "-" if q.limit_by is None else f"{q.limit_by} {when(q.limit_at)}"
    return [
        q.name,
        limit,
        by,
        "none" if q.rate is None else f"{q.rate} ({q.rate_used} in window)",
        q.paused,
        q.pending,
        q.reserved,
        q.running,
        age(q.oldest_pending_age),
        q.done,
        q.failed,
        q.cancelled,
    ]


SUPERVISOR_HEADERS = (
    "host",
    "pid",
    "app",
    "queues",
    "busy",
    "version",
    "started",
    "last seen",
    "state",
)


def supervisor_row(s: models.SupervisorInfo, now: dt.datetime) -> list[object]:
    queues = "all" if s.queues is None else ",".join(s.queues)
    if s.limits:
        queues += " (" + ",".join(f"{k}={v}" for k, v in sorted(s.limits.items())) + ")"
    seen = age(max(0.0, (now - s.last_seen).total_seconds())) + " ago"
    return [
        s.host,
        s.pid,
        s.spec,
        queues,
        f"{s.busy}/{s.workers}",
        s.version,
        when(s.started_at),
        seen,
        "alive" if s.alive else "stale",
    ]


def since(text: str, now: float) -> dt.datetime:
    """``--since``: an ISO 8601 time (UTC if no offset) or a duration back
    from `now`: ``90s``, ``30m``, ``2h``, ``1d``."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text and text[-1] in units:
        try:
            back = float(text[:-1]) * units[text[-1]]
        except ValueError:
            back = -1.0
        if math.isfinite(back) and back >= 0:
            return dt.datetime.fromtimestamp(now - back, tz=dt.UTC)
    try:
        moment_ = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--since takes a time (2024-05-01T12:00:00Z) or a duration (30m, 2h, 1d), got {text!r}"
        ) from None
    return moment_ if moment_.tzinfo else moment_.replace(tzinfo=dt.UTC)


# -- values read from the command line (argparse types) ---------------------


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def id_list(text: str) -> list[int]:
    """``12,13`` as job ids."""
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of job ids: {text!r}") from None
    if not ids or any(i < 1 for i in ids):
        raise argparse.ArgumentTypeError(f"not a list of job ids: {text!r}")
    return ids


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port 1-65535, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = non_negative(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def queue_limit(text: str) -> tuple[str, int]:
    name, sep, limit = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=LIMIT, got {text!r}")
    return name, positive_int(limit)


def queue_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected queue names separated by commas: {text!r}")
    return names
