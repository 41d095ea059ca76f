"""The one SQL store: every `base.Store` method and the claim algorithm,
written once over the named queries of ``sql/<backend>/queries.sql`` (the
same names with the same parameters on both backends).

What differs between the backends sits behind `_dialect.Dialect`; what a
job goes through (insert, claim, fencing, cancel, retry, the failure sweep,
queues, migrations, wake-ups) is decided here, so the two cannot drift apart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from procqueue import errors, models
from procqueue.store import _batches, _dialect, _queries, _rows, _sql_ops, base

log = logging.getLogger("procqueue.store")

_STATES = frozenset(s.value for s in models.JobState)


def overfetch(count: int) -> int:
    """How many candidates a claim of `count` reads: more than it takes, so
    that jobs blocked within the batch (a serial key twice, a queue's last
    slot) don't starve the ones behind them."""
    return count * 4 + 16


def _refused(id: int, row: Any, rule: str) -> errors.ProcqueueError:
    if row is None:
        return errors.JobNotFound(f"no job {id}")
    return errors.InvalidState(f"job {id} is {row['state']}; {rule}")


class SqlStore(_sql_ops.OpsStore, _batches.BatchMethods):
    """A `base.Store` over one `Dialect`. Safe to share between threads when
    the dialect is (both are). The operators' side (attempt history,
    supervisors, managed limits, bulk actions) is in `_sql_ops.OpsStore`;
    batches are in `_batches.BatchMethods`."""

    def __init__(self, dialect: _dialect.Dialect) -> None:
        self._db = dialect
        self.backend = dialect.backend
        self._json = dialect.json_type

    def close(self) -> None:
        self._db.close()

    def migrate(self, *, now: float) -> int:
        """Creates or upgrades the schema under the migration lock, so any
        number of processes may race; returns the version. `now` is recorded
        as each migration's time."""
        with self._db.transaction() as tx:
            self._db.prepare_migration(tx)
            tx.execute("schema_table_create")
            current: int = tx.execute("schema_version_get").fetchone()["version"]
            if current > base.SCHEMA_VERSION:
                raise errors.SchemaTooNew(
                    f"{self._db.where} has schema version {current}, this procqueue "
                    f"knows up to {base.SCHEMA_VERSION}; upgrade procqueue"
                )
            for version, script in _queries.migrations(self.backend):
                if version > current:
                    tx.script(version, script)
                    tx.execute("schema_version_set", {"version": version, "now": now})
                    current = version
        return current

    # -- wake-ups ---------------------------------------------------------

    def wake_fileno(self) -> int | None:
        return self._db.wake_fileno()

    def wake_drain(self) -> bool:
        return self._db.wake_drain()

    # -- jobs -------------------------------------------------------------

    def job_insert_many(
        self, *, jobs: Sequence[models.NewJob], now: float, connection: object | None = None
    ) -> list[int]:
        with self._db.transaction(connection=connection) as tx:
            return self._insert(tx, jobs, now)

    @staticmethod
    def _insert(tx: _dialect.Tx, jobs: Sequence[models.NewJob], now: float) -> list[int]:
        """Inserts `jobs` (a job whose key exists gives that job's id) and
        wakes supervisors on commit if any was new. Jobs joining a batch
        lock it first and are refused unless it is still open."""
        if any(job.batch_id is not None for job in jobs):
            _batches.check_open(tx, jobs)
        rows = tx.execute_each("job_insert", [_rows.insert_params(job, now) for job in jobs])
        ids: list[int] = [
            tx.execute("job_id_by_key", {"key": job.key}).fetchone()["id"]
            if row is None
            else row["id"]
            for job, row in zip(jobs, rows, strict=True)
        ]
        if any(row is not None for row in rows):
            tx.notify()
        return ids

    def job_get(self, *, id: int, history: bool = True) -> models.JobInfo | None:
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
        params = {"state": state, "queue": queue, "name": name, "limit": limit}
        rows = self._db.statement("job_list", params, idempotent=True).rows
        return [_rows.job_info(row, self._json) for row in rows]

    # job_claim and job_record_and_claim repeat base.Store's signatures: the
    # Protocol declares the seam, and this is its one implementation.

    def job_claim(
        self,
        *,
        owner: str,
        queues: Sequence[str] | None,
        count: int,
        lease_until: float,
        now: float,
    ) -> list[models.ClaimedJob]:
        return self.job_record_and_claim(
            outcomes=(), owner=owner, queues=queues, count=count, lease_until=lease_until, now=now
        ).claimed

    def job_record_many(self, *, outcomes: Sequence[models.Outcome], now: float) -> list[int]:
        return self.job_record_and_claim(
            outcomes=outcomes, owner="", queues=None, count=0, lease_until=now, now=now
        ).lost

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
        """One transaction. The claim holds the claim lock, so the running
        counts that limits and serial keys are checked against cannot change
        under it. Outcomes are written in id order, so that two transactions
        touching the same rows cannot deadlock. A taken job whose row does
        not decode is failed in the same transaction and not returned. A
        batch whose last member this ends completes here too (`_batches`)."""
        if not outcomes and count <= 0:
            return base.Cycle(lost=[], claimed=[])
        # In id order; a refused value raises here, before any SQL runs.
        records = [
            (o.id, _rows.record_params(o, now), _sql_ops.history_params(o, now))
            for o in sorted(outcomes, key=lambda o: o.id)
        ]
        wanted = None if queues is None else self._db.array(list(queues))
        with self._db.transaction() as tx:
            with tx.pipeline("job_record_and_claim"):
                histories = [h for _, _, h in records if h is not None]
                if histories:  # before the updates, while their fences still hold
                    tx.execute_each("attempt_record", histories)
                recorded = tx.execute_each("job_record", [p for _, p, _ in records])
                if records:
                    ids_ = self._db.array([id_ for id_, _, _ in records])
                    completed = _batches.queue_completion(tx, ids_, now)
                if count > 0:
                    tx.lock("claim")
                    found = tx.execute(
                        "job_candidates", {"now": now, "queues": wanted, "limit": overfetch(count)}
                    )
            gone = {id_ for (id_, _, _), row in zip(records, recorded, strict=True) if row is None}
            candidates = found.fetchall() if count > 0 else []  # read before _fire writes
            if records:
                self._fire(tx, completed, now)
            lost = [o.id for o in outcomes if o.id in gone]
            if count <= 0:
                return base.Cycle(lost=lost, claimed=[])
            ids = base.choose(
                (
                    base.Candidate(r["id"], r["queue"], r["serial_key"], r["room"])
                    for r in candidates
                ),
                count=count,
            )
            if not ids:
                return base.Cycle(lost=lost, claimed=[])
            taken = tx.execute(
                "job_take",
                {
                    "ids": self._db.array(ids),
                    "owner": owner,
                    "lease_until": lease_until,
                    "now": now,
                },
            ).fetchall()
            claimed = [job for row in taken if (job := self._claimed(tx, row, now)) is not None]
            if len(claimed) < len(taken):  # some failed undecodable: their batches may be done
                held = {job.id for job in claimed}
                self._complete_of_jobs(tx, [r["id"] for r in taken if r["id"] not in held], now)
        order = {id_: i for i, id_ in enumerate(ids)}
        claimed.sort(key=lambda c: order[c.id])
        return base.Cycle(lost=lost, claimed=claimed)

    def _claimed(self, tx: _dialect.Tx, row: _rows.Row, now: float) -> models.ClaimedJob | None:
        """The job just taken in `row`, or None after failing it because its
        row does not decode (running it on such values is never safe)."""
        try:
            return _rows.claimed_job(row, self._json)
        except _rows.Undecodable as exc:
            error = f"the job's row cannot be decoded: {exc}"
            log.error("job %s: %s", row["id"], error)
            tx.execute("job_fail_undecodable", {"id": row["id"], "error": error, "now": now})
            return None

    def job_renew_leases(self, *, owner: str, lease_until: float) -> base.Renewal:
        params = {"owner": owner, "lease_until": lease_until}
        rows = self._db.statement("job_renew_leases", params, idempotent=True).rows
        return base.Renewal(
            alive={(r["id"], r["attempts"]) for r in rows},
            cancel_requested={r["id"] for r in rows if r["cancel_requested"]},
        )

    def job_cancel_requested(self, *, owner: str) -> set[int]:
        rows = self._db.statement("job_cancel_requested", {"owner": owner}, idempotent=True)
        return {r["id"] for r in rows.rows}

    def job_set_progress(
        self, *, id: int, attempt: int, text: str | None, fraction: float | None
    ) -> bool:
        params = {"id": id, "attempt": attempt, "text": text, "fraction": fraction}
        return self._db.statement("job_set_progress", params).rowcount > 0

    def job_set_pid(self, *, id: int, attempt: int, pid: int) -> bool:
        params = {"id": id, "attempt": attempt, "pid": pid}
        return self._db.statement("job_set_pid", params).rowcount > 0

    def job_save_step(self, *, id: int, attempt: int, name: str, value: bytes) -> bool:
        text = _rows.json_text(value, f"the value of step {name!r}")
        params = {"id": id, "attempt": attempt, "name": name, "value": text}
        return self._db.statement("job_save_step", params).rowcount > 0

    def job_cancel(self, *, id: int, now: float) -> models.JobState:
        """A cancelled running job wakes supervisors, so its own hears of it
        at once rather than at its next check."""
        with self._db.transaction() as tx:
            if tx.execute("job_cancel_pending", {"id": id, "now": now}).rowcount:
                self._complete_of_jobs(tx, [id], now)
                return models.JobState.CANCELLED
            if tx.execute("job_cancel_running", {"id": id}).rowcount:
                tx.notify()
                return models.JobState.RUNNING
            row = tx.execute("job_state", {"id": id}).fetchone()
        raise _refused(id, row, "only pending or running jobs cancel")

    def job_retry(self, *, id: int, now: float) -> None:
        with self._db.transaction() as tx:
            if tx.execute("job_retry", {"id": id, "now": now}).rowcount:
                tx.execute("batch_reopen_of_job", {"id": id})
                tx.notify()
                return
            row = tx.execute("job_state", {"id": id}).fetchone()
        raise _refused(id, row, "only failed or cancelled jobs retry")

    def job_rescue_expired(self, *, now: float) -> int:
        """Writes a ``lost`` history row for each rescued attempt first, under
        the claim lock, so that racing rescuers never both write one; completes
        the batches it finished in the same transaction."""
        with self._db.transaction() as tx:
            tx.lock("claim")
            tx.execute("attempt_record_lost", {"now": now})
            ids = [r["id"] for r in tx.execute("job_rescue_expired", {"now": now}).fetchall()]
            self._complete_of_jobs(tx, ids, now)
        return len(ids)

    def job_owners_running(self, *, host: str) -> list[str]:
        params = {"prefix": f"{host}:"}
        rows = self._db.statement("job_owners_running", params, idempotent=True).rows
        return [str(r["owner"]) for r in rows]

    def job_expire_owner(self, *, owner: str, until: float) -> int:
        params = {"owner": owner, "until": until}
        return self._db.statement("job_expire_owner", params).rowcount

    def job_fail_past_deadline(self, *, now: float) -> int:
        return self._end_many("job_fail_past_deadline", now)

    def _end_many(self, name: str, now: float) -> int:
        """Runs `name`, which may end jobs and returns their ids, and
        completes the batches it finished in the same transaction."""
        with self._db.transaction() as tx:
            ids = [r["id"] for r in tx.execute(name, {"now": now}).fetchall()]
            self._complete_of_jobs(tx, ids, now)
        return len(ids)

    def job_prune(self, *, states: Iterable[str], before: float, limit: int) -> int:
        wanted = self._db.array([s for s in states if s in _STATES])
        params = {"states": wanted, "before": before, "limit": limit}
        with self._db.transaction() as tx:
            ids = [row["id"] for row in tx.execute("job_prune", params).fetchall()]
            if ids:
                tx.execute("attempt_prune", {"ids": self._db.array(ids)})
        return len(ids)

    def job_sweep_failures(
        self,
        *,
        now: float,
        limit: int,
        handler_job: Callable[[models.JobInfo, str], models.NewJob],
    ) -> int:
        """Marks each unhandled give-up and enqueues its handler in one
        transaction. A row another sweeper marked first (mark changes
        nothing) is skipped, so each handler is enqueued once."""
        handled = 0
        with self._db.transaction() as tx:
            for row in tx.execute("job_failures_unhandled", {"limit": limit}).fetchall():
                if not tx.execute("job_mark_failure_handled", {"id": row["id"]}).rowcount:
                    continue
                handler = row["on_failure"]
                try:
                    if not isinstance(handler, str):  # an untrusted row: not even a name
                        raise _rows.Undecodable(f"column on_failure holds {handler!r}")
                    job = handler_job(_rows.job_info(row, self._json), handler)
                except (errors.ProcqueueError, _rows.Undecodable) as exc:
                    log.error("job %s: on_failure handler not enqueued: %s", row["id"], exc)
                    continue
                self._insert(tx, [job], now)
                handled += 1
        return handled

    def chore_claim(self, *, name: str, every: float, now: float) -> bool:
        params = {"name": name, "every": every, "now": now}
        return self._db.statement("chore_claim", params).rowcount > 0

    # -- queues -----------------------------------------------------------

    def queue_set_limit(
        self, *, queue: str, limit: int | None, by: str | None = None, now: float | None = None
    ) -> None:
        params = {"queue": queue, "limit": limit, "by": by, "now": now}
        self._db.statement("queue_set_limit", params)

    def queue_set_paused(self, *, queue: str, paused: bool) -> None:
        """Resuming wakes supervisors: the queue's due jobs start now, not at the next poll."""
        with self._db.transaction() as tx:
            tx.execute("queue_set_paused", {"queue": queue, "paused": paused})
            if not paused:
                tx.notify()

    def queue_list(self, *, now: float) -> list[models.QueueInfo]:
        settings = self._db.statement("queue_limits", {}, idempotent=True).rows
        counts = self._db.statement("queue_counts", {}, idempotent=True).rows
        return base.queue_infos(
            settings={
                name: (limit, paused, by, at)
                for name, limit, paused, by, at in filter(None, map(_rows.queue_setting, settings))
            },
            counts=filter(None, map(_rows.queue_count, counts)),
            now=now,
        )
