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

JOB_FIELDS = tuple(models.JobInfo.__struct_fields__)
"""The fields of a job record (DESIGN.md section 5), in order."""

STATS_FIELDS = (
    "pending",
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
    return " ".join(str(value).split())  # one line per row, whatever the value holds


JOB_HEADERS = ("id", "name", "queue", "state", "attempts", "progress", "created")


CRON_HEADERS = ("job", "expression", "timezone", "queue", "next")


def moment(value: dt.datetime) -> str:
    """`value` to the second in its own offset: ``...T12:00:00Z`` in UTC,
    ``...T14:00:00+02:00`` elsewhere."""
    text = value.replace(microsecond=0).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def job_row(info: models.JobInfo) -> list[object]:
    return [
        info.id,
        info.name,
        info.queue,
        "undecodable" if info.undecodable else info.state.value,
        f"{info.attempts}/{info.max_attempts}",
        progress(info),
        when(info.created_at),
    ]


def job_detail(info: models.JobInfo) -> str:
    """Every field of the record, one per line; multi-line values indented."""
    width = max(len(f) for f in JOB_FIELDS) + 1
    lines = []
    for field in JOB_FIELDS:
        value = getattr(info, field)
        text = _detail_value(field, value).replace("\n", "\n" + " " * (width + 1))
        lines.append(f"{field + ':':<{width}} {text}")
    return "\n".join(lines)


def _detail_value(field: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if field in ("args", "result", "tags"):
        return msgspec.json.encode(value).decode()
    return str(value)


def job_json(info: models.JobInfo) -> str:
    return msgspec.json.encode(info).decode()


def stats_document(queues: Iterable[models.QueueInfo]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"queues": {NAME: {"pending": ..., ..., "paused": ...}}}``."""
    return {"queues": {q.name: {f: getattr(q, f) for f in STATS_FIELDS} for q in queues}}


STATS_HEADERS = ("queue", "pending", "running", "done", "failed", "cancelled", "oldest pending")


def stats_row(q: models.QueueInfo) -> list[object]:
    return [
        q.name,
        q.pending,
        q.running,
        q.done,
        q.failed,
        q.cancelled,
        age(q.oldest_pending_age),
    ]


QUEUE_HEADERS = ("queue", "limit", "paused", "pending", "running", "done", "failed", "cancelled")


def queue_row(q: models.QueueInfo) -> list[object]:
    limit = "none" if q.limit is None else q.limit
    return [q.name, limit, q.paused, q.pending, q.running, q.done, q.failed, q.cancelled]


# -- values read from the command line (argparse types) ---------------------


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


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
