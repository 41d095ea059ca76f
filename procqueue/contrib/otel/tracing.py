"""`instrument(app)`: a ``send {queue}`` PRODUCER span around each enqueue,
whose W3C trace context is stored with the job (its headers); a ``process
{job name}`` CONSUMER span around each run in the child, a child of that
context on the first attempt and linked to it on retries; and, for an
attempt whose child died, the same span made by the supervisor with
``procqueue.exit_reason``.

Spans go to the tracer provider given, else to the global one when each
span starts (so an app may set it up after instrumenting). A child forked
from the fork server's template gets a working exporter: the SDK's batch
processor restarts its thread after a fork.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from importlib import metadata
from typing import Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from procqueue.jobs.hooks import Enqueue, Run, RunDied
from procqueue.producer.app import App

SYSTEM = "procqueue"
_FAILED = frozenset({"error", "permanent"})
"""Outcomes that set a process span's status to ERROR (a Retry or Snooze
the job raised is a deliberate reschedule, not an error)."""


def instrument(
    app: App,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> None:
    """Registers the tracing hooks on `app`: call it where the app is
    defined, so that the supervisor and every child (which import that
    module) trace too. Also records ``messaging.process.duration`` (seconds)
    on the meter provider given, else the global one."""
    try:
        version = metadata.version("procqueue")
    except metadata.PackageNotFoundError:
        version = ""
    tracer = trace.get_tracer(SYSTEM, version, tracer_provider=tracer_provider)
    meter = metrics.get_meter(SYSTEM, version, meter_provider=meter_provider)
    hooks = _Hooks(
        tracer,
        meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Duration of processing operation.",
        ),
    )
    app.hooks.around_enqueue(hooks.send)
    app.hooks.around_run(hooks.process)
    app.hooks.on_run_died(hooks.died)


def _attributes(queue: str, operation: str, job_name: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation.name": operation,
        "messaging.operation.type": operation,
        "procqueue.job.name": job_name,
    }


def _parent(headers: Mapping[str, str], attempt: int) -> tuple[Context | None, list[Link]]:
    """The context a process span starts in and its links: the producer's
    span as parent on the first attempt; a new trace linked to it on the
    others (a retry is its own unit of work, caused by the enqueue)."""
    stored = propagate.extract(headers)
    if attempt <= 1:
        return stored, []
    span_context = trace.get_current_span(stored).get_span_context()
    return Context(), [Link(span_context)] if span_context.is_valid else []


class _Hooks:
    """The three hooks of one instrumented App."""

    def __init__(self, tracer: trace.Tracer, duration: metrics.Histogram) -> None:
        self.tracer = tracer
        self.duration = duration

    @contextlib.contextmanager
    def send(self, jobs: list[Enqueue]) -> Iterator[None]:
        """PRODUCER spans for `jobs` (under one ``send`` span for a batch),
        each job's trace context injected into its headers."""
        if len(jobs) == 1:
            with self._send_spans(jobs):
                yield
            return
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.batch.message_count": len(jobs),
        }
        with (
            self.tracer.start_as_current_span("send", attributes=attributes),
            self._send_spans(jobs),
        ):
            yield

    @contextlib.contextmanager
    def _send_spans(self, jobs: list[Enqueue]) -> Iterator[None]:
        spans = []
        for job in jobs:
            span = self.tracer.start_span(
                f"send {job.queue}",
                kind=SpanKind.PRODUCER,
                attributes=_attributes(job.queue, "send", job.name),
            )
            propagate.inject(job.headers, context=trace.set_span_in_context(span))
            spans.append(span)
        try:
            yield
        except BaseException as exc:
            for span in spans:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            for job, span in zip(jobs, spans, strict=True):
                if job.id is not None:
                    span.set_attribute("messaging.message.id", str(job.id))
                span.end()

    @contextlib.contextmanager
    def process(self, run: Run) -> Iterator[None]:
        """The CONSUMER span of one attempt, current while the job runs (so
        the job's own spans are its children)."""
        context, links = _parent(run.headers, run.attempt)
        attributes = _attributes(run.queue, "process", run.name)
        attributes["messaging.message.id"] = str(run.job_id)
        attributes["procqueue.attempt"] = run.attempt
        started = time.perf_counter()
        with self.tracer.start_as_current_span(
            f"process {run.name}",
            context=context,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            finally:
                span.set_attribute("procqueue.outcome", run.outcome or "unknown")
                if run.exception is not None:
                    span.record_exception(run.exception)
                failed = run.outcome in _FAILED
                if failed:
                    span.set_status(Status(StatusCode.ERROR, _first_line(run.error)))
                metric: dict[str, Any] = {
                    "messaging.system": SYSTEM,
                    "messaging.destination.name": run.queue,
                    "messaging.operation.name": "process",
                }
                if failed:
                    metric["error.type"] = _error_type(run)
                self.duration.record(time.perf_counter() - started, metric)

    def died(self, died: RunDied) -> None:
        """The span of an attempt whose child died, which the child could not
        end: from its start in the child to the death, with the exit reason."""
        context, links = _parent(died.headers, died.attempt)
        attributes = _attributes(died.queue, "process", died.name)
        attributes["messaging.message.id"] = str(died.job_id)
        attributes["procqueue.attempt"] = died.attempt
        attributes["procqueue.outcome"] = "died"
        attributes["procqueue.exit_reason"] = died.exit_reason
        if died.kill is not None:
            attributes["procqueue.kill"] = died.kill
        ended = int(died.ended_at * 1e9)
        span = self.tracer.start_span(
            f"process {died.name}",
            context=context,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
            start_time=ended if died.started_at is None else int(died.started_at * 1e9),
        )
        if died.kill != "drain":  # one handed back at shutdown runs again: no error
            span.set_status(Status(StatusCode.ERROR, _first_line(died.error) or died.exit_reason))
        span.end(end_time=ended)


def _first_line(text: str | None) -> str:
    stripped = (text or "").strip()
    return stripped.splitlines()[0] if stripped else ""


def _error_type(run: Run) -> str:
    if run.exception is not None:
        return type(run.exception).__qualname__
    return run.outcome or "error"
