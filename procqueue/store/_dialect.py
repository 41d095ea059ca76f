"""The seam between the one SQL store (`_sql.SqlStore`) and a backend.

A backend supplies a `Dialect`: connections and transactions (`Tx`), how a
list is passed as a parameter, the type JSON columns come back as, its
wake-up mechanism, and what migrating needs. Everything else is written
once, in `_sql`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple, Protocol


class Cursor(Protocol):
    """The result of one statement (a `sqlite3.Cursor` or a psycopg cursor)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Result(NamedTuple):
    """What a statement run on its own returned."""

    rows: list[Any]
    rowcount: int


class Tx(Protocol):
    """One open transaction of a dialect."""

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> Cursor:
        """Runs the named query."""
        ...

    def execute_each(self, name: str, params: Sequence[Mapping[str, Any]]) -> list[Any]:
        """Runs the named query once per parameter set (batched where the
        backend can); the first returned row of each run, or None."""
        ...

    def pipeline(self, what: str) -> AbstractContextManager[None]:
        """Statements run inside may be sent together: their cursors are
        read only after the block; errors name `what`."""
        ...

    def lock(self, purpose: str) -> None:
        """Holds, until the transaction ends, the lock that serializes
        `purpose` (``claim`` or ``migrate``) across every store on the database.
        (SQLite: nothing to take, the transaction holds the file's write lock.)"""
        ...

    def notify(self) -> None:
        """Wakes every waiting supervisor once this transaction commits (never on rollback)."""
        ...

    def plan_once(self) -> None:
        """Until the transaction ends, the statements run here are planned once
        per connection, not at every run: for statements run often and driven
        by an index whatever their parameters. (SQLite: nothing to do; its
        statements are compiled once per connection.)"""
        ...

    def script(self, version: int, text: str) -> None:
        """Runs migration `version`, the static text of its file."""
        ...


class Dialect(Protocol):
    """What a backend supplies to `SqlStore`."""

    backend: str
    where: str
    """The database, for messages (never a password)."""

    @property
    def json_type(self) -> type[str] | type[bytes]:
        """The Python type JSON columns come back as."""
        ...

    def transaction(self, *, connection: object | None = None) -> AbstractContextManager[Tx]:
        """A transaction, committed if the block returns and rolled back if it
        raises; with `connection` (PostgreSQL), part of the caller's own.

        Raises:
            errors.StoreError: the database failed (StoreRejected: it refused a value).
            errors.EnqueueError: `connection` is not usable here.
        """
        ...

    def statement(
        self, name: str, params: Mapping[str, Any], *, idempotent: bool = False
    ) -> Result:
        """Runs one statement in a transaction of its own. An `idempotent` one
        may be run again on a fresh connection after a connection failure."""
        ...

    def array(self, values: Sequence[str | int]) -> object:
        """`values` as one parameter (a JSON array on SQLite, an array on PostgreSQL)."""
        ...

    def prepare_migration(self, tx: Tx) -> None:
        """Readies `tx` to migrate: takes whatever serializes migrations
        across processes, and creates what holds the tables, if anything."""
        ...

    def wake_fileno(self) -> int | None: ...

    def wake_drain(self) -> bool: ...

    def close(self) -> None: ...
