"""Storage: one SQL store (`base.Store`) over two dialects, SQLite and PostgreSQL."""

from __future__ import annotations

import os

from procqueue import config, errors
from procqueue.store._dsn import describe
from procqueue.store.base import Store

__all__ = ["DEFAULT_DSN", "Store", "describe", "open_store", "resolve_dsn"]

DEFAULT_DSN = "sqlite:///procqueue.db"


def resolve_dsn(explicit: str | None) -> str:
    """The DSN to use: `explicit`, else ``$PROCQUEUE_DSN``, else the config
    file's (``procqueue.toml`` / ``[tool.procqueue]``), else the default file."""
    if explicit or os.environ.get("PROCQUEUE_DSN"):
        return explicit or os.environ["PROCQUEUE_DSN"]
    return config.layered(None).dsn or DEFAULT_DSN


def open_store(dsn: str, *, create: bool = True) -> Store:
    """Opens the backend `dsn` names (``sqlite:///path`` or ``postgresql://...``).

    Raises ConfigError for a DSN of no known form, StoreError when the
    database cannot be reached. With `create` False, a SQLite file that does
    not exist is a StoreError instead of a new empty database.
    """
    if "\x00" in dsn:
        raise errors.ConfigError("malformed DSN: it holds a NUL character")
    if dsn.startswith("sqlite://"):
        path = dsn[len("sqlite://") :]
        # sqlite:///rel.db is relative, sqlite:////abs.db absolute; sqlite://x.db
        # (a host part) is a typo, not a file to create
        if not path.startswith("/") or len(path) == 1:
            raise errors.ConfigError(
                f"malformed DSN {dsn!r}: expected sqlite:///PATH (three slashes; four if absolute)"
            )
        path = path[1:]
        from procqueue.store.sqlite import SqliteStore

        return SqliteStore(path, create=create)
    if dsn.startswith(("postgresql://", "postgres://")):
        from procqueue.store.postgres import PostgresStore

        return PostgresStore(dsn)
    raise errors.ConfigError(
        f"malformed DSN {describe(dsn)!r}: expected sqlite:///PATH or postgresql://HOST/DB"
    )
