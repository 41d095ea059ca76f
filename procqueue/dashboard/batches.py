"""The dashboard's batch pages, kept live like the others.

- ``/batches``            batches, newest first, each with a progress bar
- ``/batches/{id}``       one batch: live progress bar, counts, rate, ETA,
                          handlers, meta, its failed members with their errors,
                          and, for a workflow, its dependency graph (SVG; a
                          click on a member opens it)

JSON: ``GET /api/batches``, ``GET /api/batches/{id}``. Actions (POST, CSRF
token required): ``/api/batches/{id}/cancel``, ``/api/batches/{id}/retry``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from procqueue import errors, models
from procqueue.dashboard import graph, views
from procqueue.producer import workflow

if TYPE_CHECKING:
    from procqueue.producer.app import App


class Host(Protocol):
    """What the batch pages use of the dashboard that mounts them."""

    app: App

    def now(self) -> dt.datetime: ...

    def render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> Response: ...

    def action(self, verb: str, do: Callable[[Request], str]) -> Callable[[Request], Any]: ...


LIST_LIMIT = 100
FAILURES_SHOWN = 50


def batch_view(info: models.BatchInfo, now: dt.datetime) -> views.View:
    """Display values of one batch (the same dict for HTML and JSON)."""
    ended = info.done + info.failed + info.cancelled
    pct = info.fraction * 100
    rate, eta = None, None
    if info.started_at is not None and ended:
        until = info.finished_at or now
        elapsed = (until - info.started_at).total_seconds()
        rate = ended / elapsed if elapsed > 0 else None
    if rate and info.state != models.BatchState.COMPLETE:
        eta = (info.total - ended) / rate
    return {
        "id": info.id,
        "key": str(info.id),
        "url": f"/batches/{info.id}",
        "name": info.name,
        "state": info.state.value,
        **{s: getattr(info, s) for s in ("total", "blocked", "pending", "running", "done")},
        "failed": info.failed,
        "cancelled": info.cancelled,
        "pct": f"{pct:.1f}",
        "indeterminate": "",
        "progress": f"{ended}/{info.total} ended · {pct:.0f}%",
        "rate": "" if rate is None else f"{rate:.1f}/s",
        "eta": views.duration(eta),
        "created": views.relative(info.created_at, now),
        "created_iso": views.iso(info.created_at),
        "started": views.relative(info.started_at, now),
        "started_iso": views.iso(info.started_at),
        "finished": views.relative(info.finished_at, now),
        "finished_iso": views.iso(info.finished_at),
        "on_complete": info.on_complete or "",
        "on_success": info.on_success or "",
        "completions": info.completions,
        "meta_json": views.to_json_text(info.meta, indent=2),
        "is_running": "1" if info.state == models.BatchState.RUNNING else "",
        "can_cancel": "" if info.state == models.BatchState.COMPLETE else "1",
        "can_retry": "1" if info.failed else "",
        "cancel_url": f"/api/batches/{info.id}/cancel",
        "retry_url": f"/api/batches/{info.id}/retry",
    }


def _json(content: object, status: int = 200) -> Response:
    return Response(msgspec.json.encode(content), status, media_type="application/json")


class BatchPages:
    """The batch handlers of one `Dashboard`."""

    def __init__(self, dashboard: Host) -> None:
        self.d = dashboard
        self.app = dashboard.app

    def list_data(self) -> views.View:
        now = self.d.now()
        rows = [batch_view(b, now) for b in self.app.batches(limit=LIST_LIMIT)]
        totals = views.totals(self.app.stats().values())
        return {**totals, "batches": rows, "empty": "" if rows else "1"}

    def batch_data(self, batch_id: int) -> views.View:
        now = self.d.now()
        info = self.app.batch_info(batch_id)
        failures = []
        for job in self.app.batch_results(batch_id, state="failed", page=FAILURES_SHOWN):
            failures.append(views.job_view(job, now))
            if len(failures) >= FAILURES_SHOWN:
                break
        members = self.app.batch_results(batch_id, page=graph.READ_MAX)
        flow = workflow.read(self.app, batch_id, members, limit=graph.READ_MAX)
        return {
            **views.totals(self.app.stats().values()),
            **batch_view(info, now),
            "failures": failures,
            "no_failures": "" if failures else "1",
            "is_workflow": "1" if flow.is_workflow else "",
            "graph": graph.drawing(flow) if flow.is_workflow else None,
            **(graph.states(flow) if flow.is_workflow else {}),
        }

    def list_page(self, request: Request) -> Response:
        data = self.list_data()
        return self.d.render(
            request, "batches.html", page="batches", poll_url="/api/batches", d=data
        )

    def batch_page(self, request: Request) -> Response:
        batch_id: int = request.path_params["id"]
        try:
            data = self.batch_data(batch_id)
        except errors.BatchNotFound:
            totals = views.totals(self.app.stats().values())
            return self.d.render(
                request, "missing.html", 404, page="", poll_url="", d=totals, job_id=batch_id
            )
        poll = f"/api/batches/{batch_id}"
        return self.d.render(request, "batch.html", page="batches", poll_url=poll, d=data)

    def list_json(self, request: Request) -> Response:
        return _json(self.list_data())

    def batch_json(self, request: Request) -> Response:
        try:
            return _json(self.batch_data(request.path_params["id"]))
        except errors.BatchNotFound as exc:
            return _json({"error": str(exc)}, 404)

    def cancel(self, request: Request) -> str:
        batch_id = request.path_params["id"]
        n = self.app.cancel_batch(batch_id)
        return f"batch {batch_id} cancelled ({n} members)"

    def retry(self, request: Request) -> str:
        batch_id = request.path_params["id"]
        n = self.app.retry_batch(batch_id)
        return f"batch {batch_id}: {n} failed members queued again"

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/batches", self.list_page, methods=["GET"]),
            Route("/batches/{id:int}", self.batch_page, methods=["GET"]),
            Route("/api/batches", self.list_json, methods=["GET"]),
            Route("/api/batches/{id:int}", self.batch_json, methods=["GET"]),
            Route(
                "/api/batches/{id:int}/cancel",
                self.d.action("cancel", self.cancel),
                methods=["POST"],
            ),
            Route(
                "/api/batches/{id:int}/retry", self.d.action("retry", self.retry), methods=["POST"]
            ),
        ]
