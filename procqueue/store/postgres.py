"""The server backend: PostgreSQL through psycopg 3 and a small psycopg-pool.

Everything lives in one schema (``?schema=NAME`` in the DSN, default
``procqueue``): pool connections set ``search_path`` to it, so every
statement in ``sql/postgres/queries.sql`` is static. A claim first takes an
advisory lock derived from the schema name, so queue limits and serial keys
hold across every supervisor on every machine; candidates are read ``FOR
UPDATE SKIP LOCKED``; the outcomes go to the server in one round trip, and
the record rules they call for, the lock and the candidates in the next
(pipeline mode). Supervisors are woken by
``pg_notify`` inside the waking transaction: they hear it on commit, never
on a rollback. Every session runs under `Bounds`. Errors leave the store as
one-line `errors.StoreError`s.
"""

from __future__ import annotations

import hashlib
import logging
import os
import select
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg.types.numeric import Int8Dumper

from procqueue import errors
from procqueue.store import _dialect, _pg_conninfo, _pg_listen, _queries, _sql
from procqueue.store._dsn import describe

__all__ = ["Bounds", "PostgresStore", "split_dsn"]

Bounds = _pg_conninfo.Bounds  # this backend's public names
split_dsn = _pg_conninfo.split_dsn

_Q = _queries.load("postgres")
_POOL_MAX = 4  # a supervisor needs ~2 at once (claim loop, lease renewal); more only queue up
_CHECK_IDLE_S = 1.0

Conn = psycopg.Connection[Any]


class _RawJson(Loader):
    """Loads json/jsonb columns as the server's text bytes; msgspec decodes them."""

    def load(self, data: Buffer) -> bytes:
        return bytes(data)


