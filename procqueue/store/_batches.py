"""Batches in the one SQL store (issue 15): creating, sealing, reading,
cancelling, retrying and pruning them, and completing them.

A batch completes in the transaction that makes its last member terminal,
whatever made it so: a recorded outcome, the rescue of an expired lease
that gave up, a deadline, a cancel, an undecodable row failed at claim.
That transaction locks the batch's row after writing its members and then,
in a statement of its own (on PostgreSQL: a fresh snapshot under READ
COMMITTED), completes the batch only if it is sealed, has members, is not
complete yet and has no member pending or running. Of two transactions
that end a batch's last two members at once, the second to take the lock
sees the first's member: exactly one of them completes the batch, and it
inserts the handler jobs before it commits. Their keys name the batch and
its completion (``batch:ID:N:complete``), a second fence. So a callback is
enqueued once per completion whatever supervisors crash or race, and lost
never: a rollback undoes the member's outcome too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import msgspec

from procqueue import errors, models
from procqueue.store import _dialect, _rows

log = logging.getLogger("procqueue.store")

DELETE_CHUNK = 2000
"""Member rows deleted per statement when a batch is pruned."""


def check_open(tx: _dialect.Tx, jobs: Sequence[models.NewJob]) -> None:
    """Locks the batches `jobs` join and checks they still accept members.

    Raises:
        errors.BatchNotFound: a batch does not exist.
        errors.InvalidState: a batch is sealed (or was cancelled).
    """
    for id_ in sorted({job.batch_id for job in jobs if job.batch_id is not None}):
        row = tx.execute("batch_lock", {"id": id_}).fetchone()
        if row is None:
            raise errors.BatchNotFound(f"no batch {id_}")
        if row["sealed_at"] is not None:
            raise errors.InvalidState(f"batch {id_} is sealed; no job joins it any more")


def queue_completion(tx: _dialect.Tx, ids: object, now: float) -> _dialect.Cursor:
    """Locks the batches of the jobs `ids` (a dialect array) and completes
    those that are finished; inside a pipeline, the two statements add no
    round trip. Pass the returned cursor to `fire` once it can be read."""
    tx.execute("batch_lock_of_jobs", {"ids": ids})
    return tx.execute("batch_complete_of_jobs", {"ids": ids, "now": now})


def callback_jobs(
    row: _rows.Row, json_type: type[str] | type[bytes], now: float
) -> tuple[models.BatchInfo, list[models.NewJob]]:
    """The info of the batch just completed in `row` (a ``batch_get`` row)
    and the handler jobs to insert for it: on_complete always, on_success
    when every member is done. A handler whose stored job does not decode
    is logged and left out; the batch completes all the same."""
    info = _rows.batch_info(row, json_type)
    jobs: list[models.NewJob] = []
    for column, kind, wanted in (
        ("complete_job", "complete", True),
        ("success_job", "success", info.succeeded),
    ):
        if row[column] is None or not wanted:
            continue
        try:
            callback = _rows.batch_callback(row[column], json_type)
            args = msgspec.json.encode({callback.arg: info} if callback.arg else {})
        except _rows.Undecodable as exc:
            log.error("batch %s: on_%s handler not enqueued: %s", info.id, kind, exc)
            continue
        jobs.append(
            msgspec.structs.replace(
                callback.job,
                args=args,
                key=f"batch:{info.id}:{info.completions}:{kind}",
                batch_id=None,
                deadline_at=None if callback.deadline is None else now + callback.deadline,
            )
        )
    return info, jobs


class BatchMethods:
    """The batch half of `_sql.SqlStore` (see `base.Store` for each method's contract)."""

    _db: _dialect.Dialect
    _json: type[str] | type[bytes]

    @staticmethod
    def _insert(tx: _dialect.Tx, jobs: Sequence[models.NewJob], now: float) -> list[int]:
        raise NotImplementedError  # SqlStore's

    def _fire(self, tx: _dialect.Tx, completed: _dialect.Cursor, now: float) -> int:
        """Inserts the handler jobs of each batch `completed` names."""
        fired = 0
        for done in completed.fetchall():
            row = tx.execute("batch_get", {"id": done["id"]}).fetchone()
            info, jobs = callback_jobs(row, self._json, now)
            log.info(
                "batch %s (%s) complete: %s done, %s failed, %s cancelled",
                info.id,
                info.name,
                info.done,
                info.failed,
                info.cancelled,
            )
            if jobs:
                self._insert(tx, jobs, now)
            fired += 1
        return fired

    def _complete_of_jobs(self, tx: _dialect.Tx, ids: Sequence[int], now: float) -> int:
        """Completes the finished batches of the jobs `ids`, in `tx`."""
        if not ids:
            return 0
        return self._fire(tx, queue_completion(tx, self._db.array(list(ids)), now), now)

    def _complete(self, tx: _dialect.Tx, id: int, now: float) -> int:
        """Completes batch `id` if it is finished; its row is locked already."""
        return self._fire(tx, tx.execute("batch_complete", {"id": id, "now": now}), now)

    def _locked(self, tx: _dialect.Tx, id: int) -> Any:
        row = tx.execute("batch_lock", {"id": id}).fetchone()
        if row is None:
            raise errors.BatchNotFound(f"no batch {id}")
        return row

    def batch_create(
        self,
        *,
        name: str,
        meta: bytes,
        on_complete: models.BatchCallback | None,
        on_success: models.BatchCallback | None,
        now: float,
    ) -> int:
        params = {
            "name": name,
            "meta": _rows.json_text(meta, "the batch's meta"),
            "complete_job": _rows.callback_json(on_complete),
            "success_job": _rows.callback_json(on_success),
            "now": now,
        }
        with self._db.transaction() as tx:
            id_: int = tx.execute("batch_insert", params).fetchone()["id"]
        return id_

    def batch_seal(self, *, id: int, now: float) -> bool:
        with self._db.transaction() as tx:
            self._locked(tx, id)
            tx.execute("batch_seal", {"id": id, "now": now})
            return self._complete(tx, id, now) > 0

    def batch_get(self, *, id: int) -> models.BatchInfo | None:
        rows = self._db.statement("batch_get", {"id": id}, idempotent=True).rows
        return _rows.batch_info(rows[0], self._json) if rows else None

    def batch_list(
        self, *, name: str | None, state: str | None, limit: int
    ) -> list[models.BatchInfo]:
        params = {"name": name, "state": state, "limit": limit}
        rows = self._db.statement("batch_list", params, idempotent=True).rows
        return [_rows.batch_info(row, self._json) for row in rows]

    def batch_members(
        self, *, id: int, after: int, state: str | None, limit: int
    ) -> list[models.JobInfo]:
        params = {"id": id, "after": after, "state": state, "limit": limit}
        rows = self._db.statement("batch_members", params, idempotent=True).rows
        return [_rows.job_info(row, self._json) for row in rows]

    def batch_cancel(self, *, id: int, now: float) -> int:
        """Pending members are cancelled and running ones flagged before the
        batch's row is locked: members first, then their batch, the order
        every path that ends a member takes (no lock cycle)."""
        with self._db.transaction() as tx:
            n = tx.execute("batch_cancel_pending", {"id": id, "now": now}).rowcount
            flagged = tx.execute("batch_cancel_running", {"id": id}).rowcount
            self._locked(tx, id)
            tx.execute("batch_mark_cancelled", {"id": id, "now": now})
            if flagged:
                tx.notify()  # their supervisors act at once
            self._complete(tx, id, now)
        return n + flagged

    def batch_retry(self, *, id: int, now: float) -> int:
        with self._db.transaction() as tx:
            n = tx.execute("batch_retry_failed", {"id": id, "now": now}).rowcount
            self._locked(tx, id)
            if n:
                tx.execute("batch_reopen", {"id": id})
                tx.notify()
        return n

    def batch_delete(self, *, id: int) -> int:
        """Deletes a complete batch and its members, in bounded statements;
        returns how many members went."""
        info = self.batch_get(id=id)
        if info is None:
            raise errors.BatchNotFound(f"no batch {id}")
        if info.state != models.BatchState.COMPLETE:
            raise errors.InvalidState(f"batch {id} is {info.state}; only complete batches prune")
        return self._delete(id)

    def _delete(self, id: int) -> int:
        deleted = 0
        while True:
            params = {"id": id, "limit": DELETE_CHUNK}
            n = self._db.statement("batch_delete_members", params).rowcount
            deleted += n
            if n < DELETE_CHUNK:
                break
        self._db.statement("batch_delete", {"id": id})
        return deleted

    def batch_prune(self, *, before: float, limit: int) -> int:
        params = {"before": before, "limit": limit}
        ids = [r["id"] for r in self._db.statement("batch_prunable", params).rows]
        for id_ in ids:
            self._delete(id_)
        return len(ids)

    def batch_sweep(self, *, now: float, limit: int) -> int:
        """Completes, each under its row lock, sealed batches whose members
        have all ended but that are not complete: a safety net for a path
        that ends jobs without completing their batch (a bulk action written
        without it, a hand edit). Returns how many it completed."""
        params = {"limit": limit}
        if not self._db.statement("batch_finished_open", params, idempotent=True).rows:
            return 0  # the usual answer, without taking a write lock
        with self._db.transaction() as tx:
            ids = [r["id"] for r in tx.execute("batch_finished_open", params).fetchall()]
            completed = 0
            for id_ in ids:
                self._locked(tx, id_)
                completed += self._complete(tx, id_, now)
        if completed:
            log.warning("completed %d batches whose last member ended elsewhere", completed)
        return completed

    def batch_member_counts(self) -> list[tuple[str, str, int]]:
        rows = self._db.statement("batch_member_counts", {}, idempotent=True).rows
        return [
            (r["name"], r["state"], r["n"])
            for r in rows
            if type(r["name"]) is str and type(r["state"]) is str
        ]
