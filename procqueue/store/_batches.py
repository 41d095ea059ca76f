"""Batches in the one SQL store: creating, sealing, reading, cancelling,
retrying and pruning them. How and when a batch completes, and its handlers
are enqueued, is a record rule (`_rules`): sealing, cancelling and the
sweep here complete a batch only through it.

A job joins a batch through `NewJob.batch_id`; `job_insert_many` refuses
(InvalidState, nothing written) to add one to a sealed batch.
"""

from __future__ import annotations

import logging
from typing import Any

from procqueue import errors, models
from procqueue.store import _batch_rows, _dialect, _rows, _rules

log = logging.getLogger("procqueue.store")

DELETE_CHUNK = 2000
"""Member rows deleted per statement when a batch is pruned."""


class BatchMethods:
    """The batch half of `_sql.SqlStore`."""

    _db: _dialect.Dialect
    _json: type[str] | type[bytes]
    _rules: _rules.Rules

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
        """Creates an open batch; returns its id. `meta` is JSON of an object."""
        params = {
            "name": name,
            "meta": _rows.json_text(meta, "the batch's meta"),
            "complete_job": _batch_rows.callback_json(on_complete),
            "success_job": _batch_rows.callback_json(on_success),
            "now": now,
        }
        with self._db.transaction() as tx:
            id_: int = tx.execute("batch_insert", params).fetchone()["id"]
        return id_

    def batch_seal(self, *, id: int, now: float) -> bool:
        """Seals the batch (idempotent): nothing joins it any more, and it
        completes once every member is terminal (now, if they already are,
        and it has any). True if it completed in this call.
        Raises BatchNotFound."""
        with self._db.transaction() as tx:
            self._locked(tx, id)
            tx.execute("batch_seal", {"id": id, "now": now})
            return self._rules.complete(tx, id, now)

    def batch_get(self, *, id: int) -> models.BatchInfo | None:
        rows = self._db.statement("batch_get", {"id": id}, idempotent=True).rows
        return _batch_rows.batch_info(rows[0], self._json) if rows else None

    def batch_list(
        self, *, name: str | None, state: str | None, limit: int
    ) -> list[models.BatchInfo]:
        """Batches with that name and state (open, running, complete), newest first."""
        params = {"name": name, "state": state, "limit": limit}
        rows = self._db.statement("batch_list", params, idempotent=True).rows
        return [_batch_rows.batch_info(row, self._json) for row in rows]

    def batch_members(
        self, *, id: int, after: int, state: str | None, limit: int
    ) -> list[models.JobInfo]:
        """Up to `limit` members with ids above `after` (and in `state`), in id order."""
        params = {"id": id, "after": after, "state": state, "limit": limit}
        rows = self._db.statement("batch_members", params, idempotent=True).rows
        return [_rows.job_info(row, self._json) for row in rows]

    def batch_cancel(self, *, id: int, now: float) -> int:
        """Cancels the batch: pending members now, running ones through their
        supervisors (as `job_cancel`); seals it. Returns how many members
        were cancelled or flagged. Raises BatchNotFound.

        Members are written before the batch's row is locked: members first,
        then their batch, the order every path that ends a member takes (no
        lock cycle)."""
        with self._db.transaction() as tx:
            params = {"id": id, "now": now}
            ids = [r["id"] for r in tx.execute("batch_cancel_pending", params).fetchall()]
            flagged = tx.execute("batch_cancel_running", {"id": id}).rowcount
            self._locked(tx, id)
            tx.execute("batch_mark_cancelled", params)
            if flagged:
                tx.notify()  # their supervisors act at once
            self._rules.ended(tx, ids, now)
            if not ids:  # sealed now, a batch whose members had all ended completes
                self._rules.complete(tx, id, now)
        return len(ids) + flagged

    def batch_retry(self, *, id: int, now: float) -> int:
        """Runs the batch's failed members again (attempts reset) and reopens
        it if complete, so it completes again. Returns how many. Raises BatchNotFound."""
        with self._db.transaction() as tx:
            params = {"id": id, "now": now}
            ids = [r["id"] for r in tx.execute("batch_retry_failed", params).fetchall()]
            self._locked(tx, id)
            self._rules.reopened(tx, ids, now)
        return len(ids)

    def batch_delete(self, *, id: int) -> int:
        """Deletes a complete batch and its members, in bounded statements;
        returns how many members went. Raises BatchNotFound, or
        InvalidState for a batch not complete."""
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
            with self._db.transaction() as tx:
                ids = [row["id"] for row in tx.execute("batch_delete_members", params).fetchall()]
                self._rules.deleted(tx, ids)
            n = len(ids)
            deleted += n
            if n < DELETE_CHUNK:
                break
        self._db.statement("batch_delete", {"id": id})
        return deleted

    def batch_prune(self, *, before: float, limit: int) -> int:
        """Deletes up to `limit` batches completed before `before`, with their
        members; returns how many batches."""
        params = {"before": before, "limit": limit}
        ids = [r["id"] for r in self._db.statement("batch_prunable", params).rows]
        for id_ in ids:
            self._delete(id_)
        return len(ids)

    def batch_sweep(self, *, now: float, limit: int) -> int:
        """Completes, each under its row lock, sealed batches whose members
        have all ended but that are not complete: a safety net (every path
        that ends a job completes its batch itself, `_rules`; a hand edit
        does not). Returns how many it completed."""
        params = {"limit": limit}
        if not self._db.statement("batch_finished_open", params, idempotent=True).rows:
            return 0  # the usual answer, without taking a write lock
        with self._db.transaction() as tx:
            ids = [r["id"] for r in tx.execute("batch_finished_open", params).fetchall()]
            completed = 0
            for id_ in ids:
                self._locked(tx, id_)
                if self._rules.complete(tx, id_, now):
                    completed += 1
        if completed:
            log.warning("completed %d batches whose last member ended elsewhere", completed)
        return completed

    def batch_member_counts(self) -> list[tuple[str, str, int]]:
        """``(batch name, state, members)`` over the batches not complete."""
        rows = self._db.statement("batch_member_counts", {}, idempotent=True).rows
        return [
            (r["name"], r["state"], r["n"])
            for r in rows
            if type(r["name"]) is str and type(r["state"]) is str
        ]
