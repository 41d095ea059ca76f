"""The server backend: PostgreSQL through psycopg 3 and a small psycopg-pool.

Everything lives in one schema (``?schema=NAME`` in the DSN, default
``procqueue``): pool connections set ``search_path`` to it, so every
statement in ``sql/postgres/queries.sql`` is static. A claim is one short
transaction that first takes an advisory lock derived from the schema name,
so queue limits and serial keys hold across every supervisor on every
machine; candidates are read ``FOR UPDATE SKIP LOCKED``. An enqueue calls
``pg_notify`` in its own transaction: listeners wake on commit, never on a
rollback. Errors leave the store as one-line `errors.StoreError`s.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import select
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import msgspec
import psycopg
from psycopg import sql
from psycopg.abc import Buffer
from psycopg.adapt import Loader
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool

from procqueue import errors, models
from procqueue.store import _pg_listen, _queries, base, describe

log = logging.getLogger("procqueue.store")
_Q = _queries.load("postgres")
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,52}")  # "procqueue_" + 53 = 63, NOTIFY's limit
_DEFAULT_SCHEMA = "procqueue"
_POOL_MAX = 4  # a supervisor needs ~2 at once (claim loop, lease renewal); more only queue up
_CHECK_IDLE_S = 1.0
_TIMEOUT_S = 10.0
_encode = msgspec.json.encode
_backoff_decoder = msgspec.json.Decoder(models.Backoff)
_steps_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_STATES = frozenset(s.value for s in models.JobState)

Conn = psycopg.Connection[Any]


class _RawJson(Loader):
    """Loads json/jsonb columns as the server's text bytes; msgspec decodes them."""

    def load(self, data: Buffer) -> bytes:
        return bytes(data)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _lock_key(purpose: str, schema: str) -> int:
    """A fixed advisory-lock key per (purpose, schema): signed 64 bits."""
    digest = hashlib.blake2b(f"procqueue:{purpose}:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def split_dsn(dsn: str) -> tuple[str, str]:
    """`(conninfo, schema)`: the DSN without its ``schema=`` parameter, and that schema.

    Raises ConfigError for a schema that is not a plain lowercase identifier.
    """
    try:
        parts = urllib.parse.urlsplit(dsn)
        parts.port  # noqa: B018  (parsing the port validates it)
    except ValueError as exc:
        raise errors.ConfigError(f"malformed DSN {describe(dsn)!r}: {exc}") from None
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    names = [value for key, value in query if key == "schema"]
    if len(names) > 1:
        raise errors.ConfigError(f"DSN {describe(dsn)!r} names schema= more than once")
    schema = names[0] if names else _DEFAULT_SCHEMA
    if schema.startswith("pg_") or schema == "information_schema":
        raise errors.ConfigError(f"schema {schema!r} in DSN is reserved by PostgreSQL")
    if not _SCHEMA_NAME.fullmatch(schema):
        raise errors.ConfigError(
            f"invalid schema name {schema!r} in DSN: use 1-53 characters of a-z, 0-9 and _, "
            "not starting with a digit"
        )
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "schema"])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), schema


@contextmanager
def _named(what: str) -> Iterator[None]:
    """Turns a psycopg error into a StoreError naming the statement that failed."""
    try:
        yield
    except psycopg.Error as exc:
        hint = ""
        if isinstance(exc, psycopg.errors.UndefinedTable):
            hint = " (run procqueue migrate, or grant USAGE on the schema)"
        kind = errors.StoreRejected if isinstance(exc, psycopg.DataError) else errors.StoreError
        raise kind(f"PostgreSQL query {what} failed: {_first_line(exc)}{hint}") from None


def _exec(conn: Conn, name: str, params: dict[str, Any] | None = None) -> psycopg.Cursor[DictRow]:
    cur = psycopg.Cursor(conn, row_factory=dict_row)  # whatever conn.cursor_factory is
    with _named(name):
        cur.execute(_Q[name], params)
    return cur


