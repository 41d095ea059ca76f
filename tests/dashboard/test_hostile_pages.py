"""The dashboard against hostile rows and URLs, on both backends: an error
of 5 MB is cut in the listing, an id past any integer column is a 404."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from procqueue import App
from procqueue.dashboard import create_app
from tests.store.rawdb import RawDb


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = App(dsn)
    _ = a.store  # migrated before the dashboard opens it
    yield a
    a.close()


def test_an_error_of_5_mb_is_cut_in_the_failed_listing(dsn: str, app: App) -> None:
    job = app.enqueue("x.y", {})
    raw = RawDb(dsn)
    try:
        raw.execute(
            "UPDATE jobs SET state = 'failed', error = ?, finished_at = created_at WHERE id = ?",
            ("E" * (5 * 1024 * 1024), job),
        )
    finally:
        raw.close()
    with TestClient(create_app(dsn)) as client:
        listing = client.get("/failed")
        assert listing.status_code == 200 and f"/jobs/{job}" in listing.text
        assert len(listing.content) < 200_000
        page = client.get(f"/jobs/{job}")
        assert page.status_code == 200 and len(page.content) < 1_000_000


@pytest.mark.parametrize("id_", ["99999999999999999999", "9223372036854775808", "-1", "0", "1e3"])
def test_a_job_id_past_any_integer_is_not_found(app: App, dsn: str, id_: str) -> None:
    with TestClient(create_app(dsn)) as client:
        assert client.get(f"/jobs/{id_}").status_code == 404
        assert client.get(f"/api/jobs/{id_}").status_code == 404
