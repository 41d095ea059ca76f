"""The store's side of the supervisors' chores: pruning finished jobs in
bounded batches, the on_failure sweep, and chores taken by one supervisor
at a time (methods of `_sql.SqlStore`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from procqueue import errors, models
from procqueue.store import _dialect, _rows, _rules

log = logging.getLogger("procqueue.store")

_STATES = frozenset(s.value for s in models.JobState)


class ChoreMethods:
    """Chores of `SqlStore` (see the module docstring)."""

    _db: _dialect.Dialect
    _json: type[str] | type[bytes]
    _rules: _rules.Rules

    def job_prune(self, *, states: Iterable[str], before: float, limit: int) -> int:
        """Deletes up to `limit` jobs in `states` finished before `before`."""
        wanted = self._db.array([s for s in states if s in _STATES])
        params = {"states": wanted, "before": before, "limit": limit}
        with self._db.transaction() as tx:
            ids = [row["id"] for row in tx.execute("job_prune", params).fetchall()]
            self._rules.deleted(tx, ids)
        return len(ids)

    def job_sweep_failures(
        self,
        *,
        now: float,
        limit: int,
        handler_job: Callable[[models.JobInfo, str], models.NewJob],
    ) -> int:
        """Enqueues the on_failure handler of up to `limit` jobs that gave up;
        returns how many.

        In one transaction: the handler job built by `handler_job(info,
        handler_name)` is inserted and the failed job marked. A row another
        sweeper marked first (mark changes nothing) is skipped, so each
        handler is enqueued once; a job whose handler can't be built (it
        raised) is marked and skipped."""
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
                self._rules.insert(tx, [job], now)
                handled += 1
        return handled

    def chore_claim(self, *, name: str, every: float, now: float) -> bool:
        """True for exactly one caller per `every` seconds, cluster-wide."""
        params = {"name": name, "every": every, "now": now}
        return self._db.statement("chore_claim", params).rowcount > 0
