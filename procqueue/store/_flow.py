"""Flow control in the store: the candidates of a claim with what limits
them, what a claim's starts and served groups write, what an enqueue adds
(groups joining the rotation, rates, debounce), and why a pending job waits.

A rate limit counts starts: a row of ``flow_starts`` per start and limited
key, written by the claim that starts the job, under the claim lock (the
SQLite write lock), so every supervisor sees every start it must count.
Keys: ``job:NAME`` (the job's `rate_limit`), ``group:G`` (`group_rate`),
``queue:Q`` (set by operators, `queue_set_rate`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from procqueue import models, rates
from procqueue.store import _claim, _dialect, _rows

CANDIDATES = ("job_candidates", "job_group_heads")
"""What a claim reads: due jobs in claim order, and the least recently served groups' heads."""
CLAIM_ROUNDS = 3
"""Reads per claim at most: another only when limits reached within the claim hid work."""


def claim(
    db: _dialect.Dialect,
    tx: _dialect.Tx,
    read: tuple[list[Any], bool, dict[str, Any]],
    *,
    count: int,
    start: int | None,
    now: float,
    take: Callable[..., list[models.ClaimedJob]],
) -> tuple[list[models.ClaimedJob], list[str]]:
    """The jobs a claim of `count` takes, by `take(ids, start=started)`, from
    `read` (rows, whether due work may lie beyond them, the parameters that
    read them), and the limits that held back work it would have taken.

    The first `start` taken (None: all) start now. A round whose own picks
    filled a limit reads again when its read was cut short (the work behind
    was hidden); one that took nothing names the limits the filters applied.
    """
    rows, hidden, params = read
    claimed: list[models.ClaimedJob] = []
    throttled: dict[str, None] = {}
    for _ in range(CLAIM_ROUNDS):
        left = None if start is None else max(0, start - len(claimed))
        found, rooms = candidates(db, tx, rows, now)
        choice = _claim.choose(found, count=count - len(claimed), now=now, rooms=rooms, start=left)
        throttled.update(dict.fromkeys(choice.throttled))
        if choice.ids:
            record(db, tx, choice, now)
            claimed += take(choice.ids, start=left)
        if len(claimed) >= count or not choice.throttled or not hidden:
            break
        # past the work now spent (its rows are taken)
        rows, hidden = fetched([tx.execute(q, params) for q in CANDIDATES], params["limit"])
    if not claimed:
        throttled.update(dict.fromkeys(held_back(tx, now)))
    return claimed, list(throttled)


def fetched(cursors: Sequence[_dialect.Cursor], limit: int) -> tuple[list[Any], bool]:
    """The rows of ``job_candidates`` and ``job_group_heads`` (in that
    order), and whether due work may lie beyond them: the first returned
    `limit` rows, its LIMIT (else it returned every due job it may take)."""
    main, heads = (cursor.fetchall() for cursor in cursors)
    return main + heads, len(main) >= limit


def candidates(
    db: _dialect.Dialect, tx: _dialect.Tx, found: Sequence[Any], now: float
) -> tuple[list[_claim.Candidate], dict[str, int]]:
    """`found` (rows of ``job_candidates`` and ``job_group_heads``, in any
    order, a job possibly twice) as candidates, and the starts left in the
    window of each rate key they name (read in `tx`, under the claim lock)."""
    rows = list({r["id"]: r for r in found}.values())
    named = [_rate_keys(r) for r in rows]
    keys = sorted({k for row_keys in named for k in row_keys})
    rooms: dict[str, int] = {}
    if keys:
        params = {"keys": db.array(keys), "now": now}
        for r in tx.execute("flow_rooms", params).fetchall():
            if type(r["room"]) is int:  # a hand-edited rate that isn't a number limits nothing
                rooms[r["key"]] = r["room"]
    # Values come from rows that may hold anything (SQLite keeps any type in
    # any column): one that isn't of its type orders as the default.
    return [
        _claim.Candidate(
            r["id"],
            r["queue"],
            r["serial_key"],
            r["room"],
            priority=_of(int, r["priority"], 0),
            run_at=float(_of((int, float), r["run_at"], 0.0)),
            group=_of(str, r["group_key"], None),
            group_room=_of(int, r["group_room"], None) if r["group_key"] is not None else None,
            served_at=_of((int, float), r["served_at"], None),
            rate_keys=tuple(k for k in row_keys if k in rooms),
        )
        for r, row_keys in zip(rows, named, strict=True)
    ], rooms


