"""The embedded backend: one SQLite file in WAL mode.

Every transaction is ``BEGIN IMMEDIATE``, which takes the file's one write
lock first, so the running counts that limits and serial keys are checked
against cannot change under a claim; any number of supervisors on one
machine may share the file. Supervisors are woken through datagram
sockets beside the file (`_wake.WakeDir`), after the commit.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgspec

from procqueue import errors
from procqueue.store import _dialect, _queries, _sql, _wake

_Q = _queries.load("sqlite")

BUSY_TIMEOUT_DEFAULT = 5.0
"""Seconds a call waits for another connection's write lock before it fails
with `errors.StoreError`. Every call is bounded (DESIGN.md section 3): a
supervisor must notice a file held by another process and carry on (its
database guard retries with backoff) rather than hang in the store; a
claim or an enqueue normally holds the lock for milliseconds."""

# Text that is not UTF-8 (a corrupted row) is read with U+FFFD in place of
# the bad bytes: with the default factory, fetching such a row raises.
_TEXT_FACTORY = functools.partial(str, encoding="utf-8", errors="replace")


class _Tx:
    """One ``BEGIN IMMEDIATE`` transaction on the store's connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.wake = False

    def execute(self, name: str, params: Mapping[str, Any] | None = None) -> sqlite3.Cursor:
        return self._db.execute(_Q[name], params or {})

    def execute_each(self, name: str, params: Sequence[Mapping[str, Any]]) -> list[Any]:
        return [self._db.execute(_Q[name], p).fetchone() for p in params]

    def pipeline(self, what: str) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()  # one process, no round trips to save

    def lock(self, purpose: str) -> None:
        """Nothing to take: ``BEGIN IMMEDIATE`` already holds the file's write lock."""

    def notify(self) -> None:
        self.wake = True  # sent by the dialect once the commit succeeded

    def plan_once(self) -> None:
        pass  # statements are compiled once per connection (the sqlite3 module's cache)

    def script(self, version: int, text: str) -> None:
        # Migration files hold no ';' except between statements.
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        for statement in code.split(";"):
            if statement.strip():
                self._db.execute(statement)


class SqliteDialect:
    """One connection to a SQLite file, shared by threads under one lock."""

    backend = "sqlite"
    json_type = str

    def __init__(self, path: str, *, busy_timeout: float, create: bool = True) -> None:
        self.path = path
        self.where = f"SQLite {path}"
        if not create and not os.path.isfile(path):
            raise errors.StoreError(
                f"no SQLite database at {path!r} (procqueue migrate creates one; check the DSN)"
            )
        try:
            self._db = sqlite3.connect(
                path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
            self._db.row_factory = sqlite3.Row
            self._db.text_factory = _TEXT_FACTORY
            self._enable_wal(busy_timeout)
            # WAL + NORMAL survives any process crash; only an OS crash may
            # lose the last transactions. Checkpoints every ~40 MB of WAL
            # rather than 4 MB: the hot pages (claim index, running rows) are
            # rewritten once per checkpoint, so rarer ones cost less per job.
            self._db.executescript(_Q["sqlite_tuning"])
        except sqlite3.Error as exc:
            raise errors.StoreError(f"cannot open SQLite database {path!r}: {exc}") from None
        self._lock = threading.RLock()
        self._wake = _wake.WakeDir(path)

    def _enable_wal(self, busy_timeout: float) -> None:
        """Switches to WAL. On a fresh file that others open at the same time,
        SQLite reports "database is locked" at once instead of waiting out the
        busy timeout, so that wait is done here."""
        deadline = time.monotonic() + busy_timeout
        while True:
            try:
                self._db.execute(_Q["sqlite_wal"])
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def _error(self, exc: sqlite3.Error) -> errors.StoreError:
        # A constraint or a value SQLite refuses fails the same way every time.
        refused = isinstance(exc, sqlite3.IntegrityError | sqlite3.DataError)
        kind = errors.StoreRejected if refused else errors.StoreError
        return kind(f"SQLite {self.path}: {exc}")

    def _rollback(self) -> None:
        """Rolls back if a transaction is still open: SQLite may already have
        rolled it back itself (SQLITE_FULL), and the original error is the one
        worth reporting."""
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute(_Q["sqlite_rollback"])

    @contextlib.contextmanager
    def transaction(self, *, connection: object | None = None) -> Iterator[_Tx]:
        if connection is not None:
            raise errors.EnqueueError("connection= is only supported with PostgreSQL")
        with self._lock:
            tx = _Tx(self._db)
            try:
                self._db.execute(_Q["sqlite_begin"])
                try:
                    yield tx
                except BaseException:
                    self._rollback()
                    raise
                self._db.execute(_Q["sqlite_commit"])
            except sqlite3.Error as exc:
                self._rollback()
                raise self._error(exc) from None
        if tx.wake:
            self._wake.notify()

    def statement(
        self, name: str, params: Mapping[str, Any], *, idempotent: bool = False
    ) -> _dialect.Result:
        """Runs in autocommit: SQLite makes one statement its own transaction."""
        with self._lock:
            try:
                cursor = self._db.execute(_Q[name], params)
                return _dialect.Result(cursor.fetchall(), cursor.rowcount)
            except sqlite3.Error as exc:
                raise self._error(exc) from None

    def array(self, values: Sequence[str | int]) -> str:
        return msgspec.json.encode(values).decode()  # read back with json_each

    def prepare_migration(self, tx: _dialect.Tx) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already serializes migrations,
        and the file holds the tables."""

    def wake_fileno(self) -> int | None:
        return self._wake.listen()

    def wake_drain(self) -> bool:
        return self._wake.drain()

    def close(self) -> None:
        with self._lock:
            self._wake.close()
            self._db.close()


class SqliteStore(_sql.SqlStore):
    """A `Store` on one SQLite file. Safe to share between threads.

    Args:
        path: the database file (created if missing).
        busy_timeout: seconds a call waits for another connection's write
            lock before it fails with StoreError.
    """

    def __init__(
        self, path: str, *, busy_timeout: float = BUSY_TIMEOUT_DEFAULT, create: bool = True
    ) -> None:
        self.path = path
        super().__init__(SqliteDialect(path, busy_timeout=busy_timeout, create=create))
