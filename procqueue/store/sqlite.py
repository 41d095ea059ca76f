"""The embedded backend: one SQLite file in WAL mode.

Claims run inside ``BEGIN IMMEDIATE``, which takes the file's write lock
first, so the running counts that limits and serial keys are checked
against cannot change under the claim; any number of supervisors on one
machine may share the file.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import msgspec

from procqueue import errors, models
from procqueue.store import _queries, _wake, base

log = logging.getLogger("procqueue.store")
_Q = _queries.load("sqlite")
_BUSY_TIMEOUT_S = 60.0
_encode = msgspec.json.encode
_backoff_decoder = msgspec.json.Decoder(models.Backoff)
_steps_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_TERMINAL_OR_PENDING = frozenset(s.value for s in models.JobState)


def _row_to_info(row: sqlite3.Row) -> models.JobInfo:
    return models.JobInfo(
        id=row["id"],
        name=row["name"],
        queue=row["queue"],
        state=models.JobState(row["state"]),
        priority=row["priority"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        args=msgspec.json.decode(row["args"]),
        result=None if row["result"] is None else msgspec.json.decode(row["result"]),
        error=row["error"],
        progress=row["progress"],
        fraction=row["fraction"],
        key=row["key"],
        serial_key=row["serial_key"],
        tags=msgspec.json.decode(row["tags"]),
        run_at=models.to_datetime(row["run_at"]),  # type: ignore[arg-type]
        created_at=models.to_datetime(row["created_at"]),  # type: ignore[arg-type]
        started_at=models.to_datetime(row["started_at"]),
        finished_at=models.to_datetime(row["finished_at"]),
        deadline_at=models.to_datetime(row["deadline_at"]),
        pid=row["pid"],
    )


def _enable_wal(db: sqlite3.Connection) -> None:
    """Switches `db` to WAL. On a fresh file that others open at the same time,
    SQLite reports "database is locked" at once instead of waiting out the busy
    timeout, so that wait is done here."""
    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def _record_params(o: models.Outcome, now: float) -> dict[str, Any]:
    return {
        "id": o.id,
        "attempt": o.attempt,
        "state": o.state.value,
        "result": None if o.result is None else o.result.decode(),
        "error": None if o.error is None else models.cap_error(o.error),
        "run_at": o.run_at,
        "refund": 1 if o.refund else 0,
        "progress": o.progress,
        "fraction": o.fraction,
        "now": now,
    }


class SqliteStore(base.ClaimVia):
    """A `Store` on one SQLite file. Safe to share between threads (one lock)."""

    backend = "sqlite"

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(
                path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            self._db.row_factory = sqlite3.Row
            _enable_wal(self._db)
            # WAL + NORMAL survives any process crash; only an OS crash may lose
            # the last transactions.
            self._db.execute("PRAGMA synchronous=NORMAL")
            # Checkpoint every ~40 MB of WAL rather than 4 MB: the hot pages
            # (claim index, running rows) are rewritten once per checkpoint,
            # so rarer checkpoints cost several times less per job.
            self._db.execute("PRAGMA wal_autocheckpoint=10000")
            self._db.execute("PRAGMA journal_size_limit=67108864")
        except sqlite3.Error as exc:
            raise errors.StoreError(f"cannot open SQLite database {path!r}: {exc}") from None
        self._lock = threading.RLock()
        self._wake = _wake.WakeDir(path)

    # -- plumbing ---------------------------------------------------------

    @contextmanager
    def _tx(self, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute(f"BEGIN {mode}")
            except sqlite3.Error as exc:
                raise errors.StoreError(f"SQLite {self.path}: {exc}") from None
            try:
                yield self._db
            except BaseException:
                self._rollback()
                raise
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise errors.StoreError(f"SQLite {self.path}: {exc}") from None

    def _rollback(self) -> None:
        """Rolls back if a transaction is still open: SQLite may already have
        rolled it back itself (SQLITE_FULL), and the original error is the one
        worth reporting."""
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise errors.StoreError(f"SQLite {self.path}: {exc}") from None

    def _all(self, query: str, **params: Any) -> list[sqlite3.Row]:
        with self._lock, self._errors():
            return self._db.execute(_Q[query], params).fetchall()

    def _run(self, query: str, **params: Any) -> int:
        with self._lock, self._errors():
            return self._db.execute(_Q[query], params).rowcount

    # -- schema -----------------------------------------------------------

    def migrate(self, *, now: float = 0.0) -> int:
        with self._errors(), self._tx() as db:
            db.execute(_Q["schema_table_create"])
            current: int = db.execute(_Q["schema_version_get"]).fetchone()["version"]
            if current > base.SCHEMA_VERSION:
                raise errors.SchemaTooNew(
                    f"database schema is version {current}, this procqueue knows up to "
                    f"{base.SCHEMA_VERSION}; upgrade procqueue"
                )
            for version, script in _queries.migrations("sqlite"):
                if version > current:
                    code = "\n".join(
                        line for line in script.splitlines() if not line.lstrip().startswith("--")
                    )
                    for statement in code.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    db.execute(_Q["schema_version_set"], {"version": version, "now": 0.0})
                    current = version
        return current

    def close(self) -> None:
        with self._lock:
            self._wake.close()
            self._db.close()

    # -- jobs -------------------------------------------------------------

    def wake_fileno(self) -> int | None:
        return self._wake.listen()

    def wake_drain(self) -> bool:
        return self._wake.drain()

    def job_insert_many(
        self, *, jobs: Sequence[models.NewJob], now: float, connection: object | None = None
    ) -> list[int]:
        if connection is not None:
            raise errors.EnqueueError("connection= is only supported with PostgreSQL")
        ids: list[int] = []
        with self._errors(), self._tx() as db:
            for job in jobs:
                ids.append(self._insert(db, job, now))
        self._wake.notify()
        return ids

    @staticmethod
    def _insert(db: sqlite3.Connection, job: models.NewJob, now: float) -> int:
        """Inserts one job (or finds the holder of its key); returns the id."""
        row = db.execute(
            _Q["job_insert"],
            {
                "name": job.name,
                "queue": job.queue,
                "priority": job.priority,
                "max_attempts": job.max_attempts,
                "args": job.args.decode(),
                "key": job.key,
                "serial_key": job.serial_key,
                "tags": _encode(job.tags).decode(),
                "timeout": job.timeout,
                "max_memory": job.max_memory,
                "backoff": _encode(job.backoff).decode(),
                "on_failure": job.on_failure,
                "run_at": now if job.run_at is None else job.run_at,
                "now": now,
                "deadline_at": job.deadline_at,
            },
        ).fetchone()
        if row is None:
            row = db.execute(_Q["job_id_by_key"], {"key": job.key}).fetchone()
        job_id: int = row["id"]
        return job_id

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
        wanted = None if queues is None else _encode(list(queues)).decode()
        with self._errors(), self._tx() as db:
            lost = [
                o.id
                for o in outcomes
                if db.execute(_Q["job_record"], _record_params(o, now)).rowcount == 0
            ]
            if count <= 0:
                return base.Cycle(lost=lost, claimed=[])
            # Over-fetch so that jobs blocked within the batch (a serial key
            # twice, a queue's last slot) don't starve the ones behind them.
            rows = db.execute(
                _Q["job_candidates"],
                {"now": now, "queues": wanted, "limit": count * 4 + 16},
            ).fetchall()
            ids = base.choose(
                (base.Candidate(r["id"], r["queue"], r["serial_key"], r["room"]) for r in rows),
                count=count,
            )
            if not ids:
                return base.Cycle(lost=lost, claimed=[])
            taken = db.execute(
                _Q["job_take"],
                {
                    "ids": _encode(ids).decode(),
                    "owner": owner,
                    "lease_until": lease_until,
                    "now": now,
                },
            ).fetchall()
        claimed = [
            models.ClaimedJob(
                id=r["id"],
                attempt=r["attempts"],
                name=r["name"],
                queue=r["queue"],
                args=r["args"].encode(),
                steps=_steps_decoder.decode(r["steps"]),
                max_attempts=r["max_attempts"],
                timeout=r["timeout"],
                max_memory=r["max_memory"],
                backoff=_backoff_decoder.decode(r["backoff"]),
                deadline_at=r["deadline_at"],
                serial_key=r["serial_key"],
                run_at=r["run_at"],
            )
            for r in taken
        ]
        order = {id_: i for i, id_ in enumerate(ids)}
        claimed.sort(key=lambda c: order[c.id])
        return base.Cycle(lost=lost, claimed=claimed)

    def job_renew_leases(self, *, owner: str, lease_until: float) -> base.Renewal:
        with self._errors(), self._tx() as db:
            rows = db.execute(
                _Q["job_renew_leases"], {"owner": owner, "lease_until": lease_until}
            ).fetchall()
        return base.Renewal(
            alive={(r["id"], r["attempts"]) for r in rows},
            cancel_requested={r["id"] for r in rows if r["cancel_requested"]},
        )

    def job_cancel_requested(self, *, owner: str) -> set[int]:
        return {r["id"] for r in self._all("job_cancel_requested", owner=owner)}

    def job_set_progress(
        self, *, id: int, attempt: int, text: str | None, fraction: float | None
    ) -> bool:
        return (
            self._run("job_set_progress", id=id, attempt=attempt, text=text, fraction=fraction) > 0
        )

    def job_set_pid(self, *, id: int, attempt: int, pid: int) -> bool:
        return self._run("job_set_pid", id=id, attempt=attempt, pid=pid) > 0

    def job_save_step(self, *, id: int, attempt: int, name: str, value: bytes) -> bool:
        n = self._run("job_save_step", id=id, attempt=attempt, name=name, value=value.decode())
        return n > 0

    def job_cancel(self, *, id: int, now: float) -> models.JobState:
        with self._errors(), self._tx() as db:
            if db.execute(_Q["job_cancel_pending"], {"id": id, "now": now}).rowcount:
                return models.JobState.CANCELLED
            if db.execute(_Q["job_cancel_running"], {"id": id}).rowcount:
                return models.JobState.RUNNING
            row = db.execute(_Q["job_state"], {"id": id}).fetchone()
        if row is None:
            raise errors.JobNotFound(f"no job {id}")
        raise errors.InvalidState(
            f"job {id} is {row['state']}; only pending or running jobs cancel"
        )

    def job_retry(self, *, id: int, now: float) -> None:
        with self._errors(), self._tx() as db:
            retried = db.execute(_Q["job_retry"], {"id": id, "now": now}).rowcount
            row = None if retried else db.execute(_Q["job_state"], {"id": id}).fetchone()
        if retried:
            self._wake.notify()
            return
        if row is None:
            raise errors.JobNotFound(f"no job {id}")
        raise errors.InvalidState(
            f"job {id} is {row['state']}; only failed or cancelled jobs retry"
        )

    def job_rescue_expired(self, *, now: float) -> int:
        with self._errors(), self._tx():
            return self._run("job_rescue_expired", now=now)

    def job_fail_past_deadline(self, *, now: float) -> int:
        with self._errors(), self._tx():
            return self._run("job_fail_past_deadline", now=now)

    def job_prune(self, *, states: Iterable[str], before: float, limit: int) -> int:
        wanted = [s for s in states if s in _TERMINAL_OR_PENDING]
        with self._errors(), self._tx():
            return self._run(
                "job_prune", states=_encode(wanted).decode(), before=before, limit=limit
            )

    def job_sweep_failures(
        self,
        *,
        now: float,
        limit: int,
        handler_job: Callable[[models.JobInfo, str], models.NewJob],
    ) -> int:
        handled = 0
        with self._errors(), self._tx() as db:
            for row in db.execute(_Q["job_failures_unhandled"], {"limit": limit}).fetchall():
                db.execute(_Q["job_mark_failure_handled"], {"id": row["id"]})
                try:
                    job = handler_job(_row_to_info(row), row["on_failure"])
                except errors.ProcqueueError as exc:
                    log.error("job %d: on_failure handler not enqueued: %s", row["id"], exc)
                    continue
                self._insert(db, job, now)
                handled += 1
        return handled

    def chore_claim(self, *, name: str, every: float, now: float) -> bool:
        with self._errors(), self._tx() as db:
            return (
                db.execute(_Q["chore_claim"], {"name": name, "every": every, "now": now}).rowcount
                > 0
            )

    # -- queues -----------------------------------------------------------

    def queue_set_limit(self, *, queue: str, limit: int | None) -> None:
        self._run("queue_set_limit", queue=queue, limit=limit)

    def queue_set_paused(self, *, queue: str, paused: bool) -> None:
        self._run("queue_set_paused", queue=queue, paused=1 if paused else 0)

    def queue_list(self, *, now: float) -> list[models.QueueInfo]:
        with self._errors(), self._tx("DEFERRED") as db:
            settings = {r["name"]: r for r in db.execute(_Q["queue_limits"])}
            counts = db.execute(_Q["queue_counts"]).fetchall()
        return base.queue_infos(
            settings={n: (r["concurrency"], bool(r["paused"])) for n, r in settings.items()},
            counts=[(r["queue"], r["state"], r["n"], r["oldest"]) for r in counts],
            now=now,
        )
