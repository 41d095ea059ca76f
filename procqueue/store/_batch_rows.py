"""Batch rows into and out of the batches table: the handler jobs stored at
creation and a batch's public record. Untrusted like every row (`_rows`):
`batch_info` never raises, `batch_callback` raises `Undecodable`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from procqueue import models
from procqueue.store._rows import (
    _EPOCH,
    Check,
    Row,
    Undecodable,
    _encode,
    _int,
    _Json,
    _optional,
    _text,
    _time,
)

_callback_decoder = msgspec.json.Decoder(models.BatchCallback)
_COUNTS = ("blocked", "pending", "running", "done", "failed", "cancelled")


def callback_json(callback: models.BatchCallback | None) -> str | None:
    """`callback` as the text of a ``complete_job`` / ``success_job`` column."""
    return None if callback is None else _encode(callback).decode()


def batch_callback(value: object, json_type: type[str] | type[bytes]) -> models.BatchCallback:
    """The handler job stored in a batch's row.

    Raises:
        Undecodable: the column does not hold a `BatchCallback`.
    """
    return _Json(json_type).typed(_callback_decoder)(value)


def _handler_name(json: _Json) -> Check:
    def check(value: object) -> str:
        return json.typed(_callback_decoder)(value).job.name

    return _optional(check)


def batch_info(row: Row, json_type: type[str] | type[bytes]) -> models.BatchInfo:
    """The public record of the batch in a ``batch_get`` / ``batch_list`` row;
    never raises (as `job_info`: placeholders, and `undecodable` says why)."""
    json = _Json(json_type)
    checks: tuple[tuple[str, str, Check, Callable[[], Any]], ...] = (
        ("id", "id", _int, int),
        ("name", "name", _text, str),
        ("meta", "meta", json.mapping, dict),
        ("created_at", "created_at", _time, lambda: _EPOCH),
        ("sealed_at", "sealed_at", _optional(_time), type(None)),
        ("started_at", "started_at", _optional(_time), type(None)),
        ("completed_at", "finished_at", _optional(_time), type(None)),
        ("cancelled_at", "cancelled_at", _optional(_time), type(None)),
        ("completions", "completions", _int, int),
        ("complete_job", "on_complete", _handler_name(json), type(None)),
        ("success_job", "on_success", _handler_name(json), type(None)),
    )
    fields: dict[str, Any] = {}
    problems: list[str] = []
    for column, field, check, placeholder in checks:
        try:
            fields[field] = check(row[column])
        except Undecodable as exc:
            problems.append(f"column {column}: {exc}")
            fields[field] = placeholder()
    for state in _COUNTS:  # counted by the query: integers whatever the rows hold
        fields[state] = int(row[state])
    total = sum(fields[state] for state in _COUNTS)
    ended = fields["done"] + fields["failed"] + fields["cancelled"]
    fields["total"] = total
    fields["fraction"] = ended / total if total else 0.0
    if row["completed_at"] is not None:
        fields["state"] = models.BatchState.COMPLETE
    elif row["sealed_at"] is not None:
        fields["state"] = models.BatchState.RUNNING
    else:
        fields["state"] = models.BatchState.OPEN
    if problems:
        fields["undecodable"] = "; ".join(problems)
    return models.BatchInfo(**fields)
