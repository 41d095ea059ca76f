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
        assert app.get(long).state == JobState.RUNNING
        assert all(app.get(i).state == JobState.DONE for i in first)
        assert finished(app, long).state == JobState.DONE
