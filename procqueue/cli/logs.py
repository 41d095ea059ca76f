"""Log output of the command line: one line per event, as text or JSON.

Text: ``2024-05-01 12:00:00,123 INFO procqueue.supervisor: supervising ...``.
JSON (``--log-format json``): one object a line with ``time`` (ISO 8601
UTC), ``level``, ``logger``, ``message``, any fields passed as
``extra={...}``, and ``exception`` / ``stack`` when the record carries them.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from typing import Any, Literal, TextIO

import msgspec

from procqueue import models

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

LogFormat = Literal["text", "json"]

_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
"""Attributes every LogRecord has; the others came from ``extra``."""


def _fallback(value: Any) -> Any:
    return repr(value)


_encoder = msgspec.json.Encoder(enc_hook=_fallback)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = dt.datetime.fromtimestamp(record.created, tz=dt.UTC)
        doc: dict[str, Any] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in doc and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exception"] = record.exc_text
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        try:
            return _encoder.encode(doc).decode()
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
            # an extra value msgspec refuses even with the fallback (e.g. a
            # non-string key): never lose the event over it
            extras = {k: repr(v) for k, v in doc.items() if k not in ("time", "level", "logger")}
            return _encoder.encode({**doc, **extras}).decode()


class TextFormatter(logging.Formatter):
    """`TEXT_FORMAT`, with control characters escaped (newlines kept): a job's
    name or error can't retitle, clear or overprint the operator's terminal."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        return models.printable(super().format(record), lines=True)


def formatter(log_format: LogFormat) -> logging.Formatter:
    """The formatter for `log_format` (``text`` or ``json``)."""
    if log_format == "json":
        return JsonFormatter()
    return TextFormatter()


def setup(level: str, log_format: LogFormat, stream: TextIO | None = None) -> None:
    """Logs records at `level` and above to `stream` (stderr), one line each,
    unless logging was configured already (e.g. by the job module)."""
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=level.upper(), handlers=[handler])
