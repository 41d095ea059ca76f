"""Dependencies in the store, on both backends: a job enqueued after others
is blocked until every one is terminal, then pending if all are done, else
cancelled naming the dependency (transitively), unless allow_failure. This
is decided in the transaction that ends the dependency, whichever path ends
it (outcome, rescue, deadline, cancel single or bulk, undecodable row), and
undone by every path that runs one again (retry single or bulk, a batch's)."""

from __future__ import annotations

import threading
import time
from typing import Any

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
    insert_one,
    new_job,
    record,
)
from tests.store.held import HOLD_BATCH, Held
from tests.store.rawdb import RawDb


def dependent(store: Store, *after: int, now: float = BASE, **job: object) -> int:
    return insert_one(store, now=now, queue="late", after=list(after), **job)


def end(store: Store, id_: int, state: JobState, *, now: float = BASE) -> None:
    """Claims job `id_` (from its own queue) and records `state` for it."""
    claimed = claim_exactly(store, id_, now=now)
    error = "boom" if state == JobState.FAILED else None
    assert record(store, claimed, state, now=now, error=error) == []


def states(store: Store, *ids: int) -> list[JobState]:
    return [get(store, id_).state for id_ in ids]


def test_a_dependent_is_blocked_until_its_last_dependency_is_done(store: Store) -> None:
    a, b = insert_one(store, queue="a"), insert_one(store, queue="b")
    c = dependent(store, a, b)
    assert states(store, c) == [JobState.BLOCKED]
    assert claim(store, queues=["late"]) == []  # never claimed while blocked
    end(store, a, JobState.DONE)
    assert states(store, c) == [JobState.BLOCKED]
    end(store, b, JobState.DONE, now=BASE + 5)
    info = get(store, c)
    assert info.state == JobState.PENDING and info.run_at.timestamp() == BASE + 5
    assert [d.depends_on for d in store.job_dependencies(ids=[c])] == [a, b]
    claim_exactly(store, c, now=BASE + 5)


def test_a_failed_dependency_cancels_its_dependents_transitively(store: Store) -> None:
    a = insert_one(store, queue="a", name="tests.jobs.decode")
    b = dependent(store, a)
    c = insert_one(store, queue="c", after=[b])
    d = insert_one(store, queue="d", after=[b], allow_failure=True)
    end(store, a, JobState.FAILED)
    assert states(store, b, c, d) == [JobState.CANCELLED, JobState.CANCELLED, JobState.PENDING]
    assert get(store, b).error == f"dependency {a} (tests.jobs.decode) failed"
    assert get(store, c).error == f"dependency {b} (tests.jobs.echo) was cancelled"
    assert get(store, c).finished_at is not None


def test_allow_failure_waits_for_every_dependency_then_runs(store: Store) -> None:
    a, b = insert_one(store, queue="a"), insert_one(store, queue="b")
    c = dependent(store, a, b, allow_failure=True)
    end(store, a, JobState.FAILED)
    assert states(store, c) == [JobState.BLOCKED]
    assert store.job_cancel(id=b, now=BASE) == JobState.CANCELLED
    assert states(store, c) == [JobState.PENDING]


def test_an_unknown_dependency_is_refused_and_nothing_is_written(store: Store) -> None:
    a = insert_one(store, queue="a")
    with pytest.raises(errors.EnqueueError, match="depends on job 999999, which does not exist"):
        insert(store, new_job(queue="x"), new_job(queue="x", after=[a, 999_999]))
    assert store.job_list(state=None, queue="x", name=None, limit=10) == []
    assert store.job_dependencies(ids=[a + 1, a + 2]) == []


def test_dependencies_already_terminal_are_decided_at_enqueue(store: Store) -> None:
    done, failed = insert_one(store, queue="a"), insert_one(store, queue="b")
    end(store, done, JobState.DONE)
    end(store, failed, JobState.FAILED)
    assert states(store, dependent(store, done)) == [JobState.PENDING]
    late = dependent(store, done, failed)
    assert states(store, late) == [JobState.CANCELLED]
    assert get(store, late).error == f"dependency {failed} (tests.jobs.echo) failed"
    assert states(store, dependent(store, failed, allow_failure=True)) == [JobState.PENDING]


def test_a_known_key_adds_no_edge(store: Store) -> None:
    a, b = insert_one(store, queue="a"), insert_one(store, queue="b")
    first = dependent(store, a, key="k")
    assert dependent(store, b, key="k") == first
    assert [d.depends_on for d in store.job_dependencies(ids=[first])] == [a]


