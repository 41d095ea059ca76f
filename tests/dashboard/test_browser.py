"""The dashboard in a real headless Chromium, over a real supervisor and real children."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from procqueue import App, JobState
from procqueue.testing import supervising, wait_until
from tests.dashboard import dashjobs
from tests.dashboard.conftest import Serve, Tab

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips (or fails) with the reason
    expect = None  # type: ignore[assignment]

SPEC = "tests.dashboard.dashjobs"
JOB = "tests.dashboard.dashjobs."
PAYLOAD = "<script>alert(1)</script><img src=x onerror=alert(2)>"


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = dashjobs.app.using(dsn)
    _ = a.store  # migrated before the dashboard opens it
    yield a
    a.close()


@pytest.fixture(autouse=True)
def _patience(browser: Any) -> None:
    expect.set_options(timeout=15_000)


def row(tab: Tab, job_id: int) -> Any:
    return tab.page.locator(f'tbody[data-rows] tr[data-key="{job_id}"]')


def test_retry_a_failed_job_and_watch_it_run_to_done(
    app: App, dsn: str, serve: Serve, tab: Tab, tmp_path: Path
) -> None:
    marker = tmp_path / "fixed"
    page = tab.page
    with supervising(app, SPEC), serve(dsn) as url:
        job = app.enqueue(JOB + "flaky", {"marker": str(marker)})
        assert app.wait(job, timeout=30).state == JobState.FAILED

        page.goto(f"{url}/failed")
        failed = row(tab, job)
        expect(failed).to_contain_text("RuntimeError: the marker file is missing")
        expect(page.locator('.tab[data-state="failed"] .count')).to_have_text("1")
        failed.locator("td.name a").click()
        page.wait_for_url(f"{url}/jobs/{job}")
        badge = page.locator(".panel-head .badge")
        expect(badge).to_have_text("failed")

        marker.write_text("fixed")
        page.get_by_role("button", name="Retry").click()
        expect(page.locator("#toast")).to_have_text(f"job {job} queued again")
        expect(badge).to_have_text("done")  # live: pending, running, done without a reload
        expect(page.locator('[data-f="result_json"]')).to_have_text('"recovered"')
        expect(page.get_by_role("button", name="Retry")).to_be_hidden()
        expect(page.locator('section[data-show="error"]')).to_be_hidden()
        expect(page.locator('.tab[data-state="failed"] .count')).to_have_text("0")
        expect(page.locator('[data-f="attempts"]')).to_have_text("1/1")

        page.goto(f"{url}/done")
        expect(row(tab, job)).to_contain_text('"recovered"')
    assert app.get(job).state == JobState.DONE


def test_a_progress_bar_advances_live(
    app: App, dsn: str, serve: Serve, tab: Tab, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    page = tab.page
    with supervising(app, SPEC), serve(dsn) as url:
        page.goto(f"{url}/running")
        expect(page.locator("p.empty")).to_be_visible()
        job = app.enqueue(JOB + "stepped", {"gate": str(gate)})  # appears without a reload

        running = row(tab, job)
        bar = running.locator(".bar")
        expect(bar).to_have_attribute("aria-valuenow", "20.0")
        expect(running.locator(".bar-label")).to_have_text("first half · 20%")
        expect(page.locator("p.empty")).to_be_hidden()
        pid = getattr(app.get(job), "pid", None)
        if pid is not None:
            expect(running.locator("td.pid")).to_have_text(str(pid))
        wait_until(lambda: filled(running) == pytest.approx(0.2, abs=0.01), what="a 20% fill")

        Path(f"{gate}.1").write_text("go")
        expect(bar).to_have_attribute("aria-valuenow", "80.0")
        expect(running.locator(".bar-label")).to_have_text("second half · 80%")
        wait_until(lambda: filled(running) == pytest.approx(0.8, abs=0.01), what="an 80% fill")

        Path(f"{gate}.2").write_text("go")
        expect(running).to_have_count(0)
        expect(page.locator("p.empty")).to_be_visible()
    assert app.get(job).result == "finished"


def filled(running: Any) -> float:
    """The drawn width of the bar's fill over the width of its track."""
    fill = running.locator(".bar .fill").bounding_box()
    track = running.locator(".bar").bounding_box()
    return float(fill["width"] / track["width"]) if fill and track else 0.0


