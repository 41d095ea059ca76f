"""The supervisors' hot path in the store: the record-and-claim cycle
(outcomes written, the record rules they call for, jobs claimed), the
claim alone and outcomes alone, in one transaction each. A part of
`_sql.SqlStore`, written once over both backends' named queries."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from procqueue import models
from procqueue.store import _claim, _deps, _dialect, _flow, _rows, _rules, _sql_ops

SET_ROWS = 64
"""Most outcomes one ``*_set`` statement writes. The planner cannot count a JSON array's rows
(it assumes 100), so its join may be a nested loop over them: bounded, that costs
SET_ROWS² comparisons at worst, never a quadratic time over a whole large batch."""

log = logging.getLogger("procqueue.store")


class CycleMethods:
    """Claims and outcome writes of `_sql.SqlStore`."""

    _db: _dialect.Dialect
    _json: type[str] | type[bytes]
    _rules: _rules.Rules

    def job_claim(
        self,
        *,
        owner: str,
        queues: Sequence[str] | None,
        count: int,
        lease_until: float,
        now: float,
    ) -> list[models.ClaimedJob]:
        """Atomically moves up to `count` due pending jobs to running for `owner`.

        Order: priority (higher first), then run_at, then id. Skips paused queues,
        jobs past their deadline, queues at their limit and serial keys running.
        """
        return self.job_record_and_claim(
            outcomes=(), owner=owner, queues=queues, count=count, lease_until=lease_until, now=now
        ).claimed

    def job_record_many(
        self, *, outcomes: Sequence[models.Outcome], now: float, owner: str = ""
    ) -> list[int]:
        """Records outcomes in one transaction, each fenced by (id, attempt)
        and, unless `owner` is '', by its owner; returns the ids whose fence
        failed (the attempt is no longer theirs)."""
        return self.job_record_and_claim(
            outcomes=outcomes, owner=owner, queues=None, count=0, lease_until=now, now=now
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
        start: int | None = None,
        clock: Callable[[], float] | None = None,
    ) -> _claim.Cycle:
        """`job_record_many` then `job_claim`, in one transaction: a busy
        supervisor's loop pays one commit for both.

        `clock` (the caller's, when given) is read once the claim lock is
        held: what the claim writes (claimed_at, started_at, rate starts,
        served groups) is stamped then and `lease_until` moves by as much,
        so a claim that waited out a stalled database or a busy lock still
        gets its whole lease. The read of due jobs and spent rates uses
        `now`, the earlier time, which only ever counts more starts.

        The first `start` jobs claimed (all when None) are marked started
        now: they go to idle children at once. The others are reserved
        (`started_at` NULL, shown as such) until their pid or outcome is
        written with the time a child started them.

        The claim holds the claim lock, so the running counts that limits
        and serial keys are checked against cannot change under it. Each
        outcome is fenced by (id, attempt) and by `owner`: an attempt handed
        back unspent is claimed again with the same number, and an outcome of
        the earlier claim must never land on the new one. Outcomes
        are written in id order, so that two transactions touching the same
        rows cannot deadlock. A taken job whose row does not decode is failed
        in the same transaction and not returned (so is one whose
        dependencies' results do not fit, `_deps`). Both end jobs by the
        record rule (`_rules`)."""
        if not outcomes and count <= 0:
            return _claim.Cycle(lost=[], claimed=[])
        # In id order; a refused value raises here, before any SQL runs.
        ordered = sorted(outcomes, key=lambda o: o.id)
        records = [_rows.record_params(o, now, owner) for o in ordered]
        histories = [h for o in ordered if (h := _sql_ops.history_params(o, now, owner))]
        fence = {"now": now, "owner": owner}
        wanted = None if queues is None else self._db.array(list(queues))
        with self._db.transaction() as tx:
            # every supervisor runs this many times a second: its statements
            # are planned once (in the first round trip, whichever it is)
            written: set[int] = set()
            ruled: list[int] = []
            if records:
                with tx.pipeline("job_record_and_claim"):
                    tx.plan_once()
                    # a statement per SET_ROWS outcomes, read after the pipeline;
                    # histories first, while their fences still hold
                    for chunk in _json_rows(histories):
                        tx.execute("attempt_record_set", {"rows": chunk, **fence})
                    recorded = [
                        tx.execute("job_record_set", {"rows": chunk, **fence})
                        for chunk in _json_rows(records)
                    ]
                    ids = self._db.array([o.id for o in ordered])
                    wanted_rules = tx.execute("job_rules_wanted", {"ids": ids})
                written = {row["id"] for cursor in recorded for row in cursor.fetchall()}
                # most jobs are in no batch and nothing depends on them: no rule to run
                ruled = sorted(int(r["id"]) for r in wanted_rules.fetchall())
            with tx.pipeline("job_record_and_claim"):
                if not records:
                    tx.plan_once()
                if ruled:
                    ended = self._rules.ending(tx, ruled, now)
                if count > 0:
                    tx.lock("claim")
                    limit = _claim.overfetch(count)
                    params = {"now": now, "queues": wanted, "limit": limit}
                    found = [tx.execute(q, params) for q in _flow.CANDIDATES]
            rows, hidden = _flow.fetched(found, limit) if count > 0 else ([], False)
            if ruled:  # `rows` were read before `ended` writes
                ended()
            lost = [o.id for o in outcomes if o.id not in written]
            if count <= 0:
                return _claim.Cycle(lost=lost, claimed=[])
            if clock is not None and (held := clock()) > now:
                lease_until, now = lease_until + held - now, held
            take = functools.partial(self._take, tx, owner=owner, lease_until=lease_until, now=now)
            read = (rows, hidden, params)
            claimed, throttled = _flow.claim(
                self._db, tx, read, count=count, start=start, now=now, take=take
            )
        return _claim.Cycle(lost=lost, claimed=claimed, throttled=throttled)

    def _take(self, tx: _dialect.Tx, ids: list[int], **params: Any) -> list[models.ClaimedJob]:
        """Takes `ids` for ``params["owner"]`` (the first ``params["start"]``
        started, None: all) until ``lease_until``; the jobs claimed in the
        order of `ids`, less those failed as undecodable."""
        start, now = params.pop("start"), params["now"]
        started = self._db.array(ids if start is None else ids[:start])
        params.update(ids=self._db.array(ids), started=started)
        taken = tx.execute("job_take", params).fetchall()
        claimed = [job for row in taken if (job := self._claimed(tx, row, now)) is not None]
        claimed = _deps.with_parents(self._db, tx, claimed, taken, now)
        if len(claimed) < len(taken):  # some failed undecodable: they ended
            held = {job.id for job in claimed}
            self._rules.ended(tx, [r["id"] for r in taken if r["id"] not in held], now)
        order = {id_: i for i, id_ in enumerate(ids)}
        claimed.sort(key=lambda c: order[c.id])
        return claimed

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


def _json_rows(params: Sequence[dict[str, Any]]) -> list[str]:
    """Rows of parameters as the JSON arrays ``*_set`` statements read them from, at most
    `SET_ROWS` an array (the scalars `now` and `owner` are parameters of their own)."""
    return [
        msgspec.json.encode(
            [
                {k: v for k, v in p.items() if k not in ("now", "owner")}
                for p in params[i : i + SET_ROWS]
            ]
        ).decode()
        for i in range(0, len(params), SET_ROWS)
    ]
