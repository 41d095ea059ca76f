"""Values into and out of the jobs table.

Going in, a value the caller hands over is checked before any SQL runs: a
result or step value must be UTF-8 JSON, or the write is refused with
`errors.StoreRejected` (which the supervisor turns into the attempt's
failure).

Coming out, a row is untrusted data: another program, a bad restore or a
hand edit may have put anything into it, and SQLite does not enforce
column types. Nothing here raises on such a row: a job's public record
(`job_info`) replaces each value that does not decode with a placeholder
and names the column in `JobInfo.undecodable`; the record a claim hands to
a supervisor (`claimed_job`) raises `Undecodable`, so that the store can
fail that one job instead of running it on values it cannot trust.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import msgspec

from procqueue import errors, models

T = TypeVar("T")

_encode = msgspec.json.encode
_backoff_decoder = msgspec.json.Decoder(models.Backoff)
_steps_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_STATES = frozenset(s.value for s in models.JobState)
_SHOWN_CHARS = 40  # of an unexpected value, in a message


class Row(Protocol):
    """A result row (`sqlite3.Row` or a psycopg dict row): values by column name."""

    def __getitem__(self, key: str, /) -> Any: ...


class Undecodable(Exception):
    """A column holds a value its schema does not allow; the message says which and why."""


# -- going in -------------------------------------------------------------------


def json_text(value: bytes, what: str) -> str:
    """`value` as text for a JSON column.

    Raises:
        errors.StoreRejected: `value` is not UTF-8, or not JSON; `what` names it.
    """
    try:
        text = value.decode()
        msgspec.json.decode(value)
    except UnicodeDecodeError as exc:
        raise errors.StoreRejected(f"{what} is not valid UTF-8: {exc.reason}") from None
    except msgspec.DecodeError as exc:
        raise errors.StoreRejected(f"{what} is not valid JSON: {exc}") from None
    return text


def insert_params(job: models.NewJob, now: float) -> dict[str, Any]:
    """The ``job_insert`` parameters of `job` (its args were encoded by procqueue)."""
    return {
        "name": job.name,
        "queue": job.queue,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "args": job.args.decode(),
        "key": job.key,
        "serial_key": job.serial_key,
        "tags": _encode(job.tags).decode(),
        "timeout": job.timeout,
        "max_memory": job.max_memory,
        "backoff": _encode(job.backoff).decode(),
        "on_failure": job.on_failure,
        "run_at": now if job.run_at is None else job.run_at,
        "now": now,
        "deadline_at": job.deadline_at,
    }


def record_params(o: models.Outcome, now: float) -> dict[str, Any]:
    """The ``job_record`` parameters of `o`.

    Raises:
        errors.StoreRejected: the result is not UTF-8 JSON.
    """
    return {
        "id": o.id,
        "attempt": o.attempt,
        "state": o.state.value,
        "result": None if o.result is None else json_text(o.result, f"job {o.id}'s result"),
        "error": None if o.error is None else models.cap_error(o.error),
        "run_at": o.run_at,
        "refund": o.refund,
        "now": now,
    }


# -- coming out: one column ---------------------------------------------------------


def _shown(value: object) -> str:
    if isinstance(value, str):
        return f"text {value[:_SHOWN_CHARS]!r}"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"{len(value)} bytes"
    return f"{type(value).__name__} {str(value)[:_SHOWN_CHARS]}"


def _int(value: object) -> int:
    if type(value) is not int:
        raise Undecodable(f"expected an integer, got {_shown(value)}")
    return value


def _text(value: object) -> str:
    if type(value) is not str:
        raise Undecodable(f"expected text, got {_shown(value)}")
    return value


def _number(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise Undecodable(f"expected a finite number, got {_shown(value)}")


def _time(value: object) -> dt.datetime:
    seconds = _number(value)
    try:
        return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    except (ValueError, OverflowError, OSError):
        raise Undecodable(f"time {seconds!r} is out of range") from None


def _state(value: object) -> models.JobState:
    if isinstance(value, str) and value in _STATES:
        return models.JobState(value)
    raise Undecodable(f"unknown state: {_shown(value)}")


def _optional(check: Callable[[object], T]) -> Callable[[object], T | None]:
    return lambda value: None if value is None else check(value)


class _Json:
    """Checks of JSON columns, which a backend returns as one Python type
    (SQLite: str; PostgreSQL: bytes, as the server sent them)."""

    def __init__(self, json_type: type[str] | type[bytes]) -> None:
        self.json_type = json_type

    def _raw(self, value: object) -> str | bytes:
        if isinstance(value, str | bytes) and type(value) is self.json_type:
            return value
        raise Undecodable(f"expected JSON text, got {_shown(value)}")

    def value(self, value: object) -> Any:
        try:
            return msgspec.json.decode(self._raw(value))
        except msgspec.DecodeError as exc:
            raise Undecodable(f"invalid JSON ({exc})") from None

    def mapping(self, value: object) -> dict[str, Any]:
        decoded = self.value(value)
        if not isinstance(decoded, dict):
            raise Undecodable(f"expected a JSON object, got {type(decoded).__name__}")
        return decoded

    def mapping_bytes(self, value: object) -> bytes:
        """The text of a JSON object, as bytes (what a child decodes again)."""
        self.mapping(value)
        raw = self._raw(value)
        return raw.encode() if isinstance(raw, str) else raw

    def strings(self, value: object) -> list[str]:
        decoded = self.value(value)
        if not isinstance(decoded, list) or not all(isinstance(s, str) for s in decoded):
            raise Undecodable("expected a JSON list of strings")
        return decoded

    def typed(self, decoder: msgspec.json.Decoder[T]) -> Callable[[object], T]:
        def check(value: object) -> T:
            try:
                return decoder.decode(self._raw(value))
            except msgspec.ValidationError as exc:
                raise Undecodable(f"unexpected JSON ({exc})") from None
            except msgspec.DecodeError as exc:
                raise Undecodable(f"invalid JSON ({exc})") from None

        return check


def _column(row: Row, name: str, check: Callable[[object], T]) -> T:
    try:
        return check(row[name])
    except Undecodable as exc:
        raise Undecodable(f"column {name}: {exc}") from None


# -- coming out: whole records -------------------------------------------------------


def job_info(row: Row, json_type: type[str] | type[bytes]) -> models.JobInfo:
    """The public record of the job in `row`; never raises on a bad value.

    A column that does not decode gets a placeholder (empty, zero, the
    epoch, or the state ``failed``) and `JobInfo.undecodable` names every
    such column and why.
    """
    json = _Json(json_type)
    problems: list[str] = []

    def take(name: str, check: Callable[[object], T], placeholder: T) -> T:
        try:
            return _column(row, name, check)
        except Undecodable as exc:
            problems.append(str(exc))
            return placeholder

    info = models.JobInfo(
        id=take("id", _int, 0),
        name=take("name", _text, ""),
        queue=take("queue", _text, ""),
        state=take("state", _state, models.JobState.FAILED),
        priority=take("priority", _int, 0),
        attempts=take("attempts", _int, 0),
        max_attempts=take("max_attempts", _int, 0),
        args=take("args", json.mapping, {}),
        result=take("result", _optional(json.value), None),
        error=take("error", _optional(_text), None),
        progress=take("progress", _optional(_text), None),
        fraction=take("fraction", _optional(_number), None),
        key=take("key", _optional(_text), None),
        serial_key=take("serial_key", _optional(_text), None),
        tags=take("tags", json.strings, []),
        run_at=take("run_at", _time, _EPOCH),
        created_at=take("created_at", _time, _EPOCH),
        started_at=take("started_at", _optional(_time), None),
        finished_at=take("finished_at", _optional(_time), None),
        deadline_at=take("deadline_at", _optional(_time), None),
        pid=take("pid", _optional(_int), None),
    )
    if problems:
        return msgspec.structs.replace(info, undecodable="; ".join(problems))
    return info


def claimed_job(row: Row, json_type: type[str] | type[bytes]) -> models.ClaimedJob:
    """What a supervisor needs to run the attempt just taken in `row`.

    Raises:
        Undecodable: naming the first column that does not decode; the job
            must not run.
    """
    json = _Json(json_type)
    return models.ClaimedJob(
        id=_column(row, "id", _int),
        attempt=_column(row, "attempts", _int),
        name=_column(row, "name", _text),
        queue=_column(row, "queue", _text),
        args=_column(row, "args", json.mapping_bytes),
        steps=_column(row, "steps", json.typed(_steps_decoder)),
        max_attempts=_column(row, "max_attempts", _int),
        timeout=_column(row, "timeout", _optional(_number)),
        max_memory=_column(row, "max_memory", _optional(_int)),
        backoff=_column(row, "backoff", json.typed(_backoff_decoder)),
        deadline_at=_column(row, "deadline_at", _optional(_number)),
        serial_key=_column(row, "serial_key", _optional(_text)),
        run_at=_column(row, "run_at", _number),
    )


def queue_count(row: Row) -> tuple[str, str, int, float | None] | None:
    """``(queue, state, count, oldest created_at)`` of a ``queue_counts`` row,
    or None when its queue or state is not text (it cannot be shown)."""
    queue, state, n, oldest = row["queue"], row["state"], row["n"], row["oldest"]
    if type(queue) is not str or type(state) is not str or type(n) is not int:
        return None
    try:
        return queue, state, n, None if oldest is None else _number(oldest)
    except Undecodable:
        return queue, state, n, None


def queue_setting(row: Row) -> tuple[str, int | None, bool] | None:
    """``(name, limit, paused)`` of a ``queue_limits`` row; a limit that is
    not an integer counts as none; None when the name is not text."""
    name, limit = row["name"], row["concurrency"]
    if type(name) is not str:
        return None
    return name, limit if type(limit) is int else None, bool(row["paused"])
