"""Jobs claimed ahead wait in the supervisor, not in a child's pipe: the
first child that becomes idle takes the next one, so no job waits behind a
long one while another child idles."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from procqueue import App, JobState
from procqueue.testing import supervising, wait_until
from tests.helpers import JOB, SPEC, finished
from tests.jobs import basic


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = basic.app.using(dsn)
    yield a
    a.close()


def test_short_jobs_behind_a_long_one_go_to_the_idle_child(app: App, tmp_path: Path) -> None:
    log = str(tmp_path / "spans")
    with supervising(app, SPEC, workers=2):
        warm = app.enqueue_many([(JOB + "span", {"path": log, "seconds": 0.05}, None)] * 2)
        for id_ in warm:
            finished(app, id_)
        first = app.enqueue_many([(JOB + "span", {"path": log, "seconds": 0.05}, None)] * 40)
        long = app.enqueue(JOB + "span", {"path": log, "seconds": 6.0})
        last = app.enqueue_many([(JOB + "span", {"path": log, "seconds": 0.05}, None)] * 3)
        # The long job holds one child for 6 s; the other takes all that is left.
        wait_until(
            lambda: all(app.get(i).state == JobState.DONE for i in last),
            timeout=3.0,
            what="the 3 short jobs behind the 6 s one, within 3 s of their enqueue",
        )
        # claimed ahead: shown running once its start is written, soon after it began
        wait_until(lambda: app.get(long).state == JobState.RUNNING, timeout=2.0, what="running")
        assert all(app.get(i).state == JobState.DONE for i in first)
        assert finished(app, long).state == JobState.DONE


def test_running_never_lists_more_jobs_than_children(app: App) -> None:
    """Jobs claimed ahead are `reserved` until a child starts them, and the
    start a job shows is its history's: sampled while 1,500 tiny jobs drain."""
    ids = app.enqueue_many([(JOB + "add", {"a": i, "b": 1}, None) for i in range(1500)])
    most_running = 0
    with supervising(app, SPEC, workers=2):

        def drained() -> bool:
            nonlocal most_running
            most_running = max(most_running, len(app.jobs(state="running", limit=50)))
            return app.stats()["default"].done == len(ids)

        wait_until(drained, timeout=120, interval=0.005, what="the drain")
    assert most_running <= 2
    for id_ in (ids[0], ids[len(ids) // 2], ids[-1]):
        info = app.get(id_)
        assert info.history[-1].started_at == info.started_at is not None
        assert info.history[-1].claimed_at is not None
        assert info.history[-1].claimed_at <= info.started_at
