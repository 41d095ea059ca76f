"""Batches in the store, on both backends: a batch completes in the
transaction that ends its last member, whichever path ends it (bulk ones
too), and its handlers are inserted there exactly once per completion; a
retry, single or bulk, reopens it."""

from __future__ import annotations

import threading
from typing import Any

import msgspec
import pytest

from procqueue import errors, models
from procqueue.models import BatchState, JobState
from procqueue.store import open_store
from procqueue.store.base import Store
from procqueue.testing import wait_until
from tests.store.factories import (
    BASE,
    LEASE,
    claim,
    claim_exactly,
    get,
    insert,
    new_job,
    record,
)
from tests.store.held import HOLD_KEY, Held
from tests.store.rawdb import RawDb

HANDLER = "tests.jobs.on_batch"


def callback(name: str = HANDLER, arg: str | None = "info") -> models.BatchCallback:
    return models.BatchCallback(job=models.NewJob(name=name, args=b"{}", queue="cb"), arg=arg)


def make_batch(
    store: Store, members: int, *, success: bool = False, seal: bool = True, **job: Any
) -> tuple[int, list[int]]:
    """A batch with an on_complete handler (and on_success), and its members' ids."""
    id_ = store.batch_create(
        name="tiles",
        meta=b'{"season": 2}',
        on_complete=callback(),
        on_success=callback(f"{HANDLER}_ok") if success else None,
        now=BASE,
    )
    ids = insert(store, *(new_job(batch_id=id_, args={"n": i}, **job) for i in range(members)))
    if seal:
        store.batch_seal(id=id_, now=BASE)
    return id_, ids


def handlers(store: Store) -> list[models.JobInfo]:
    """The handler jobs inserted so far (queue ``cb``), oldest first."""
    return sorted(store.job_list(state=None, queue="cb", name=None, limit=1000), key=lambda j: j.id)


def finish_all(store: Store, state: JobState = JobState.DONE, *, now: float = BASE) -> None:
    """Claims every due job of the default queue and records `state` for each."""
    while taken := claim(store, now=now, count=50, queues=["default"]):
        outcomes = [models.Outcome(id=c.id, attempt=c.attempt, state=state) for c in taken]
        assert store.job_record_many(outcomes=outcomes, now=now) == []


def test_last_member_done_enqueues_on_complete_once_with_the_batch_info(store: Store) -> None:
    id_, _ids = make_batch(store, 3, success=True)
    assert store.batch_get(id=id_).state == BatchState.RUNNING  # type: ignore[union-attr]
    finish_all(store)
    (complete, success) = handlers(store)
    assert complete.name == HANDLER and success.name == f"{HANDLER}_ok"
    assert complete.key == f"batch:{id_}:1:complete"
    info = msgspec.convert(complete.args["info"], models.BatchInfo)
    assert (info.id, info.name, info.meta, info.total, info.done) == (
        id_,
        "tiles",
        {"season": 2},
        3,
        3,
    )
    assert info.state == BatchState.COMPLETE and info.fraction == 1.0 and info.succeeded
    got = store.batch_get(id=id_)
    assert got is not None and got.completions == 1 and got.finished_at is not None
    assert got.on_complete == HANDLER and got.on_success == f"{HANDLER}_ok"
    assert get(store, complete.id).state == JobState.PENDING


def test_on_success_only_when_every_member_is_done(store: Store) -> None:
    make_batch(store, 2, success=True)
    (c,) = claim(store, count=1, queues=["default"])
    record(store, c, JobState.FAILED, error="boom")
    finish_all(store)
    (complete,) = handlers(store)
    info = msgspec.convert(complete.args["info"], models.BatchInfo)
    assert (info.done, info.failed, info.succeeded) == (1, 1, False)


def test_a_retried_member_does_not_complete_the_batch(store: Store) -> None:
    make_batch(store, 1)
    (c,) = claim(store, queues=["default"])
    record(store, c, JobState.PENDING, error="retry", run_at=BASE)
    assert handlers(store) == []
    finish_all(store, now=BASE + 1)
    assert len(handlers(store)) == 1


def test_empty_or_unsealed_batches_never_fire(store: Store) -> None:
    empty, _ = make_batch(store, 0)
    open_, _ = make_batch(store, 2, seal=False)
    finish_all(store)
    assert handlers(store) == []
    assert store.batch_get(id=empty).state == BatchState.RUNNING  # type: ignore[union-attr]
    assert store.batch_get(id=open_).state == BatchState.OPEN  # type: ignore[union-attr]
    assert store.batch_seal(id=open_, now=BASE + 1)  # its members all ended: it completes now
    assert not store.batch_seal(id=open_, now=BASE + 2)
    assert len(handlers(store)) == 1


