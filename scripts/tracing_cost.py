"""What tracing (procqueue.contrib.otel) costs per job:
``python scripts/tracing_cost.py [N]``.

Times N no-op attempts through the child's runner (`runner.execute`, what a
child does per job, hooks included) and N enqueues into a temporary SQLite
file, with and without tracing, interleaved, median of 5 rounds, in CPU
time of the thread doing them (so that other processes on a busy machine
don't count; the enqueue's wait for the disk doesn't either). Tracing
here is an SDK tracer provider whose batch processor hands the spans to an
exporter that drops them: the export itself runs on the processor's own
thread and is not counted; building, ending and queueing each span is.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from procqueue import App, protocol
from procqueue.contrib.otel import instrument
from procqueue.jobs import runner
from procqueue.jobs.hooks import Enqueue

ROUNDS = 5


class Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def noop() -> None:
    return None


def make_app(dsn: str, provider: TracerProvider | None) -> App:
    app = App(dsn)
    app.job(name="noop")(noop)
    if provider is not None:
        instrument(app, tracer_provider=provider)
    return app


def runs(app: App, n: int) -> float:
    """CPU seconds for `n` attempts of the no-op job through the runner."""
    job = app.registry["noop"]
    headers: dict[str, str] = {}
    for hook in app.hooks.enqueue:  # the headers an enqueue would have stored
        sent = [Enqueue(name="noop", queue="default", args={})]
        with hook(sent):
            pass
        headers = sent[0].headers
    message = protocol.Run(
        job_id=1, attempt=1, name="noop", args=b"{}", steps={}, queue="default", headers=headers
    )
    channel = runner.InlineChannel()
    started = time.thread_time()
    for _ in range(n):
        runner.execute(job, message, channel=channel)
    return time.thread_time() - started


def enqueues(app: App, n: int) -> float:
    """CPU seconds for `n` enqueues of the no-op job, one transaction each."""
    started = time.thread_time()
    for _ in range(n):
        app.enqueue("noop", {})
    return time.thread_time() - started


def compare(name: str, measure: Callable[[App, int], float], apps: dict[str, App], n: int) -> None:
    took: dict[str, list[float]] = {k: [] for k in apps}
    for _ in range(ROUNDS):
        for label, app in apps.items():
            took[label].append(measure(app, n) / n * 1e6)
    off, on = statistics.median(took["off"]), statistics.median(took["on"])
    print(
        f"{name:8} off {off:7.1f} µs   on {on:7.1f} µs   tracing costs {on - off:6.1f} µs a job"
        f"   (median of {ROUNDS} rounds of {n})"
    )


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv else 2000
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop(), max_queue_size=1 << 16))
    with tempfile.TemporaryDirectory() as folder:
        apps = {
            "off": make_app(f"sqlite:///{folder}/off.db", None),
            "on": make_app(f"sqlite:///{folder}/on.db", provider),
        }
        compare("run", runs, apps, n)
        compare("enqueue", enqueues, apps, n // 4)
        for app in apps.values():
            app.close()
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
