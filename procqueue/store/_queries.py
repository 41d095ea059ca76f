"""Named SQL, one file per backend.

``queries.sql`` holds blocks headed ``-- query_name --`` followed by
``-- description`` lines and the statement. Both backends define the same
names with the same parameter names (a test checks it); runtime code never
builds SQL by formatting strings.
"""

from __future__ import annotations

import re
from importlib import resources

from procqueue import errors

SCHEMA_VERSION = 10
"""The schema version this code writes and reads: the number of the last
migration of each backend (a test checks both end there)."""

_HEADER = re.compile(r"^-- ([a-z0-9_]+) --$", re.MULTILINE)


def load(backend: str) -> dict[str, str]:
    """Every named query of `backend`, description lines stripped."""
    text = resources.files("procqueue.store").joinpath(f"sql/{backend}/queries.sql").read_text()
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
        if name in queries:
            raise errors.ConfigError(f"query {name!r} is defined twice for {backend}")
        queries[name] = "\n".join(lines).strip()
    return queries


def migrations(backend: str) -> list[tuple[int, str]]:
    """`(version, script)` for each ``migrations/NNNN_name.sql``, in order."""
    folder = resources.files("procqueue.store").joinpath(f"sql/{backend}/migrations")
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_[a-z0-9_]+\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text()))
    return sorted(found)