def test_a_sealed_batch_takes_no_member(store: Store) -> None:
    id_, _ = make_batch(store, 1)
    with pytest.raises(errors.InvalidState, match="sealed"):
        insert(store, new_job(batch_id=id_), new_job())
    assert len(store.job_list(state=None, queue=None, name=None, limit=10)) == 1
    with pytest.raises(errors.BatchNotFound):
        insert(store, new_job(batch_id=id_ + 100))


def test_every_path_that_ends_a_member_completes_its_batch(store: Store, raw: RawDb) -> None:
    """A lease that expired on the last attempt, a deadline, a cancel, an
    undecodable row failed at claim: each completes the batch once."""
    lease, _ = make_batch(store, 1, max_attempts=1)
    (_c,) = claim(store, queues=["default"])
    assert store.job_rescue_expired(now=BASE + LEASE + 1) == 1
    deadline, _ = make_batch(store, 1, deadline_at=BASE + 5, queue="late")
    assert store.job_fail_past_deadline(now=BASE + 10) == 1
    cancel, (member,) = make_batch(store, 1, queue="held")
    assert store.job_cancel(id=member, now=BASE) == JobState.CANCELLED
    bad, (garbled,) = make_batch(store, 1, queue="bad")
    raw.execute("UPDATE jobs SET backoff = ? WHERE id = ?", ('"nope"', garbled))
    assert claim(store, queues=["bad"]) == []
    keys = sorted(h.key or "" for h in handlers(store))
    assert keys == sorted(f"batch:{b}:1:complete" for b in (lease, deadline, cancel, bad))
    for b, state in (
        (lease, "failed"),
        (deadline, "failed"),
        (cancel, "cancelled"),
        (bad, "failed"),
    ):
        info = store.batch_get(id=b)
        assert info is not None and info.state == BatchState.COMPLETE
        assert getattr(info, state) == 1, (b, info)


def test_cancel_a_batch_fires_on_complete_once_with_the_cancelled_counts(store: Store) -> None:
    id_, _ids = make_batch(store, 4)
    (running,) = claim(store, queues=["default"])
    assert store.batch_cancel(id=id_, now=BASE) == 4
    assert handlers(store) == []  # the running member is still to be killed
    assert store.job_renew_leases(owner="owner-1", lease_until=BASE + 60).cancel_requested == {
        running.id
    }
    record(store, running, JobState.CANCELLED, error="cancelled")
    (complete,) = handlers(store)
    info = msgspec.convert(complete.args["info"], models.BatchInfo)
    assert (info.cancelled, info.total, info.cancelled_at is not None) == (4, 4, True)
    assert store.batch_cancel(id=id_, now=BASE + 1) == 0
    assert len(handlers(store)) == 1


def test_cancel_an_open_batch_seals_it(store: Store) -> None:
    id_, _ = make_batch(store, 2, seal=False)
    store.batch_cancel(id=id_, now=BASE)
    assert len(handlers(store)) == 1
    with pytest.raises(errors.InvalidState):
        insert(store, new_job(batch_id=id_))


def test_retry_reopens_a_complete_batch_which_fires_again(store: Store) -> None:
    id_, _ = make_batch(store, 3)
    (c,) = claim(store, queues=["default"])
    record(store, c, JobState.FAILED, error="boom")
    finish_all(store)
    assert store.batch_retry(id=id_, now=BASE + 1) == 1
    info = store.batch_get(id=id_)
    assert info is not None and (info.state, info.pending, info.completions) == (
        BatchState.RUNNING,
        1,
        1,
    )
    finish_all(store, now=BASE + 2)
    assert [h.key for h in handlers(store)] == [
        f"batch:{id_}:1:complete",
        f"batch:{id_}:2:complete",
    ]
    assert store.batch_retry(id=id_, now=BASE + 3) == 0


def test_retrying_one_member_reopens_its_batch(store: Store) -> None:
    id_, (member,) = make_batch(store, 1)
    store.job_cancel(id=member, now=BASE)
    store.job_retry(id=member, now=BASE + 1)
    assert store.batch_get(id=id_).state == BatchState.RUNNING  # type: ignore[union-attr]
    finish_all(store, now=BASE + 2)
    assert len(handlers(store)) == 2