def _of(kind: Any, value: Any, default: Any) -> Any:
    """`value` if it is of `kind` (never a bool), else `default`."""
    return value if isinstance(value, kind) and not isinstance(value, bool) else default


STARTS_KEPT_S = 300.0
"""How long a start is kept past its window. Claims are stamped before they wait for the
claim lock, so one may commit after another stamped later: it still counts every start its
own window holds, as long as none was trimmed. A claim's transaction is bounded by the
statement and lock timeouts, far below this."""


def _rate_keys(row: Any) -> list[str]:
    keys = (row["job_rate_key"], row["group_rate_key"], row["queue_rate_key"])
    return [k for k in keys if isinstance(k, str)]


def record(db: _dialect.Dialect, tx: _dialect.Tx, choice: _claim.Choice, now: float) -> None:
    """Writes what the claim of `choice` counts: its starts against each rate
    key (forgetting those that left their window) and the groups it served."""
    if choice.starts:
        keys = [key for key, _ in choice.starts]
        tx.execute("flow_start_add", {"keys": db.array(keys), "now": now})
        trimmed = {"keys": db.array(sorted(set(keys))), "now": now, "kept": STARTS_KEPT_S}
        tx.execute("flow_starts_trim", trimmed)
    if choice.served:
        served = sorted(choice.served, key=lambda s: s[1])
        base = served[0][1] - 1e-6
        tx.execute("flow_group_served", {"groups": db.array([g for g, _ in served]), "base": base})


def held_back(tx: _dialect.Tx, now: float) -> list[str]:
    """The spent rates that hold back due pending work now (``rate KEY``)."""
    return [str(r["held"]) for r in tx.execute("flow_held_back", {"now": now}).fetchall()]


def inserted(
    db: _dialect.Dialect, tx: _dialect.Tx, jobs: Sequence[models.NewJob], now: float
) -> None:
    """What an enqueue of `jobs` adds besides their rows: their groups join
    the rotation, and each rate they name becomes their key's rate."""
    groups = sorted({job.flow.group for job in jobs if job.flow.group is not None})
    if groups:
        tx.execute("flow_group_add", {"groups": db.array(groups)})
    given: dict[str, str] = {}
    for job in jobs:
        if job.flow.rate_limit is not None:
            given[f"job:{job.name}"] = job.flow.rate_limit
        if job.flow.group_rate is not None and job.flow.group is not None:
            given[f"group:{job.flow.group}"] = job.flow.group_rate
    if not given:
        return
    # Written only when it changes: an upsert would lock the key's row for
    # the rest of the enqueue's transaction, serializing its producers.
    rows = tx.execute("flow_limit_of", {"keys": db.array(sorted(given))}).fetchall()
    held = {r["key"]: (r["rate"], r["period"]) for r in rows}
    for key, text in sorted(given.items()):
        rate = rates.parse_rate(text)
        if held.get(key) != (rate.count, rate.period):
            params = {"key": key, "rate": rate.count, "period": rate.period, "by": None, "now": now}
            tx.execute("flow_limit_set", params)


def insert_params(job: models.NewJob, now: float) -> dict[str, Any]:
    """The ``job_insert`` parameters of `job`: a debounced job first runs
    `debounce` seconds from now (unless given a time), and never later than
    `debounce_max` after this first enqueue."""
    params = _rows.insert_params(job, now)
    if job.flow.debounce is not None and job.run_at is None:
        params["run_at"] = now + job.flow.debounce
    params.update(
        group=job.flow.group,
        group_limit=job.flow.group_limit,
        rate_limit=job.flow.rate_limit,
        group_rate=job.flow.group_rate,
        debounce_until=None if job.flow.debounce is None else now + job.flow.debounce_max,
    )
    return params


