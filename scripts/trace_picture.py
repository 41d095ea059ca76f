"""The picture in docs/tracing.md: a web request's trace into two jobs,
one of which segfaults, exported by every process and drawn as a
waterfall: ``python scripts/trace_picture.py [PNG]`` (default
docs/img/trace.png).

This file is also the app the picture's children import (as
``trace_picture``): imported, it sets up a tracer provider that exports to
$TRACE_PICTURE_SPANS, one JSON object a line, and instruments its App.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from procqueue import App, Context
from procqueue.contrib.otel import instrument

SPANS_ENV = "TRACE_PICTURE_SPANS"
HERE = Path(__file__).resolve().parent
COLORS = {"SERVER": "#4c72b0", "PRODUCER": "#dd8452", "CONSUMER": "#55a868", "INTERNAL": "#8172b3"}

app = App()
tracer = trace.get_tracer("trace_picture")


class JsonLines(SpanExporter):
    """Appends each batch of spans to $TRACE_PICTURE_SPANS in one write."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for span in spans:
            ctx = span.get_span_context()
            assert ctx is not None
            lines.append(
                json.dumps(
                    {
                        "name": span.name,
                        "kind": span.kind.name,
                        "span_id": format(ctx.span_id, "016x"),
                        "parent_id": None
                        if span.parent is None
                        else format(span.parent.span_id, "016x"),
                        "attributes": dict(span.attributes or {}),
                        "status": span.status.status_code.name,
                        "start": span.start_time,
                        "end": span.end_time,
                        "pid": os.getpid(),
                    }
                )
            )
        fd = os.open(os.environ[SPANS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, "".join(line + "\n" for line in lines).encode())
        finally:
            os.close(fd)
        return SpanExportResult.SUCCESS


def setup() -> None:
    """What an app's module does: a provider, an exporter, `instrument`."""
    provider = TracerProvider(resource=Resource.create({"service.name": "photos"}))
    provider.add_span_processor(BatchSpanProcessor(JsonLines(), schedule_delay_millis=100))
    trace.set_tracer_provider(provider)
    instrument(app)


@app.job(name="photos.thumbnail", max_attempts=1)
def thumbnail(cx: Context, photo: int) -> str:
    for step, seconds in (("download", 0.04), ("resize", 0.09), ("upload", 0.03)):
        with tracer.start_as_current_span(step):
            time.sleep(seconds)
    return f"thumbs/{photo}.webp"


@app.job(name="photos.ocr", max_attempts=1)
def ocr(photo: int) -> str:
    with tracer.start_as_current_span("load model"):
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGSEGV)  # a C extension crashing
    return ""


def record(spans_file: Path) -> None:
    """Runs the request and both jobs under a supervisor; every process's
    spans end up in `spans_file`."""
    import trace_picture as demo  # the module the children import, set up

    from procqueue.testing import supervising, wait_until

    os.environ[SPANS_ENV] = str(spans_file)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent)])
    with tempfile.TemporaryDirectory() as folder:
        queue = demo.app.using(f"sqlite:///{folder}/q.db")
        web = trace.get_tracer("a web framework")
        with supervising(queue, "trace_picture", workers=2) as supervisor:
            wait_until(lambda: len(supervisor.attempts.idle()) == 2, timeout=60)  # warm
            with web.start_as_current_span("POST /albums/7/photos", kind=trace.SpanKind.SERVER):
                time.sleep(0.01)
                ids = queue.enqueue_many(
                    [("photos.thumbnail", {"photo": 7}, None), ("photos.ocr", {"photo": 7}, None)]
                )
                time.sleep(0.01)
            for job_id in ids:
                queue.wait(job_id, timeout=30)
        queue.close()
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    provider.force_flush()


def where(span: dict[str, Any], producer: int) -> str:
    if "procqueue.exit_reason" in span["attributes"]:
        return "supervisor"
    return "web app" if span["pid"] == producer else f"child {span['pid']}"


def draw(spans: list[dict[str, Any]], producer: int, png: Path) -> None:
    """A waterfall: one row a span, in tree order, bars on the trace's time axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in sorted(spans, key=lambda s: s["start"]):
        children.setdefault(span["parent_id"], []).append(span)
    rows: list[tuple[int, dict[str, Any]]] = []

    def walk(parent: str | None, depth: int) -> None:
        for span in children.get(parent, []):
            rows.append((depth, span))
            walk(span["span_id"], depth + 1)

    walk(None, 0)
    t0 = min(s["start"] for s in spans)
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(rows) + 1.2))
    for y, (depth, span) in enumerate(rows):
        start, end = (span["start"] - t0) / 1e6, (span["end"] - t0) / 1e6
        failed = span["status"] == "ERROR"
        ax.barh(
            y,
            max(end - start, 0.4),
            left=start,
            color=COLORS.get(span["kind"], "#999999"),
            edgecolor="#c44e52" if failed else "none",
            linewidth=2.5 if failed else 0,
        )
        note = span["attributes"].get("procqueue.exit_reason")
        ax.text(
            end + 2,
            y,
            f"{end - start:.0f} ms" + (f"  ✗ {note}" if note else ""),
            va="center",
            fontsize=8,
        )
        at = ax.get_yaxis_transform()  # x in axes fractions, y in rows
        x = -0.5 + 0.03 * depth
        ax.text(x, y - 0.08, span["name"], va="center", fontsize=9, transform=at)
        shown = where(span, producer)
        ax.text(x, y + 0.3, shown, va="center", fontsize=6.5, color="#666666", transform=at)
    ax.set_yticks([])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the request started")
    ax.set_xlim(left=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(handles, [k.lower() for k in COLORS], loc="upper right", fontsize=8, frameon=False)
    ax.set_title("A web request's trace into procqueue jobs (one child segfaults)", fontsize=11)
    fig.tight_layout()
    fig.subplots_adjust(left=0.36)
    fig.savefig(png, dpi=110)


def main(argv: list[str]) -> int:
    png = Path(argv[0]) if argv else HERE.parent / "docs" / "img" / "trace.png"
    with tempfile.TemporaryDirectory() as folder:
        spans_file = Path(folder) / "spans.jsonl"
        record(spans_file)
        spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    trace_ids = {s["span_id"] for s in spans}
    roots = [s for s in spans if s["parent_id"] not in trace_ids]
    print(f"{len(spans)} spans, {len(roots)} root(s): {[r['name'] for r in roots]}")
    draw(spans, os.getpid(), png)
    print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
else:
    setup()
