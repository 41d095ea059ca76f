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

from procqueue import codec, errors, models

T = TypeVar("T")

_encode = msgspec.json.encode
_backoff_decoder = msgspec.json.Decoder(models.Backoff)
_steps_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_STATES = frozenset(s.value for s in models.STORED_STATES)
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
        errors.StoreRejected: `value` is not UTF-8, not JSON, or nested
            deeper than `codec.MAX_DEPTH`; `what` names it.
    """
    if codec.too_deep(value):
        raise errors.StoreRejected(f"{what} is nested deeper than {codec.MAX_DEPTH} levels")
    try:
        text = value.decode()
        msgspec.json.decode(value)
    except UnicodeDecodeError as exc:
        raise errors.StoreRejected(f"{what} is not valid UTF-8: {exc.reason}") from None
    except codec.DECODE_ERRORS as exc:
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
        "batch_id": job.batch_id,
        "allow_failure": job.allow_failure,
        "max_snoozes": job.max_snoozes,
        "run_at": now if job.run_at is None else job.run_at,
        "now": now,
        "deadline_at": job.deadline_at,
        "headers": _encode(job.headers).decode() if job.headers else None,
    }


def record_params(o: models.Outcome, now: float, owner: str = "") -> dict[str, Any]:
    """The ``job_record_set`` values of `o`, fenced by `owner` unless it is ''.

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
        "snooze": int(o.snooze),
        "progress": None if o.progress is None else o.progress.replace("\x00", "\\x00"),
        "fraction": o.fraction,
        "started_at": o.started_at,
        "now": now,
        "owner": owner,
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
        except codec.DECODE_ERRORS as exc:  # RecursionError: nested deeper than this stack
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

    def headers(self, value: object) -> dict[str, str]:
        """The text entries of a headers object; never raises: headers are
        for tracing and logs, and a bad one must not stop the job."""
        try:
            decoded = None if value is None else self.value(value)
        except Undecodable:
            return {}
        if not isinstance(decoded, dict):
            return {}
        return {k: v for k, v in decoded.items() if isinstance(v, str)}

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
            except codec.DECODE_ERRORS as exc:
                raise Undecodable(f"invalid JSON ({exc})") from None

        return check


Check = Callable[[object], Any]


def _job_columns(json: _Json) -> tuple[tuple[str, Check, Callable[[], Any]], ...]:
    """``(column, check, placeholder factory)`` for each field of `JobInfo`."""
    return (
        ("id", _int, int),
        ("name", _text, str),
        ("queue", _text, str),
        ("state", _state, lambda: models.JobState.FAILED),
        ("priority", _int, int),
        ("attempts", _int, int),
        ("max_attempts", _int, int),
        ("args", json.mapping, dict),
        ("result", _optional(json.value), type(None)),
        ("error", _optional(_text), type(None)),
        ("progress", _optional(_text), type(None)),
        ("fraction", _optional(_number), type(None)),
        ("key", _optional(_text), type(None)),
        ("serial_key", _optional(_text), type(None)),
        ("tags", json.strings, list),
        ("run_at", _time, lambda: _EPOCH),
        ("created_at", _time, lambda: _EPOCH),
        ("started_at", _optional(_time), type(None)),
        ("finished_at", _optional(_time), type(None)),
        ("deadline_at", _optional(_time), type(None)),
        ("pid", _optional(_int), type(None)),
        ("owner", _optional(_text), type(None)),
    )


def _claim_columns(json: _Json) -> tuple[tuple[str, str, Check], ...]:
    """``(column, field, check)`` for each field of `ClaimedJob`."""
    return (
        ("id", "id", _int),
        ("attempts", "attempt", _int),
        ("name", "name", _text),
        ("queue", "queue", _text),
        ("args", "args", json.mapping_bytes),
        ("steps", "steps", json.typed(_steps_decoder)),
        ("max_attempts", "max_attempts", _int),
        ("timeout", "timeout", _optional(_number)),
        ("max_memory", "max_memory", _optional(_int)),
        ("backoff", "backoff", json.typed(_backoff_decoder)),
        ("deadline_at", "deadline_at", _optional(_number)),
        ("serial_key", "serial_key", _optional(_text)),
        ("run_at", "run_at", _number),
        ("snoozes", "snoozes", _int),
        ("max_snoozes", "max_snoozes", _int),
        ("headers", "headers", json.headers),
    )


# Built once per JSON column type: decoding is on every claim's path.
_JOB_COLUMNS = {t: _job_columns(_Json(t)) for t in (str, bytes)}
_CLAIM_COLUMNS = {t: _claim_columns(_Json(t)) for t in (str, bytes)}


# -- coming out: whole records -------------------------------------------------------


def job_info(row: Row, json_type: type[str] | type[bytes]) -> models.JobInfo:
    """The public record of the job in `row`; never raises on a bad value.

    A column that does not decode gets a placeholder (empty, zero, the
    epoch, or the state ``failed``) and `JobInfo.undecodable` names every
    such column and why.
    """
    fields: dict[str, Any] = {}
    problems: list[str] = []
    for column, check, placeholder in _JOB_COLUMNS[json_type]:
        try:
            fields[column] = check(row[column])
        except Undecodable as exc:
            problems.append(f"column {column}: {exc}")
            fields[column] = placeholder()
    if problems:
        fields["undecodable"] = "; ".join(problems)
    elif fields["state"] == models.JobState.RUNNING and fields["started_at"] is None:
        fields["state"] = models.JobState.RESERVED  # no child has started it yet
    return models.JobInfo(**fields)


def claimed_job(row: Row, json_type: type[str] | type[bytes]) -> models.ClaimedJob:
    """What a supervisor needs to run the attempt just taken in `row`.

    Raises:
        Undecodable: naming the first column that does not decode; the job
            must not run.
    """
    fields: dict[str, Any] = {}
    for column, field, check in _CLAIM_COLUMNS[json_type]:
        try:
            fields[field] = check(row[column])
        except Undecodable as exc:
            raise Undecodable(f"column {column}: {exc}") from None
    if fields["attempt"] < 1:  # job_take's mark of a row with no attempt left
        raise Undecodable("column attempts: no attempt left (not below max_attempts)")
    return models.ClaimedJob(**fields)


def queue_count(row: Row) -> tuple[str, str, int, float | None] | None:
    """``(queue, state, count, earliest due run_at)`` of a ``queue_counts`` row,
    or None when its queue or state is not text (it cannot be shown)."""
    queue, state, n, oldest = row["queue"], row["state"], row["n"], row["oldest"]
    if type(queue) is not str or type(state) is not str or type(n) is not int:
        return None
    try:
        return queue, state, n, None if oldest is None else _number(oldest)
    except Undecodable:
        return queue, state, n, None


def queue_setting(row: Row) -> tuple[str, int | None, bool, str | None, float | None] | None:
    """``(name, limit, paused, limit_by, limit_at)`` of a ``queue_limits``
    row; a limit that is not an integer counts as none, an unreadable
    limit_by or limit_at as unknown; None when the name is not text."""
    name, limit = row["name"], row["concurrency"]
    if type(name) is not str:
        return None
    by, at = row["limit_by"], row["limit_at"]
    try:
        when = None if at is None else _number(at)
    except Undecodable:
        when = None
    return (
        name,
        limit if type(limit) is int else None,
        bool(row["paused"]),
        by if type(by) is str else None,
        when,
    )
