"""A lock held by a transaction of the test's own, to pause a store's
transaction at a chosen statement and so replay a race between two of them
in a chosen order (PostgreSQL; SQLite's write transactions never interleave,
so there it holds nothing)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from procqueue.store._pg_conninfo import split_dsn

HOLD_KEY = (
    "INSERT INTO jobs (name, queue, state, max_attempts, args, key, backoff, run_at, created_at)"
    " VALUES ('held', 'held', 'done', 1, '{}', %s, '{}', 0, 0)"
)
"""An uncommitted job with a key: an insert of the same key waits for it."""
HOLD_BATCH = "SELECT id FROM batches WHERE id = %s FOR UPDATE"
"""A batch's row lock: a transaction ending one of its members waits for it."""


class Held:
    """`statement` run in an open transaction on `dsn`'s database (PostgreSQL
    only: `conn` is None on SQLite) until `release`."""

    def __init__(self, dsn: str, statement: str, params: tuple[Any, ...]) -> None:
        self.conn: psycopg.Connection[Any] | None = None
        self.pid = 0
        self.schema = ""
        if dsn.startswith("sqlite:"):
            return
        conninfo, schema = split_dsn(dsn)
        self.schema = schema
        self.conn = psycopg.connect(conninfo)
        self.conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        self.conn.execute(statement, params)  # type: ignore[arg-type]
        self.pid = self.conn.info.backend_pid

    def blocked_by(self, pid: int) -> int | None:
        """The backend waiting for a lock that backend `pid` holds, if any."""
        assert self.conn is not None
        with psycopg.connect(self.conn.info.dsn, autocommit=True) as c:
            row = c.execute(
                "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (pid,)
            ).fetchone()
        return None if row is None else int(row[0])

    def waiting(self) -> int:
        """How many of the stores' connections to this schema wait for a lock."""
        assert self.conn is not None
        with psycopg.connect(self.conn.info.dsn, autocommit=True) as c:
            row = c.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = %s AND wait_event_type = 'Lock'",
                (f"procqueue:{self.schema}",),
            ).fetchone()
        return 0 if row is None else int(row[0])

    def release(self) -> None:
        """Rolls the transaction back (its lock goes with it); idempotent."""
        if self.conn is not None:
            self.conn.rollback()
            self.conn.close()
            self.conn = None
