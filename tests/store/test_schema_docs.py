"""docs/postgres.md names every table the PostgreSQL migrations create."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "procqueue" / "store" / "sql" / "postgres" / "migrations"


def test_postgres_md_lists_every_table() -> None:
    tables = {"procqueue_schema"}  # made by the migrator itself
    for migration in MIGRATIONS.glob("*.sql"):
        tables |= set(re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", migration.read_text()))
    assert len(tables) >= 8
    doc = (ROOT / "docs" / "postgres.md").read_text()
    listed = doc[doc.index("Tables: ") : doc.index("Times are")]
    assert {t for t in tables if f"`{t}`" not in listed} == set()
