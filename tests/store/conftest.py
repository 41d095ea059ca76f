"""Fixtures of the storage tests: a migrated store on each backend, direct
SQL beside it, and a fresh PostgreSQL schema."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from procqueue.store import open_store
from procqueue.store.base import Store
from tests.conftest import drop_pg_schema, make_pg_dsn
from tests.store.factories import BASE
from tests.store.rawdb import RawDb


@pytest.fixture
def store(dsn: str) -> Iterator[Store]:
    """A migrated store on `dsn` (each backend in turn)."""
    s = open_store(dsn)
    s.migrate(now=BASE)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def raw(dsn: str, store: Store) -> Iterator[RawDb]:
    """Direct SQL on `store`'s database."""
    db = RawDb(dsn)
    try:
        yield db
    finally:
        db.close()


@pytest.fixture
def pg(pg_available: None) -> Iterator[tuple[str, str]]:
    """A DSN naming a fresh PostgreSQL schema, and the schema; dropped afterwards."""
    url, schema = make_pg_dsn()
    try:
        yield url, schema
    finally:
        drop_pg_schema(schema)