def test_bulk_cancel_of_the_last_members_completes_the_batch_in_its_transaction(
    store: Store,
) -> None:
    id_, (first, *_rest) = make_batch(store, 3, name="bulk")
    outsider = insert(store, new_job(name="bulk"))[0]
    record(store, claim_exactly(store, first), JobState.DONE)
    where: dict[str, Any] = {"queue": None, "name": "bulk", "since": None}
    assert store.job_cancel_where(states=["pending"], now=BASE + 1, **where) == (3, 0)
    # no supervisor ran: the cancel's own transaction completed the batch
    info = store.batch_get(id=id_)
    assert info is not None and (info.state, info.completions, info.done, info.cancelled) == (
        BatchState.COMPLETE,
        1,
        1,
        2,
    )
    (complete,) = handlers(store)
    assert complete.key == f"batch:{id_}:1:complete" and complete.state == JobState.PENDING
    assert get(store, outsider).state == JobState.CANCELLED
    assert store.batch_sweep(now=BASE + 2, limit=10) == 0  # nothing left for the safety net


def test_bulk_retry_reopens_the_complete_batch_which_fires_again(store: Store) -> None:
    id_, (failing, *_rest) = make_batch(store, 3, name="bulk")
    record(store, claim_exactly(store, failing), JobState.FAILED, error="boom")
    where: dict[str, Any] = {"queue": None, "name": "bulk", "since": None}
    assert store.job_cancel_where(states=["pending"], now=BASE, **where) == (2, 0)
    assert store.batch_get(id=id_).state == BatchState.COMPLETE  # type: ignore[union-attr]
    states = ["failed", "cancelled"]
    assert store.job_retry_where(states=states, now=BASE + 1, **where) == 3
    info = store.batch_get(id=id_)
    assert info is not None
    assert (info.state, info.pending, info.completions) == (BatchState.RUNNING, 3, 1)
    finish_all(store, now=BASE + 2)
    keys = [h.key for h in handlers(store)]
    assert keys == [f"batch:{id_}:{n}:complete" for n in (1, 2)]  # it completed again


def test_members_page_in_id_order_and_batches_list(store: Store) -> None:
    id_, ids = make_batch(store, 7)
    other, _ = make_batch(store, 1, seal=False)
    page = store.batch_members(id=id_, after=0, state=None, limit=5)
    rest = store.batch_members(id=id_, after=page[-1].id, state=None, limit=5)
    assert [j.id for j in page + rest] == ids
    assert store.batch_members(id=id_, after=0, state="done", limit=5) == []
    assert [b.id for b in store.batch_list(name=None, state=None, limit=10)] == [other, id_]
    assert [b.id for b in store.batch_list(name="tiles", state="open", limit=10)] == [other]
    assert store.batch_member_counts() == [("tiles", "pending", 8)]


def test_prune_deletes_complete_batches_with_their_members(store: Store) -> None:
    id_, _ = make_batch(store, 3)
    running, _ = make_batch(store, 1, queue="other")
    with pytest.raises(errors.InvalidState):
        store.batch_delete(id=running)
    finish_all(store)
    # Members of a batch are not pruned as jobs: they go with their batch.
    assert store.job_prune(states=["done"], before=BASE + 100, limit=100) == 0
    failed, _ = make_batch(store, 1, queue="f")
    (c,) = claim(store, queues=["f"])
    record(store, c, JobState.FAILED, error="boom")
    assert store.batch_prune(before=BASE + 100, limit=10) == 1  # not the one with a failure
    assert store.batch_get(id=failed) is not None
    assert store.batch_delete(id=failed) == 1
    assert store.batch_get(id=id_) is None
    assert store.batch_members(id=id_, after=0, state=None, limit=10) == []
    assert store.batch_get(id=running) is not None
    with pytest.raises(errors.BatchNotFound):
        store.batch_delete(id=id_)


