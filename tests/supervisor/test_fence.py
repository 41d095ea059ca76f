"""The outcome fence tells placements of one attempt apart: a job handed back
unspent is claimed again with the same attempt number, and an outcome of the
earlier claim must never land on the new one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from procqueue import models
from procqueue.models import JobState
from procqueue.store import open_store
from procqueue.store.base import Store
from tests.store.factories import BASE, claim_exactly, insert_one


@pytest.fixture
def store(dsn: str) -> Iterator[Store]:
    s = open_store(dsn)
    s.migrate(now=BASE)
    try:
        yield s
    finally:
        s.close()


def _outcome(job: models.ClaimedJob, state: JobState, **fields: object) -> models.Outcome:
    return models.Outcome(id=job.id, attempt=job.attempt, state=state, **fields)  # type: ignore[arg-type]


def test_a_stale_outcome_of_a_handed_back_claim_never_lands_on_the_next(store: Store) -> None:
    id_ = insert_one(store)
    first = claim_exactly(store, id_, owner="sup-a")
    back = _outcome(first, JobState.PENDING, run_at=BASE, refund=True)
    assert store.job_record_many(outcomes=[back], now=BASE, owner="sup-a") == []
    second = claim_exactly(store, id_, owner="sup-b", now=BASE + 1)
    assert second.attempt == first.attempt  # the hand-back spent nothing

    stale = _outcome(first, JobState.DONE, result=b"1", history="done", started_at=BASE)
    assert store.job_record_many(outcomes=[stale], now=BASE + 2, owner="sup-a") == [id_]
    info = store.job_get(id=id_)
    assert info is not None and info.state == JobState.RUNNING and info.owner == "sup-b"
    assert store.attempt_list(id=id_) == []  # nor its history row

    fresh = _outcome(second, JobState.DONE, result=b"2", history="done", started_at=BASE + 1)
    assert store.job_record_many(outcomes=[fresh], now=BASE + 3, owner="sup-b") == []
    info = store.job_get(id=id_)
    assert info is not None and info.state == JobState.DONE and info.result == 2
    assert len(store.attempt_list(id=id_)) == 1
