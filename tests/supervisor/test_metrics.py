"""Prometheus metrics served by a real supervisor while jobs run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from procqueue import App
from procqueue.testing import supervising, wait_until
from tests.helpers import JOB, SPEC, finished, free_port, key, scrape
from tests.jobs import basic


@pytest.fixture
def app(tmp_path: object) -> Iterator[App]:
    a = basic.app.using(f"sqlite:///{tmp_path}/q.db")
    yield a
    a.close()


def test_metrics_count_claims_outcomes_and_restarts(app: App) -> None:
    port = free_port()
    with supervising(app, SPEC, workers=1, metrics_port=port):
        for i in range(3):
            finished(app, app.enqueue(JOB + "add", {"a": i, "b": 1}))
        finished(app, app.enqueue(JOB + "segfault"))
        finished(app, app.enqueue(JOB + "fail_then_succeed", {"times": 1}))
        m = scrape(port)
    add = {"queue": "default", "name": JOB + "add"}
    assert m[key("procqueue_jobs_claimed_total", **add)] == 3
    assert m[key("procqueue_jobs_finished_total", **add, outcome="done")] == 3
    seg = {"queue": "default", "name": JOB + "segfault", "outcome": "failed"}
    assert m[key("procqueue_jobs_finished_total", **seg)] == 1
    flaky = {"queue": "default", "name": JOB + "fail_then_succeed", "outcome": "retried"}
    assert m[key("procqueue_jobs_finished_total", **flaky)] == 1
    assert m[key("procqueue_child_restarts_total", reason="crash")] == 1
    assert m[key("procqueue_job_run_seconds_count", **add)] == 3
    assert m[key("procqueue_job_queue_wait_seconds_count", queue="default")] >= 5
    assert m[key("procqueue_children")] == 1


def test_metrics_count_claims_a_rate_throttled(app: App) -> None:
    port = free_port()
    ids = [app.enqueue(JOB + "add", {"a": i, "b": 1}, rate_limit="1/h") for i in range(2)]
    with supervising(app, SPEC, workers=2, metrics_port=port):
        finished(app, ids[0])
        limit = "rate job:" + JOB + "add"
        wait_until(
            lambda: scrape(port).get(key("procqueue_claims_throttled_total", limit=limit), 0) >= 1,
            what="a throttled claim counted",
        )
    assert app.get(ids[1]).state == "pending" and app.get(ids[1]).attempts == 0
