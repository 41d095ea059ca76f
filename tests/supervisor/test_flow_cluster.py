"""Flow control across two real supervisors on one database (each backend):
a rate limit and a group limit hold exactly by the jobs' own timestamps,
small tenants are served behind one tenant's backlog, and a debounced key
runs once with its last arguments."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from procqueue import App, JobState
from procqueue.testing import supervising, wait_until
from tests.helpers import JOB, SPEC, finished
from tests.jobs import basic
from tests.procs import start_supervisor


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = basic.app.using(dsn)
    yield a
    a.close()


@contextmanager
def two_supervisors(app: App) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two supervisor processes of 2 children each on `app`'s database."""
    sups = [start_supervisor(app.dsn or "", workers=2) for _ in range(2)]
    try:
        yield sups
    finally:
        for sup in sups:
            sup.send_signal(signal.SIGTERM)
        assert [sup.wait(timeout=30) for sup in sups] == [0, 0]


def _spans(path: Path) -> list[tuple[float, float]]:
    return [
        (float(a), float(b)) for a, b in (line.split() for line in path.read_text().splitlines())
    ]


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    most = held = 0
    for _, step in edges:  # an end at the same instant as a start comes first
        held += step
        most = max(most, held)
    return most


def test_two_supervisors_hold_a_rate_exactly_and_spend_no_attempt(app: App, tmp_path: Path) -> None:
    items = [(JOB + "span", {"path": str(tmp_path / "s"), "seconds": 0.01}, {}) for _ in range(14)]
    ids = app.enqueue_many([(n, a, {**o, "rate_limit": "4/s"}) for n, a, o in items])
    with two_supervisors(app):
        infos = [app.get(finished(app, id_, timeout=60).id) for id_ in ids]
    assert {(i.state, i.attempts) for i in infos} == {(JobState.DONE, 1)}
    # A rate-limited job is started by the claim that takes it (never
    # reserved): its attempt's claimed_at is its start, the time counted.
    starts = sorted(a.claimed_at.timestamp() for i in infos for a in i.history if a.claimed_at)
    assert len(starts) == 14
    # any window of one second holds at most 4 starts: the 5th after one
    # is at least a second later
    assert min(b - a for a, b in zip(starts, starts[4:], strict=False)) >= 1.0
    assert all(i.started_at is not None for i in infos)


def test_two_supervisors_hold_a_group_limit_and_use_it_fully(app: App, tmp_path: Path) -> None:
    path = tmp_path / "spans"
    options = {"group": "tenant-1", "group_limit": 2}
    # long enough that a claim (slow on a loaded host) lands while two run
    items = [(JOB + "span", {"path": str(path), "seconds": 0.8}, options) for _ in range(8)]
    other = [(JOB + "span", {"path": str(tmp_path / "other"), "seconds": 0.2}, {})] * 4
    ids = app.enqueue_many(items + other)
    with two_supervisors(app):
        assert {finished(app, id_, timeout=60).state for id_ in ids} == {JobState.DONE}
    assert _most_at_once(_spans(path)) == 2
    assert all(finished(app, id_).attempts == 1 for id_ in ids)


def test_small_tenants_run_within_the_first_dozen_behind_a_big_backlog(app: App) -> None:
    app.enqueue_many([(JOB + "echo", {"value": n}, {"group": "big"}) for n in range(2000)])
    small = app.enqueue_many(
        [(JOB + "echo", {"value": t}, {"group": f"small-{t}"}) for t in range(3) for _ in range(3)]
    )
    with two_supervisors(app):
        for id_ in small:
            finished(app, id_, timeout=60)
    ran = [app.get(j.id) for j in app.jobs(state="done", limit=5000)]
    # the order claims took them in: by the claim's time (a claim's own jobs
    # share it, and a claim of many rotates within itself)
    claimed = sorted((a.claimed_at, j.id) for j in ran for a in j.history if a.claimed_at)
    twelfth = claimed[min(11, len(claimed) - 1)][0]
    first = {id_ for at, id_ in claimed if at <= twelfth}
    assert set(small) <= first
    assert len(first) < 40


def test_a_debounced_key_runs_once_with_its_last_arguments(app: App) -> None:
    with supervising(app, SPEC, poll=0.05):
        ids = []
        for n in range(5):
            last = time.time()
            ids.append(app.enqueue(JOB + "echo", {"value": n}, key="k", debounce=0.5))
        assert len(set(ids)) == 1
        info = finished(app, ids[0])
    assert (info.state, info.result, info.attempts) == (JobState.DONE, 4, 1)
    assert info.started_at is not None and info.started_at.timestamp() >= last + 0.5
    assert [j.id for j in app.jobs(limit=10)] == ids[:1]
    wait_until(lambda: app.stats()["default"].done == 1, what="one job done")
