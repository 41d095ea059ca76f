"""A row is untrusted data: any value in any column of a job's row, against a
live supervisor, the command line and the dashboard. The supervisor fails
that one job and goes on; `jobs`, `show` and every dashboard page list the
other jobs and show that row as undecodable."""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st
from starlette.testclient import TestClient

from procqueue import App, JobState
from procqueue.cli import main as cli
from procqueue.dashboard import create_app
from procqueue.supervisor.loop import Supervisor
from procqueue.testing import supervising
from tests.helpers import JOB, SPEC
from tests.jobs import basic

VALUES = st.one_of(
    st.none(),
    st.text(max_size=30),
    st.binary(max_size=30),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.sampled_from(["{bad", "[]", '"x"', "1e999", "running", "pending", "-1"]),
)
PAGES = ["/", "/pending", "/running", "/done", "/failed", "/cancelled", "/api/queues", "/api/jobs"]


class Live:
    def __init__(self, folder: Path) -> None:
        self.dsn = f"sqlite:///{folder}/queue.db"
        self.path = folder / "queue.db"
        self.app = basic.app.using(self.dsn)
        _ = self.app.store  # migrated
        self.columns = [
            row[1]
            for row in sqlite3.connect(self.path).execute("PRAGMA table_info(jobs)")
            if row[1] != "id"
        ]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Live, Supervisor]]:
    world = Live(tmp_path_factory.mktemp("untrusted-live"))
    with supervising(world.app, SPEC, workers=1, poll=0.05) as sup:
        yield world, sup
    world.app.close()


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


@hypothesis.settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture],
)
@hypothesis.given(data=st.data())
def test_any_value_in_any_column_costs_at_most_that_job(
    live: tuple[Live, Supervisor], data: st.DataObject
) -> None:
    world, sup = live
    app: App = world.app
    columns = data.draw(st.lists(st.sampled_from(world.columns), min_size=1, max_size=3))
    values: dict[str, Any] = {c: data.draw(VALUES) for c in columns}
    app.pause("default")  # the row is corrupted before any supervisor sees it
    bad = app.enqueue(JOB + "add", {"a": 1, "b": 2})
    with sqlite3.connect(world.path) as db:
        for column, value in values.items():
            try:
                db.execute(f"UPDATE jobs SET {column} = ? WHERE id = ?", (value, bad))
            except sqlite3.IntegrityError:
                pass  # a constraint the file itself keeps (NOT NULL, a unique key)
    app.resume("default")
    good = app.enqueue(JOB + "add", {"a": 2, "b": 2})
    assert app.wait(good, timeout=30).result == 4  # the supervisor goes on

    code, listing = run_cli("jobs", "--dsn", world.dsn, "--limit", "1000")
    assert code == 0 and f"\n{good} " in listing
    assert run_cli("jobs", "--json", "--dsn", world.dsn, "--limit", "1000")[0] == 0
    assert run_cli("show", str(bad), "--dsn", world.dsn)[0] in (0, 1)  # 1: the id itself is gone
    assert run_cli("stats", "--dsn", world.dsn)[0] == 0
    with TestClient(create_app(world.dsn)) as client:
        for page in [*PAGES, f"/jobs/{bad}", f"/jobs/{good}"]:
            response = client.get(page)
            assert response.status_code in (200, 404), (page, values, response.text[:300])
    info = app.get(good)
    assert info.state == JobState.DONE
    assert sup.db.down_since is None
