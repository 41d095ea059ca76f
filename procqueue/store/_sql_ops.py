"""The operators' side of the SQL store: every attempt's history, the
supervisors' heartbeat rows, queues (pause, limits as managed settings,
counts), and count, retry or cancel by filter.

A mixin of `_sql.SqlStore`, over the same dialect and the same named
queries. Rows read here are untrusted like every other row (`_rows`): a
history or heartbeat row that does not decode is shown with placeholders
or skipped, never raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypedDict, Unpack

import msgspec

from procqueue import models
from procqueue.store import _dialect, _flow, _rows, _rules

SUPERVISOR_FORGET_S = 86400.0
"""A supervisor row silent this long is deleted (its process is long gone)."""

_STATES = frozenset(s.value for s in models.JobState)


def history_params(o: models.Outcome, now: float, owner: str = "") -> dict[str, Any] | None:
    """The ``attempt_record_set`` values of `o` (fenced by `owner` unless it is ''),
    or None when it writes no history."""
    if o.history is None:
        return None
    return {
        "id": o.id,
        "attempt": o.attempt,
        "state": o.state.value,
        "outcome": o.history,
        "child_pid": o.child_pid,
        "started_at": o.started_at,
        "exit_reason": o.exit_reason,
        "error": None if o.error is None else models.cap_error(o.error),
        "peak_memory": o.peak_memory,
        "now": now,
        "owner": owner,
    }


def _value(row: _rows.Row, column: str, kind: type) -> Any:
    """The column's value if it has the expected Python type, else None."""
    value = row[column]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value if type(value) is kind else None


def attempt_info(row: _rows.Row) -> models.AttemptInfo:
    """One history row; a value that does not decode shows as unknown (None)."""
    host, supervisor_pid = models.owner_parts(_value(row, "owner", str))
    started = _value(row, "started_at", float)
    ended = _value(row, "ended_at", float)
    seconds = None if started is None or ended is None else max(0.0, ended - started)
    try:
        ended_at = models.to_datetime(ended) or models.to_datetime(0.0)
        claimed_at = models.to_datetime(_value(row, "claimed_at", float))
        started_at = models.to_datetime(started)
    except (ValueError, OverflowError, OSError):
        ended_at, claimed_at, started_at = models.to_datetime(0.0), None, None
    assert ended_at is not None
    return models.AttemptInfo(
        attempt=_value(row, "attempt", int) or 0,
        outcome=_value(row, "outcome", str) or "?",
        ended_at=ended_at,
        host=host,
        supervisor_pid=supervisor_pid,
        child_pid=_value(row, "child_pid", int),
        claimed_at=claimed_at,
        started_at=started_at,
        seconds=seconds,
        exit_reason=_value(row, "exit_reason", str),
        error=_value(row, "error", str),
        peak_memory=_value(row, "peak_memory", float),
    )


def supervisor_info(row: _rows.Row, json_type: type, now: float) -> models.SupervisorInfo | None:
    """One heartbeat row, or None when it does not decode (it is not shown)."""
    try:
        fields = {c: row[c] for c in ("owner", "host", "pid", "version", "spec", "workers")}
        fields |= {c: row[c] for c in ("busy", "beat_every")}
        for column in ("queues", "limits"):
            raw = row[column]
            if raw is None:
                fields[column] = None
            elif isinstance(raw, str | bytes) and type(raw) is json_type:
                fields[column] = msgspec.json.decode(raw)
            else:
                return None
        last_seen, started = row["last_seen"], row["started_at"]
        fields["last_seen"] = models.to_datetime(last_seen)
        fields["started_at"] = models.to_datetime(started)
        fields["alive"] = models.alive(last_seen, row["beat_every"], now)
        return msgspec.convert(fields, models.SupervisorInfo)
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError, OverflowError):
        return None


def queue_infos(
    *,
    settings: dict[str, tuple[int | None, bool, str | None, float | None]],
    counts: Iterable[tuple[str, str, int, float | None]],
    now: float,
) -> list[models.QueueInfo]:
    """Folds per-(queue, state) counts and queue settings into QueueInfo rows."""
    per: dict[str, dict[str, Any]] = {}
    for name, (limit, paused, by, at) in settings.items():
        per[name] = {"name": name, "limit": limit, "paused": paused, "limit_by": by}
        if at is not None:
            per[name]["limit_at"] = models.to_datetime(at)
    for queue, state, n, oldest in counts:
        row = per.setdefault(queue, {"name": queue, "limit": None, "paused": False})
        row[state] = n
        # the due pending job that waits longest: since its run_at (not its creation);
        # None when every pending job is delayed into the future
        if state == models.JobState.PENDING and oldest is not None:
            row["oldest_pending_age"] = max(0.0, now - oldest)
    return [msgspec.convert(per[name], models.QueueInfo) for name in sorted(per)]


class Where(TypedDict):
    """The filters of the by-filter methods: jobs in `states` matching every
    one given (None: any), created at or after `since`."""

    states: Sequence[str]
    queue: str | None
    name: str | None
    since: float | None


