"""Numbers as the page prints them: a value, and a median with its range over the repetitions."""

from __future__ import annotations

from typing import Any


def fmt(v: float | None, digits: int = 0) -> str:
    if v is None or v != v:
        return "-"
    return f"{v:,.{digits}f}"


def cell(summary: dict[str, Any], workload: str, system: str, key: str, digits: int = 0) -> str:
    """`median [min-max]`, with a dagger when a run of it did not finish (see the notes)."""
    per = summary["per_system"].get(workload, {}).get(system, {})
    entry = per.get(key)
    cut = any(st not in ("ok", None) for st in per.get("statuses", []))
    mark = " †" if cut else ""
    if not entry:
        return "-" + mark
    if entry["n"] == 1 or fmt(entry["min"], digits) == fmt(entry["max"], digits):
        return fmt(entry["median"], digits) + mark
    return (
        f"{fmt(entry['median'], digits)} "
        f"<sub>[{fmt(entry['min'], digits)}-{fmt(entry['max'], digits)}]</sub>{mark}"
    )
