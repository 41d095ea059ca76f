"""``procqueue enqueue --after``, ``show`` and ``batch show --graph``, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from procqueue import models
from procqueue.cli import main as cli
from tests.jobs import flows
from tests.store.factories import claim

STAGE = flows.stage.name


@pytest.fixture
def dsn(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/q.db"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_enqueue_after_blocks_the_job_and_show_names_its_dependencies(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "enqueue", STAGE, "--args", '{"n": 1}', "--dsn", dsn)
    assert code == 0
    first = int(out)
    code, out, _ = run(capsys, "enqueue", STAGE, "--args", '{"n": 2}', "--dsn", dsn)
    second = int(out)
    argv = ("enqueue", STAGE, "--args", '{"n": 3}', "--after", f"{first},{second}")
    code, out, _ = run(capsys, *argv, "--allow-failure", "--dsn", dsn)
    assert code == 0
    third = int(out)
    code, out, _ = run(capsys, "jobs", "--state", "blocked", "--json", "--dsn", dsn)
    assert [json.loads(line)["id"] for line in out.splitlines()] == [third]
    code, out, _ = run(capsys, "show", str(third), "--dsn", dsn)
    assert code == 0 and f"#{first} (pending), #{second} (pending)" in out
    code, out, _ = run(capsys, "stats", "--json", "--dsn", dsn)
    assert json.loads(out)["queues"]["default"]["blocked"] == 1
    code, out, err = run(capsys, "enqueue", flows.gather.name, "--after", "999999", "--dsn", dsn)
    assert code == 2 and "999999, which does not exist" in err and "Traceback" not in err
    code, _, err = run(capsys, "enqueue", STAGE, "--after", "x,1", "--dsn", dsn)
    assert code == 2 and "not a list of job ids" in err


def test_batch_show_graph_draws_the_layers_with_states(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    app = flows.app.using(dsn)
    with app.batch("pipeline") as b:
        top = app.enqueue(STAGE, {"n": 1})
        pages = [app.enqueue(STAGE, {"n": i}, after=[top]) for i in range(20)]
        end = app.enqueue(flows.gather.name, after=pages)
    (taken,) = claim(app.store, queues=["default"], now=app.clock.now())
    outcome = models.Outcome(id=taken.id, attempt=taken.attempt, state=models.JobState.DONE)
    app.store.job_record_many(outcomes=[outcome], now=app.clock.now())
    app.cancel(pages[0])
    code, out, _ = run(capsys, "batch", "show", str(b.id), "--graph", "--dsn", dsn)
    assert code == 0
    assert "22 members in 3 layers" in out
    assert f"[ok] #{top} {STAGE}" in out and "done" in out
    assert f"[--] #{pages[0]} {STAGE}" in out
    assert f"[  ] #{pages[1]} {STAGE}" in out and f"<- #{top}" in out
    assert "... 8 more: 8 pending" in out
    assert f"[--] #{end} {flows.gather.name}" in out  # cancelled: a dependency was
    code, out, _ = run(capsys, "batch", "show", str(b.id), "--graph", "--json", "--dsn", dsn)
    doc = json.loads(out)
    assert len(doc["nodes"]) == 22 and [top, pages[0]] in doc["edges"]
    assert {n["id"]: n["layer"] for n in doc["nodes"]}[end] == 2
    app.close()