def _one(cur: psycopg.Cursor[DictRow]) -> DictRow:
    row = cur.fetchone()
    assert row is not None, "the query returns one row"
    return row


_TIMES = ("run_at", "created_at", "started_at", "finished_at", "deadline_at")


def _row_to_info(row: DictRow) -> models.JobInfo:
    fields = {name: row[name] for name in models.JobInfo.__struct_fields__}
    fields["state"] = models.JobState(row["state"])
    for column in ("args", "result", "tags"):
        if fields[column] is not None:
            fields[column] = msgspec.json.decode(fields[column])
    for column in _TIMES:
        fields[column] = models.to_datetime(fields[column])
    return models.JobInfo(**fields)


def _claimed(row: DictRow) -> models.ClaimedJob:
    fields = dict(row, attempt=row["attempts"], steps=_steps_decoder.decode(row["steps"]))
    del fields["attempts"]
    fields["backoff"] = _backoff_decoder.decode(row["backoff"])
    return models.ClaimedJob(**fields)


def _record_params(o: models.Outcome, now: float) -> dict[str, Any]:
    return msgspec.structs.asdict(o) | {
        "state": o.state.value,
        "result": None if o.result is None else o.result.decode(),
        "error": None if o.error is None else models.cap_error(o.error),
        "refund": 1 if o.refund else 0,
        "now": now,
    }


def _refused(id: int, row: DictRow | None, rule: str) -> errors.ProcqueueError:
    if row is None:
        return errors.JobNotFound(f"no job {id}")
    return errors.InvalidState(f"job {id} is {row['state']}; {rule}")


