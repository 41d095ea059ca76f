"""Flow control on the command line, in-process on both backends: ``queues
rate`` (set, shown with its window's count, cleared, refused when
malformed) and ``show`` saying why a pending job waits."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import msgspec
import pytest

from procqueue import App
from procqueue.cli import main as cli
from tests.jobs import basic

Run = Callable[..., tuple[int, str, str]]
ADD = "tests.jobs.basic.add"


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], dsn: str) -> Run:
    """``procqueue ARGS --dsn DSN`` in-process, on a migrated database."""
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


def test_queues_rate_set_shown_and_cleared(run: Run, app: App) -> None:
    app.enqueue(ADD, {"a": 1, "b": 2}, queue="api")
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
    app.enqueue(ADD, {"a": 1, "b": 2}, queue="api")
    code, out, err = run("queues", "rate", "api", *argv)
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) >= 1 and "Traceback" not in err
    assert app.queues()[0].rate is None


def test_show_says_which_rate_and_group_limit_a_job_waits_for(run: Run, app: App) -> None:
    store = app.store
    first = app.enqueue(ADD, {"a": 1, "b": 2}, rate_limit="1/h", group="t", group_limit=1)
    second = app.enqueue(ADD, {"a": 1, "b": 2}, rate_limit="1/h", group="t", group_limit=1)
    now = app.clock.now()
    claimed = store.job_claim(owner="o", queues=None, count=2, lease_until=now + 60, now=now)
    assert [c.id for c in claimed] == [first]
    code, out, _ = run("show", str(second))
    waits = [line for line in out.splitlines() if line.startswith("waits:")]
    assert code == 0 and len(waits) == 2
    assert "throttled by rate 1/h of job:tests.jobs.basic.add until" in waits[0]
    assert "blocked by group t's limit (1 of 1 held)" in waits[1]
