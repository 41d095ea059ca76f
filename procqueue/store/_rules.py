"""The record rules, each written once: what inserting a job, ending one
and running one again entail in the same transaction, whichever path does it.

Every path that ends a job (a recorded outcome, the rescue of an expired
lease, a deadline, a cancel single or bulk, an undecodable row failed at
claim) calls `Rules.ending` or `Rules.ended`; every path that makes a
finished job pending again (a retry single or bulk, a batch's retry) calls
`Rules.reopened`. What follows from a job's end is added there, and only there.

A batch completes in the transaction that makes its last member terminal.
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
from collections.abc import Callable, Sequence

import msgspec

from procqueue import errors, models
from procqueue.store import _dialect, _rows

log = logging.getLogger("procqueue.store")


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


class Rules:
    """The record rules over one dialect, applied inside a caller's `Tx`."""

    def __init__(self, dialect: _dialect.Dialect) -> None:
        self._db = dialect

    def insert(self, tx: _dialect.Tx, jobs: Sequence[models.NewJob], now: float) -> list[int]:
        """Inserts `jobs` (a job whose key exists gives that job's id) and
        wakes supervisors on commit if any was new. Jobs joining a batch
        lock it first and are refused unless it is still open."""
        if any(job.batch_id is not None for job in jobs):
            check_open(tx, jobs)
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

    def ending(self, tx: _dialect.Tx, ids: Sequence[int], now: float) -> Callable[[], object]:
        """Sends what the end of the jobs `ids` entails; call the result once
        the statements' results can be read (they may run in a pipeline).

        `ids` may include jobs that did not end (they are passed over): the
        batch of each job that did completes if it was its last open member.
        """
        array = self._db.array(list(ids))
        tx.execute("batch_lock_of_jobs", {"ids": array})
        completed = tx.execute("batch_complete_of_jobs", {"ids": array, "now": now})
        return lambda: self._fire(tx, completed, now)

    def ended(self, tx: _dialect.Tx, ids: Sequence[int], now: float) -> None:
        """`ending` for jobs that ended in `tx` outside a pipeline."""
        if ids:
            self.ending(tx, ids, now)()

    def reopened(self, tx: _dialect.Tx, ids: Sequence[int]) -> None:
        """What making the finished jobs `ids` pending again entails: the
        complete batch of each runs again (its next completion counts anew),
        and supervisors wake on commit."""
        if ids:
            tx.execute("batch_reopen_of_jobs", {"ids": self._db.array(list(ids))})
            tx.notify()

    def complete(self, tx: _dialect.Tx, id: int, now: float) -> bool:
        """Completes batch `id` if it is finished; its row is locked already."""
        completed = tx.execute("batch_complete", {"id": id, "now": now})
        return self._fire(tx, completed, now) > 0

    def _fire(self, tx: _dialect.Tx, completed: _dialect.Cursor, now: float) -> int:
        """Inserts the handler jobs of each batch `completed` names; how many."""
        fired = 0
        for done in completed.fetchall():
            row = tx.execute("batch_get", {"id": done["id"]}).fetchone()
            info, jobs = callback_jobs(row, self._db.json_type, now)
            log.info(
                "batch %s (%s) complete: %s done, %s failed, %s cancelled",
                info.id,
                info.name,
                info.done,
                info.failed,
                info.cancelled,
            )
            if jobs:
                self.insert(tx, jobs, now)
            fired += 1
        return fired
