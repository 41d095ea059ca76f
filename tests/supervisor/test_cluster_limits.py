"""Many supervisors claiming at once: limits hold and are used fully; the
database going away mid-run loses nothing."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from procqueue import App, JobState
from procqueue.testing import supervising, wait_until
from tests.conftest import PG_URL
from tests.helpers import JOB, SPEC, finished
from tests.jobs import basic
from tests.procs import start_supervisor

LIMITS = {"narrow": 2, "wide": 3}


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = basic.app.using(dsn)
    yield a
    a.close()


def test_four_supervisors_never_pass_a_queue_limit_and_use_it_fully(
    app: App, tmp_path: object
) -> None:
    spans = f"{tmp_path}/spans"
    items = [
        (JOB + "span", {"path": spans, "seconds": 0.15}, {"queue": queue})
        for queue in ("narrow", "wide")
        for _ in range(24)
    ]
    ids = app.enqueue_many(items)
    sups = [start_supervisor(app.dsn or "", workers=2, limits=LIMITS) for _ in range(4)]
    peaks = dict.fromkeys(LIMITS, 0)
    samples = 0
    give_up = time.monotonic() + 90
    try:
        while True:
            stats = app.stats()
            samples += 1
            for queue, limit in LIMITS.items():
                q = stats.get(queue)
                running = q.running + q.reserved if q else 0  # both hold a slot
                assert running <= limit, f"{queue}: {running} running, limit {limit}"
                peaks[queue] = max(peaks[queue], running)
            if sum(q.running + q.reserved + q.pending for q in stats.values()) == 0:
                break
            assert time.monotonic() < give_up, "jobs did not finish"
    finally:
        for sup in sups:
            sup.send_signal(signal.SIGTERM)
        assert [sup.wait(timeout=30) for sup in sups] == [0, 0, 0, 0]
    assert samples >= 50
    assert peaks == LIMITS  # the limits were used fully, never passed
    assert all(finished(app, i).attempts == 1 for i in ids)


@pytest.mark.parametrize("dsn", ["postgres"], indirect=True)
def test_terminated_connections_are_replaced_and_nothing_is_lost(
    app: App, tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="procqueue")
    schema = (app.dsn or "").rsplit("schema=", 1)[1]
    spans = f"{tmp_path}/spans"
    with supervising(app, SPEC, workers=2, lease=10):
        ids = [app.enqueue(JOB + "span", {"path": spans, "seconds": 0.3}) for _ in range(6)]
        wait_until(lambda: app.stats()["default"].running > 0, what="running jobs")
        for _ in range(2):
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = %s",
                    (f"procqueue:{schema}",),
                )
        infos = [finished(app, i, timeout=60) for i in ids]
    assert all(i.state == JobState.DONE and i.attempts == 1 for i in infos)
    outages = [r for r in caplog.records if "database unavailable" in r.getMessage()]
    assert len(outages) <= 2  # at most one line per outage, never one per retry


@pytest.mark.skipif(
    os.environ.get("PROCQUEUE_TEST_RESTART_PG") != "1",
    reason="restarts the shared PostgreSQL server: set PROCQUEUE_TEST_RESTART_PG=1 (CI does)",
)
@pytest.mark.parametrize("dsn", ["postgres"], indirect=True)
def test_a_server_restart_mid_run_loses_nothing(
    app: App, tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="procqueue")
    spans = f"{tmp_path}/spans"
    with supervising(app, SPEC, workers=2, lease=30):
        ids = [app.enqueue(JOB + "span", {"path": spans, "seconds": 1.0}) for _ in range(6)]
        wait_until(lambda: app.stats()["default"].running == 2, what="running jobs")
        restart = threading.Thread(
            target=subprocess.run,
            args=("pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main restart",),
            kwargs={"shell": True, "check": True},
        )
        restart.start()
        restart.join(timeout=60)
        infos = [_wait_through_outage(app, i) for i in ids]
    assert all(i.state == JobState.DONE for i in infos)
    assert all(i.attempts == 1 for i in infos), [i.attempts for i in infos]
    outages = [r for r in caplog.records if "database unavailable" in r.getMessage()]
    backs = [r for r in caplog.records if "database back" in r.getMessage()]
    # The pool may ride out a short restart unseen; an outage it can't hide is
    # one line when it starts and one when it ends, never a line per retry.
    assert len(outages) <= 2 and len(backs) == len(outages)
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]


def _wait_through_outage(app: App, job_id: int) -> object:
    def done() -> object:
        try:
            info = app.get(job_id)
        except Exception:
            return None
        return info if info.state in (JobState.DONE, JobState.FAILED) else None

    return wait_until(done, timeout=90, interval=0.1, what=f"job {job_id}")


@pytest.mark.parametrize("dsn", ["postgres"], indirect=True)
def test_transactional_enqueue_commits_with_the_caller_and_wakes_a_supervisor(app: App) -> None:
    with supervising(app, SPEC, workers=1, poll=120):  # only a wake-up can start it in time
        with psycopg.connect(PG_URL) as conn:
            dropped = app.enqueue(JOB + "add", {"a": 1, "b": 1}, connection=conn)
            conn.rollback()
            kept = app.enqueue(JOB + "add", {"a": 2, "b": 3}, connection=conn)
            assert app.jobs(limit=10) == []  # not visible before the caller commits
            conn.commit()
        info = finished(app, kept, timeout=30)
    assert info.result == 5
    assert [j.id for j in app.jobs(limit=10)] == [kept] and dropped != kept