@pytest.mark.parametrize("path", ["rescue", "deadline", "cancel", "bulk", "undecodable"])
def test_every_path_that_ends_a_dependency_decides_its_dependents(
    store: Store, raw: RawDb, path: str
) -> None:
    a = insert_one(store, queue="a", max_attempts=1, deadline_at=BASE + 10)
    ok = dependent(store, a, allow_failure=True)
    gone = dependent(store, a)
    if path == "rescue":
        claim_exactly(store, a)
        assert store.job_rescue_expired(now=BASE + LEASE + 1) == 1
    elif path == "deadline":
        assert store.job_fail_past_deadline(now=BASE + 10) == 1
    elif path == "cancel":
        assert store.job_cancel(id=a, now=BASE) == JobState.CANCELLED
    elif path == "bulk":
        assert store.job_cancel_where(
            states=["pending", "running"], queue="a", name=None, since=None, now=BASE
        ) == (1, 0)
    else:
        raw.execute("UPDATE jobs SET args = '[1, 2]' WHERE id = ?", (a,))
        assert claim(store, queues=["a"]) == []
    assert states(store, a)[0] in (JobState.FAILED, JobState.CANCELLED)
    assert states(store, ok, gone) == [JobState.PENDING, JobState.CANCELLED]
    assert get(store, gone).error is not None and f"dependency {a} " in get(store, gone).error


def test_cancelling_a_blocked_job_cancels_its_dependents(store: Store) -> None:
    a = insert_one(store, queue="a")
    b = dependent(store, a)
    c = insert_one(store, queue="c", after=[b])
    assert store.job_cancel(id=b, now=BASE) == JobState.CANCELLED
    assert states(store, a, b, c) == [JobState.PENDING, JobState.CANCELLED, JobState.CANCELLED]
    assert get(store, c).error == f"dependency {b} (tests.jobs.echo) was cancelled"


def test_retrying_a_failed_dependency_blocks_its_cancelled_dependents_again(
    store: Store,
) -> None:
    a = insert_one(store, queue="a")
    b = dependent(store, a)
    c = insert_one(store, queue="c", after=[b])
    end(store, a, JobState.FAILED)
    assert states(store, b, c) == [JobState.CANCELLED, JobState.CANCELLED]
    store.job_retry(id=a, now=BASE + 1)
    assert states(store, a, b, c) == [JobState.PENDING, JobState.BLOCKED, JobState.BLOCKED]
    assert get(store, b).error is None and get(store, b).finished_at is None
    end(store, a, JobState.DONE, now=BASE + 2)
    assert states(store, b, c) == [JobState.PENDING, JobState.BLOCKED]
    end(store, b, JobState.DONE, now=BASE + 3)
    assert states(store, c) == [JobState.PENDING]


def test_a_retried_dependent_is_decided_by_its_dependencies_again(store: Store) -> None:
    a, b = insert_one(store, queue="a"), insert_one(store, queue="b")
    c = dependent(store, a, b)
    end(store, a, JobState.FAILED)
    store.job_retry(id=c, now=BASE)  # a still failed: cancelled again
    assert states(store, c) == [JobState.CANCELLED]
    store.job_retry(id=a, now=BASE)
    end(store, a, JobState.DONE)
    assert states(store, c) == [JobState.BLOCKED]
    assert store.job_cancel(id=c, now=BASE) == JobState.CANCELLED
    store.job_retry(id=c, now=BASE)  # b still open: blocked again
    assert states(store, c) == [JobState.BLOCKED]


def test_a_dependent_cancelled_by_two_failures_stays_cancelled_until_both_retry(
    store: Store,
) -> None:
    a, b = insert_one(store, queue="a"), insert_one(store, queue="b")
    c = dependent(store, a, b)
    end(store, a, JobState.FAILED)
    end(store, b, JobState.FAILED)
    store.job_retry(id=a, now=BASE)
    assert states(store, c) == [JobState.CANCELLED]
    assert get(store, c).error == f"dependency {b} (tests.jobs.echo) failed"
    store.job_retry(id=b, now=BASE)
    assert states(store, c) == [JobState.BLOCKED]


def test_bulk_retry_blocks_the_dependents_again(store: Store) -> None:
    a = insert_one(store, queue="a")
    b = dependent(store, a)
    end(store, a, JobState.FAILED)
    n = store.job_retry_where(states=["failed"], queue="a", name=None, since=None, now=BASE)
    assert n == 1
    assert states(store, a, b) == [JobState.PENDING, JobState.BLOCKED]


