"""Fixtures shared by every test: one `dsn` fixture parametrized over both
backends, each test getting a fresh SQLite file or a fresh PostgreSQL schema."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest

PG_URL = os.environ.get("PROCQUEUE_TEST_PG", "postgresql://127.0.0.1:5432/test")


def _postgres_answers() -> str | None:
    try:
        with psycopg.connect(PG_URL, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


@pytest.fixture(scope="session")
def pg_available() -> None:
    reason = _postgres_answers()
    if reason is None:
        return
    if os.environ.get("PROCQUEUE_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL required but not reachable at {PG_URL}: {reason}")
    pytest.skip(f"no PostgreSQL at {PG_URL}: {reason}")


def make_pg_dsn() -> tuple[str, str]:
    """A DSN naming a fresh, not yet created schema, and that schema's name."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    return f"{PG_URL}?schema={schema}", schema


def drop_pg_schema(schema: str) -> None:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgres"])
def dsn(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[str]:
    """A DSN of an empty database on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/queue.db"
        return
    request.getfixturevalue("pg_available")
    url, schema = make_pg_dsn()
    try:
        yield url
    finally:
        drop_pg_schema(schema)