class OpsStore:
    """Operators' methods of `SqlStore` (see the module docstring)."""

    _db: _dialect.Dialect
    _json: type[str] | type[bytes]
    _rules: _rules.Rules

    # -- attempt history -----------------------------------------------------

    def attempt_list(self, *, id: int) -> list[models.AttemptInfo]:
        """Every recorded attempt of job `id`, oldest first."""
        rows = self._db.statement("attempt_list", {"id": id}, idempotent=True).rows
        return [attempt_info(row) for row in rows]

    # -- supervisors ---------------------------------------------------------

    def supervisor_beat(
        self,
        *,
        owner: str,
        spec: str,
        version: str,
        queues: Sequence[str] | None,
        limits: dict[str, int],
        workers: int,
        busy: int,
        beat_every: float,
        started_at: float,
        now: float,
    ) -> None:
        """Upserts `owner`'s heartbeat row, and forgets rows silent for a day."""
        host, pid = models.owner_parts(owner)
        params = {
            "owner": owner,
            "host": host or "?",
            "pid": pid or 0,
            "version": version,
            "spec": spec,
            "queues": None if queues is None else msgspec.json.encode(list(queues)).decode(),
            "limits": msgspec.json.encode(limits).decode(),
            "workers": workers,
            "busy": busy,
            "beat_every": beat_every,
            "started_at": started_at,
            "now": now,
        }
        with self._db.transaction() as tx:
            tx.execute("supervisor_beat", params)
            tx.execute("supervisor_forget", {"before": now - SUPERVISOR_FORGET_S})

    def supervisor_remove(self, *, owner: str) -> None:
        """Deletes `owner`'s heartbeat row (it stopped cleanly)."""
        self._db.statement("supervisor_remove", {"owner": owner})

    def supervisor_list(self, *, now: float) -> list[models.SupervisorInfo]:
        """Every supervisor row, `alive` judged at `now`, oldest first."""
        rows = self._db.statement("supervisor_list", {}, idempotent=True).rows
        found = (supervisor_info(row, self._json, now) for row in rows)
        return [s for s in found if s is not None]

    # -- queues ------------------------------------------------------------------

    def queue_set_limit(
        self, *, queue: str, limit: int | None, by: str | None = None, now: float | None = None
    ) -> None:
        """Sets (None: clears) `queue`'s limit; `by` says who, for ``procqueue queues``."""
        params = {"queue": queue, "limit": limit, "by": by, "now": now}
        self._db.statement("queue_set_limit", params)

    def queue_set_paused(self, *, queue: str, paused: bool) -> None:
        """Resuming wakes supervisors: the queue's due jobs start now, not at the next poll."""
        with self._db.transaction() as tx:
            tx.execute("queue_set_paused", {"queue": queue, "paused": paused})
            if not paused:
                tx.notify()

    def queue_list(self, *, now: float) -> list[models.QueueInfo]:
        """Every queue that has jobs or settings, with counts per state."""
        settings = self._db.statement("queue_limits", {}, idempotent=True).rows
        counts = self._db.statement("queue_counts", {"now": now}, idempotent=True).rows
        infos = queue_infos(
            settings={
                name: (limit, paused, by, at)
                for name, limit, paused, by, at in filter(None, map(_rows.queue_setting, settings))
            },
            counts=filter(None, map(_rows.queue_count, counts)),
            now=now,
        )
        return _flow.with_rates(infos, _flow.key_rates(self._db, now))

    def job_finished_per_minute(self, *, minutes: int, now: float) -> models.Throughput:
        """Done and failed jobs in each of the last `minutes` UTC minutes (the
        current one last) and in the last 60 s; rows that do not decode are
        not counted."""
        first = int(now // 60) - minutes + 1
        params = {"since": first * 60.0, "recent": now - 60.0}
        rows = self._db.statement("job_finished_per_minute", params, idempotent=True).rows
        counts = {"done": [0] * minutes, "failed": [0] * minutes}
        recent = 0
        for row in rows:
            minute, state, n, last = row["minute"], row["state"], row["n"], row["recent"]
            if state not in counts or not all(type(v) is int for v in (minute, n, last)):
                continue
            if 0 <= minute - first < minutes:
                counts[state][minute - first] += n
                recent += last
        return models.Throughput(
            first_minute=first, done=counts["done"], failed=counts["failed"], last_60s=recent
        )

    def queue_init_limit(
        self, *, queue: str, limit: int, by: str, now: float
    ) -> tuple[int | None, str | None]:
        """Sets `queue`'s limit only if nobody set (or cleared) it before;
        returns the limit in force afterwards and who set it."""
        params = {"queue": queue, "limit": limit, "by": by, "now": now}
        with self._db.transaction() as tx:
            tx.execute("queue_init_limit", params)
            for row in tx.execute("queue_limits", {}).fetchall():
                setting = _rows.queue_setting(row)
                if setting is not None and setting[0] == queue:
                    return setting[1], setting[3]
        return None, None

    # -- by filter ---------------------------------------------------------------

    def _where(self, where: Where) -> dict[str, Any]:
        wanted = self._db.array([s for s in where["states"] if s in _STATES])
        return {**where, "states": wanted}

    def job_count_where(self, **where: Unpack[Where]) -> int:
        """How many jobs match the filters."""
        rows = self._db.statement("job_count_where", self._where(where), idempotent=True).rows
        return int(rows[0]["n"])

    def job_retry_where(self, *, now: float, **where: Unpack[Where]) -> int:
        """`job_retry` for every failed or cancelled job matching the
        filters; returns how many."""
        with self._db.transaction() as tx:
            rows = tx.execute("job_retry_where", {**self._where(where), "now": now}).fetchall()
            self._rules.reopened(tx, [r["id"] for r in rows], now)
        return len(rows)

    def job_cancel_where(self, *, now: float, **where: Unpack[Where]) -> tuple[int, int]:
        """`job_cancel` for every pending or running job matching the
        filters; returns (cancelled now, running ones flagged)."""
        params = {**self._where(where), "now": now}
        with self._db.transaction() as tx:
            rows = tx.execute("job_cancel_pending_where", params).fetchall()
            flagged = int(tx.execute("job_cancel_running_where", params).rowcount)
            if flagged:
                tx.notify()
            self._rules.ended(tx, [r["id"] for r in rows], now)
        return len(rows), flagged
