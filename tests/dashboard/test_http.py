"""The dashboard over HTTP (Starlette's TestClient), on both backends."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from procqueue import App, JobState
from procqueue.dashboard import create_app, views
from procqueue.models import Throughput
from tests.dashboard import dashjobs
from tests.dashboard.factory import csrf_of, make, progress
from tests.store.rawdb import RawDb

XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
PAGES = ["/", "/pending", "/running", "/done", "/failed", "/cancelled"]
ACTIONS = ["/api/jobs/{id}/cancel", "/api/jobs/{id}/retry", "/api/queues/default/pause"]


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = dashjobs.app.using(dsn)
    yield a
    a.close()


@pytest.fixture
def client(dsn: str, app: App) -> Iterator[TestClient]:
    _ = app.store  # migrated before the dashboard opens it
    with TestClient(create_app(dsn)) as c:
        yield c


def csrf(client: TestClient) -> str:
    return csrf_of(client.get("/").text)


def test_every_page_renders_its_jobs(app: App, client: TestClient) -> None:
    pending = make(app, JobState.PENDING, args={"marker": "m"}, queue="bulk")
    running = make(app, JobState.RUNNING, queue="render")
    progress(app, running, "decoding", 0.5)
    done = make(app, JobState.DONE, result={"pixels": 1024}, queue="done-q")
    failed = make(app, JobState.FAILED, error="RuntimeError: disk on fire\nTraceback ...")
    cancelled = make(app, JobState.CANCELLED, queue="cancel-q")

    pages = {path: client.get(path) for path in PAGES}
    for path, response in pages.items():
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith("text/html")
        assert "/static/dashboard.js" in response.text

    queues = pages["/"].text
    for name in ("bulk", "render", "done-q", "default", "cancel-q"):
        assert f'data-key="{name}"' in queues
    assert "Throughput" in queues and queues.count("<rect") == 2 * views.CHART_MINUTES

    assert f'data-key="{pending}"' in pages["/pending"].text
    assert f'action="/api/jobs/{pending}/cancel"' in pages["/pending"].text
    assert f'data-key="{running}"' in pages["/running"].text
    assert 'aria-valuenow="50.0"' in pages["/running"].text
    assert "decoding · 50%" in pages["/running"].text
    assert "{&#34;pixels&#34;:1024}" in pages["/done"].text
    assert "RuntimeError: disk on fire" in pages["/failed"].text
    assert f'action="/api/jobs/{failed}/retry"' in pages["/failed"].text
    assert f'data-key="{cancelled}"' in pages["/cancelled"].text

    detail = client.get(f"/jobs/{failed}")
    assert detail.status_code == 200
    assert "Traceback ..." in detail.text and ">failed<" in detail.text
    assert client.get(f"/jobs/{done}").text.count("1024") >= 1
    assert client.get("/jobs/999999").status_code == 404
    assert client.get("/jobs/99999999999999999999").status_code == 404  # past 64 bits


def test_filters_narrow_a_list(app: App, client: TestClient) -> None:
    a = make(app, JobState.PENDING, queue="a")
    b = make(app, JobState.PENDING, queue="b", name="other.job")
    only_a = client.get("/pending?queue=a").text
    assert f'data-key="{a}"' in only_a and f'data-key="{b}"' not in only_a
    by_name = client.get("/api/jobs", params={"state": "pending", "name": "other.job"}).json()
    assert [j["id"] for j in by_name["jobs"]] == [b]


def test_json_endpoints(app: App, client: TestClient) -> None:
    failed = make(app, JobState.FAILED, error="boom", queue="q1")
    make(app, JobState.PENDING, queue="q1")

    queues = client.get("/api/queues")
    assert queues.headers["content-type"] == "application/json"
    body = queues.json()
    (q1,) = [q for q in body["queues"] if q["name"] == "q1"]
    assert (q1["pending"], q1["failed"], q1["status"]) == (1, 1, "active")
    assert body["n_failed"] == 1 and len(body["bars"]) == views.CHART_MINUTES
    assert body["total_failed"] == 1

    jobs = client.get("/api/jobs?state=failed").json()["jobs"]
    assert [(j["id"], j["error_line"], j["can_retry"]) for j in jobs] == [(failed, "boom", "1")]

    one = client.get(f"/api/jobs/{failed}").json()
    assert one["record"]["id"] == failed and one["record"]["state"] == "failed"
    assert "pid" in one["record"] and one["error"] == "boom"
    assert client.get("/api/jobs/999999").status_code == 404
    assert client.get("/api/jobs/99999999999999999999").status_code == 404  # past 64 bits
    assert client.get("/api/jobs?state=bogus").status_code == 400


def test_the_queues_page_shows_rates_and_their_window_counts(app: App, client: TestClient) -> None:
    app.set_rate("api", "30/m", create=True)
    make(app, JobState.RUNNING, queue="api")  # its claim counts one start
    (api,) = [q for q in client.get("/api/queues").json()["queues"] if q["name"] == "api"]
    assert (api["rate"], api["rate_used"]) == ("30/m", "1 in window")
    page = client.get("/").text
    assert '<th class="num">Rate</th>' in page and ">30/m</td>" in page


def test_actions_change_state(app: App, client: TestClient) -> None:
    token = csrf(client)
    headers = {"X-CSRF-Token": token}
    pending = make(app, JobState.PENDING)
    failed = make(app, JobState.FAILED, error="boom")

    r = client.post(f"/api/jobs/{pending}/cancel", headers=headers)
    assert r.status_code == 200 and r.json()["ok"] is True
    assert app.get(pending).state == JobState.CANCELLED
    assert client.post(f"/api/jobs/{pending}/cancel", headers=headers).status_code == 409

    assert client.post(f"/api/jobs/{failed}/retry", headers=headers).status_code == 200
    info = app.get(failed)
    assert info.state == JobState.PENDING and info.attempts == 0
    assert client.post(f"/api/jobs/{failed}/retry", headers=headers).status_code == 409
    assert client.post("/api/jobs/999999/retry", headers=headers).status_code == 404

    assert client.post("/api/queues/default/pause", headers=headers).status_code == 200
    assert app.stats()["default"].paused
    assert client.get("/api/queues").json()["queues"][0]["status"] == "paused"
    assert client.post("/api/queues/default/resume", headers=headers).status_code == 200
    assert not app.stats()["default"].paused


def test_a_plain_form_post_redirects_back_to_a_local_page(app: App, client: TestClient) -> None:
    token = csrf(client)
    job = make(app, JobState.PENDING)
    r = client.post(
        f"/api/jobs/{job}/cancel",
        data={"csrf": token, "next": "/pending?queue=default"},
        follow_redirects=False,
    )
    assert (r.status_code, r.headers["location"]) == (303, "/pending?queue=default")
    assert app.get(job).state == JobState.CANCELLED
    r = client.post(
        f"/api/jobs/{job}/retry",
        data={"csrf": token, "next": "//evil.example/"},
        follow_redirects=False,
    )
    assert (r.status_code, r.headers["location"]) == (303, "/")


def test_post_without_the_csrf_token_is_refused(app: App, client: TestClient) -> None:
    token = csrf(client)
    job = make(app, JobState.PENDING)
    url = f"/api/jobs/{job}/cancel"
    assert client.post(url).status_code == 403
    assert client.post(url, headers={"X-CSRF-Token": "wrong"}).status_code == 403
    assert client.post(url, data={"csrf": "wrong"}).status_code == 403
    cross_site = [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ]
    for extra in cross_site:
        assert client.post(url, headers={"X-CSRF-Token": token, **extra}).status_code == 403
    assert app.get(job).state == JobState.PENDING
    same_origin = {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"}
    assert client.post(url, headers={"X-CSRF-Token": token, **same_origin}).status_code == 200
    assert app.get(job).state == JobState.CANCELLED


def test_get_on_a_state_changing_route_is_refused(app: App, client: TestClient) -> None:
    job = make(app, JobState.FAILED, error="boom")
    for route in [*ACTIONS, "/api/queues/default/resume"]:
        r = client.get(route.format(id=job))
        assert r.status_code == 405, route
        assert "POST" in r.headers["allow"]
    assert app.get(job).state == JobState.FAILED
    assert not app.stats()["default"].paused


def test_a_token_guards_every_request(dsn: str, app: App) -> None:
    job = make(app, JobState.FAILED, error="boom")
    with TestClient(create_app(dsn, token="s3cret")) as c:
        for path in [*PAGES, f"/jobs/{job}", "/api/queues", "/static/dashboard.js"]:
            r = c.get(path)
            assert r.status_code == 401, path
            assert "token" in r.text
        assert c.get("/", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert c.get("/?token=nope").status_code == 401
        assert c.post(f"/api/jobs/{job}/retry").status_code == 401

        assert c.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200

        r = c.get("/failed?token=s3cret&queue=default", follow_redirects=False)
        assert (r.status_code, r.headers["location"]) == (303, "/failed?queue=default")
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "s3cret" in cookie
        # The cookie now authenticates, and POST still needs the CSRF token.
        page = c.get("/failed?queue=default")
        assert page.status_code == 200 and f'data-key="{job}"' in page.text
        assert c.post(f"/api/jobs/{job}/retry").status_code == 403
        headers = {"X-CSRF-Token": csrf_of(page.text)}
        assert c.post(f"/api/jobs/{job}/retry", headers=headers).status_code == 200
    assert app.get(job).state == JobState.PENDING


def test_script_in_names_args_and_errors_renders_as_text(app: App, client: TestClient) -> None:
    bad_name = make(app, JobState.PENDING, name=f"evil{XSS}", queue=f"q{XSS}")
    bad_arg = make(app, JobState.DONE, args={"path": XSS}, result=XSS, queue="r")
    bad_error = make(app, JobState.FAILED, error=f"RuntimeError: {XSS}\n  at {XSS}", queue="f")
    running = make(app, JobState.RUNNING, queue="p")
    progress(app, running, XSS, 0.3)
    paths = [*PAGES, f"/pending?queue=q{XSS}"]
    paths += [f"/jobs/{i}" for i in (bad_name, bad_arg, bad_error, running)]
    for path in paths:
        html = client.get(path).text
        assert XSS not in html, path
        assert "<script>" not in html.replace('<script src="/static/dashboard.js" defer>', ""), path
    assert ESCAPED in client.get("/failed").text
    assert ESCAPED in client.get("/running").text
    assert f"evil{ESCAPED}" in client.get(f"/jobs/{bad_name}").text
    assert ESCAPED in client.get(f"/jobs/{bad_arg}").text
    # JSON carries the text as data (the page puts it in with textContent).
    assert client.get(f"/api/jobs/{bad_error}").json()["error_line"] == f"RuntimeError: {XSS}"


def test_security_headers(client: TestClient) -> None:
    r = client.get("/")
    csp = dict(d.strip().split(" ", 1) for d in r.headers["content-security-policy"].split(";"))
    assert csp["script-src"] == "'self'" and csp["frame-ancestors"] == "'none'"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["cache-control"] == "no-store"
    assert client.get("/static/dashboard.css").status_code == 200


def test_loopback_dashboard_refuses_foreign_host_names(dsn: str, app: App) -> None:
    _ = app.store
    dashboard = create_app(dsn, allowed_hosts=["127.0.0.1", "localhost"])
    with TestClient(dashboard, base_url="http://rebound.example") as c:
        assert c.get("/").status_code == 400
    with TestClient(dashboard, base_url="http://localhost:8040") as c:
        assert c.get("/").status_code == 200


# -- presentation (no database) ----------------------------------------------


def test_throughput_draws_the_stores_counts_per_minute() -> None:
    first = int(dt.datetime(2024, 5, 1, 12, 16, tzinfo=dt.UTC).timestamp() // 60)
    done, failed = [0] * 15, [0] * 15
    done[-1], failed[-1], done[-4] = 4, 1, 2
    counts = Throughput(first_minute=first, done=done, failed=failed, last_60s=600)
    chart = views.throughput(counts)
    assert (chart["total_done"], chart["total_failed"], chart["peak"]) == (6, 1, 5)
    last = chart["bars"][-1]
    assert last["title"] == "12:30 UTC: 4 done, 1 failed"
    assert float(last["h_done"]) + float(last["h_failed"]) == pytest.approx(40.0)
    assert chart["bars"][-4]["title"] == "12:27 UTC: 2 done, 0 failed"
    assert (chart["from_label"], chart["to_label"]) == ("12:16", "12:30")
    assert chart["rate_now"] == "10.0"  # the last 60 s, not a 15-minute average


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "250ms"), (3.21, "3.2s"), (42, "42s"), (185, "3m 05s"), (7380, "2h 03m")],
)
def test_durations_read_well(seconds: float, text: str) -> None:
    assert views.duration(seconds) == text


def test_first_line_and_preview_cut_long_text() -> None:
    assert views.first_line("\n  Boom: x\nTraceback") == "Boom: x"
    assert len(views.preview({"a": "x" * 500})) == views.PREVIEW_CHARS
    assert re.fullmatch(r'\{"a":"x+…', views.preview({"a": "x" * 500}))


def test_a_huge_error_keeps_the_pages_small(dsn: str, app: App, client: TestClient) -> None:
    """A row is untrusted data: jobs whose errors hold 5 MB (written to the row
    by hand: procqueue caps the errors it writes) still list as a small page,
    and the job's page says how much it left out."""
    ids = [make(app, JobState.FAILED, error="boom") for _ in range(3)]
    raw = RawDb(dsn)
    try:
        for id_ in ids:
            raw.execute("UPDATE jobs SET error = ? WHERE id = ?", ("Boom: " + "x" * 5_000_000, id_))
    finally:
        raw.close()
    listing = client.get("/failed")
    assert listing.status_code == 200 and len(listing.text) < 100_000
    page = client.get(f"/jobs/{ids[0]}")
    assert page.status_code == 200 and len(page.text) < 1_000_000
    assert "more characters)" in page.text
