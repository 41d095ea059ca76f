"""``procqueue batches`` and ``procqueue batch show|cancel|retry|prune``, in-process."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from procqueue import models
from procqueue.cli import main as cli
from procqueue.cli.batches import bar, eta, rate
from procqueue.store.base import Store
from tests.jobs import batches
from tests.store.factories import claim

SQUARE = "tests.jobs.batches.square"


@pytest.fixture
def dsn(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/q.db"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def finish(store: Store, n: int, state: models.JobState, now: float) -> None:
    taken = claim(store, count=n, queues=["default"], now=now)
    outcomes = [
        models.Outcome(id=c.id, attempt=c.attempt, state=state, error="ValueError: bad tile")
        for c in taken
    ]
    store.job_record_many(outcomes=outcomes, now=now)


def test_batches_and_batch_show_with_a_bar_counts_rate_eta_and_failures(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    app = batches.app.using(dsn)
    with app.batch("tiles", on_complete=batches.on_done, meta={"log": "-"}) as b:
        app.enqueue_many([(SQUARE, {"n": i}, None) for i in range(10)])
    now = app.clock.now()
    finish(app.store, 3, models.JobState.DONE, now)
    finish(app.store, 1, models.JobState.FAILED, now + 2)
    code, out, _ = run(capsys, "batches", "--dsn", dsn)
    assert code == 0 and "tiles" in out and "running" in out and " 40%" in out
    code, out, _ = run(capsys, "batch", "show", str(b.id), "--dsn", dsn)
    assert code == 0
    assert f"batch {b.id} 'tiles': running" in out and "4/10 ended" in out
    assert "failed 1" in out and "ValueError: bad tile" in out and "eta " in out
    code, out, _ = run(capsys, "batch", "show", str(b.id), "--dsn", dsn, "--json")
    doc = json.loads(out)
    assert (doc["total"], doc["done"], doc["failed"], doc["state"]) == (10, 3, 1, "running")
    assert doc["failures"][0]["error"] == "ValueError: bad tile" and doc["rate"] > 0
    code, out, _ = run(capsys, "batches", "--dsn", dsn, "--json", "--state", "running")
    assert json.loads(out)["id"] == b.id
    app.close()


def test_batch_cancel_retry_and_prune(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    app = batches.app.using(dsn)
    with app.batch("tiles") as b:
        app.enqueue_many([(SQUARE, {"n": i}, None) for i in range(4)])
    finish(app.store, 1, models.JobState.FAILED, app.clock.now())
    code, out, _ = run(capsys, "batch", "prune", str(b.id), "--dsn", dsn)
    assert code == 1  # not complete
    code, out, _ = run(capsys, "batch", "cancel", str(b.id), "--dsn", dsn)
    assert (code, "3 members" in out) == (0, True)
    assert app.batch_info(b.id).state == models.BatchState.COMPLETE
    code, out, _ = run(capsys, "batch", "retry", str(b.id), "--dsn", dsn)
    assert (code, "1 failed" in out) == (0, True)
    assert app.batch_info(b.id).state == models.BatchState.RUNNING
    app.store.batch_cancel(id=b.id, now=app.clock.now())
    code, out, _ = run(capsys, "batch", "prune", "--dsn", dsn)
    assert code == 2
    code, out, _ = run(capsys, "batch", "prune", str(b.id), "--dsn", dsn)
    assert code == 0 and app.batches() == [] and app.jobs() == []
    code, _, err = run(capsys, "batch", "show", "999", "--dsn", dsn)
    assert code == 1 and err.startswith("procqueue: error: no batch 999")
    app.close()


def test_bar_rate_and_eta() -> None:
    assert bar(0.5, 10) == "[#####.....]  50%"
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    b = models.BatchInfo(
        id=1,
        name="x",
        state=models.BatchState.RUNNING,
        meta={},
        total=100,
        pending=50,
        running=0,
        done=50,
        failed=0,
        cancelled=0,
        fraction=0.5,
        created_at=t0,
        sealed_at=t0,
        started_at=t0,
        finished_at=None,
        cancelled_at=None,
        completions=0,
        on_complete=None,
        on_success=None,
    )
    assert rate(b, t0.timestamp() + 10) == 5.0
    assert eta(b, t0.timestamp() + 10) == 10.0
