"""The dashboard: a Starlette app over `procqueue.App`'s control API.

Pages (server-rendered, then kept live by polling their JSON twin):

- ``/``                      queues: counts per state, oldest pending, throughput
- ``/running`` ``/pending`` ``/failed`` ``/done`` ``/cancelled``
                             jobs in that state (``?queue=&name=&limit=``)
- ``/jobs/{id}``             one job's full record, with every attempt's history
- ``/supervisors``           live supervisors: host, pid, queues, busy, last seen
- ``/jobs/{id}``             one job's full record
- ``/batches`` ``/batches/{id}``  batches and one batch (`procqueue.dashboard.batches`)

JSON: ``GET /api/queues``, ``GET /api/jobs?state=&queue=&name=&limit=``,
``GET /api/jobs/{id}``, ``GET /api/supervisors``. Actions (POST, CSRF token
required): ``/api/jobs/{id}/cancel``, ``/api/jobs/{id}/retry``,
``/api/queues/{name}/pause``, ``/api/queues/{name}/resume``, and by filter
``/api/bulk/retry?state=&queue=&name=``, ``/api/bulk/cancel?...``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
import msgspec
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from procqueue import errors
from procqueue.dashboard import batches as batch_pages
from procqueue.dashboard import views
from procqueue.dashboard.security import (
    CSRF_HEADER,
    LOOPBACK_HOSTS,
    Guard,
    csrf_ok,
    form_field,
)
from procqueue.producer.app import App

HERE = Path(__file__).parent
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


class JSON(Response):
    """A JSON response encoded by msgspec."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return msgspec.json.encode(content)


