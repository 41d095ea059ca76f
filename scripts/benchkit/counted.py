"""``procqueue`` run with counters, for the cost profile (``--extras cost``):

    python -m benchkit.counted supervise APP --dsn DSN ...

Counts, per thread, the SQL statements its cursors run (an ``executemany`` counts each
parameter set), the commits, and the protocol frames the supervisor sends to and reads
from its children; on SIGUSR1 writes them to ``$BENCH_COUNTS`` as JSON with each
thread's native id, so that the harness can take a difference over a window and match
``/proc/PID/task/TID`` to a thread. The counters cost a few hundred nanoseconds each.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

COUNTS: collections.Counter[str] = collections.Counter()


def _bump(what: str, n: int = 1) -> None:
    COUNTS[f"{threading.current_thread().name}|{what}"] += n


def _wrap(owner: Any, method: str, what: str, size: Any = None) -> None:
    inner = getattr(owner, method)

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = inner(self, *args, **kwargs)
        _bump(what, size(args, result) if size else 1)
        return result

    setattr(owner, method, counted)


def _by_query(owner: Any, method: str) -> None:
    """Also counts each statement of `owner.method(query, ...)` by its query's first words."""
    inner = getattr(owner, method)

    def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        _bump("sql " + " ".join(str(query).split())[:70])
        return inner(self, query, *args, **kwargs)

    setattr(owner, method, counted)


def _dump(signum: int, frame: Any) -> None:
    threads = {str(t.native_id): t.name for t in threading.enumerate()}
    snapshot = {"counts": dict(COUNTS), "threads": threads}
    path = Path(os.environ["BENCH_COUNTS"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(snapshot))
    tmp.replace(path)


def main() -> int:
    import psycopg

    from procqueue.cli.main import main as procqueue_main
    from procqueue.store import sqlite
    from procqueue.supervisor.children.pool import Pool
    from procqueue.supervisor.children.process import ChildBase

    _wrap(psycopg.Cursor, "execute", "statements")
    _wrap(psycopg.Cursor, "executemany", "statements", lambda a, _: len(a[1]) if len(a) > 1 else 1)
    _wrap(psycopg.Connection, "execute", "statements")
    _by_query(psycopg.Cursor, "execute")
    _by_query(psycopg.Cursor, "executemany")
    _wrap(psycopg.Connection, "commit", "commits")
    # SQLite's connection is a C type: count at the store's transaction instead
    _wrap(sqlite._Tx, "execute", "statements")
    _wrap(sqlite._Tx, "execute_each", "statements", lambda a, _: len(a[1]))
    _wrap(sqlite.SqliteDialect, "statement", "statements")
    _wrap(sqlite.SqliteDialect, "transaction", "transactions")
    _wrap(Pool, "send", "frames to children")
    _wrap(ChildBase, "read_messages", "frames from children", lambda _, r: len(r))
    signal.signal(signal.SIGUSR1, _dump)
    return procqueue_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
