"""The operators' commands, in-process on both backends:
``queues`` with limits, ``jobs --state failed`` with its error column,
bulk retry and cancel's usage errors, `queues rate` and `show`'s waits lines."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import msgspec
import pytest

from procqueue import App, JobState, models
from procqueue.cli import main as cli
from tests.jobs import basic

Run = Callable[..., tuple[int, str, str]]
JOB = "tests.jobs.basic."


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], dsn: str) -> Run:
    """``procqueue ARGS --dsn DSN`` in-process, on a migrated database (as a
    producer or supervisor leaves it: reading commands never migrate)."""
    migrated = App(dsn)
    migrated.store  # noqa: B018 - opening migrates
    migrated.close()

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cli.main([*argv, "--dsn", dsn])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    a = basic.app.using(dsn)
    yield a
    a.close()


def test_queues_limit_set_show_clear_and_json(run: Run, app: App) -> None:
    app.enqueue(JOB + "add", {"a": 1, "b": 2}, queue="bulk")
    assert run("queues", "limit", "bulk", "3")[:2] == (
        0,
        "queue bulk: at most 3 running at once, cluster-wide\n",
    )
    code, out, _ = run("queues", "--json")
    (doc,) = [msgspec.json.decode(line) for line in out.splitlines()]
    assert (doc["name"], doc["limit"], doc["limit_by"], doc["pending"]) == (
        "bulk",
        3,
        "operator",
        1,
    )
    assert doc["oldest_pending_age"] >= 0 and doc["paused"] is False
    _, out, _ = run("queues")
    assert "operator" in out.splitlines()[1]
    assert run("queues", "limit", "bulk", "--clear")[0] == 0
    assert app.queues()[0].limit is None
    code, _, err = run("queues", "limit", "bulk")
    assert code == 2 and "either N or --clear" in err


def test_unknown_queues_are_errors_unless_created(run: Run, app: App) -> None:
    code, _, err = run("queues", "pause", "nosuch")
    assert code == 1 and "no queue 'nosuch'" in err
    assert run("queues", "limit", "nosuch", "2")[0] == 1
    assert run("queues", "limit", "nosuch", "2", "--create")[0] == 0
    assert run("queues", "pause", "nosuch")[0] == 0
    assert (app.queues()[0].limit, app.queues()[0].paused) == (2, True)


def test_failed_jobs_show_their_error_and_running_ones_their_owner(run: Run, app: App) -> None:
    job_id = app.enqueue(JOB + "add", {"a": 1, "b": 2})
    now = app.clock.now()
    app.store.job_claim(owner="web-1:77:tok", queues=None, count=1, lease_until=now + 60, now=now)
    _, out, _ = run("jobs", "--state", "running")
    header, row = out.splitlines()
    assert header.split()[-1] == "OWNER" and row.split()[-1] == "web-1:77"
    assert "running (orphaned)" in row  # no heartbeat from web-1:77
    failure = models.Outcome(
        id=job_id, attempt=1, state=JobState.FAILED, error="ValueError: bad pixel\n  File ..."
    )
    app.store.job_record_many(outcomes=[failure], now=now)
    _, out, _ = run("jobs", "--state", "failed")
    header, row = out.splitlines()
    assert header.split()[-1] == "ERROR" and row.endswith("ValueError: bad pixel")


def test_bulk_actions_need_an_id_or_a_filter_not_both(run: Run) -> None:
    assert run("retry")[0] == 2
    assert run("retry", "3", "--state", "failed")[0] == 2
    assert run("cancel", "--state", "done")[0] == 2  # argparse: not a cancellable state
    code, _, err = run("retry", "--since", "yesterday", "--yes")
    assert code == 2 and "--since takes" in err
    assert run("retry", "--state", "failed", "--yes")[:2] == (
        0,
        "no jobs match: nothing to retry\n",
    )


def test_supervisors_when_none(run: Run) -> None:
    assert run("supervisors") == (0, "", "no supervisors\n")
    assert run("supervisors", "--json") == (0, "", "")


# -- flow control -------------------------------------------------------------------


def test_queues_rate_set_shown_and_cleared(run: Run, app: App) -> None:
    app.enqueue(JOB + "add", {"a": 1, "b": 2}, queue="api")
    assert run("queues", "rate", "api", "100/m")[:2] == (
        0,
        "queue api: at most 100/m starts, cluster-wide\n",
    )
    _, out, _ = run("queues", "--json")
    (doc,) = [msgspec.json.decode(line) for line in out.splitlines()]
    assert (doc["name"], doc["rate"], doc["rate_used"]) == ("api", "100/m", 0)
    _, out, _ = run("queues")
    assert "100/m (0 in window)" in out.splitlines()[1]
    assert run("queues", "rate", "api", "--clear")[:2] == (0, "queue api: rate cleared (no rate)\n")
    _, out, _ = run("queues", "--json")
    assert msgspec.json.decode(out.splitlines()[0])["rate"] is None


@pytest.mark.parametrize("argv", [("100/d",), ("0/s",), ("x/s",), ("5/s", "--clear"), ()])
def test_queues_rate_refuses_bad_input_in_one_line(run: Run, app: App, argv: tuple[str]) -> None:
    app.enqueue(JOB + "add", {"a": 1, "b": 2}, queue="api")
    code, out, err = run("queues", "rate", "api", *argv)
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) >= 1 and "Traceback" not in err
    assert app.queues()[0].rate is None


def test_show_says_which_rate_and_group_limit_a_job_waits_for(run: Run, app: App) -> None:
    store = app.store
    first = app.enqueue(JOB + "add", {"a": 1, "b": 2}, rate_limit="1/h", group="t", group_limit=1)
    second = app.enqueue(JOB + "add", {"a": 1, "b": 2}, rate_limit="1/h", group="t", group_limit=1)
    now = app.clock.now()
    claimed = store.job_claim(owner="o", queues=None, count=2, lease_until=now + 60, now=now)
    assert [c.id for c in claimed] == [first]
    code, out, _ = run("show", str(second))
    waits = [line for line in out.splitlines() if line.startswith("waits:")]
    assert code == 0 and len(waits) == 2
    assert "throttled by rate 1/h of job:tests.jobs.basic.add until" in waits[0]
    assert "blocked by group t's limit (1 of 1 held)" in waits[1]
