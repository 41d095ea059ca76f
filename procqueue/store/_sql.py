"""The one SQL store, written once over the named queries of
``sql/<backend>/queries.sql`` (the same names with the same parameters on
both backends): the class is the store's interface (`base.Store`), each
method's docstring its contract.

What differs between the backends sits behind `_dialect.Dialect`; what a
job goes through (insert, claim, fencing, cancel, retry, the failure sweep,
migrations, wake-ups) is decided here, so the two cannot drift apart. What
ending or reopening a job entails is in `_rules`, the operators' side in
`_sql_ops`, batches in `_batches`, dependencies in `_deps`, the
supervisors' chores (pruning, the failure sweep) in `_chores`, their
record-and-claim cycle in `_cycle`.

Methods are named noun_verb, take keyword arguments only, and receive the
time as ``now`` from the caller's clock: no query asks the database what
time it is. Every write about a running job is fenced by ``(id, attempt)``
and only applies while the job is still ``running`` at that attempt, so a
supervisor that lost its lease can never overwrite the one that took over.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from procqueue import errors, models
from procqueue.store import (
    _batches,
    _chores,
    _claim,
    _cycle,
    _deps,
    _dialect,
    _flow,
    _queries,
    _rows,
    _rules,
    _sql_ops,
)


def _refused(id: int, row: Any, rule: str) -> errors.ProcqueueError:
    if row is None:
        return errors.JobNotFound(f"no job {id}")
    return errors.InvalidState(f"job {id} is {row['state']}; {rule}")


class SqlStore(
    _cycle.CycleMethods,
    _sql_ops.OpsStore,
    _batches.BatchMethods,
    _deps.DepMethods,
    _chores.ChoreMethods,
    _flow.FlowMethods,
):
    """A job database over one `Dialect`; thread-safe when the dialect is (both are)."""

    def __init__(self, dialect: _dialect.Dialect) -> None:
        self._db = dialect
        self.backend = dialect.backend
        self._json = dialect.json_type
        self._rules = _rules.Rules(dialect)

    def close(self) -> None:
        """Releases connections and wake-up sockets; calls after it raise StoreError."""
        self._db.close()

    def migrate(self, *, now: float) -> int:
        """Creates or upgrades the schema under the migration lock, so any
        number of processes may race; returns the version. `now` is recorded
        as each migration's time. Raises SchemaTooNew when the database was
        migrated by newer code."""
        with self._db.transaction() as tx:
            self._db.prepare_migration(tx)
            tx.execute("schema_table_create")
            current: int = tx.execute("schema_version_get").fetchone()["version"]
            if current > _queries.SCHEMA_VERSION:
                raise errors.SchemaTooNew(
                    f"{self._db.where} has schema version {current}, this procqueue "
                    f"knows up to {_queries.SCHEMA_VERSION}; upgrade procqueue"
                )
            for version, script in _queries.migrations(self.backend):
                if version > current:
                    tx.script(version, script)
                    tx.execute("schema_version_set", {"version": version, "now": now})
                    current = version
        return current

    def schema_version(self) -> int:
        """The version of this database's schema, 0 when it has none; creates
        and changes nothing (read-only tools check it instead of migrating)."""
        with self._db.transaction() as tx:
            if not tx.execute("schema_table_exists").fetchone()["present"]:
                return 0
            version: int = tx.execute("schema_version_get").fetchone()["version"]
            return version

    # -- wake-ups ---------------------------------------------------------

    def wake_fileno(self) -> int | None:
        """A file descriptor that becomes readable when there may be new work
        for a supervisor (PostgreSQL LISTEN, SQLite datagram socket), or None
        when there is none now (ask again later; polling covers the gap).

        Supervisors are woken after the commit of an enqueue, a retry, a
        promotion, the cancel of a running job, the resume of a queue.
        """
        return self._db.wake_fileno()

    def wake_drain(self) -> bool:
        """Consumes pending wake-ups; True if there was at least one. Never raises."""
        return self._db.wake_drain()

    # -- jobs -------------------------------------------------------------

    def job_insert_many(
        self, *, jobs: Sequence[models.NewJob], now: float, connection: object | None = None
    ) -> list[int]:
        """Inserts `jobs` in one transaction; returns their ids in order.

        With `connection` (PostgreSQL: a psycopg connection of the caller's),
        the insert joins that connection's transaction and becomes visible,
        and wakes supervisors, only when the caller commits. A job whose
        `key` already exists is not inserted: its slot in the result holds
        the existing job's id.
        """
        with self._db.transaction(connection=connection) as tx:
            return self._rules.insert(tx, jobs, now)

    def job_get(self, *, id: int, history: bool = True) -> models.JobInfo | None:
        """One job's record, with its attempt history unless `history` is False."""
        rows = self._db.statement("job_get", {"id": id}, idempotent=True).rows
        if not rows:
            return None
        info = _rows.job_info(rows[0], self._json)
        if not history:
            return info
        return msgspec.structs.replace(info, history=self.attempt_list(id=id))

    def job_list(
        self, *, state: str | None, queue: str | None, name: str | None, limit: int
    ) -> list[models.JobInfo]:
        """Jobs matching every given filter, newest first."""
        params = {"state": state, "queue": queue, "name": name, "limit": limit}
        rows = self._db.statement("job_list", params, idempotent=True).rows
        return [_rows.job_info(row, self._json) for row in rows]

    def job_renew_leases(
        self, *, owner: str, lease_until: float, released: Sequence[int] = ()
    ) -> _claim.Renewal:
        """Extends, in one statement, the lease of every job `owner` holds but
        the `released` ones (given up: left to the rescue of their lease)."""
        params = {
            "owner": owner,
            "lease_until": lease_until,
            "released": self._db.array(list(released)),
        }
        rows = self._db.statement("job_renew_leases", params, idempotent=True).rows
        return _claim.Renewal(
            alive={(r["id"], r["attempts"]) for r in rows},
            cancel_requested={r["id"] for r in rows if r["cancel_requested"]},
        )

    def job_cancel_requested(self, *, owner: str) -> set[int]:
        """Ids of running jobs held by `owner` whose cancel was requested."""
        rows = self._db.statement("job_cancel_requested", {"owner": owner}, idempotent=True)
        return {r["id"] for r in rows.rows}

    def job_set_progress(
        self, *, id: int, attempt: int, text: str | None, fraction: float | None
    ) -> bool:
        """Sets progress (fenced); False when the attempt is no longer running."""
        params = {"id": id, "attempt": attempt, "text": text, "fraction": fraction}
        return self._db.statement("job_set_progress", params).rowcount > 0

    def job_set_pid(
        self, *, id: int, attempt: int, pid: int, started_at: float | None = None
    ) -> bool:
        """Records the child running an attempt and when it started it (fenced);
        False when it is no longer running."""
        params = {"id": id, "attempt": attempt, "pid": pid, "started_at": started_at}
        return self._db.statement("job_set_pid", params).rowcount > 0

    def job_save_step(self, *, id: int, attempt: int, name: str, value: bytes) -> bool:
        """Saves a durable step's JSON result (fenced); False when the lease is lost."""
        text = _rows.json_text(value, f"the value of step {name!r}")
        params = {"id": id, "attempt": attempt, "name": name, "value": text}
        return self._db.statement("job_save_step", params).rowcount > 0

    def job_cancel(self, *, id: int, now: float) -> models.JobState:
        """Cancels a pending job now, or flags a running one for its
        supervisor, woken so that it hears of it at once.

        Returns the job's state afterwards (``cancelled`` or ``running``).
        Raises JobNotFound, or InvalidState for a finished job.
        """
        with self._db.transaction() as tx:
            if tx.execute("job_cancel_pending", {"id": id, "now": now}).rowcount:
                self._rules.ended(tx, [id], now)
                return models.JobState.CANCELLED
            if tx.execute("job_cancel_running", {"id": id}).rowcount:
                tx.notify()
                return models.JobState.RUNNING
            row = tx.execute("job_state", {"id": id}).fetchone()
        raise _refused(id, row, "only pending or running jobs cancel")

    def job_retry(self, *, id: int, now: float) -> None:
        """Makes a failed or cancelled job pending again with attempts reset.
        Raises JobNotFound, or InvalidState for a job in another state."""
        with self._db.transaction() as tx:
            if tx.execute("job_retry", {"id": id, "now": now}).rowcount:
                self._rules.reopened(tx, [id], now)
                return
            row = tx.execute("job_state", {"id": id}).fetchone()
        raise _refused(id, row, "only failed or cancelled jobs retry")

    def job_rescue_expired(self, *, now: float) -> int:
        """Running jobs whose lease passed: pending again (the attempt is
        spent), failed if that was the last attempt, cancelled if a cancel
        was requested. Returns how many.

        Writes a ``lost`` history row for each rescued attempt first, under
        the claim lock, so that racing rescuers never both write one."""
        with self._db.transaction() as tx:
            tx.lock("claim")
            tx.execute("attempt_record_lost", {"now": now})
            ids = [r["id"] for r in tx.execute("job_rescue_expired", {"now": now}).fetchall()]
            self._rules.ended(tx, ids, now)
        return len(ids)

    def job_owners_running(self, *, host: str) -> list[str]:
        """Owners (``host:pid:token``) on `host` that hold running jobs."""
        params = {"prefix": f"{host}:"}
        rows = self._db.statement("job_owners_running", params, idempotent=True).rows
        return [str(r["owner"]) for r in rows]

    def job_expire_owner(self, *, owner: str, until: float) -> int:
        """Brings the leases of `owner`'s running jobs forward to `until` (it
        is gone), so that a rescue at or after `until` takes them."""
        params = {"owner": owner, "until": until}
        return self._db.statement("job_expire_owner", params).rowcount

    def job_fail_past_deadline(self, *, now: float) -> int:
        """Pending jobs past their deadline fail with "passed its deadline"."""
        with self._db.transaction() as tx:
            rows = tx.execute("job_fail_past_deadline", {"now": now}).fetchall()
            self._rules.ended(tx, [r["id"] for r in rows], now)
        return len(rows)
