"""Batches end to end on both backends: real supervisors and
children run the members, and the handlers run once, in a child, with the
batch's `BatchInfo`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from procqueue import App, BatchState, ConfigError, EnqueueError, InvalidState, JobState
from procqueue.testing import supervising, wait_until
from tests.helpers import free_port, key, scrape
from tests.jobs import batches

SPEC = "tests.jobs.batches"


def calls(log: Path) -> list[dict[str, Any]]:
    """The handler calls logged so far."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def app(dsn: str) -> App:
    a = batches.app.using(dsn)
    yield a  # type: ignore[misc]
    a.close()


def test_a_batch_of_many_fires_on_complete_and_on_success_once(app: App, tmp_path: Path) -> None:
    log = tmp_path / "calls"
    with app.batch(
        "squares", on_complete=batches.on_done, on_success=batches.on_ok, meta={"log": str(log)}
    ) as b:
        ids = app.enqueue_many([(batches.square.name, {"n": i}, None) for i in range(300)])
        assert app.batch_info(b.id).state == BatchState.OPEN
    assert app.batch_info(b.id).total == 300
    with supervising(app, SPEC, workers=2):
        info = app.wait_batch(b.id, timeout=60)
        wait_until(lambda: len(calls(log)) == 2, timeout=30, what="both handlers")
    assert (info.state, info.done, info.fraction, info.succeeded) == ("complete", 300, 1.0, True)
    assert info.started_at is not None and info.finished_at is not None
    got = sorted(calls(log), key=lambda c: c["kind"])
    assert [c["kind"] for c in got] == ["complete", "success"]
    assert {c["type"] for c in got} == {"BatchInfo"}
    assert all(c["id"] == b.id and c["done"] == 300 and c["total"] == 300 for c in got)
    results = list(app.batch_results(b.id, page=64))
    assert [r.id for r in results] == ids
    assert [r.result for r in results] == [i * i for i in range(300)]


def test_a_member_that_segfaults_on_every_attempt_completes_the_batch_as_failed(
    app: App, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    with app.batch(
        on_complete=batches.on_done, on_success=batches.on_ok, meta={"log": str(log)}
    ) as b:
        app.enqueue(batches.square.name, {"n": 3})
        crash = app.enqueue(batches.segfault.name, {"n": 1})
    with supervising(app, SPEC, workers=2):
        info = app.wait_batch(b.id, timeout=60)
        wait_until(lambda: calls(log), timeout=30, what="on_complete")
    assert (info.done, info.failed, info.succeeded) == (1, 1, False)
    member = app.get(crash)
    assert member.attempts == 2 and "SIGSEGV" in (member.error or "")
    (call,) = calls(log)
    assert (call["kind"], call["failed"], call["done"]) == ("complete", 1, 1)
    (failure,) = app.batch_results(b.id, state="failed")
    assert failure.id == crash


def test_a_cancelled_batch_fires_on_complete_once_with_the_cancelled_counts(
    app: App, tmp_path: Path
) -> None:
    log = tmp_path / "calls"
    with app.batch(on_complete=batches.on_done, meta={"log": str(log)}) as b:
        ids = [app.enqueue(batches.wait_cancelled.name, {"n": i}) for i in range(5)]
    with supervising(app, SPEC, workers=2):
        # (jobs claimed ahead into the children's pipes count as running too)
        wait_until(lambda: app.batch_info(b.id).running >= 2, timeout=30, what="2 running")
        assert app.cancel_batch(b.id) == 5
        info = app.wait_batch(b.id, timeout=30)
        wait_until(lambda: calls(log), timeout=30, what="on_complete")
        assert app.cancel_batch(b.id) == 0
    assert {app.get(i).state for i in ids} == {JobState.CANCELLED}
    (call,) = calls(log)
    assert (call["cancelled"], call["total"], info.cancelled) == (5, 5, 5)


def test_bad_handlers_and_sealed_batches_fail_at_the_call(app: App) -> None:
    with pytest.raises(EnqueueError):
        app.batch(on_complete=batches.pair)  # it needs two arguments
    with pytest.raises(ConfigError, match="not a registered job"):
        app.batch(on_complete=calls)
    with pytest.raises(EnqueueError, match="meta"):
        app.batch(meta={"x": object()})
    with app.batch() as b:
        pass
    with pytest.raises(InvalidState, match="sealed"), b:
        app.enqueue(batches.square.name, {"n": 1})
    assert app.batch_info(b.id).total == 0


def test_a_block_that_raises_leaves_the_batch_open(app: App, tmp_path: Path) -> None:
    log = tmp_path / "calls"
    with (
        pytest.raises(RuntimeError),
        app.batch(on_complete=batches.on_done, meta={"log": str(log)}) as b,
    ):
        app.enqueue(batches.square.name, {"n": 2})
        raise RuntimeError("producer crashed")
    assert app.batch_info(b.id).state == BatchState.OPEN
    app.enqueue(batches.square.name, {"n": 3})  # outside the block: not a member
    assert app.batch_info(b.id).total == 1


def test_prometheus_gauges_count_members_per_batch_name(app: App) -> None:
    app.pause("held", create=True)
    with app.batch("gauged") as b:
        app.enqueue_many([(batches.square.name, {"n": i}, {"queue": "held"}) for i in range(3)])
    port = free_port()
    with supervising(app, SPEC, workers=1, metrics_port=port):
        pending = key("procqueue_batch_members", batch="gauged", state="pending")

        def gauge() -> float | None:
            try:
                return scrape(port).get(pending)
            except OSError:  # not serving yet
                return None

        assert wait_until(gauge, timeout=30, what="the gauge") == 3
        app.resume("held")
        app.wait_batch(b.id, timeout=30)
        m = scrape(port)
    assert not any(name == "procqueue_batch_members" for name, _ in m)
