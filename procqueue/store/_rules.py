"""The record rules, each written once: what inserting a job, ending one
and running one again entail in the same transaction, whichever path does it.

Every path that ends a job (a recorded outcome, the rescue of an expired
lease, a deadline, a cancel single or bulk, an undecodable row failed at
claim) calls `Rules.ending` or `Rules.ended`; every path that makes a
finished job pending again (a retry single or bulk, a batch's retry) calls
`Rules.reopened`. What follows from a job's end is added there, and only there:
its batch may complete (below) and its dependents may become pending or be
cancelled (`_deps`); a job they cancel ended too, and the rule applies to it
in turn, in the same transaction.

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
from procqueue.store import _batch_rows, _deps, _dialect, _flow, _rows

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
    info = _batch_rows.batch_info(row, json_type)
    jobs: list[models.NewJob] = []
    for column, kind, wanted in (
        ("complete_job", "complete", True),
        ("success_job", "success", info.succeeded),
    ):
        if row[column] is None or not wanted:
            continue
        try:
            callback = _batch_rows.batch_callback(row[column], json_type)
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
        wakes supervisors on commit if any was new. The jobs they depend on
        are locked first (EnqueueError if one does not exist), then the
        batches they join (refused unless still open): jobs before batches,
        the order every ending takes."""
        parents = _deps.lock_parents(self._db, tx, jobs)
        if any(job.batch_id is not None for job in jobs):
            check_open(tx, jobs)
        rows = tx.execute_each("job_insert", [_flow.insert_params(job, now) for job in jobs])
        ids: list[int] = [
            row["id"]
            if row is not None
            else _flow.debounced(tx, job, now)
            or tx.execute("job_id_by_key", {"key": job.key}).fetchone()["id"]
            for job, row in zip(jobs, rows, strict=True)
        ]
        _flow.inserted(self._db, tx, jobs, now)
        if parents:
            new = [
                (row["id"], job)
                for job, row in zip(jobs, rows, strict=True)
                if row is not None and job.after
            ]
            self.ended(tx, _deps.add_edges(self._db, tx, new, parents, now), now)
        # a debounced job moved: its new run_at may be sooner than a supervisor's next poll
        moved = any(job.flow.debounce is not None for job in jobs)
        if moved or any(row is not None for row in rows):
            tx.notify()
        return ids

    def ending(self, tx: _dialect.Tx, ids: Sequence[int], now: float) -> Callable[[], object]:
        """Sends what the end of the jobs `ids` entails; call the result once
        the statements' results can be read (they may run in a pipeline).

        `ids` may include jobs that did not end (they are passed over): the
        dependents of each job that did are decided, and its batch completes
        if it was its last open member.
        """
        read = self._send(tx, ids, now)

        def finish() -> None:
            cancelled, promoted = read()
            # The dependents cancelled ended too; a chain of them is walked
            # level by level (never by recursion: a chain may be long).
            while cancelled:
                cancelled, woken = self._send(tx, cancelled, now)()
                promoted = promoted or woken
            if promoted:
                tx.notify()

        return finish

    def _send(
        self, tx: _dialect.Tx, ids: Sequence[int], now: float
    ) -> Callable[[], tuple[list[int], bool]]:
        """Sends the rule's statements for `ids`; the result, called once they
        can be read, inserts the handlers of the batches completed and
        returns the dependents cancelled and whether any became pending."""
        dependents = _deps.send_ending(self._db, tx, ids, now)
        array = self._db.array(list(ids))
        tx.execute("batch_lock_of_jobs", {"ids": array})
        completed = tx.execute("batch_complete_of_jobs", {"ids": array, "now": now})

        def read() -> tuple[list[int], bool]:
            cancelled, promoted = dependents()
            self._fire(tx, completed, now)
            return cancelled, promoted

        return read

    def ended(self, tx: _dialect.Tx, ids: Sequence[int], now: float) -> None:
        """`ending` for jobs that ended in `tx` outside a pipeline."""
        if ids:
            self.ending(tx, ids, now)()

    def reopened(self, tx: _dialect.Tx, ids: Sequence[int], now: float) -> None:
        """What making the finished jobs `ids` pending again entails: each
        waits for its own dependencies again (cancelled again if one still
        failed), its dependents wait for it again, the complete batch of each
        runs again (its next completion counts anew), and supervisors wake
        on commit."""
        if not ids:
            return
        again: list[int] = []
        todo = list(ids)
        while todo:  # the dependents blocked again run again too
            ran, todo = _deps.reopen(self._db, tx, todo, now)
            again += ran
        if again:
            # Every batch of a job running again is locked (jobs before batches, the
            # order of every ending) and only then reopened, in a statement of its
            # own: a transaction ending a batch's last member either completed it
            # before the lock was granted, and the reopen sees that completion, or
            # asks whether a member is open after this commits, and sees this one.
            array = self._db.array(again)
            tx.execute("batch_lock_of_reopened", {"ids": array})
            tx.execute("batch_reopen_of_jobs", {"ids": array})
        tx.notify()

    def deleted(self, tx: _dialect.Tx, ids: Sequence[int]) -> None:
        """What deleting the jobs `ids` in `tx` entails: their attempt
        history, durable steps and dependency edges (either way) go too."""
        if ids:
            array = self._db.array(list(ids))
            for query in ("attempt_prune", "step_prune", "dep_prune"):
                tx.execute(query, {"ids": array})

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
