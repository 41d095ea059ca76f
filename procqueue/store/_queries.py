"""Named SQL, one file per backend.

``queries.sql`` holds blocks headed ``-- query_name --`` followed by
``-- description`` lines and the statement. Both backends define the same
names with the same parameter names (a test checks it); runtime code never
builds SQL by formatting strings.

A block whose name starts with ``_`` is a part, not a query: a line
``<<_name>>`` in a later block stands for its text, so that text shared
by two queries (the filters of the two claim reads) is written once. The
parts are joined when the file is loaded, never at run time.
"""

from __future__ import annotations

import re
from importlib import resources

from procqueue import errors

SCHEMA_VERSION = 10
"""The schema version this code writes and reads: the number of the last
migration of each backend (a test checks both end there)."""

_HEADER = re.compile(r"^-- ([a-z0-9_]+) --$", re.MULTILINE)
_PART = re.compile(r"^<<(_[a-z0-9_]+)>>$")


def load(backend: str) -> dict[str, str]:
    """Every named query of `backend`, description lines stripped and parts
    put in their places (the parts themselves are not returned)."""
    text = resources.files("procqueue.store").joinpath(f"sql/{backend}/queries.sql").read_text()
    pieces = _HEADER.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(pieces[1::2], pieces[2::2], strict=True):
        lines = []
        for line in body.strip("\n").splitlines():
            if line.startswith("--"):
                continue
            part = _PART.match(line)
            if part is not None and part.group(1) not in blocks:
                raise errors.ConfigError(f"query {name!r} uses {part.group(1)!r} before it")
            lines.append(line if part is None else blocks[part.group(1)])
        if name in blocks:
            raise errors.ConfigError(f"query {name!r} is defined twice for {backend}")
        blocks[name] = "\n".join(lines).strip("\n").rstrip()
    return {name: sql for name, sql in blocks.items() if not name.startswith("_")}


def migrations(backend: str) -> list[tuple[int, str]]:
    """`(version, script)` for each ``migrations/NNNN_name.sql``, in order."""
    folder = resources.files("procqueue.store").joinpath(f"sql/{backend}/migrations")
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_[a-z0-9_]+\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text()))
    return sorted(found)