class Dashboard:
    """Request handlers over one `App`; one per Starlette app."""

    def __init__(self, app: App, *, poll_interval: float) -> None:
        self.app = app
        self.csrf = secrets.token_urlsafe(32)
        self.interval_ms = max(100, int(poll_interval * 1000))
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.chart = views.Cached(self._throughput, ttl=2.0)

    # -- data ----------------------------------------------------------------

    def now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.app.clock.now(), tz=dt.UTC)

    def _throughput(self) -> views.View:
        return views.throughput(self.app.throughput(views.CHART_MINUTES))

    def queues_data(self) -> views.View:
        stats = self.app.stats()
        queues = [views.queue_view(q) for q in sorted(stats.values(), key=lambda q: q.name)]
        return {
            **views.totals(stats.values()),
            **self.chart.get(),  # bars, total_done, total_failed, rate_now, ...
            "queues": queues,
            "empty": "" if queues else "1",
        }

    def jobs_data(self, state: str | None, query: dict[str, str]) -> views.View:
        now = self.now()
        jobs = self.app.jobs(
            state=state,
            queue=query.get("queue") or None,
            name=query.get("name") or None,
            limit=query_limit(query),
        )
        rows = [views.job_view(j, now) for j in jobs]
        totals = views.totals(self.app.stats().values())
        return {**totals, "jobs": rows, "empty": "" if rows else "1", **self._bulk(state, query)}

    def _bulk(self, state: str | None, query: dict[str, str]) -> views.View:
        """The page's "retry/cancel all matching" action: how many, and where to post."""
        verb = {"failed": "retry", "cancelled": "retry", "blocked": "cancel", "pending": "cancel"}
        verb["running"] = "cancel"
        if state not in verb:
            return {"bulk_n": "", "bulk_url": ""}
        queue, name = query.get("queue") or None, query.get("name") or None
        n = self.app.count_where(verb[state], state=state, queue=queue, name=name)
        where = {"state": state, "queue": queue, "name": name}
        filters = {k: v for k, v in where.items() if v is not None}
        return {
            "bulk_n": str(n) if n else "",
            "bulk_label": f"{verb[state].capitalize()} all {n} matching",
            "bulk_url": f"/api/bulk/{verb[state]}?{urlencode(filters)}",
        }

    def supervisors_data(self) -> views.View:
        now = self.now()
        rows = [views.supervisor_view(s, now) for s in self.app.supervisors()]
        totals = views.totals(self.app.stats().values())
        return {**totals, "supervisors": rows, "empty": "" if rows else "1"}

    def job_data(self, job_id: int) -> views.View:
        info = self.app.get(job_id)
        return {
            **views.totals(self.app.stats().values()),
            **views.job_view(info, self.now(), full=True),
            "record": views.record(info),
        }

    # -- pages ---------------------------------------------------------------

    def render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> Response:
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        page = self.env.get_template(template).render(
            csrf=self.csrf,
            interval_ms=self.interval_ms,
            states=views.STATES,
            here=here,
            **context,
        )
        return HTMLResponse(page, status_code=status)

    def queues_page(self, request: Request) -> Response:
        data = self.queues_data()
        return self.render(request, "queues.html", page="queues", poll_url="/api/queues", d=data)

    def jobs_page(self, request: Request) -> Response:
        state = request.url.path.strip("/")
        query = dict(request.query_params)
        data = self.jobs_data(state, query)
        filters = {k: query[k] for k in ("queue", "name", "limit") if query.get(k)}
        return self.render(
            request,
            "jobs.html",
            page=state,
            state=state,
            poll_url="/api/jobs?" + urlencode({"state": state, **filters}),
            queue_names=sorted(self.app.stats()),
            filters=filters,
            d=data,
        )

    def job_page(self, request: Request) -> Response:
        job_id: int = request.path_params["id"]
        try:
            data = self.job_data(job_id)
        except errors.JobNotFound:
            totals = views.totals(self.app.stats().values())
            return self.render(
                request, "missing.html", 404, page="", poll_url="", d=totals, job_id=job_id
            )
        return self.render(request, "job.html", page="job", poll_url=f"/api/jobs/{job_id}", d=data)

    def supervisors_page(self, request: Request) -> Response:
        data = self.supervisors_data()
        return self.render(
            request, "supervisors.html", page="supervisors", poll_url="/api/supervisors", d=data
        )

    # -- JSON ----------------------------------------------------------------

    def supervisors_json(self, request: Request) -> Response:
        return JSON(self.supervisors_data())

    def queues_json(self, request: Request) -> Response:
        return JSON(self.queues_data())

    def jobs_json(self, request: Request) -> Response:
        query = dict(request.query_params)
        state = query.get("state") or None
        if state is not None and state not in views.STATES:
            return JSON({"error": f"unknown state {state!r}"}, status_code=400)
        return JSON(self.jobs_data(state, query))

    def job_json(self, request: Request) -> Response:
        try:
            return JSON(self.job_data(request.path_params["id"]))
        except errors.JobNotFound as exc:
            return JSON({"error": str(exc)}, status_code=404)

    # -- actions -------------------------------------------------------------

    def action(self, verb: str, do: Callable[[Request], str]) -> Callable[[Request], Any]:
        """A POST endpoint: CSRF check, `do` in a thread, JSON or (forms) a redirect."""

        async def endpoint(request: Request) -> Response:
            if not await csrf_ok(request, self.csrf):
                return JSON({"error": "missing or wrong CSRF token"}, status_code=403)
            try:
                message = await run_in_threadpool(do, request)
                status, body = 200, {"ok": True, "message": message}
            except (errors.JobNotFound, errors.QueueNotFound, errors.BatchNotFound) as exc:
                status, body = 404, {"ok": False, "error": str(exc)}
            except (errors.InvalidState, errors.ConfigError) as exc:
                status, body = 409, {"ok": False, "error": f"cannot {verb}: {exc}"}
            if request.headers.get(CSRF_HEADER) is None:  # a plain HTML form, no script
                return RedirectResponse(local_path(await form_field(request, "next")), 303)
            return JSON(body, status_code=status)

        return endpoint

    def cancel(self, request: Request) -> str:
        job_id = request.path_params["id"]
        state = self.app.cancel(job_id)
        return f"job {job_id} cancelled" if state == "cancelled" else f"job {job_id} cancelling"

    def retry(self, request: Request) -> str:
        job_id = request.path_params["id"]
        self.app.retry(job_id)
        return f"job {job_id} queued again"

    def pause(self, request: Request) -> str:
        self.app.pause(request.path_params["name"])
        return f"queue {request.path_params['name']} paused"

    def resume(self, request: Request) -> str:
        self.app.resume(request.path_params["name"])
        return f"queue {request.path_params['name']} resumed"

    @staticmethod
    def _where(request: Request) -> tuple[str | None, str | None, str | None]:
        """``?state=&queue=&name=`` of a bulk action (empty: any)."""
        q = request.query_params
        return q.get("state") or None, q.get("queue") or None, q.get("name") or None

    def bulk_retry(self, request: Request) -> str:
        state, queue, name = self._where(request)
        n = self.app.retry_where(state=state, queue=queue, name=name)
        return f"{_jobs(n)} queued again"

    def bulk_cancel(self, request: Request) -> str:
        state, queue, name = self._where(request)
        cancelled, stopping = self.app.cancel_where(state=state, queue=queue, name=name)
        return f"{_jobs(cancelled)} cancelled, {_jobs(stopping)} running being stopped"

    def routes(self) -> list[BaseRoute]:
        pages: list[BaseRoute] = [Route("/", self.queues_page, methods=["GET"])]
        pages += [Route(f"/{state}", self.jobs_page, methods=["GET"]) for state in views.STATES]
        return [
            *pages,
            Route("/jobs/{id:int}", self.job_page, methods=["GET"]),
            Route("/supervisors", self.supervisors_page, methods=["GET"]),
            Route("/api/supervisors", self.supervisors_json, methods=["GET"]),
            Route("/api/queues", self.queues_json, methods=["GET"]),
            Route("/api/jobs", self.jobs_json, methods=["GET"]),
            Route("/api/jobs/{id:int}", self.job_json, methods=["GET"]),
            *[
                Route(path, self.action(verb, do), methods=["POST"])
                for path, verb, do in (
                    ("/api/jobs/{id:int}/cancel", "cancel", self.cancel),
                    ("/api/jobs/{id:int}/retry", "retry", self.retry),
                    ("/api/queues/{name}/pause", "pause", self.pause),
                    ("/api/queues/{name}/resume", "resume", self.resume),
                    ("/api/bulk/retry", "retry the matching jobs", self.bulk_retry),
                    ("/api/bulk/cancel", "cancel the matching jobs", self.bulk_cancel),
                )
            ],
            *batch_pages.BatchPages(self).routes(),  # /batches, /api/batches
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]


