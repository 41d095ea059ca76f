"""docs/benchmarks.md from a result: each section rendered by its own function, in page order."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchkit.report.alone import (
    backlog,
    children,
    cluster,
    cost,
    fresh_child,
    long_jobs,
    pending,
    profile,
    prune,
    scale,
    scaling_chart,
    storm,
)
from benchkit.report.method import (
    configurations,
    how_measured,
    not_measured,
    reproducing,
    systems_table,
    versions,
)
from benchkit.report.shared import (
    cost_per_job,
    cpu_heavy,
    crashy,
    failed_runs,
    goals,
    header,
    ratios,
    results,
)

Section = Callable[[dict[str, Any], list[Path], Path], list[str]]


def alone_heading(result: dict[str, Any], charts: list[Path], md_dir: Path) -> list[str]:
    """The heading over the procqueue-only parts."""
    return ["## procqueue alone\n"]


SECTIONS: tuple[Section, ...] = (
    header,
    goals,
    results,
    ratios,
    cost_per_job,
    cpu_heavy,
    crashy,
    failed_runs,
    alone_heading,
    cost,
    scale,
    prune,
    cluster,
    children,
    backlog,
    scaling_chart,
    pending,
    storm,
    long_jobs,
    fresh_child,
    profile,
    not_measured,
    how_measured,
    systems_table,
    configurations,
    versions,
    reproducing,
)


def render_markdown(result: dict[str, Any], charts: list[Path], md_dir: Path) -> str:
    """The page, section after section; chart links are relative to md_dir."""
    return "\n".join(line for section in SECTIONS for line in section(result, charts, md_dir))