def test_a_pending_dependent_waits_again_for_a_dependency_retried(store: Store) -> None:
    a = insert_one(store, queue="a")
    b = dependent(store, a, allow_failure=True)
    end(store, a, JobState.FAILED)
    assert states(store, b) == [JobState.PENDING]
    store.job_retry(id=a, now=BASE)
    assert states(store, b) == [JobState.BLOCKED]


def test_a_fan_in_of_1000_is_promoted_by_its_last_dependency(store: Store) -> None:
    parents = insert(store, *(new_job(queue="p", args={"n": i}) for i in range(1000)))
    last = dependent(store, *parents)
    taken = claim(store, queues=["p"], count=1000)
    outcomes = [models.Outcome(id=c.id, attempt=c.attempt, state=JobState.DONE) for c in taken]
    assert store.job_record_many(outcomes=outcomes[:-1], now=BASE) == []
    assert states(store, last) == [JobState.BLOCKED]
    assert store.job_record_many(outcomes=outcomes[-1:], now=BASE) == []
    assert states(store, last) == [JobState.PENDING]


def test_a_workflow_batch_completes_once_when_a_failure_cancels_the_rest(store: Store) -> None:
    batch = store.batch_create(name="flow", meta=b"{}", on_complete=None, on_success=None, now=BASE)
    (a,) = insert(store, new_job(queue="a", batch_id=batch))
    (b,) = insert(store, new_job(queue="b", batch_id=batch, after=[a]))
    (c,) = insert(store, new_job(queue="c", batch_id=batch, after=[b]))
    store.batch_seal(id=batch, now=BASE)
    info = store.batch_get(id=batch)
    assert info is not None and (info.pending, info.blocked, info.total) == (1, 2, 3)
    end(store, a, JobState.FAILED)
    info = store.batch_get(id=batch)
    assert info is not None and info.state == BatchState.COMPLETE
    assert (info.failed, info.cancelled, info.completions) == (1, 2, 1)
    assert states(store, b, c) == [JobState.CANCELLED, JobState.CANCELLED]
    assert store.batch_retry(id=batch, now=BASE) == 1  # its failed member; the rest follow
    assert states(store, a, b, c) == [JobState.PENDING, JobState.BLOCKED, JobState.BLOCKED]
    info = store.batch_get(id=batch)
    assert info is not None and info.state == BatchState.RUNNING


def test_cancelling_a_batch_cancels_its_blocked_members_and_their_dependents(
    store: Store,
) -> None:
    batch = store.batch_create(name="flow", meta=b"{}", on_complete=None, on_success=None, now=BASE)
    (a,) = insert(store, new_job(queue="a", batch_id=batch))
    (b,) = insert(store, new_job(queue="b", batch_id=batch, after=[a]))
    outside = dependent(store, b)
    assert store.batch_cancel(id=batch, now=BASE) == 2
    assert states(store, a, b, outside) == [JobState.CANCELLED] * 3
    assert store.batch_get(id=batch).state == BatchState.COMPLETE  # type: ignore[union-attr]


def test_parent_results_are_the_done_dependencies_results(store: Store) -> None:
    a, b = insert_one(store, queue="a"), insert_one(store, queue="b")
    c = dependent(store, a, b, allow_failure=True)
    claimed = claim_exactly(store, a)
    assert record(store, claimed, JobState.DONE, result=b'{"pages": 3}') == []
    end(store, b, JobState.FAILED)
    assert claim_exactly(store, c).parents == {a: b'{"pages": 3}'}


def test_promoting_10000_dependents_is_one_transaction_of_their_size(store: Store) -> None:
    a = insert_one(store, queue="a")
    insert(store, *(new_job(queue="late", args={"n": i}, after=[a]) for i in range(10_000)))
    claimed = claim_exactly(store, a)
    started = time.perf_counter()
    assert record(store, claimed, JobState.DONE) == []
    elapsed = time.perf_counter() - started
    counts = {q.name: q for q in store.queue_list(now=BASE)}
    assert (counts["late"].pending, counts["late"].blocked) == (10_000, 0)
    assert elapsed < 5.0, elapsed