def debounced(tx: _dialect.Tx, job: models.NewJob, now: float) -> int | None:
    """For a debounced `job` whose key exists: the id of the key's job if it
    was pending, now holding `job`'s args and run at now + debounce (never
    past its debounce_until); None if that job is not pending (then it is
    never touched)."""
    if job.flow.debounce is None:
        return None
    params = {"key": job.key, "args": job.args.decode(), "run_at": now + job.flow.debounce}
    row = tx.execute("job_debounce", params).fetchone()
    return None if row is None else int(row["id"])


class FlowMethods:
    """Flow-control methods of `SqlStore` (see the module docstring)."""

    _db: _dialect.Dialect

    def queue_set_rate(
        self, *, queue: str, rate: str | None, by: str = "operator", now: float
    ) -> None:
        """Sets (None: clears) `queue`'s rate, ``"N/s"``, ``"N/m"`` or
        ``"N/h"`` starts per sliding window across every supervisor.
        Raises ValueError for a malformed rate, before writing."""
        key = f"queue:{queue}"
        if rate is None:
            self._db.statement("flow_limit_clear", {"key": key})
            return
        parsed = rates.parse_rate(rate)
        params = {"key": key, "rate": parsed.count, "period": parsed.period, "by": by, "now": now}
        self._db.statement("flow_limit_set", params)

    def flow_rates(self, *, now: float) -> dict[str, tuple[rates.Rate, int]]:
        """Every limited key's rate and the starts counted in its window now."""
        return key_rates(self._db, now)

    def flow_groups_prune(self, *, before: float) -> int:
        """Groups served before `before` that hold no job leave the rotation."""
        return self._db.statement("flow_groups_prune", {"before": before}).rowcount

    def job_waits(self, *, id: int, now: float) -> list[str]:
        """Why the pending job `id` is not running yet beyond its run_at: each
        rate it counts against that is spent (and until when), its group's
        limit when reached. Empty for any other job, or one free to start."""
        rows = self._db.statement("job_flow", {"id": id}, idempotent=True).rows
        if not rows or rows[0]["state"] != "pending":
            return []
        job = rows[0]
        limits = key_rates(self._db, now)
        keys = [f"queue:{job['queue']}"]
        if job["rate_limit"] is not None:
            keys.insert(0, f"job:{job['name']}")
        if job["group_rate"] is not None and job["group_key"] is not None:
            keys.insert(1, f"group:{job['group_key']}")
        waits = []
        for key in keys:
            if key not in limits or limits[key][1] < limits[key][0].count:
                continue
            rate = limits[key][0]
            starts = self._db.statement("flow_starts_of", {"key": key, "now": now}).rows
            until = starts[len(starts) - rate.count]["at"] + rate.period if starts else now
            when = models.to_datetime(until)
            waits.append(f"throttled by rate {rate.text} of {key} until {when}")
        if job["group_limit"] is not None and job["group_key"] is not None:
            held = self._db.statement("flow_group_held", {"group": job["group_key"]}).rows
            if held[0]["n"] >= job["group_limit"]:
                waits.append(
                    f"blocked by group {job['group_key']}'s limit "
                    f"({held[0]['n']} of {job['group_limit']} held)"
                )
        return waits


def key_rates(db: _dialect.Dialect, now: float) -> dict[str, tuple[rates.Rate, int]]:
    """Every limited key's rate and the starts counted in its window now (a
    row that does not decode as a rate is left out)."""
    found: dict[str, tuple[rates.Rate, int]] = {}
    for row in db.statement("flow_limit_list", {"now": now}, idempotent=True).rows:
        rate, period = row["rate"], row["period"]
        if type(rate) is int and rate > 0 and period in rates.PERIODS.values():
            found[row["key"]] = (rates.Rate(rate, float(period)), int(row["used"]))
    return found


def with_rates(
    infos: list[models.QueueInfo], limits: dict[str, tuple[rates.Rate, int]]
) -> list[models.QueueInfo]:
    """`infos` with each queue's rate and window count; a queue known only
    by its rate is listed too."""
    per = {q.name: q for q in infos}
    for key, (rate, used) in limits.items():
        kind, _, name = key.partition(":")
        if kind != "queue":
            continue
        info = per.get(name) or models.QueueInfo(name=name, limit=None, paused=False)
        per[name] = msgspec.structs.replace(info, rate=rate.text, rate_used=used)
    return [per[name] for name in sorted(per)]
