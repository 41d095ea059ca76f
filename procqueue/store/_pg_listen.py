"""PostgreSQL wake-ups: one dedicated autocommit connection LISTENing on the
schema's channel, reopened after it breaks, under a new descriptor number."""

from __future__ import annotations

import os
import threading
from contextlib import suppress
from typing import Any

import psycopg
from psycopg import sql


class Listener:
    """The LISTEN connection of one store. Safe to share between threads."""

    def __init__(self, conninfo: str, kwargs: dict[str, Any], *, channel: str) -> None:
        self._conninfo = conninfo
        self._kwargs = kwargs
        self.channel = channel
        self._lock = threading.Lock()
        self._listener: psycopg.Connection[Any] | None = None
        self._listen_fd: int | None = None
        self._stale_fds: list[int] = []  # closed once a new listener is open
        self._missed_wake = False
        self._closed = False

    def fileno(self) -> int | None:
        """A descriptor that turns readable when a dedicated connection
        LISTENing on this schema's channel receives something. Opened on first
        use, and again after it broke, always under a new number (so a caller
        comparing numbers re-registers). None while the server cannot be
        reached: poll, then ask again."""
        with self._lock:
            if self._listener is None and not self._closed:
                # Best effort, so a short connect timeout: polling covers an outage.
                kwargs = self._kwargs | {"connect_timeout": 2, "autocommit": True}
                try:
                    self._listener = psycopg.connect(self._conninfo, **kwargs)
                    self._listener.execute(
                        sql.SQL("LISTEN {}").format(sql.Identifier(self.channel))
                    )
                    # Our own duplicate: libpq closes its descriptor when the
                    # connection drops, which would free the number for reuse.
                    self._listen_fd = os.dup(self._listener.fileno())
                except (psycopg.Error, OSError):
                    self._retire_listener()
                finally:  # closed only now, so that the new descriptor got another number
                    self._close_stale()
            return self._listen_fd

    def drain(self) -> bool:
        """Consumes notifications without blocking; True if any arrived, or if
        the listening connection broke (notifications may have been missed, so
        the caller should look for work; `fileno` reconnects). Never raises."""
        with self._lock:
            woke, self._missed_wake = self._missed_wake, False
            conn = self._listener
            if conn is None:
                return woke
            try:
                for _ in conn.notifies(timeout=0):
                    woke = True
                if conn.broken or conn.closed:
                    raise psycopg.OperationalError("listening connection lost")
            except Exception:
                self._retire_listener()
                return True
            return woke

    def _retire_listener(self) -> None:
        conn, self._listener = self._listener, None
        if conn is not None:
            with suppress(Exception):  # a broken connection may fail to close; it is gone
                conn.close()
        if self._listen_fd is not None:
            self._stale_fds.append(self._listen_fd)
        self._listen_fd = None
        self._missed_wake = True

    def _close_stale(self) -> None:
        for fd in self._stale_fds:
            with suppress(OSError):
                os.close(fd)
        self._stale_fds.clear()

    def backend_pid(self) -> int | None:
        """The server process of the listening connection (None when closed)."""
        conn = self._listener
        return None if conn is None else conn.info.backend_pid

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._retire_listener()
            self._close_stale()
            self._missed_wake = False
