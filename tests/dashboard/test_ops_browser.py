"""The operators' pages in a real headless Chromium: a job's
attempt history, the supervisors page, orphaned jobs, limits and who set
them, and retry or cancel of every matching job."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from procqueue import App, JobState
from procqueue.testing import supervising
from tests.dashboard import dashjobs
from tests.dashboard.conftest import Serve, Tab
from tests.dashboard.factory import csrf_of, finish, insert, make, start

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips (or fails) with the reason
    expect = None  # type: ignore[assignment]

SPEC = "tests.dashboard.dashjobs"


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = dashjobs.app.using(dsn)
    _ = a.store  # migrated before the dashboard opens it
    yield a
    a.close()


@pytest.fixture(autouse=True)
def _patience(browser: Any) -> None:
    expect.set_options(timeout=15_000)


def test_the_job_page_lists_every_attempt_and_new_ones_live(
    app: App, dsn: str, serve: Serve, tab: Tab
) -> None:
    page = tab.page
    job = insert(app, "app.jobs.thumbnail", {"path": "a.heic"}, max_attempts=3)
    start(app, job)
    finish(
        app,
        job,
        JobState.PENDING,
        error="child process killed by SIGSEGV\n  File x",
        exit_reason="SIGSEGV",
    )
    start(app, job)
    with serve(dsn) as url:
        page.goto(f"{url}/jobs/{job}")
        attempts = page.locator("li.attempt")
        expect(attempts).to_have_count(1)
        expect(attempts.first).to_contain_text("#1")
        expect(attempts.first).to_contain_text("SIGSEGV")
        expect(attempts.first.locator("pre")).to_contain_text("child process killed by SIGSEGV")
        expect(attempts.first).to_contain_text("supervisor worker-7.internal:31337")
        expect(page.locator('[data-f="owner"]')).to_have_text("worker-7.internal:31337")
        expect(page.locator(".badge.orphaned")).to_be_visible()  # no heartbeat from its owner
        finish(app, job, JobState.DONE, result={"ok": True})
        expect(attempts).to_have_count(2)  # added by the page's poll
        expect(attempts.nth(1)).to_contain_text("done")
        expect(attempts.nth(1).locator("pre")).to_be_hidden()
        expect(page.locator(".badge.orphaned")).to_be_hidden()


def test_the_supervisors_page_follows_supervisors_live(
    app: App, dsn: str, serve: Serve, tab: Tab
) -> None:
    page = tab.page
    with serve(dsn) as url:
        page.goto(f"{url}/supervisors")
        expect(page.locator("p.empty")).to_be_visible()
        with supervising(app, SPEC, workers=2, queues=["default", "tiles"], limits={"tiles": 3}):
            row = page.locator("tbody[data-rows] tr")
            expect(row).to_have_count(1)
            expect(row.locator('[data-f="queues"]')).to_have_text("default, tiles")
            expect(row.locator('[data-f="limits"]')).to_have_text("tiles=3")
            expect(row.locator('[data-f="busy"]')).to_have_text("0/2")
            expect(row.locator(".status")).to_have_text("alive")
            page.goto(f"{url}/")
            tiles = page.locator('tr[data-key="tiles"]')
            expect(tiles.locator('[data-f="limit"]')).to_have_text("3")
            expect(tiles.locator('[data-f="limit_by"]')).to_contain_text("supervise on ")
            page.goto(f"{url}/supervisors")
        expect(page.locator("tbody[data-rows] tr")).to_have_count(0)  # gone when it stopped
        expect(page.locator("p.empty")).to_be_visible()
    assert tab.dialogs == []


def test_retry_every_matching_failed_job_after_confirming(
    app: App, dsn: str, serve: Serve, tab: Tab
) -> None:
    page = tab.page
    chosen = [make(app, JobState.FAILED, name="app.jobs.render", error="boom") for _ in range(3)]
    other = make(app, JobState.FAILED, name="app.jobs.other", error="boom")
    with serve(dsn) as url:
        page.goto(f"{url}/failed?name=app.jobs.render")
        summary = page.locator("details.bulk summary")
        expect(summary).to_have_text("Retry all 3 matching")
        confirm = page.get_by_role("button", name="Yes, retry all 3 matching")
        expect(confirm).to_be_hidden()  # one more click first
        summary.click()
        confirm.click()
        expect(page.locator("#toast")).to_have_text("3 jobs queued again")
        expect(page.locator("details.bulk")).to_be_hidden()  # nothing matches any more
    assert {app.get(j).state for j in chosen} == {JobState.PENDING}
    assert app.get(other).state == JobState.FAILED


def test_cancel_every_matching_pending_job(app: App, dsn: str, serve: Serve, tab: Tab) -> None:
    page = tab.page
    pending = [insert(app, "app.jobs.reindex", {"shard": n}, queue="bulk") for n in range(4)]
    kept = insert(app, "app.jobs.reindex", {"shard": 9}, queue="default")
    with serve(dsn) as url:
        page.goto(f"{url}/pending?queue=bulk")
        page.locator("details.bulk summary").click()
        page.get_by_role("button", name="Yes, cancel all 4 matching").click()
        expect(page.locator("#toast")).to_have_text(
            "4 jobs cancelled, 0 jobs running being stopped"
        )
    assert {app.get(j).state for j in pending} == {JobState.CANCELLED}
    assert app.get(kept).state == JobState.PENDING


def test_bulk_actions_need_the_csrf_token(app: App, dsn: str, serve: Serve) -> None:
    failed = make(app, JobState.FAILED, error="boom")
    with serve(dsn) as url, httpx.Client(base_url=url) as client:
        refused = client.post(
            "/api/bulk/retry?state=failed", headers={"Accept": "application/json"}
        )
        assert refused.status_code == 403
        assert app.get(failed).state == JobState.FAILED
        token = csrf_of(client.get("/failed").text)
        done = client.post("/api/bulk/retry?state=failed", headers={"X-CSRF-Token": token})
        assert done.status_code == 200 and done.json()["message"] == "1 job queued again"
        wrong = client.post("/api/bulk/retry?state=pending", headers={"X-CSRF-Token": token})
        assert wrong.status_code == 409 and "only failed or cancelled" in wrong.json()["error"]
    assert app.get(failed).state == JobState.PENDING
