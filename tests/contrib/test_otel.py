"""OpenTelemetry (procqueue.contrib.otel) with real children on both
backends: spans exported by every process to one JSON-lines file (see
tests/jobs/traced.py) and read back."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from procqueue import App, JobState
from procqueue.contrib.otel import instrument
from procqueue.testing import supervising, wait_until
from tests.helpers import finished
from tests.jobs import traced

SPEC = "tests.jobs.traced"
JOB = SPEC + "."
ROOT = Path(__file__).resolve().parents[2]
Span = dict[str, Any]


@pytest.fixture
def spans_file(tmp_path: Path) -> Path:
    return tmp_path / "spans.jsonl"


@pytest.fixture
def app(dsn: str, spans_file: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    """The traced app on `dsn`, every process exporting to `spans_file`."""
    monkeypatch.setenv(traced.SPANS_ENV, str(spans_file))
    traced_app = traced.app.using(dsn)
    yield traced_app
    traced_app.close()


def exported(path: Path, want: Callable[[list[Span]], Any], what: str) -> list[Span]:
    """The spans exported so far once `want` holds of them (this process's
    batch flushed first; the other processes export on their own)."""

    def ready() -> list[Span] | None:
        traced.provider.force_flush()
        spans = traced.read(path)
        return spans if want(spans) else None

    return wait_until(ready, timeout=20, what=what)


def process_spans(job_id: int) -> Callable[[list[Span]], list[Span]]:
    def found(spans: list[Span]) -> list[Span]:
        return [
            s
            for s in spans
            if s["kind"] == "CONSUMER" and s["attributes"]["messaging.message.id"] == str(job_id)
        ]

    return found


def one(spans: list[Span], **match: Any) -> Span:
    (span,) = [s for s in spans if all(s.get(k) == v for k, v in match.items())]
    return span


def test_a_web_request_span_is_the_parent_of_the_childs_process_span(
    app: App, spans_file: Path
) -> None:
    web = trace.get_tracer("a web framework")
    with supervising(app, SPEC, workers=1):
        with web.start_as_current_span("GET /orders", kind=SpanKind.SERVER):
            job_id = app.enqueue(JOB + "add", {"a": 2, "b": 3})
        info = finished(app, job_id)
        spans = exported(spans_file, process_spans(job_id), "the process span")
    assert info.state == JobState.DONE
    request = one(spans, name="GET /orders")
    send = one(spans, name="send default")
    process = one(spans, name=f"process {JOB}add")
    inner = one(spans, name="inside the job")
    assert send["kind"] == "PRODUCER" and send["parent_id"] == request["span_id"]
    assert send["attributes"]["messaging.message.id"] == str(job_id)
    assert process["parent_id"] == send["span_id"]
    assert process["trace_id"] == send["trace_id"] == request["trace_id"]
    assert inner["parent_id"] == process["span_id"]  # the job's own spans nest in it
    assert process["pid"] == info.result["pid"] != os.getpid()
    attributes = process["attributes"]
    assert attributes["messaging.system"] == "procqueue"
    assert attributes["messaging.destination.name"] == "default"
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["procqueue.attempt"] == 1
    assert attributes["procqueue.outcome"] == "done"
    assert process["status"] == "UNSET"


def test_an_async_jobs_own_spans_nest_in_its_process_span(app: App, spans_file: Path) -> None:
    with supervising(app, SPEC, workers=1):
        job_id = app.enqueue(JOB + "fetch_async", {"n": 4})
        assert finished(app, job_id).result == 4
        spans = exported(spans_file, process_spans(job_id), "the process span")
    (process,) = process_spans(job_id)(spans)
    inner = one(spans, name="inside the async job")
    assert inner["parent_id"] == process["span_id"]


def test_a_retry_is_a_new_trace_linked_to_the_enqueue_and_errors_are_recorded(
    app: App, spans_file: Path
) -> None:
    with supervising(app, SPEC, workers=1):
        job_id = app.enqueue(JOB + "fail_once", {})
        assert finished(app, job_id).state == JobState.DONE
        spans = exported(spans_file, lambda s: len(process_spans(job_id)(s)) == 2, "2 attempts")
    send = one(spans, name="send default")
    first, second = sorted(process_spans(job_id)(spans), key=lambda s: s["start"])
    assert first["parent_id"] == send["span_id"] and first["links"] == []
    assert first["status"] == "ERROR" and first["events"] == ["exception"]
    assert first["attributes"]["procqueue.outcome"] == "error"
    assert second["parent_id"] is None and second["trace_id"] != send["trace_id"]
    assert second["links"] == [send["span_id"]]
    assert second["attributes"]["procqueue.attempt"] == 2
    assert second["attributes"]["procqueue.outcome"] == "done"


def test_a_segfaulted_attempt_gets_its_span_from_the_supervisor(app: App, spans_file: Path) -> None:
    with supervising(app, SPEC, workers=1):
        job_id = app.enqueue(JOB + "segfault", {})
        assert finished(app, job_id).state == JobState.FAILED
        spans = exported(spans_file, process_spans(job_id), "the supervisor's span")
    send = one(spans, name="send default")
    (died,) = process_spans(job_id)(spans)
    assert died["pid"] == os.getpid()  # the supervisor runs in this process
    assert died["parent_id"] == send["span_id"]
    assert died["attributes"]["procqueue.exit_reason"] == "SIGSEGV"
    assert died["attributes"]["procqueue.outcome"] == "died"
    assert died["status"] == "ERROR"
    assert died["start"] < died["end"]


def test_enqueue_many_sends_under_one_parent(app: App, spans_file: Path) -> None:
    ids = app.enqueue_many([(JOB + "add", {"a": n, "b": 1}, None) for n in range(3)])
    spans = exported(spans_file, lambda s: len(s) >= 4, "4 spans")
    batch = one(spans, name="send")
    assert batch["attributes"]["messaging.batch.message_count"] == 3
    sends = [s for s in spans if s["name"] == "send default"]
    assert {s["parent_id"] for s in sends} == {batch["span_id"]}
    assert sorted(s["attributes"]["messaging.message.id"] for s in sends) == sorted(map(str, ids))


def test_a_child_forked_from_the_template_exports_its_spans(app: App, spans_file: Path) -> None:
    with supervising(app, SPEC, workers=1, max_jobs_per_child=1):
        for n in range(20):  # the first children start clean, until the template is ready
            info = finished(app, app.enqueue(JOB + "add", {"a": n, "b": 0}))
            if info.result["forked"]:
                break
        assert info.result["forked"], "no child was forked from the template"
        spans = exported(spans_file, process_spans(info.id), "the forked child's span")
    (process,) = process_spans(info.id)(spans)
    assert process["pid"] == info.result["pid"]


def test_procqueue_never_imports_opentelemetry_itself(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        import procqueue
        from procqueue.testing import supervising
        from tests.jobs import hooked
        app = hooked.app.using("sqlite:///{tmp_path}/q.db")
        assert app.run_inline(hooked.add, a=1) == 1
        with supervising(app, "tests.jobs.hooked", workers=1):
            job = app.enqueue("tests.jobs.hooked.modules", {{"prefix": "opentelemetry"}})
            child = app.wait(job, timeout=30)
        here = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        print(child.state, child.result, here)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.strip() == "done [] []", out.stderr


def test_the_process_duration_metric_is_recorded_with_the_outcome() -> None:
    reader = InMemoryMetricReader()
    app = App("sqlite:///unused.db")
    app.job(name="ok")(lambda: 1)

    @app.job(name="bad")
    def bad() -> None:
        raise KeyError("x")

    instrument(app, tracer_provider=TracerProvider(), meter_provider=MeterProvider([reader]))
    assert app.run_inline("ok") == 1
    with pytest.raises(KeyError):
        app.run_inline("bad")
    data = reader.get_metrics_data()
    assert data is not None
    (metric,) = [
        m
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "messaging.process.duration"
    ]
    assert metric.unit == "s"
    points = {p.attributes.get("error.type"): p for p in metric.data.data_points}
    assert set(points) == {None, "KeyError"}
    assert all(p.count == 1 and p.sum >= 0 for p in points.values())
    assert points[None].attributes["messaging.system"] == "procqueue"
