"""An app traced with OpenTelemetry, set up as an app's module would: a
tracer provider whose batch processor exports to a small JSON-lines
exporter (the file named by $PROCQUEUE_TEST_SPANS when a batch is
exported, so every process of a test, the children forked from the
template included, writes to that test's file)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from procqueue import App, Context
from procqueue.contrib.otel import instrument

SPANS_ENV = "PROCQUEUE_TEST_SPANS"


class JsonLines(SpanExporter):
    """Appends one JSON object a span to $PROCQUEUE_TEST_SPANS, a batch in
    one write (lines from several processes never interleave)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        path = os.environ.get(SPANS_ENV)
        if path:
            text = "".join(json.dumps(as_dict(s)) + "\n" for s in spans)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
        return SpanExportResult.SUCCESS


def _hex(number: int, width: int) -> str:
    return format(number, f"0{width}x")


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.get_span_context()
    assert ctx is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": _hex(ctx.trace_id, 32),
        "span_id": _hex(ctx.span_id, 16),
        "parent_id": None if span.parent is None else _hex(span.parent.span_id, 16),
        "links": [_hex(link.context.span_id, 16) for link in span.links],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [e.name for e in span.events],
        "start": span.start_time,
        "end": span.end_time,
        "pid": os.getpid(),
    }


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


provider = TracerProvider(resource=Resource.create({"service.name": "procqueue-tests"}))
provider.add_span_processor(BatchSpanProcessor(JsonLines(), schedule_delay_millis=50))
trace.set_tracer_provider(provider)

app = App()
instrument(app)
tracer = trace.get_tracer("tests.jobs.traced")


@app.job(max_attempts=1)
def add(a: int, b: int) -> dict[str, Any]:
    with tracer.start_as_current_span("inside the job"):
        parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
        forked = b"--template" in parent or b"procqueue template" in parent  # its title
        return {"sum": a + b, "forked": forked, "pid": os.getpid()}


@app.job(max_attempts=2)
def fail_once(cx: Context) -> int:
    if cx.attempt == 1:
        raise ValueError("first attempt fails")
    return cx.attempt


@app.job(max_attempts=1)
def segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


@app.job(max_attempts=1)
async def fetch_async(n: int) -> int:
    with tracer.start_as_current_span("inside the async job"):
        await asyncio.sleep(0)
        return n