class PostgresStore(base.ClaimVia):
    """A `Store` on one schema of a PostgreSQL database. Safe to share between
    threads: each call borrows a pooled connection for one transaction."""

    backend = "postgres"

    def __init__(self, dsn: str) -> None:
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
        self.where = f"{host}:{port} database {db}"
        defaults = {
            "connect_timeout": int(_TIMEOUT_S),
            "application_name": f"procqueue:{self.schema}",  # lets tests and ops find them
        }
        self._kwargs: dict[str, Any] = {k: v for k, v in defaults.items() if k not in params}
        self._claim_key = _lock_key("claim", self.schema)
        self._migrate_key = _lock_key("migrate", self.schema)
        self._channel = f"procqueue_{self.schema}"
        self._listener = _pg_listen.Listener(self._conninfo, self._kwargs, channel=self._channel)
        self._last_used: dict[int, float] = {}
        self.check_idle = _CHECK_IDLE_S
        """Seconds a pooled connection may idle before it is checked when lent."""
        try:  # a direct attempt first: it fails fast and says why
            psycopg.connect(self._conninfo, **self._kwargs).close()
        except psycopg.Error as exc:
            raise errors.StoreError(self._unreachable(_first_line(exc))) from None
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=_POOL_MAX,
            kwargs=self._kwargs,
            configure=self._configure,
            check=self._check,  # replaces connections a restart killed
            timeout=_TIMEOUT_S,
            name=f"procqueue-{self.schema}",
            open=True,
        )

    def __repr__(self) -> str:
        return f"PostgresStore({self.where} schema {self.schema})"

    # -- plumbing ---------------------------------------------------------

    def _unreachable(self, reason: str) -> str:
        if self._password:
            reason = reason.replace(self._password, "***")
        return f"cannot connect to PostgreSQL at {self.where}: {reason}"

    def _check(self, conn: Conn) -> None:
        """Checks a connection before lending it, with a round trip only when
        it idled over `check_idle` seconds or its socket has something to say
        (a terminated or restarted server closes it): the hot path of a busy
        supervisor pays one non-blocking select, not a round trip."""
        idle = time.monotonic() - self._last_used.get(id(conn), 0.0) > self.check_idle
        if idle or select.select([conn.fileno()], [], [], 0)[0]:
            ConnectionPool.check_connection(conn)

    def _configure(self, conn: Conn) -> None:
        conn.adapters.register_loader("jsonb", _RawJson)
        conn.adapters.register_loader("json", _RawJson)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        conn.commit()

    @contextmanager
    def _tx(self) -> Iterator[Conn]:
        """One transaction on a pooled connection: committed if the block
        returns, rolled back if it raises."""
        try:
            with self._pool.connection() as conn:
                yield conn
                self._last_used[id(conn)] = time.monotonic()
        except psycopg.Error as exc:
            raise errors.StoreError(f"PostgreSQL at {self.where}: {_first_line(exc)}") from None

    def _all(self, query: str, **params: Any) -> list[DictRow]:
        """Runs an idempotent query; retried once on a fresh connection when it
        fails for a reason other than a refused value (the lent connection may
        have been killed after the pool's check; a real outage fails twice)."""
        try:
            with self._tx() as conn:
                return _exec(conn, query, params).fetchall()
        except errors.StoreRejected:
            raise
        except errors.StoreError:
            with self._tx() as conn:
                return _exec(conn, query, params).fetchall()

    def _run(self, query: str, **params: Any) -> int:
        with self._tx() as conn:
            return _exec(conn, query, params).rowcount

    # -- schema -----------------------------------------------------------

    def migrate(self, *, now: float = 0.0) -> int:
        """Creates the schema and applies pending migrations under an advisory
        lock, so any number of processes may race; returns the version."""
        with self._tx() as conn:
            _exec(conn, "pg_lock", {"key": self._migrate_key})
            if not _one(_exec(conn, "pg_schema_exists", {"schema": self.schema}))["n"]:
                with _named(f"CREATE SCHEMA {self.schema}"):
                    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
            _exec(conn, "schema_table_create")
            current: int = _one(_exec(conn, "schema_version_get"))["version"]
            if current > base.SCHEMA_VERSION:
                raise errors.SchemaTooNew(
                    f"database schema {self.schema} is version {current}, this procqueue knows "
                    f"up to {base.SCHEMA_VERSION}; upgrade procqueue"
                )
            for version, script in _queries.migrations("postgres"):
                if version > current:
                    with _named(f"migration {version:04d}"):
                        conn.execute(script)  # static file text
                    _exec(conn, "schema_version_set", {"version": version, "now": time.time()})
                    current = version
        return current

    def close(self) -> None:
        self._listener.close()
        self._pool.close()

    # -- wake-ups ---------------------------------------------------------

    def wake_fileno(self) -> int | None:
        return self._listener.fileno()

    def wake_drain(self) -> bool:
        return self._listener.drain()

    # -- jobs -------------------------------------------------------------

    def job_insert_many(
        self, *, jobs: Sequence[models.NewJob], now: float, connection: object | None = None
    ) -> list[int]:
        """Inserts and notifies in one transaction. With `connection`, joins
        the caller's transaction (a savepoint, so a failure here leaves it
        usable) and sets search_path to the schema only for the statements
        it runs; the caller commits or rolls back."""
        if connection is None:
            with self._tx() as conn:
                return self._insert(conn, jobs, now)
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
        try:
            # The first statement opens the caller's transaction if none is.
            saved = _one(_exec(connection, "pg_search_path_get"))["path"]
            with connection.transaction():
                path = sql.Identifier(self.schema).as_string(connection)
                _exec(connection, "pg_search_path_set", {"path": path})
                ids = self._insert(connection, jobs, now)
                _exec(connection, "pg_search_path_set", {"path": saved})
        except psycopg.Error as exc:
            raise errors.StoreError(
                f"PostgreSQL enqueue on connection=: {_first_line(exc)}"
            ) from None
        return ids

    def _insert(self, conn: Conn, jobs: Sequence[models.NewJob], now: float) -> list[int]:
        if not jobs:
            return []
        params = [
            msgspec.structs.asdict(job)
            | {
                "args": job.args.decode(),
                "tags": _encode(job.tags).decode(),
                "backoff": _encode(job.backoff).decode(),
                "run_at": now if job.run_at is None else job.run_at,
                "now": now,
            }
            for job in jobs
        ]
        cur = psycopg.Cursor(conn, row_factory=dict_row)  # whatever conn.cursor_factory is
        inserted: list[int | None] = []
        with _named("job_insert"):  # pipelined: one round trip for the batch
            cur.executemany(_Q["job_insert"], params, returning=True)
            while True:
                row = cur.fetchone()
                inserted.append(None if row is None else row["id"])
                if not cur.nextset():
                    break
        ids = [
            _one(_exec(conn, "job_id_by_key", {"key": job.key}))["id"] if id_ is None else id_
            for job, id_ in zip(jobs, inserted, strict=True)
        ]
        if any(id_ is not None for id_ in inserted):
            _exec(conn, "pg_notify", {"channel": self._channel})
        return ids

    def job_get(self, *, id: int) -> models.JobInfo | None:
        rows = self._all("job_get", id=id)
        return _row_to_info(rows[0]) if rows else None

    def job_list(
        self, *, state: str | None, queue: str | None, name: str | None, limit: int
    ) -> list[models.JobInfo]:
        rows = self._all("job_list", state=state, queue=queue, name=name, limit=limit)
        return [_row_to_info(r) for r in rows]

    def job_record_and_claim(
        self,
        *,
        outcomes: Sequence[models.Outcome],
        owner: str,
        queues: Sequence[str] | None,
        count: int,
        lease_until: float,
        now: float,
    ) -> base.Cycle:
        """One transaction; a claim holds the schema's claim lock (cluster-wide),
        so the running counts that limits and serial keys are checked against
        cannot change under it. The outcomes, the lock and the candidates go
        in one round trip; outcomes in id order, so that two transactions
        touching the same rows cannot deadlock."""
        if not outcomes and count <= 0:
            return base.Cycle(lost=[], claimed=[])
        wanted = None if queues is None else list(queues)
        with self._tx() as conn:
            with _named("job_record_and_claim"), conn.pipeline():
                recorded = [
                    (o.id, _exec(conn, "job_record", _record_params(o, now)))
                    for o in sorted(outcomes, key=lambda o: o.id)
                ]
                if count > 0:
                    _exec(conn, "pg_lock", {"key": self._claim_key})
                    # Over-fetch so that jobs blocked within the batch (a serial
                    # key twice, a queue's last slot) don't starve the ones behind.
                    cursor = _exec(
                        conn,
                        "job_candidates",
                        {"now": now, "queues": wanted, "limit": count * 4 + 16},
                    )
            gone = {id_ for id_, c in recorded if c.rowcount == 0}
            lost = [o.id for o in outcomes if o.id in gone]
            if count <= 0:
                return base.Cycle(lost=lost, claimed=[])
            ids = base.choose(
                (
                    base.Candidate(r["id"], r["queue"], r["serial_key"], r["room"])
                    for r in cursor.fetchall()
                ),
                count=count,
            )
            if not ids:
                return base.Cycle(lost=lost, claimed=[])
            taken = _exec(
                conn,
                "job_take",
                {"ids": ids, "owner": owner, "lease_until": lease_until, "now": now},
            ).fetchall()
        order = {id_: i for i, id_ in enumerate(ids)}
        claimed = [_claimed(r) for r in sorted(taken, key=lambda r: order[r["id"]])]
        return base.Cycle(lost=lost, claimed=claimed)

    def job_renew_leases(self, *, owner: str, lease_until: float) -> base.Renewal:
        rows = self._all("job_renew_leases", owner=owner, lease_until=lease_until)
        return base.Renewal(
            alive={(r["id"], r["attempts"]) for r in rows},
            cancel_requested={r["id"] for r in rows if r["cancel_requested"]},
        )

    def job_cancel_requested(self, *, owner: str) -> set[int]:
        return {r["id"] for r in self._all("job_cancel_requested", owner=owner)}

    def job_set_progress(
        self, *, id: int, attempt: int, text: str | None, fraction: float | None
    ) -> bool:
        n = self._run("job_set_progress", id=id, attempt=attempt, text=text, fraction=fraction)
        return n > 0

    def job_set_pid(self, *, id: int, attempt: int, pid: int) -> bool:
        return self._run("job_set_pid", id=id, attempt=attempt, pid=pid) > 0

    def job_save_step(self, *, id: int, attempt: int, name: str, value: bytes) -> bool:
        n = self._run("job_save_step", id=id, attempt=attempt, name=name, value=value.decode())
        return n > 0

    def job_cancel(self, *, id: int, now: float) -> models.JobState:
        with self._tx() as conn:
            if _exec(conn, "job_cancel_pending", {"id": id, "now": now}).rowcount:
                return models.JobState.CANCELLED
            if _exec(conn, "job_cancel_running", {"id": id}).rowcount:
                return models.JobState.RUNNING
            row = _exec(conn, "job_state", {"id": id}).fetchone()
        raise _refused(id, row, "only pending or running jobs cancel")

    def job_retry(self, *, id: int, now: float) -> None:
        with self._tx() as conn:
            if _exec(conn, "job_retry", {"id": id, "now": now}).rowcount:
                return
            row = _exec(conn, "job_state", {"id": id}).fetchone()
        raise _refused(id, row, "only failed or cancelled jobs retry")

    def job_rescue_expired(self, *, now: float) -> int:
        return self._run("job_rescue_expired", now=now)

    def job_fail_past_deadline(self, *, now: float) -> int:
        return self._run("job_fail_past_deadline", now=now)

    def job_prune(self, *, states: Iterable[str], before: float, limit: int) -> int:
        wanted = [s for s in states if s in _STATES]
        return self._run("job_prune", states=wanted, before=before, limit=limit)

    def job_sweep_failures(
        self,
        *,
        now: float,
        limit: int,
        handler_job: Callable[[models.JobInfo, str], models.NewJob],
    ) -> int:
        """Marks each unhandled give-up and enqueues its handler in one
        transaction; rows another sweeper holds are skipped, so each handler
        is enqueued once."""
        handled = 0
        with self._tx() as conn:
            for row in _exec(conn, "job_failures_unhandled", {"limit": limit}).fetchall():
                if not _exec(conn, "job_mark_failure_handled", {"id": row["id"]}).rowcount:
                    continue
                try:
                    job = handler_job(_row_to_info(row), row["on_failure"])
                except errors.ProcqueueError as exc:
                    log.error("job %d: on_failure handler not enqueued: %s", row["id"], exc)
                    continue
                self._insert(conn, [job], now)
                handled += 1
        return handled

    def chore_claim(self, *, name: str, every: float, now: float) -> bool:
        return self._run("chore_claim", name=name, every=every, now=now) > 0

    # -- queues -----------------------------------------------------------

    def queue_set_limit(self, *, queue: str, limit: int | None) -> None:
        self._run("queue_set_limit", queue=queue, limit=limit)

    def queue_set_paused(self, *, queue: str, paused: bool) -> None:
        self._run("queue_set_paused", queue=queue, paused=paused)

    def queue_list(self, *, now: float) -> list[models.QueueInfo]:
        with self._tx() as conn:
            settings = {r["name"]: r for r in _exec(conn, "queue_limits")}
            counts = _exec(conn, "queue_counts").fetchall()
        return base.queue_infos(
            settings={n: (r["concurrency"], bool(r["paused"])) for n, r in settings.items()},
            counts=[(r["queue"], r["state"], r["n"], r["oldest"]) for r in counts],
            now=now,
        )
