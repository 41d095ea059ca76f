"""Dependencies between jobs: the record rule's workflow half (`_rules`
calls it; nothing else writes a dependency's consequences).

A job enqueued with ``after=[...]`` gets one edge per dependency in
``job_deps``; an edge is resolved once its dependency is terminal. A job
with an unresolved edge is ``blocked`` and never claimed. The transaction
that ends a job, in the same place that completes batches:

- cancels its blocked dependents (unless ``allow_failure``) when it failed
  or was cancelled, naming it (``blocked_by``): they ended too, so what
  their end entails follows in the same transaction (transitively);
- resolves its edges and makes pending every dependent left with none
  unresolved (and wakes supervisors on commit).

Every statement touches only the edges of the jobs named (the
``depends_on`` index), so the end of a job with 100,000 dependents costs
O(its dependents), and is idempotent (resolved edges are passed over).
The dependents are locked in id order before they are decided: of two
transactions ending a job's last two dependencies at once, the second to
take the lock sees the first's edge resolved, so one of them promotes it.
Below a job that failed or was cancelled, every blocked job downstream is
locked in the same statement, in the same order: the cancel runs down level
by level, and a later level's lock taken then would cross another ending's
id order (a deadlock of two endings deciding shared dependents).
An enqueue locks the jobs it names (``FOR SHARE``) before it writes its
edges, so none of them can end unseen in between.

A dependency exists before its dependent (an enqueue naming an unknown id
is refused), so dependents always have higher ids and no cycle can exist.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import msgspec

from procqueue import errors, models
from procqueue.store import _dialect, _rows

log = logging.getLogger("procqueue.store")

_TERMINAL = frozenset(s.value for s in models.TERMINAL_STATES)


def lock_parents(
    db: _dialect.Dialect, tx: _dialect.Tx, jobs: Sequence[models.NewJob]
) -> dict[int, str]:
    """Locks the jobs that `jobs` depend on; their states by id.

    Raises:
        errors.EnqueueError: one of them does not exist (nothing is written).
    """
    wanted = sorted({id_ for job in jobs for id_ in job.after})
    if not wanted:
        return {}
    rows = tx.execute("dep_lock_parents", {"ids": db.array(wanted)}).fetchall()
    states = {int(r["id"]): str(r["state"]) for r in rows}
    for job in jobs:
        missing = sorted(set(job.after) - states.keys())
        if missing:
            raise errors.EnqueueError(
                f"{job.name} depends on job {missing[0]}, which does not exist"
            )
    return states


def add_edges(
    db: _dialect.Dialect,
    tx: _dialect.Tx,
    new: Sequence[tuple[int, models.NewJob]],
    parents: dict[int, str],
    now: float,
) -> list[int]:
    """Writes the edges of the jobs just inserted (`new`: id and job) and
    settles them: blocked while a dependency is open, cancelled when one
    failed or was cancelled already (unless allow_failure). Returns the ids
    cancelled now (they ended: the caller applies the ending rule)."""
    edges = [
        {"job_id": id_, "depends_on": p, "resolved": parents[p] in _TERMINAL}
        for id_, job in new
        for p in sorted(set(job.after))
    ]
    if not edges:
        return []
    tx.execute_each("dep_insert", edges)
    return settle(db, tx, [id_ for id_, _ in new], now)


def settle(db: _dialect.Dialect, tx: _dialect.Tx, ids: Sequence[int], now: float) -> list[int]:
    """Decides the pending jobs `ids` (just inserted or run again) by their
    own dependencies: cancelled if one failed or was cancelled (unless
    allow_failure), else blocked while one is open. Returns the ids cancelled."""
    array = db.array(list(ids))
    cancelled = tx.execute("dep_cancel_failed_of", {"ids": array, "now": now}).fetchall()
    tx.execute("dep_block_of", {"ids": array})
    return [int(r["id"]) for r in cancelled]


def send_ending(
    db: _dialect.Dialect, tx: _dialect.Tx, ids: Sequence[int], now: float
) -> Callable[[], tuple[list[int], bool]]:
    """Sends what the end of the jobs `ids` (some may not have ended) means
    for their dependents. Call the result once the results can be read: the
    ids cancelled now (they ended too), and whether any job became pending."""
    array = db.array(list(ids))
    tx.execute("dep_lock_dependents", {"ids": array})
    cancelled = tx.execute("dep_cancel_dependents", {"ids": array, "now": now})
    tx.execute("dep_resolve", {"ids": array})
    promoted = tx.execute("dep_promote", {"ids": array, "now": now})

    def read() -> tuple[list[int], bool]:
        return [int(r["id"]) for r in cancelled.fetchall()], bool(promoted.fetchall())

    return read


def reopen(
    db: _dialect.Dialect, tx: _dialect.Tx, ids: Sequence[int], now: float
) -> tuple[list[int], list[int]]:
    """What making the finished jobs `ids` pending again means for the
    dependency graph: each is decided by its own dependencies again
    (`settle`); each that runs again unresolves its edges, so its pending
    dependents wait for it again and those its failure cancelled are
    blocked again. Returns (the ids that really run again, the dependents
    blocked again: they run again too, the caller reopens them in turn)."""
    cancelled = set(settle(db, tx, ids, now))
    again = [id_ for id_ in ids if id_ not in cancelled]
    if not again:
        return [], []
    array = db.array(again)
    tx.execute("dep_unresolve", {"ids": array})
    tx.execute("dep_reblock_dependents", {"ids": array})
    rows = tx.execute("dep_reopen_dependents", {"ids": array}).fetchall()
    return again, [int(r["id"]) for r in rows]


class DepMethods:
    """The dependency reads of `_sql.SqlStore`. Rows are untrusted: a value
    of the wrong type is shown as unknown (None) or skipped, never raised."""

    _db: _dialect.Dialect

    def job_dependencies(self, *, ids: Sequence[int]) -> list[models.Dependency]:
        """The edges of the jobs `ids`, each with its dependency's name and
        state (None for a dependency pruned since), by job then dependency."""
        if not ids:
            return []
        rows = self._db.statement("dep_list", {"ids": self._db.array(list(ids))}, idempotent=True)
        found = []
        for r in rows.rows:
            job_id, on, name, state = r["job_id"], r["depends_on"], r["name"], r["state"]
            if type(job_id) is not int or type(on) is not int:
                continue
            found.append(
                models.Dependency(
                    job_id=job_id,
                    depends_on=on,
                    name=name if type(name) is str else None,
                    state=state if type(state) is str else None,
                )
            )
        return found


def parent_results(
    db: _dialect.Dialect, tx: _dialect.Tx, ids: Sequence[int]
) -> dict[int, dict[int, bytes]]:
    """The results of the done dependencies of each of the jobs `ids`, read in `tx`.

    Raises:
        _rows.Undecodable: naming the first result that is not JSON text
            (None stands for JSON null).
    """
    rows = tx.execute("dep_results_of", {"ids": db.array(list(ids))}).fetchall()
    found: dict[int, dict[int, bytes]] = {}
    for r in rows:
        value = r["result"]
        if (value is not None and type(value) is not db.json_type) or type(r["id"]) is not int:
            raise _rows.Undecodable(f"the result of dependency {r['id']!r} is not JSON text")
        text = "null" if value is None else value
        raw = text.encode() if isinstance(text, str) else bytes(text)
        found.setdefault(int(r["job_id"]), {})[r["id"]] = raw
    return found


def with_parents(
    db: _dialect.Dialect,
    tx: _dialect.Tx,
    claimed: list[models.ClaimedJob],
    rows: Sequence[_rows.Row],
    now: float,
) -> list[models.ClaimedJob]:
    """`claimed` (just taken from `rows`) with the results of their
    dependencies; a job whose results do not decode or exceed
    `models.PARENT_RESULTS_MAX` in total is failed in `tx` and left out
    (the caller applies the ending rule to it)."""
    wanted = {r["id"] for r in rows if r["has_deps"]}
    if not any(job.id in wanted for job in claimed):
        return claimed
    ids = [job.id for job in claimed if job.id in wanted]
    try:
        found = parent_results(db, tx, ids)
    except _rows.Undecodable as exc:
        found, bad = {}, set(ids)
        error = f"its dependencies' results cannot be read: {exc}"
    else:
        cap = models.PARENT_RESULTS_MAX
        bad = {i for i, results in found.items() if sum(map(len, results.values())) > cap}
        error = f"its dependencies' results exceed {cap} bytes in total"
    kept = []
    for job in claimed:
        if job.id in bad:
            log.error("job %s: %s", job.id, error)
            tx.execute("job_fail_undecodable", {"id": job.id, "error": error, "now": now})
        elif job.id in wanted:
            kept.append(msgspec.structs.replace(job, parents=found.get(job.id, {})))
        else:
            kept.append(job)
    return kept
