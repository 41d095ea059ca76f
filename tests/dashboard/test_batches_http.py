"""The dashboard's batch pages over HTTP, on both backends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from procqueue import App, models
from procqueue.dashboard import create_app
from tests.dashboard.factory import csrf_of
from tests.jobs import batches
from tests.store.factories import claim

XSS = "<script>alert(1)</script>"


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = batches.app.using(dsn)
    yield a
    a.close()


@pytest.fixture
def client(dsn: str, app: App) -> Iterator[TestClient]:
    _ = app.store
    with TestClient(create_app(dsn)) as c:
        yield c


def test_batch_pages_show_live_progress_failures_and_act(app: App, client: TestClient) -> None:
    with app.batch(XSS, on_complete=batches.on_done, meta={"note": XSS}) as b:
        app.enqueue_many([(batches.square.name, {"n": i}, None) for i in range(4)])
    now = app.clock.now()
    taken = claim(app.store, count=2, queues=["default"], now=now)
    app.store.job_record_many(
        outcomes=[
            models.Outcome(id=taken[0].id, attempt=1, state=models.JobState.DONE),
            models.Outcome(id=taken[1].id, attempt=1, state=models.JobState.FAILED, error=XSS),
        ],
        now=now,
    )
    page = client.get("/batches")
    assert page.status_code == 200 and f"/batches/{b.id}" in page.text
    assert XSS not in page.text and "&lt;script&gt;" in page.text
    detail = client.get(f"/batches/{b.id}")
    assert detail.status_code == 200 and "50%" in detail.text and XSS not in detail.text
    data = client.get(f"/api/batches/{b.id}").json()
    assert (data["done"], data["failed"], data["total"], data["state"]) == (1, 1, 4, "running")
    assert data["pct"] == "50.0" and data["failures"][0]["error_line"] == XSS
    listed = client.get("/api/batches").json()["batches"]
    assert [row["id"] for row in listed] == [b.id]

    headers = {"X-CSRF-Token": csrf_of(client.get("/").text)}
    assert client.post(f"/api/batches/{b.id}/cancel").status_code == 403
    assert client.post(f"/api/batches/{b.id}/cancel", headers=headers).status_code == 200
    assert app.batch_info(b.id).state == models.BatchState.COMPLETE
    assert client.post(f"/api/batches/{b.id}/retry", headers=headers).status_code == 200
    assert app.batch_info(b.id).pending == 1
    assert client.post("/api/batches/999/cancel", headers=headers).status_code == 404
    assert client.get("/batches/999").status_code == 404
    assert client.get("/api/batches/999").status_code == 404


def test_a_workflow_batch_page_draws_its_graph_with_live_states(
    app: App, client: TestClient
) -> None:
    with app.batch("flow") as b:
        top = app.enqueue(batches.square.name, {"n": 1})
        pages = [app.enqueue(batches.square.name, {"n": i}, after=[top]) for i in range(20)]
        end = app.enqueue(batches.square.name, {"n": 0}, after=pages)
    detail = client.get(f"/batches/{b.id}")
    assert detail.status_code == 200 and '<svg class="graph"' in detail.text
    assert f'href="/jobs/{top}"' in detail.text and f'href="/jobs/{end}"' in detail.text
    assert f'data-a="data-state:node_{end}"' in detail.text
    assert "+4 more" in detail.text  # a layer draws 16 members and counts the rest
    data = client.get(f"/api/batches/{b.id}").json()
    got = (data[f"node_{top}"], data[f"node_{end}"], data["blocked"])
    assert got == ("pending", "blocked", 21)
    # top to 16 pages and the "more" box, and each of those to end
    assert len(data["graph"]["edges"]) == 17 + 17
    app.cancel(top)
    data = client.get(f"/api/batches/{b.id}").json()
    assert (data[f"node_{top}"], data[f"node_{end}"]) == ("cancelled", "cancelled")


def test_a_batch_without_dependencies_has_no_graph(app: App, client: TestClient) -> None:
    with app.batch("flat") as b:
        app.enqueue(batches.square.name, {"n": 1})
    detail = client.get(f"/batches/{b.id}")
    assert detail.status_code == 200 and '<svg class="graph"' not in detail.text
    assert client.get(f"/api/batches/{b.id}").json()["graph"] is None
