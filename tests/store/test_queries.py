"""The named SQL of both backends stays in step: the same query names (bar
backend-only ``pg_*`` and ``sqlite_*`` ones), the same parameter names, and
every query used by some store module."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from procqueue.store import _queries
from procqueue.store.base import SCHEMA_VERSION

_STORE_DIR = Path(str(resources.files("procqueue.store")))
_PG_FILE = _STORE_DIR / "sql" / "postgres" / "queries.sql"

_STRING_LITERAL = re.compile(r"'(?:[^']|'')*'")
_SQLITE_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_PG_PARAM = re.compile(r"%\(([A-Za-z_]\w*)\)s")


def _without_literals(sql: str) -> str:
    return _STRING_LITERAL.sub("''", sql)


def sqlite_params(sql: str) -> set[str]:
    return set(_SQLITE_PARAM.findall(_without_literals(sql)))


def pg_params(sql: str) -> set[str]:
    return set(_PG_PARAM.findall(_without_literals(sql)))


@pytest.fixture(scope="module")
def sqlite_queries() -> dict[str, str]:
    return _queries.load("sqlite")


@pytest.fixture(scope="module")
def pg_queries() -> dict[str, str]:
    if not _PG_FILE.exists():
        pytest.skip("sql/postgres/queries.sql does not exist yet")
    return _queries.load("postgres")


def test_param_extractors() -> None:
    sql = "SELECT ':not' , a::text FROM t WHERE x = :one AND y IN (:two_2) AND z = ':three'"
    assert sqlite_params(sql) == {"one", "two_2"}
    pg = "SELECT '%(not)s', a::text, '100%%' FROM t WHERE x = %(one)s AND y = %(two_2)s"
    assert pg_params(pg) == {"one", "two_2"}


def test_sqlite_defines_queries_with_bodies(sqlite_queries: dict[str, str]) -> None:
    assert sqlite_queries
    assert all(body.strip() for body in sqlite_queries.values())
    assert not [name for name in sqlite_queries if name.startswith("pg_")]


def test_postgres_defines_no_sqlite_only_queries(pg_queries: dict[str, str]) -> None:
    assert not [name for name in pg_queries if name.startswith("sqlite_")]


def test_backends_define_the_same_query_names(
    sqlite_queries: dict[str, str], pg_queries: dict[str, str]
) -> None:
    shared_pg = {name for name in pg_queries if not name.startswith("pg_")}
    shared_sqlite = {name for name in sqlite_queries if not name.startswith("sqlite_")}
    assert sorted(shared_sqlite - shared_pg) == [], "missing from postgres"
    assert sorted(shared_pg - shared_sqlite) == [], "missing from sqlite"


def test_shared_queries_use_the_same_parameter_names(
    sqlite_queries: dict[str, str], pg_queries: dict[str, str]
) -> None:
    differ = {
        name: (sorted(sqlite_params(sql)), sorted(pg_params(pg_queries[name])))
        for name, sql in sqlite_queries.items()
        if name in pg_queries and sqlite_params(sql) != pg_params(pg_queries[name])
    }
    assert differ == {}, "query: (sqlite params, postgres params)"


def test_sqlite_queries_use_no_postgres_placeholders(sqlite_queries: dict[str, str]) -> None:
    assert {name: sql for name, sql in sqlite_queries.items() if pg_params(sql)} == {}


def test_postgres_queries_use_no_sqlite_placeholders(pg_queries: dict[str, str]) -> None:
    assert {name: sql for name, sql in pg_queries.items() if sqlite_params(sql)} == {}


def _store_sources() -> str:
    return "\n".join(p.read_text() for p in sorted(_STORE_DIR.glob("*.py")))


def _referenced(name: str, sources: str) -> bool:
    return re.search(rf"""["']{re.escape(name)}["']""", sources) is not None


def test_every_sqlite_query_is_referenced(sqlite_queries: dict[str, str]) -> None:
    sources = _store_sources()
    assert [name for name in sqlite_queries if not _referenced(name, sources)] == []


def test_every_shared_query_is_referenced(
    sqlite_queries: dict[str, str], pg_queries: dict[str, str]
) -> None:
    sources = _store_sources()
    shared = sorted(set(sqlite_queries) & set(pg_queries))
    assert [name for name in shared if not _referenced(name, sources)] == []


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_migrations_are_numbered_up_to_the_schema_version(backend: str) -> None:
    if backend == "postgres" and not _PG_FILE.exists():
        pytest.skip("the postgres backend's SQL does not exist yet")
    versions = [version for version, _ in _queries.migrations(backend)]
    assert versions == list(range(1, SCHEMA_VERSION + 1))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_parts_are_put_in_place_and_not_queries_of_their_own(backend: str) -> None:
    queries = _queries.load(backend)
    assert not [name for name in queries if name.startswith("_")]
    assert not [name for name, sql in queries.items() if "<<" in sql]
    # the two claim reads filter due work with the same text
    filters = "AND queue NOT IN (SELECT name FROM queues WHERE paused"
    assert filters in queries["job_candidates"] and filters in queries["job_group_heads"]