def test_cancel_buttons_stop_running_and_pending_jobs(
    app: App, dsn: str, serve: Serve, tab: Tab, tmp_path: Path
) -> None:
    page = tab.page
    with supervising(app, SPEC), serve(dsn) as url:
        running_job = app.enqueue(JOB + "block", {"marker": str(tmp_path / "never")})
        later = app.enqueue(JOB + "block", {"marker": str(tmp_path / "never")}, delay=3600)

        page.goto(f"{url}/running")
        running = row(tab, running_job)
        expect(running.locator(".bar")).to_have_attribute("data-indeterminate", "1")
        running.get_by_role("button", name="Cancel").click()
        expect(running).to_have_count(0)
        wait_until(lambda: app.get(running_job).state == JobState.CANCELLED, what="cancelled")

        page.goto(f"{url}/pending")
        pending = row(tab, later)
        expect(pending).to_contain_text("in 59m")
        pending.get_by_role("button", name="Cancel").click()
        expect(pending).to_have_count(0)
        expect(page.locator('.tab[data-state="cancelled"] .count')).to_have_text("2")
    assert app.get(later).state == JobState.CANCELLED


def test_a_script_payload_stays_text(app: App, dsn: str, serve: Serve, tab: Tab) -> None:
    page = tab.page
    with supervising(app, SPEC), serve(dsn) as url:
        first = app.enqueue(JOB + "flaky", {"marker": PAYLOAD, "message": PAYLOAD})
        app.wait(first, timeout=30)
        page.goto(f"{url}/failed")  # rendered by the server
        expect(row(tab, first).locator(".error-line")).to_have_text(f"RuntimeError: {PAYLOAD}")

        second = app.enqueue(JOB + "flaky", {"marker": PAYLOAD, "message": PAYLOAD})
        app.wait(second, timeout=30)  # added to the page by the script
        expect(row(tab, second).locator(".error-line")).to_have_text(f"RuntimeError: {PAYLOAD}")
        expect(row(tab, second).locator(".args")).to_contain_text("<script>alert(1)</script>")
        assert page.locator("main img, main script").count() == 0

        page.goto(f"{url}/jobs/{second}")
        expect(page.locator("pre.error")).to_contain_text(f"RuntimeError: {PAYLOAD}")
        expect(page.locator('[data-f="args_json"]')).to_contain_text("<img src=x onerror")
        expect(page.locator(".live")).to_have_text("live")  # a poll refilled the page
        assert page.locator("main img, main script").count() == 0
    assert tab.dialogs == []


def test_with_a_token_the_link_sets_a_cookie_and_actions_work(
    app: App, dsn: str, serve: Serve, tab: Tab
) -> None:
    page = tab.page
    job = app.enqueue(JOB + "flaky", {"marker": "/nonexistent"}, delay=3600)
    with serve(dsn, token="s3cret") as url:
        response = page.goto(f"{url}/pending")
        assert response is not None and response.status == 401
        page.goto(f"{url}/pending?token=s3cret")
        page.wait_for_url(f"{url}/pending")  # the token left the address bar
        (cookie,) = page.context.cookies()
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert page.evaluate("document.cookie") == ""
        expect(page.locator(".live")).to_have_text("live")
        row(tab, job).get_by_role("button", name="Cancel").click()
        expect(row(tab, job)).to_have_count(0)
    assert app.get(job).state == JobState.CANCELLED


def test_a_workflow_graph_shows_live_states_and_opens_a_member(
    app: App, dsn: str, serve: Serve, tab: Tab, tmp_path: Path
) -> None:
    marker = tmp_path / "go"
    page = tab.page
    with app.batch("flow") as b:
        top = app.enqueue(JOB + "block", {"marker": str(marker)})
        left = app.enqueue(JOB + "flaky", {"marker": str(marker)}, after=[top])
        right = app.enqueue(JOB + "flaky", {"marker": str(marker)}, after=[top])
    with supervising(app, SPEC), serve(dsn) as url:
        wait_until(lambda: app.get(top).state == JobState.RUNNING, timeout=30, what="running")
        page.goto(f"{url}/batches/{b.id}")
        node = page.locator(f'svg.graph a[data-job="{left}"] g.node')
        expect(node).to_have_attribute("data-state", "blocked")
        expect(page.locator(f'svg.graph a[data-job="{top}"] g.node')).to_have_attribute(
            "data-state", "running"
        )
        marker.write_text("go")
        expect(node).to_have_attribute("data-state", "done")  # live, without a reload
        expect(page.locator(f'svg.graph a[data-job="{right}"] text.state')).to_have_text("done")
        page.locator(f'svg.graph a[data-job="{left}"]').click()
        page.wait_for_url(f"{url}/jobs/{left}")
        expect(page.locator(".panel-head .badge")).to_have_text("done")