class _PipelineEndNoise(logging.Filter):
    """Drops psycopg's warning that a pipeline could not be ended after a
    statement in it failed: that statement's own error leaves the store as
    the one report of the lost connection."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("error ignored terminating")


logging.getLogger("psycopg").addFilter(_PipelineEndNoise())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _passing(message: str) -> bool:
    """Whether a failed connection's libpq `message` (which carries no
    SQLSTATE) says the server is away for now: nothing answered, or the
    server answered that it is starting, stopping, recovering or full. A
    FATAL about the login or the database (auth, missing role or database,
    pg_hba) does not pass by waiting."""
    if "FATAL:" not in message:
        return True
    return any(s in message for s in ("the database system is", "too many clients"))


def _lock_key(purpose: str, schema: str) -> int:
    """A fixed advisory-lock key per (purpose, schema): signed 64 bits."""
    digest = hashlib.blake2b(f"procqueue:{purpose}:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _failure(exc: psycopg.Error, what: str) -> errors.StoreError:
    """`exc` as the StoreError of the statement `what`."""
    hint = ""
    if isinstance(exc, psycopg.errors.UndefinedTable):
        hint = " (run procqueue migrate, or grant USAGE on the schema)"
    kind = errors.StoreRejected if isinstance(exc, psycopg.DataError) else errors.StoreError
    return kind(f"PostgreSQL query {what} failed: {_first_line(exc)}{hint}")


def _transient(exc: psycopg.Error) -> bool:
    """Whether `exc` is a failure of the lent connection (killed after the
    pool's check) that a fresh connection may not have: not a bound that ran
    out (retrying would double it), a closed pool, or a refused statement."""
    bounded = (
        psycopg.errors.QueryCanceled,
        psycopg.errors.LockNotAvailable,
        psycopg_pool.PoolTimeout,
        psycopg_pool.PoolClosed,
    )
    connection = (psycopg.OperationalError, psycopg.InterfaceError)
    return isinstance(exc, connection) and not isinstance(exc, bounded)


@contextmanager
def _named(what: str) -> Iterator[None]:
    try:
        yield
    except psycopg.Error as exc:
        raise _failure(exc, what) from None


class _Tx:
    """One transaction on a psycopg connection (the pool's, or the caller's)."""

    def __init__(self, conn: Conn, dialect: PostgresDialect) -> None:
        self._conn = conn
        self._dialect = dialect

    def execute(
        self, name: str, params: Mapping[str, Any] | None = None
    ) -> psycopg.Cursor[DictRow]:
        cursor = psycopg.Cursor(self._conn, row_factory=dict_row)  # whatever the cursor_factory
        with _named(name):
            cursor.execute(_Q[name], params)
        return cursor

    def execute_each(self, name: str, params: Sequence[Mapping[str, Any]]) -> list[Any]:
        """Pipelined by psycopg: one round trip for the batch."""
        if not params:
            return []
        cursor = psycopg.Cursor(self._conn, row_factory=dict_row)
        rows: list[Any] = []
        with _named(name):
            cursor.executemany(_Q[name], params, returning=True)
            while True:
                rows.append(cursor.fetchone())
                if not cursor.nextset():
                    break
        return rows

    @contextmanager
    def pipeline(self, what: str) -> Iterator[None]:
        with _named(what), self._conn.pipeline():
            yield

    def lock(self, purpose: str) -> None:
        self.execute("pg_lock", {"key": self._dialect.lock_keys[purpose]})

    def plan_once(self) -> None:
        self.execute("pg_generic_plans")

    def notify(self) -> None:
        self.execute("pg_notify", {"channel": self._dialect.channel})

    def script(self, version: int, text: str) -> None:
        with _named(f"migration {version:04d}"):
            self._conn.execute(text)  # static file text

    def create_schema(self) -> None:
        schema = self._dialect.schema
        with _named(f"CREATE SCHEMA {schema}"):
            self._conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))


class PostgresDialect:
    """A connection pool and a LISTEN connection on one schema. Safe to share
    between threads: each call borrows a pooled connection for one transaction."""

    backend = "postgres"
    json_type = bytes

    def __init__(self, dsn: str, *, bounds: Bounds) -> None:
        self._conninfo, self.schema = split_dsn(dsn)
        try:
            params = conninfo_to_dict(self._conninfo)
        except psycopg.Error as exc:
            raise errors.ConfigError(
                f"malformed DSN {describe(dsn)!r}: {_first_line(exc)}"
            ) from None
        self._password = str(params.get("password") or "")
        host = params.get("host") or os.environ.get("PGHOST") or "localhost"
        port = params.get("port") or os.environ.get("PGPORT") or "5432"
        db = params.get("dbname") or os.environ.get("PGDATABASE") or "(default)"
        self.server = f"{host}:{port} database {db}"
        self.where = f"PostgreSQL {self.server} schema {self.schema}"
        self.channel = f"procqueue_{self.schema}"
        self.lock_keys = {p: _lock_key(p, self.schema) for p in ("claim", "migrate")}
        self._kwargs = bounds.session(params, schema=self.schema)
        self.listener = _pg_listen.Listener(self._conninfo, self._kwargs, channel=self.channel)
        self._last_used: dict[int, float] = {}
        self.check_idle = _CHECK_IDLE_S
        try:  # a direct attempt first: it fails fast and says why
            psycopg.connect(self._conninfo, **self._kwargs).close()
        except psycopg.Error as exc:
            kind = errors.StoreUnavailable if _passing(str(exc)) else errors.StoreError
            raise kind(self._unreachable(_first_line(exc))) from None
        self._pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=_POOL_MAX,
            kwargs=self._kwargs,
            configure=self._configure,
            check=self._check,  # replaces connections a restart killed
            timeout=bounds.pool_wait,
            name=f"procqueue-{self.schema}",
            open=True,
        )

    def _unreachable(self, reason: str) -> str:
        if self._password:
            reason = reason.replace(self._password, "***")
        return f"cannot connect to PostgreSQL at {self.server}: {reason}"

    def _check(self, conn: Conn) -> None:
        """Checks a connection before lending it, with a round trip only when
        it idled over `check_idle` seconds or its socket has something to say
        (a terminated or restarted server closes it): the hot path of a busy
        supervisor pays one non-blocking select, not a round trip."""
        idle = time.monotonic() - self._last_used.get(id(conn), 0.0) > self.check_idle
        if idle or select.select([conn.fileno()], [], [], 0)[0]:
            psycopg_pool.ConnectionPool.check_connection(conn)

    def _configure(self, conn: Conn) -> None:
        conn.adapters.register_loader("jsonb", _RawJson)
        conn.adapters.register_loader("json", _RawJson)
        # Every int goes as bigint, whatever its size: a statement's parameter
        # types then stay the same from one run to the next, so psycopg
        # prepares it once (a list of ids dumped as int2[] one time and int4[]
        # the next was a new statement each time, planned at every run).
        conn.adapters.register_dumper(int, Int8Dumper)
        # No JIT: a claim's generic plan, costed for a million pending rows,
        # crossed jit_above_cost and compiled ~140 functions at every run
        # (80 ms) to read 32 rows; no query here is long enough to repay it.
        conn.execute("SET jit = off")
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        conn.commit()

    @contextmanager
    def _connection(self) -> Iterator[Conn]:
        """A pooled connection for one transaction: committed if the block
        returns, rolled back if it raises. psycopg errors pass through."""
        with self._pool.connection() as conn:
            yield conn
            self._last_used[id(conn)] = time.monotonic()

    @contextmanager
    def transaction(self, *, connection: object | None = None) -> Iterator[_Tx]:
        if connection is not None:
            with self._joined(connection) as tx:
                yield tx
            return
        try:
            with self._connection() as conn:
                yield _Tx(conn, self)
        except psycopg.Error as exc:
            raise errors.StoreError(f"PostgreSQL at {self.server}: {_first_line(exc)}") from None

    @contextmanager
    def _joined(self, connection: object) -> Iterator[_Tx]:
        """A savepoint in the caller's transaction (a failure here leaves it
        usable), with search_path set to the schema only for the statements
        run inside; the caller commits or rolls back."""
        if not isinstance(connection, psycopg.Connection):
            raise errors.EnqueueError("connection= must be a (synchronous) psycopg.Connection")
        status = connection.info.transaction_status
        if status == TransactionStatus.INERROR:
            raise errors.EnqueueError("connection= is in a failed transaction; roll it back first")
        if connection.autocommit and status == TransactionStatus.IDLE:
            raise errors.EnqueueError(
                "connection= is in autocommit mode with no transaction open; "
                "enqueue inside `with conn.transaction():`"
            )
        tx = _Tx(connection, self)
        try:
            # The first statement opens the caller's transaction if none is.
            saved = tx.execute("pg_search_path_get").fetchone()
            assert saved is not None, "the query returns one row"
            with connection.transaction():
                path = sql.Identifier(self.schema).as_string(connection)
                tx.execute("pg_search_path_set", {"path": path})
                yield tx
                tx.execute("pg_search_path_set", {"path": saved["path"]})
        except psycopg.Error as exc:
            raise errors.StoreError(
                f"PostgreSQL enqueue on connection=: {_first_line(exc)}"
            ) from None

    def statement(
        self, name: str, params: Mapping[str, Any], *, idempotent: bool = False
    ) -> _dialect.Result:
        """An idempotent statement is run again, once, on a fresh connection
        when the lent one failed (it may have been killed after the pool's
        check; a real outage fails twice)."""
        for retry in (True, False) if idempotent else (False,):
            try:
                with self._connection() as conn:
                    cursor = psycopg.Cursor(conn, row_factory=dict_row)
                    cursor.execute(_Q[name], params)
                    rows = cursor.fetchall() if cursor.description is not None else []
                    return _dialect.Result(rows, cursor.rowcount)
            except psycopg.Error as exc:
                if not (retry and _transient(exc)):
                    raise _failure(exc, name) from None
        raise AssertionError("unreachable: the last try returns or raises")

    def array(self, values: Sequence[str | int]) -> list[str | int]:
        return list(values)

    def prepare_migration(self, tx: _dialect.Tx) -> None:
        """Lifts this transaction's bounds to MIGRATION_TIMEOUT, takes the
        migration lock and creates the schema if missing (CREATE SCHEMA needs
        a privilege even when the schema exists, so it is asked first)."""
        assert isinstance(tx, _Tx)
        tx.execute("pg_bounds_set", {"ms": str(int(_pg_conninfo.MIGRATION_TIMEOUT * 1000))})
        tx.lock("migrate")
        exists = tx.execute("pg_schema_exists", {"schema": self.schema}).fetchone()
        if exists is None or not exists["n"]:
            tx.create_schema()

    def wake_fileno(self) -> int | None:
        return self.listener.fileno()

    def wake_drain(self) -> bool:
        return self.listener.drain()

    def close(self) -> None:
        self.listener.close()
        self._pool.close()


class PostgresStore(_sql.SqlStore):
    """A `Store` on one schema of a PostgreSQL database. Safe to share
    between threads.

    Args:
        dsn: ``postgresql://...``, optionally with ``schema=NAME``.
        bounds: how long calls may wait (the defaults of `Bounds` otherwise).
    """

    def __init__(self, dsn: str, *, bounds: Bounds | None = None) -> None:
        self._pg = PostgresDialect(dsn, bounds=bounds or Bounds())
        self.schema = self._pg.schema
        self.where = self._pg.server
        self.listener = self._pg.listener
        """The LISTEN connection (its backend pid, for tests and operators)."""
        super().__init__(self._pg)

    @property
    def check_idle(self) -> float:
        """Seconds a pooled connection may idle before it is checked when lent."""
        return self._pg.check_idle

    @check_idle.setter
    def check_idle(self, seconds: float) -> None:
        self._pg.check_idle = seconds

    def __repr__(self) -> str:
        return f"PostgresStore({self.where} schema {self.schema})"