def _jobs(n: int) -> str:
    return f"{n} job{'' if n == 1 else 's'}"


def query_limit(query: dict[str, str]) -> int:
    """``?limit=``, clamped to 1..MAX_LIMIT (DEFAULT_LIMIT if absent or not a number)."""
    try:
        limit = int(query.get("limit") or DEFAULT_LIMIT)
    except ValueError:
        limit = DEFAULT_LIMIT
    return max(1, min(MAX_LIMIT, limit))


def local_path(value: str | None) -> str:
    """`value` if it is a path on this site, else ``/`` (no open redirect)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


def create_app(
    dsn: str,
    token: str | None = None,
    *,
    allowed_hosts: Sequence[str] | None = None,
    poll_interval: float = 1.0,
) -> Starlette:
    """The dashboard as an ASGI app over the queue database `dsn`.

    Args:
        dsn: the queue database (``sqlite:///...`` or ``postgresql://...``).
        token: when given, every request must present it (see `security`).
        allowed_hosts: Host header names accepted (None: any).
        poll_interval: seconds between the page's live updates.

    Raises:
        StoreError: `dsn` can't be opened, or has no procqueue schema (the
            dashboard never creates one).
    """
    queue_app = App(dsn)
    queue_app.migrate = False  # a mistyped DSN is an error, not a new empty queue
    _ = queue_app.store  # raises StoreError here for a database without procqueue's schema
    dashboard = Dashboard(queue_app, poll_interval=poll_interval)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            queue_app.close()

    return Starlette(
        routes=dashboard.routes(),
        middleware=[Middleware(Guard, token=token, allowed_hosts=allowed_hosts)],
        lifespan=lifespan,
    )


def serve(dsn: str, host: str = "127.0.0.1", port: int = 8040, token: str | None = None) -> None:
    """Serves the dashboard until interrupted (binds `host`, loopback by default).

    On a loopback address only loopback Host names are accepted, so a web
    page that rebinds its DNS name to 127.0.0.1 cannot reach the dashboard.
    """
    import sys

    import uvicorn

    loopback = host in LOOPBACK_HOSTS or host.startswith("127.")
    allowed = [*LOOPBACK_HOSTS, host] if loopback else None
    shown = f"[{host}]" if ":" in host else host
    print(f"procqueue dashboard on http://{shown}:{port}/", file=sys.stderr, flush=True)
    if not loopback and token is None:
        print(
            "warning: no --token on a non-loopback address: anyone who can reach it "
            "can cancel and retry jobs",
            file=sys.stderr,
            flush=True,
        )
    uvicorn.run(
        create_app(dsn, token, allowed_hosts=allowed),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
    )
