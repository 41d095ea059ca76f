"""Child output is logged under the job that wrote it, also when jobs are
handed to a child back to back: every line of 1,000 noisy jobs is checked."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from procqueue import App, JobState
from procqueue.testing import supervising, wait_until
from tests.supervisor import noisy_jobs

SPEC = "tests.supervisor.noisy_jobs"
JOBS = 1000
LINE = re.compile(r"job (\d+) (stdout|stderr): (?:out|err) (\d+)")


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = noisy_jobs.app.using(dsn)
    yield a
    a.close()


def test_every_output_line_names_the_job_that_wrote_it(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="procqueue")
    with supervising(app, SPEC, workers=2):
        ids = app.enqueue_many([(SPEC + ".noisy", {}, None)] * JOBS)
        wait_until(lambda: app.stats()["default"].done == JOBS, timeout=240, what="every noisy job")
    assert all(app.get(i).state == JobState.DONE for i in ids[:: JOBS // 10])
    lines = [r.getMessage() for r in caplog.records if r.name == "procqueue.child"]
    tagged = [m for line in lines if (m := LINE.match(line))]
    assert all(m[1] == m[3] for m in tagged), [m[0] for m in tagged if m[1] != m[3]][:5]
    dropped = [line for line in lines if "lines dropped" in line]
    # Each job wrote two lines (its stderr one unterminated); none was cut or
    # dropped, so each appears once, under its own job.
    assert not dropped, dropped[:3]
    assert len(tagged) == 2 * JOBS
    assert {int(m[1]) for m in tagged} == set(ids)