def test_racing_recorders_complete_a_batch_exactly_once(store: Store, dsn: str) -> None:
    """Several stores record the last members at the same moment, again and
    again: every batch completes once, never zero times, never twice."""
    stores = [open_store(dsn) for _ in range(4)]
    try:
        for round_ in range(8):
            id_, _ = make_batch(store, 8, queue=f"race{round_}")
            taken = claim(store, count=8, queues=[f"race{round_}"])
            start = threading.Barrier(len(stores))

            def finish(
                s: Store, mine: list[models.ClaimedJob], start: threading.Barrier = start
            ) -> None:
                outcomes = [
                    models.Outcome(id=c.id, attempt=c.attempt, state=JobState.DONE) for c in mine
                ]
                start.wait()
                s.job_record_many(outcomes=outcomes, now=BASE)

            threads = [
                threading.Thread(target=finish, args=(s, taken[i :: len(stores)]))
                for i, s in enumerate(stores)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            info = store.batch_get(id=id_)
            assert info is not None and info.state == BatchState.COMPLETE, info
        keys = [h.key for h in handlers(store)]
        assert len(keys) == len(set(keys)) == 8
    finally:
        for s in stores:
            s.close()


def test_the_sweep_completes_a_batch_a_foreign_path_ended(store: Store, raw: RawDb) -> None:
    """A bulk update that knows nothing of batches ends the last member: the
    maintenance sweep completes the batch, once."""
    id_, (member,) = make_batch(store, 1)
    raw.execute("UPDATE jobs SET state = 'cancelled', finished_at = ? WHERE id = ?", (BASE, member))
    assert store.batch_sweep(now=BASE + 1, limit=10) == 1
    assert store.batch_sweep(now=BASE + 2, limit=10) == 0
    assert [h.key for h in handlers(store)] == [f"batch:{id_}:1:complete"]


def test_a_handlers_deadline_counts_from_the_completion(store: Store) -> None:
    template = models.NewJob(name=HANDLER, args=b"{}", queue="cb")
    cb = models.BatchCallback(job=template, arg="info", deadline=30.0)
    id_ = store.batch_create(name="d", meta=b"{}", on_complete=cb, on_success=None, now=BASE)
    insert(store, new_job(batch_id=id_))
    store.batch_seal(id=id_, now=BASE)
    finish_all(store, now=BASE + 500)
    (handler,) = handlers(store)
    assert handler.deadline_at is not None and handler.deadline_at.timestamp() == BASE + 530


def test_a_batch_row_that_does_not_decode_still_completes(store: Store, raw: RawDb) -> None:
    """An untrusted row: its record names the bad columns, and its last member
    still completes it (the handler that cannot be read is logged, not run)."""
    id_, _ = make_batch(store, 1)
    raw.execute(
        "UPDATE batches SET meta = ?, complete_job = ? WHERE id = ?", ('"x"', '{"a": 1}', id_)
    )
    info = store.batch_get(id=id_)
    assert info is not None and info.meta == {} and info.on_complete is None
    assert "column meta" in (info.undecodable or "") and "column complete_job" in info.undecodable
    finish_all(store)
    assert store.batch_get(id=id_).state == BatchState.COMPLETE  # type: ignore[union-attr]
    assert handlers(store) == []


def test_a_bulk_retry_racing_the_end_of_the_last_member_reopens_the_batch(
    store: Store, dsn: str
) -> None:
    """The transaction ending a batch's last member completes it and, before
    it commits, a bulk retry makes a failed member pending and commits: the
    batch must run again (and complete again once that member ends), never
    stay complete with a member pending."""
    id_, (failing, last) = make_batch(store, 2, name="race")
    record(store, claim_exactly(store, failing), JobState.FAILED, error="boom")
    taken = claim_exactly(store, last)
    other = open_store(dsn)
    # The ending waits at its handler's insert (the batch completed), for a job
    # of the same key that a transaction of the test's own holds uncommitted.
    held = Held(dsn, HOLD_KEY, (f"batch:{id_}:1:complete",))
    try:
        ending = threading.Thread(target=record, args=(other, taken, JobState.DONE))
        ending.start()
        ender = None
        if held.conn is not None:
            ender = wait_until(lambda: held.blocked_by(held.pid), what="the ending to wait")
        else:
            ending.join()
        where: dict[str, Any] = {"queue": None, "name": "race", "since": None}
        retry = threading.Thread(
            target=store.job_retry_where, kwargs={"states": ["failed"], "now": BASE + 1, **where}
        )
        retry.start()
        if ender is not None:  # the retry commits, or waits for the ending's batch lock
            wait_until(lambda: not retry.is_alive() or held.blocked_by(ender), what="the retry")
        held.release()
        ending.join()
        retry.join()
    finally:
        held.release()
        other.close()
    info = store.batch_get(id=id_)
    assert info is not None and (info.state, info.pending, info.completions) == (
        BatchState.RUNNING,
        1,
        1,
    ), info
    finish_all(store, now=BASE + 2)
    assert [h.key for h in handlers(store)] == [f"batch:{id_}:{n}:complete" for n in (1, 2)]