def test_a_claim_hands_over_the_parents_results_and_fails_a_job_over_the_cap(
    store: Store, raw: RawDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = insert_one(store, queue="a")
    claimed = claim_exactly(store, a)
    assert record(store, claimed, JobState.DONE, result=b'"0123456789"') == []
    small, big = dependent(store, a), insert_one(store, queue="big", after=[a])
    assert claim_exactly(store, small).parents == {a: b'"0123456789"'}
    monkeypatch.setattr(models, "PARENT_RESULTS_MAX", 5)
    assert claim(store, queues=["big"]) == []
    info = get(store, big)
    assert info.state == JobState.FAILED
    assert info.error == "its dependencies' results exceed 5 bytes in total"
    if raw.backend == "sqlite":  # only SQLite lets a JSON column hold bytes
        bad = insert_one(store, queue="bad", after=[a])
        raw.execute("UPDATE jobs SET result = x'07' WHERE id = ?", (a,))
        assert claim(store, queues=["bad"]) == []
        error = get(store, bad).error
        assert error is not None and error.startswith("its dependencies' results cannot be read")


def test_two_endings_deciding_dependents_in_crossing_orders_do_not_deadlock(
    store: Store, dsn: str
) -> None:
    """P1 fails: its dependents D1 and D5 are cancelled, then, one level down,
    E3 (which waits for D1). P2 ends at the same moment: its dependents are E3
    and D5. By level, the first transaction locks D1, D5 then E3, the second
    E3 then D5: they must not deadlock, and both outcomes are recorded."""
    batch = store.batch_create(name="b", meta=b"{}", on_complete=None, on_success=None, now=BASE)
    p1 = insert_one(store, queue="p1", batch_id=batch)
    p2 = insert_one(store, queue="p2")
    d1 = dependent(store, p1)
    e3 = dependent(store, d1, p2)
    d5 = dependent(store, p1, p2)
    t1, t2 = claim_exactly(store, p1), claim_exactly(store, p2)
    stores = [open_store(dsn), open_store(dsn)]
    # The first ending waits at its batch's row lock, after its first level.
    held = Held(dsn, HOLD_BATCH, (batch,))
    errors_seen: list[BaseException] = []

    def ending(s: Store, claimed: models.ClaimedJob, state: JobState) -> None:
        try:
            error = "boom" if state == JobState.FAILED else None
            assert record(s, claimed, state, error=error) == []
        except BaseException as exc:  # reported below, in the test's thread
            errors_seen.append(exc)

    first = threading.Thread(target=ending, args=(stores[0], t1, JobState.FAILED))
    second = threading.Thread(target=ending, args=(stores[1], t2, JobState.DONE))
    try:
        first.start()
        if held.conn is not None:
            one = wait_until(lambda: held.blocked_by(held.pid), what="the first ending to wait")
        else:
            first.join()
        second.start()
        if held.conn is not None:  # the second waits for a dependent the first locked
            wait_until(lambda: held.blocked_by(one), what="the second ending to wait")
        held.release()
        first.join()
        second.join()
    finally:
        held.release()
        for s in stores:
            s.close()
    assert not errors_seen, errors_seen
    assert states(store, p1, p2, d1, e3, d5) == [
        JobState.FAILED,
        JobState.DONE,
        JobState.CANCELLED,
        JobState.CANCELLED,
        JobState.CANCELLED,
    ]


def test_a_dependent_enqueued_while_its_dependency_ends_is_decided(store: Store, dsn: str) -> None:
    """An enqueue naming a running job locks it first. An outcome written
    meanwhile waits for that lock; once the enqueue commits its edge, the
    ending must see the new dependent and promote it (the rules are skipped
    only for jobs that nothing depends on and no batch holds)."""
    a = insert_one(store, queue="a")
    claimed = claim_exactly(store, a)
    batch = store.batch_create(name="b", meta=b"{}", on_complete=None, on_success=None, now=BASE)
    # The enqueue locks `a`, then waits at its batch's row lock, before its edge.
    held = Held(dsn, HOLD_BATCH, (batch,))
    ids: list[int] = []
    seen: list[BaseException] = []

    def run(what: str, fn: Any) -> threading.Thread:
        def target() -> None:
            try:
                fn()
            except BaseException as exc:  # reported below, in the test's thread
                seen.append(exc)

        thread = threading.Thread(target=target, name=what)
        thread.start()
        return thread

    stores = [open_store(dsn), open_store(dsn)]
    try:
        enqueue = run("enqueue", lambda: ids.append(dependent(stores[0], a, batch_id=batch)))
        if held.conn is not None:
            waiter = wait_until(lambda: held.blocked_by(held.pid), what="the enqueue to wait")
        ending = run("ending", lambda: record(stores[1], claimed, JobState.DONE))
        if held.conn is not None:  # the outcome waits for the enqueue's lock on `a`
            wait_until(lambda: held.blocked_by(waiter), what="the outcome to wait")
        held.release()
        enqueue.join()
        ending.join()
    finally:
        held.release()
        for s in stores:
            s.close()
    assert not seen, seen
    assert states(store, a, ids[0]) == [JobState.DONE, JobState.PENDING]
