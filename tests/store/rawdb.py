"""Direct SQL on a store's database, beside the store: to corrupt rows the
store wrote and to look at the schema it made."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
from psycopg import sql

from procqueue.store.postgres import split_dsn


def sqlite_path(dsn: str) -> str:
    """The file of a ``sqlite:///`` DSN, as `open_store` reads it."""
    path = dsn[len("sqlite://") :]
    return path[1:] if path.startswith("/") else path


class RawDb:
    """An autocommit connection to the database of `dsn` (for PostgreSQL,
    with search_path set to the DSN's schema).

    Statements use ``?`` placeholders on both backends.
    """

    def __init__(self, dsn: str) -> None:
        self.backend = "sqlite" if dsn.startswith("sqlite:") else "postgres"
        self._sqlite: sqlite3.Connection | None = None
        self._pg: psycopg.Connection[Any] | None = None
        if self.backend == "sqlite":
            self._sqlite = sqlite3.connect(sqlite_path(dsn), isolation_level=None)
        else:
            conninfo, self.schema = split_dsn(dsn)
            self._pg = psycopg.connect(conninfo, autocommit=True)
            self._pg.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))

    def execute(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Runs `statement`; its rows (none for a statement without)."""
        if self._sqlite is not None:
            return self._sqlite.execute(statement, params).fetchall()
        assert self._pg is not None
        cursor = self._pg.execute(statement.replace("?", "%s"), params)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description is not None else []

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
        if self._pg is not None:
            self._pg.close()
