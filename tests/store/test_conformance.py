"""The storage conformance suite: one behavioural contract (`procqueue.store.base.Store`),
run against every backend through the `dsn` fixture.

Every time is an explicit ``now`` (`BASE` plus offsets): the store never reads
the clock, so nothing here sleeps.
"""

from __future__ import annotations

import datetime as dt
import itertools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec
import pytest

from procqueue import errors, models
from procqueue.models import JobState
from procqueue.store import open_store
from procqueue.store.base import SCHEMA_VERSION, Store
from tests.conftest import drop_pg_schema, make_pg_dsn
from tests.store.factories import (
    BASE,
    LEASE,
    claim,
    claim_exactly,
    claim_ids,
    finished_job,
    get,
    insert,
    insert_one,
    new_job,
    record,
    running_ids,
    utc,
)


@pytest.fixture
def fresh_dsns(dsn: str) -> Iterator[Callable[[], str]]:
    """Makes more empty databases on `dsn`'s backend (dropped at teardown)."""
    schemas: list[str] = []
    counter = itertools.count()

    def make() -> str:
        if dsn.startswith("sqlite:"):
            return f"{dsn.removesuffix('.db')}-{next(counter)}.db"
        url, schema = make_pg_dsn()
        schemas.append(schema)
        return url

    try:
        yield make
    finally:
        for schema in schemas:
            drop_pg_schema(schema)


def _all_jobs(store: Store, **filters: Any) -> list[models.JobInfo]:
    args: dict[str, Any] = {"state": None, "queue": None, "name": None, "limit": 100_000}
    args.update(filters)
    return store.job_list(**args)


# -- schema ------------------------------------------------------------------


def test_migrate_twice_is_a_noop_returning_the_same_version(store: Store) -> None:
    id_ = insert_one(store, args={"keep": True})
    first = store.migrate(now=BASE)
    second = store.migrate(now=BASE)
    assert first == second == SCHEMA_VERSION
    assert get(store, id_).args == {"keep": True}


def _open_and_migrate_together(dsn: str, threads: int) -> list[int]:
    """`threads` threads open their own store on `dsn` at once and migrate it."""
    barrier = threading.Barrier(threads)

    def migrate(_: int) -> int:
        barrier.wait(timeout=30)
        s = open_store(dsn)
        try:
            return s.migrate(now=BASE)
        finally:
            s.close()

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(migrate, range(threads)))


def test_open_and_migrate_are_safe_to_race_on_fresh_databases(
    dsn: str, fresh_dsns: Callable[[], str]
) -> None:
    # A race loses only now and then: try it on many fresh databases (fewer
    # where each costs a schema and a few connections).
    for _ in range(40 if dsn.startswith("sqlite:") else 8):
        target = fresh_dsns()
        assert _open_and_migrate_together(target, 4) == [SCHEMA_VERSION] * 4
    s = open_store(target)
    try:
        assert s.migrate(now=BASE) == SCHEMA_VERSION
        (id_,) = insert(s, new_job(args={"after": "race"}))
        assert get(s, id_).args == {"after": "race"}
    finally:
        s.close()


# -- insert / get / list -------------------------------------------------------


NESTED_ARGS: dict[str, Any] = {
    "path": "a.png",
    "opts": {"sizes": [1, 2.5, None, True, False], "label": "ünïcödé 🐍", "empty": {}},
    "matrix": [[1, 2], [3, [4, {"deep": None}]]],
    "big": 2**53 + 1,
    "float": 0.30000000000000004,
}


def test_insert_and_get_round_trip_every_field(store: Store) -> None:
    job = new_job(
        name="app.jobs.thumbnail",
        args=NESTED_ARGS,
        queue="bulk",
        priority=5,
        max_attempts=4,
        timeout=12.5,
        max_memory=256,
        backoff=models.Backoff(base=2.0, factor=3.0, max=60.0, jitter=False),
        run_at=BASE + 10,
        deadline_at=BASE + 100,
        key="thumb:a.png",
        serial_key="user:7",
        tags=["images", "ünï"],
    )
    (id_,) = insert(store, job, now=BASE)
    info = get(store, id_)
    assert info == models.JobInfo(
        id=id_,
        name="app.jobs.thumbnail",
        queue="bulk",
        state=JobState.PENDING,
        priority=5,
        attempts=0,
        max_attempts=4,
        args=NESTED_ARGS,
        result=None,
        error=None,
        progress=None,
        fraction=None,
        key="thumb:a.png",
        serial_key="user:7",
        tags=["images", "ünï"],
        run_at=utc(BASE + 10),
        created_at=utc(BASE),
        started_at=None,
        finished_at=None,
        deadline_at=utc(BASE + 100),
    )
    for when in (info.run_at, info.created_at, info.deadline_at):
        assert when is not None
        assert when.utcoffset() == dt.timedelta(0)
    assert store.job_list(state=None, queue=None, name=None, limit=10) == [info]


def test_insert_defaults_run_at_to_now_and_empty_optionals(store: Store) -> None:
    id_ = insert_one(store, now=BASE + 3)
    info = get(store, id_)
    assert info.run_at == utc(BASE + 3)
    assert info.created_at == utc(BASE + 3)
    assert (info.key, info.serial_key, info.deadline_at, info.tags) == (None, None, None, [])
    assert info.max_attempts == 3
    assert info.queue == "default"


def test_insert_many_returns_ids_in_order(store: Store) -> None:
    ids = insert(store, *(new_job(args={"i": i}) for i in range(5)))
    assert len(set(ids)) == 5
    assert [get(store, id_).args for id_ in ids] == [{"i": i} for i in range(5)]


def test_get_unknown_id_is_none(store: Store) -> None:
    assert store.job_get(id=123_456) is None


def test_claim_then_done_round_trips_started_finished_and_result(store: Store) -> None:
    id_ = insert_one(store, now=BASE)
    claimed = claim_exactly(store, id_, now=BASE + 5)
    running = get(store, id_)
    assert running.state == JobState.RUNNING
    assert running.started_at == utc(BASE + 5)
    assert running.attempts == 1
    result = {"out": [1, "two", None, {"x": 3.5}]}
    assert (
        record(store, claimed, JobState.DONE, now=BASE + 9, result=msgspec.json.encode(result))
        == []
    )
    info = get(store, id_)
    assert info.state == JobState.DONE
    assert info.result == result
    assert info.error is None
    assert info.started_at == utc(BASE + 5)
    assert info.finished_at == utc(BASE + 9)
    assert info.finished_at is not None and info.finished_at.utcoffset() == dt.timedelta(0)


def test_list_filters_newest_first_and_limit(store: Store) -> None:
    a1 = insert_one(store, now=BASE + 1, name="job.a", queue="q1")
    b1 = insert_one(store, now=BASE + 2, name="job.b", queue="q1")
    a2 = insert_one(store, now=BASE + 3, name="job.a", queue="q2")
    b2 = insert_one(store, now=BASE + 4, name="job.b", queue="q2")
    a3 = finished_job(store, JobState.DONE, now=BASE + 5, name="job.a", queue="q3")

    def ids(**filters: Any) -> list[int]:
        return [j.id for j in _all_jobs(store, **filters)]

    assert ids() == [a3, b2, a2, b1, a1]
    assert ids(name="job.a") == [a3, a2, a1]
    assert ids(queue="q1") == [b1, a1]
    assert ids(state="pending") == [b2, a2, b1, a1]
    assert ids(state="done") == [a3]
    assert ids(state="pending", name="job.a") == [a2, a1]
    assert ids(state="pending", queue="q2", name="job.b") == [b2]
    assert ids(queue="nope") == []
    assert ids(state="failed") == []
    assert ids(limit=2) == [a3, b2]
    assert ids(name="job.a", limit=1) == [a3]


# -- idempotency key ---------------------------------------------------------


def test_same_key_returns_existing_id_and_adds_nothing(store: Store) -> None:
    first = insert_one(store, key="k", args={"v": 1})
    again = insert_one(store, key="k", args={"v": 2}, now=BASE + 1)
    assert again == first
    jobs = _all_jobs(store)
    assert [j.id for j in jobs] == [first]
    assert jobs[0].args == {"v": 1}


def test_same_key_within_one_batch(store: Store) -> None:
    ids = insert(
        store,
        new_job(key="dup", args={"v": 1}),
        new_job(args={"v": 2}),
        new_job(key="dup", args={"v": 3}),
        new_job(key="other", args={"v": 4}),
    )
    assert ids[0] == ids[2]
    assert len({ids[0], ids[1], ids[3]}) == 3
    assert sorted(j.id for j in _all_jobs(store)) == sorted({ids[0], ids[1], ids[3]})
    assert get(store, ids[0]).args == {"v": 1}


def test_key_is_held_by_finished_jobs_until_pruned(store: Store) -> None:
    done = finished_job(store, JobState.DONE, now=BASE, key="once")
    assert insert_one(store, key="once", now=BASE + 10) == done
    failed = finished_job(store, JobState.FAILED, now=BASE, key="f", queue="other")
    assert insert_one(store, key="f", now=BASE + 10) == failed
    assert len(_all_jobs(store)) == 2

    assert store.job_prune(states=["done"], before=BASE + 20, limit=100) == 1
    fresh = insert_one(store, key="once", now=BASE + 30)
    assert fresh != done
    info = get(store, fresh)
    assert (info.state, info.key) == (JobState.PENDING, "once")
    assert store.job_get(id=done) is None


# -- claim ---------------------------------------------------------------------


def test_claim_order_priority_then_run_at_then_id(store: Store) -> None:
    low_early_1 = insert_one(store, priority=0, run_at=BASE + 2)
    high_late = insert_one(store, priority=5, run_at=BASE + 3)
    high_early = insert_one(store, priority=5, run_at=BASE + 1)
    low_early_2 = insert_one(store, priority=0, run_at=BASE + 2)
    negative = insert_one(store, priority=-1, run_at=BASE)
    order = [claim_ids(store, owner=f"o{i}", now=BASE + 10) for i in range(6)]
    assert order == [[high_early], [high_late], [low_early_1], [low_early_2], [negative], []]


def test_future_run_at_not_claimed_until_now_passes_it(store: Store) -> None:
    later = insert_one(store, run_at=BASE + 50)
    assert claim(store, now=BASE) == []
    assert claim(store, now=BASE + 49.5) == []
    assert get(store, later).state == JobState.PENDING
    assert claim_ids(store, now=BASE + 50.5) == [later]


def test_claim_count_is_respected(store: Store) -> None:
    ids = insert(store, *(new_job() for _ in range(5)))
    first = claim_ids(store, count=3)
    second = claim_ids(store, count=3, owner="owner-2")
    assert len(first) == 3
    assert len(second) == 2
    assert sorted(first + second) == sorted(ids)
    assert claim(store, count=3) == []
    assert claim(store, count=0) == []


def test_claim_count_zero_takes_nothing(store: Store) -> None:
    id_ = insert_one(store)
    assert claim(store, count=0) == []
    assert get(store, id_).state == JobState.PENDING


def test_claim_queues_filter(store: Store) -> None:
    a = insert_one(store, queue="a")
    b = insert_one(store, queue="b")
    c = insert_one(store, queue="c")
    assert sorted(claim_ids(store, count=10, queues=["a", "c"])) == sorted([a, c])
    assert claim(store, count=10, queues=["a", "c"]) == []
    assert claim(store, count=10, queues=["zzz"]) == []
    assert claim_ids(store, count=10, queues=None) == [b]


def test_paused_queue_is_not_claimed_and_resumes(store: Store) -> None:
    paused = insert_one(store, queue="q", priority=9)
    other = insert_one(store, queue="other")
    store.queue_set_paused(queue="q", paused=True)
    assert claim_ids(store, count=10) == [other]
    assert claim(store, count=10, queues=["q"]) == []
    assert get(store, paused).state == JobState.PENDING
    store.queue_set_paused(queue="q", paused=False)
    assert claim_ids(store, count=10) == [paused]


def test_pausing_keeps_the_queue_limit_and_vice_versa(store: Store) -> None:
    store.queue_set_limit(queue="q", limit=1)
    store.queue_set_paused(queue="q", paused=True)
    store.queue_set_paused(queue="q", paused=False)
    insert(store, new_job(queue="q"), new_job(queue="q"))
    assert len(claim(store, count=5)) == 1
    store.queue_set_paused(queue="q", paused=True)
    (info,) = (q for q in store.queue_list(now=BASE) if q.name == "q")
    assert (info.limit, info.paused) == (1, True)


def test_job_past_deadline_is_not_claimed_and_fails(store: Store) -> None:
    late = insert_one(store, deadline_at=BASE + 5, priority=1)
    fine = insert_one(store, deadline_at=BASE + 500)
    assert claim_ids(store, now=BASE + 6, count=1) == [fine]
    assert get(store, late).state == JobState.PENDING

    assert store.job_fail_past_deadline(now=BASE + 6) == 1
    info = get(store, late)
    assert info.state == JobState.FAILED
    assert info.error == "passed its deadline"
    assert info.finished_at == utc(BASE + 6)
    assert info.attempts == 0
    assert get(store, fine).state == JobState.RUNNING
    assert store.job_fail_past_deadline(now=BASE + 7) == 0


def test_fail_past_deadline_leaves_running_and_future_jobs(store: Store) -> None:
    running = insert_one(store, deadline_at=BASE + 5, queue="r")
    claim_exactly(store, running, now=BASE)
    pending = insert_one(store, deadline_at=BASE + 50)
    no_deadline = insert_one(store)
    assert store.job_fail_past_deadline(now=BASE + 10) == 0
    assert get(store, running).state == JobState.RUNNING
    assert get(store, pending).state == JobState.PENDING
    assert get(store, no_deadline).state == JobState.PENDING


# -- attempts and the claimed record ---------------------------------------------


def test_claim_increments_attempts_and_round_trips_claimed_fields(store: Store) -> None:
    backoff = models.Backoff(base=2.0, factor=3.0, max=60.0, jitter=False)
    id_ = insert_one(
        store,
        name="app.jobs.crunch",
        queue="cpu",
        args=NESTED_ARGS,
        max_attempts=5,
        timeout=7.5,
        max_memory=512,
        backoff=backoff,
        deadline_at=BASE + 1000,
        serial_key="s:1",
    )
    first = claim_exactly(store, id_, now=BASE + 1)
    assert first == models.ClaimedJob(
        id=id_,
        attempt=1,
        name="app.jobs.crunch",
        queue="cpu",
        args=first.args,
        steps={},
        max_attempts=5,
        timeout=7.5,
        max_memory=512,
        backoff=backoff,
        deadline_at=BASE + 1000,
        serial_key="s:1",
        run_at=first.run_at,
    )
    assert first.run_at == get(store, id_).run_at.timestamp()
    assert isinstance(first.args, bytes)
    assert msgspec.json.decode(first.args) == NESTED_ARGS
    assert get(store, id_).attempts == 1

    assert record(store, first, JobState.PENDING, now=BASE + 2, run_at=BASE + 2) == []
    second = claim_exactly(store, id_, now=BASE + 3)
    assert second.attempt == 2
    assert get(store, id_).attempts == 2


def test_claimed_defaults_round_trip(store: Store) -> None:
    id_ = insert_one(store)
    claimed = claim_exactly(store, id_)
    assert (claimed.timeout, claimed.max_memory, claimed.deadline_at, claimed.serial_key) == (
        None,
        None,
        None,
        None,
    )
    assert claimed.backoff == models.Backoff()
    assert claimed.max_attempts == 3


# -- queue limits and serial keys ------------------------------------------------


def test_queue_limit_holds_across_owners(store: Store) -> None:
    store.queue_set_limit(queue="q", limit=2)
    insert(store, *(new_job(queue="q") for _ in range(5)))
    elsewhere = insert_one(store, queue="free")
    taken: list[models.ClaimedJob] = []
    for i in range(5):
        taken += claim(store, owner=f"o{i}", count=1, queues=["q"])
        assert len(running_ids(store, queue="q")) <= 2
    assert len(taken) == 2
    assert claim(store, owner="greedy", count=5, queues=["q"]) == []
    assert claim_ids(store, owner="greedy", count=5) == [elsewhere]
    assert len(running_ids(store, queue="q")) == 2

    assert record(store, taken[0], JobState.DONE) == []
    more = claim(store, owner="o9", count=5, queues=["q"])
    assert len(more) == 1
    assert running_ids(store, queue="q") == {taken[1].id, more[0].id}


def test_queue_limit_in_one_batch_and_cleared(store: Store) -> None:
    store.queue_set_limit(queue="q", limit=2)
    insert(store, *(new_job(queue="q") for _ in range(5)))
    assert len(claim(store, owner="a", count=5)) == 2
    store.queue_set_limit(queue="q", limit=None)
    assert len(claim(store, owner="b", count=5)) == 3
    assert len(running_ids(store, queue="q")) == 5


def test_queue_at_limit_does_not_starve_other_queues(store: Store) -> None:
    """Many due jobs of a queue at its limit, ahead in claim order, must not hide
    a claimable job of another queue behind them."""
    store.queue_set_limit(queue="q", limit=1)
    insert(store, *(new_job(queue="q", priority=5) for _ in range(60)))
    other = insert_one(store, queue="r", priority=0)
    assert len(claim(store, owner="a", count=1)) == 1
    assert claim_ids(store, owner="b", count=1) == [other]


def test_serial_key_never_runs_twice(store: Store) -> None:
    s1 = insert_one(store, serial_key="user:1", run_at=BASE)
    s2 = insert_one(store, serial_key="user:1", run_at=BASE + 1)
    s3 = insert_one(store, serial_key="user:2", run_at=BASE + 2)
    plain = insert_one(store, run_at=BASE + 3)

    first = claim(store, owner="a", count=10, now=BASE + 10)
    assert sorted(c.id for c in first) == sorted([s1, s3, plain])
    assert claim(store, owner="b", count=10, now=BASE + 10) == []
    assert get(store, s2).state == JobState.PENDING

    by_id = {c.id: c for c in first}
    assert record(store, by_id[s3], JobState.DONE, now=BASE + 11) == []
    assert claim(store, owner="b", count=10, now=BASE + 11) == []
    assert record(store, by_id[s1], JobState.DONE, now=BASE + 12) == []
    assert claim_ids(store, owner="b", count=10, now=BASE + 12) == [s2]


def test_serial_key_one_at_a_time_across_owners(store: Store) -> None:
    insert(store, *(new_job(serial_key="k") for _ in range(3)))
    other = insert_one(store, serial_key="other")
    got = [claim_ids(store, owner=f"o{i}", count=1) for i in range(4)]
    assert [len(g) for g in got] == [1, 1, 0, 0]
    assert other in got[0] + got[1]


def test_running_serial_key_does_not_starve_other_keys(store: Store) -> None:
    """Many due jobs whose serial key is running, ahead in claim order, must not
    hide a claimable job with another key behind them."""
    insert(store, *(new_job(serial_key="busy", priority=5) for _ in range(60)))
    other = insert_one(store, serial_key="idle", priority=0)
    assert len(claim(store, owner="a", count=1)) == 1
    assert claim_ids(store, owner="b", count=1) == [other]


# -- fencing, progress and steps ---------------------------------------------------


def _take_over(store: Store, id_: int) -> tuple[models.ClaimedJob, models.ClaimedJob]:
    """Owner "old" claims `id_` and loses its lease; owner "new" takes it over."""
    old = claim_exactly(store, id_, owner="old", now=BASE, lease=LEASE)
    assert store.job_rescue_expired(now=BASE + LEASE + 1) == 1
    new = claim_exactly(store, id_, owner="new", now=BASE + LEASE + 2, lease=LEASE)
    assert (old.attempt, new.attempt) == (1, 2)
    return old, new


def test_record_with_stale_attempt_is_lost_and_changes_nothing(store: Store) -> None:
    id_ = insert_one(store)
    old, new = _take_over(store, id_)
    before = get(store, id_)
    lost = record(store, old, JobState.DONE, now=BASE + 40, result=msgspec.json.encode("stale"))
    assert lost == [id_]
    assert get(store, id_) == before
    assert store.job_renew_leases(owner="new", lease_until=BASE + 100).alive == {(id_, 2)}
    assert store.job_renew_leases(owner="old", lease_until=BASE + 100).alive == set()

    assert record(store, new, JobState.DONE, now=BASE + 41) == []
    assert get(store, id_).state == JobState.DONE
    # The attempt is over: recording it again is lost too.
    assert record(store, new, JobState.FAILED, now=BASE + 42, error="late") == [id_]
    assert get(store, id_).state == JobState.DONE


def test_record_many_mixes_lost_and_written(store: Store) -> None:
    stale_id = insert_one(store, queue="stale")
    old, _new = _take_over(store, stale_id)
    good_id = insert_one(store, queue="good")
    good = claim_exactly(store, good_id, owner="new", now=BASE + 35)
    lost = store.job_record_many(
        outcomes=[
            models.Outcome(id=old.id, attempt=old.attempt, state=JobState.FAILED, error="x"),
            models.Outcome(id=good.id, attempt=good.attempt, state=JobState.DONE),
            models.Outcome(id=999_999, attempt=1, state=JobState.DONE),
        ],
        now=BASE + 36,
    )
    assert sorted(lost) == sorted([stale_id, 999_999])
    assert get(store, good_id).state == JobState.DONE
    assert get(store, stale_id).state == JobState.RUNNING


def test_progress_is_fenced_and_visible(store: Store) -> None:
    id_ = insert_one(store)
    old, new = _take_over(store, id_)
    assert store.job_set_progress(id=id_, attempt=old.attempt, text="stale", fraction=0.9) is False
    assert (get(store, id_).progress, get(store, id_).fraction) == (None, None)
    assert store.job_set_progress(id=id_, attempt=new.attempt, text="decoding", fraction=0.25)
    info = get(store, id_)
    assert (info.progress, info.fraction) == ("decoding", 0.25)
    assert store.job_set_progress(id=id_, attempt=new.attempt, text="ünï 🐍", fraction=1.0)
    info = get(store, id_)
    assert (info.progress, info.fraction) == ("ünï 🐍", 1.0)


def test_progress_refused_when_not_running(store: Store) -> None:
    pending = insert_one(store)
    assert store.job_set_progress(id=pending, attempt=0, text="x", fraction=0.5) is False
    assert store.job_set_progress(id=123_456, attempt=1, text="x", fraction=0.5) is False
    assert get(store, pending).progress is None
    done = finished_job(store, JobState.DONE, queue="d")
    assert store.job_set_progress(id=done, attempt=1, text="x", fraction=0.5) is False
    assert get(store, done).progress is None


STEPS: dict[str, Any] = {
    "decode": {"w": 640, "h": [480, None], "ok": True},
    "with space": "a string",
    "ünïcödé 🐍": [1, 2.5, 0.30000000000000004, 2**60],
    "nothing": None,
    "zero": 0,
    "false": False,
    "a.b[0]": {"dotted": "name"},
    'quote"d \\ back': "slashes",
}


def test_set_pid_is_fenced_and_visible(store: Store) -> None:
    id_ = insert_one(store)
    claimed = claim_exactly(store, id_)
    assert not store.job_set_pid(id=id_, attempt=claimed.attempt + 1, pid=4242)
    assert get(store, id_).pid is None
    assert store.job_set_pid(id=id_, attempt=claimed.attempt, pid=4242)
    assert get(store, id_).pid == 4242


@pytest.mark.parametrize("state", [JobState.DONE, JobState.FAILED, JobState.PENDING])
def test_an_ended_attempt_leaves_its_pid_to_its_history(store: Store, state: JobState) -> None:
    id_ = insert_one(store)
    claimed = claim_exactly(store, id_)
    assert store.job_set_pid(id=id_, attempt=claimed.attempt, pid=4242)
    assert record(store, claimed, state, history=state.value, error="x") == []
    info = store.job_get(id=id_, history=True)
    assert info is not None and info.pid is None  # no process runs it now
    assert [a.child_pid for a in info.history] == [4242]


def test_a_job_claimed_ahead_is_reserved_until_a_child_starts_it(store: Store) -> None:
    first, second = insert(store, new_job(), new_job())
    cycle = store.job_record_and_claim(
        outcomes=(), owner="w", queues=None, count=2, lease_until=BASE + LEASE, now=BASE, start=1
    )
    assert [c.id for c in cycle.claimed] == [first, second]
    assert (get(store, first).state, get(store, first).started_at) == (JobState.RUNNING, utc(BASE))
    assert (get(store, second).state, get(store, second).started_at) == (JobState.RESERVED, None)
    assert [j.id for j in store.job_list(state="running", queue=None, name=None, limit=9)] == [
        first
    ]
    assert [j.id for j in store.job_list(state="reserved", queue=None, name=None, limit=9)] == [
        second
    ]
    (queue,) = store.queue_list(now=BASE)
    assert (queue.reserved, queue.running) == (1, 1)
    # a child starts it: its pid and start are written together
    assert store.job_set_pid(id=second, attempt=1, pid=4242, started_at=BASE + 3)
    assert (get(store, second).state, get(store, second).started_at) == (
        JobState.RUNNING,
        utc(BASE + 3),
    )
    outcome = models.Outcome(
        id=second, attempt=1, state=JobState.DONE, result=b"1", history="done", started_at=BASE + 3
    )
    assert store.job_record_many(outcomes=[outcome], now=BASE + 4) == []
    info = store.job_get(id=second, history=True)
    assert info is not None and info.history[0].started_at == info.started_at == utc(BASE + 3)
    assert info.history[0].claimed_at == utc(BASE)


def test_a_short_job_gets_its_start_with_its_outcome(store: Store) -> None:
    id_ = insert_one(store)
    store.job_record_and_claim(
        outcomes=(), owner="w", queues=None, count=1, lease_until=BASE + LEASE, now=BASE, start=0
    )
    assert get(store, id_).state == JobState.RESERVED
    outcome = models.Outcome(
        id=id_, attempt=1, state=JobState.DONE, result=b"1", started_at=BASE + 1
    )
    assert store.job_record_many(outcomes=[outcome], now=BASE + 2) == []
    assert get(store, id_).started_at == utc(BASE + 1)


def test_steps_are_fenced_and_come_back_on_the_next_claim(store: Store) -> None:
    id_ = insert_one(store)
    old, new = _take_over(store, id_)
    assert (
        store.job_save_step(id=id_, attempt=old.attempt, name="decode", value=b'"stale"') is False
    )
    for name, value in STEPS.items():
        assert store.job_save_step(
            id=id_, attempt=new.attempt, name=name, value=msgspec.json.encode(value)
        ), name
    assert record(store, new, JobState.PENDING, now=BASE + 40, run_at=BASE + 40) == []
    third = claim_exactly(store, id_, owner="third", now=BASE + 41)
    assert third.attempt == 3
    assert {name: msgspec.json.decode(raw) for name, raw in third.steps.items()} == STEPS


def test_step_overwrite_keeps_the_last_value(store: Store) -> None:
    id_ = insert_one(store, max_attempts=5)
    first = claim_exactly(store, id_)
    assert store.job_save_step(id=id_, attempt=1, name="s", value=b'{"v": 1}')
    assert store.job_save_step(id=id_, attempt=1, name="s", value=b"null")
    assert store.job_save_step(id=id_, attempt=1, name="t", value=b"[1, 2]")
    assert record(store, first, JobState.PENDING, run_at=BASE) == []
    second = claim_exactly(store, id_, now=BASE + 1)
    assert {k: msgspec.json.decode(v) for k, v in second.steps.items()} == {
        "s": None,
        "t": [1, 2],
    }


def test_save_step_refused_when_not_running(store: Store) -> None:
    id_ = insert_one(store)
    assert store.job_save_step(id=id_, attempt=0, name="s", value=b"1") is False
    assert store.job_save_step(id=123_456, attempt=1, name="s", value=b"1") is False
    assert claim_exactly(store, id_).steps == {}


def test_steps_survive_retry_of_a_failed_job(store: Store) -> None:
    id_ = insert_one(store, max_attempts=1)
    first = claim_exactly(store, id_)
    assert store.job_save_step(id=id_, attempt=1, name="s", value=b'"kept"')
    assert record(store, first, JobState.FAILED, error="boom") == []
    store.job_retry(id=id_, now=BASE + 1)
    again = claim_exactly(store, id_, now=BASE + 2)
    assert again.attempt == 1
    assert {k: msgspec.json.decode(v) for k, v in again.steps.items()} == {"s": "kept"}


# -- record outcomes -----------------------------------------------------------


def test_record_failed_caps_a_huge_error(store: Store) -> None:
    id_ = insert_one(store)
    claimed = claim_exactly(store, id_)
    text = "HEAD:" + "x" * (1024 * 1024) + ":TAIL"
    assert record(store, claimed, JobState.FAILED, now=BASE + 1, error=text) == []
    info = get(store, id_)
    assert info.state == JobState.FAILED
    assert info.finished_at == utc(BASE + 1)
    assert info.error is not None
    assert len(info.error) <= models.ERROR_MAX_CHARS
    assert info.error.startswith("HEAD:")
    assert info.error.endswith(":TAIL")


def test_record_failed_keeps_a_short_error_verbatim(store: Store) -> None:
    id_ = insert_one(store)
    claimed = claim_exactly(store, id_)
    text = "ValueError: bad ünï 🐍\n  at line 3"
    assert record(store, claimed, JobState.FAILED, error=text) == []
    assert get(store, id_).error == text


def test_record_pending_retries_at_run_at(store: Store) -> None:
    id_ = insert_one(store)
    claimed = claim_exactly(store, id_, now=BASE)
    assert (
        record(store, claimed, JobState.PENDING, now=BASE + 1, run_at=BASE + 100, error="try") == []
    )
    info = get(store, id_)
    assert info.state == JobState.PENDING
    assert info.run_at == utc(BASE + 100)
    assert info.attempts == 1
    assert info.finished_at is None
    assert info.error == "try"
    assert claim(store, now=BASE + 99) == []
    assert claim_exactly(store, id_, now=BASE + 101).attempt == 2


def test_record_refund_gives_the_attempt_back(store: Store) -> None:
    id_ = insert_one(store, max_attempts=5)
    first = claim_exactly(store, id_, now=BASE)
    assert record(store, first, JobState.PENDING, now=BASE + 1, run_at=BASE + 1) == []
    second = claim_exactly(store, id_, now=BASE + 2)
    assert second.attempt == 2
    assert record(store, second, JobState.PENDING, now=BASE + 3, run_at=BASE + 3, refund=True) == []
    info = get(store, id_)
    assert (info.state, info.attempts) == (JobState.PENDING, 1)
    assert claim_exactly(store, id_, now=BASE + 4).attempt == 2


def test_record_refund_on_first_attempt_returns_to_zero(store: Store) -> None:
    id_ = insert_one(store)
    first = claim_exactly(store, id_)
    assert record(store, first, JobState.PENDING, refund=True) == []
    assert get(store, id_).attempts == 0
    assert claim_exactly(store, id_, now=BASE + 1).attempt == 1


def test_record_cancelled(store: Store) -> None:
    id_ = insert_one(store)
    claimed = claim_exactly(store, id_)
    assert store.job_cancel(id=id_, now=BASE + 1) == JobState.RUNNING
    assert record(store, claimed, JobState.CANCELLED, now=BASE + 2, error="cancelled") == []
    info = get(store, id_)
    assert info.state == JobState.CANCELLED
    assert info.finished_at == utc(BASE + 2)
    assert store.job_cancel_requested(owner="owner-1") == set()
    assert claim(store, now=BASE + 3) == []


# -- leases ------------------------------------------------------------------


def test_renew_leaves_the_released_jobs_to_the_rescue(store: Store) -> None:
    j1, j2 = (insert_one(store, queue=q) for q in ("a", "b"))
    claim_exactly(store, j1, owner="o1")
    claim_exactly(store, j2, owner="o1")
    renewal = store.job_renew_leases(owner="o1", lease_until=BASE + 100, released=[j2])
    assert renewal.alive == {(j1, 1)}
    # j2's lease still ends at BASE+30: the rescue takes it, attempt spent
    assert store.job_rescue_expired(now=BASE + 50) == 1
    assert (get(store, j2).state, running_ids(store)) == (JobState.PENDING, {j1})


def test_renew_reports_only_the_owners_running_jobs(store: Store) -> None:
    j1, j2, j3, j4 = (insert_one(store, queue=q) for q in ("a", "b", "c", "d"))
    c1 = claim_exactly(store, j1, owner="o1")
    claim_exactly(store, j2, owner="o1")
    claim_exactly(store, j3, owner="o2")
    assert store.job_cancel(id=j2, now=BASE + 1) == JobState.RUNNING

    renewal = store.job_renew_leases(owner="o1", lease_until=BASE + 100)
    assert renewal.alive == {(j1, 1), (j2, 1)}
    assert renewal.cancel_requested == {j2}
    assert store.job_cancel_requested(owner="o1") == {j2}
    assert store.job_cancel_requested(owner="o2") == set()
    assert store.job_renew_leases(owner="nobody", lease_until=BASE + 100).alive == set()

    # o1's leases now run to BASE+100; o2's still end at BASE+30.
    assert store.job_rescue_expired(now=BASE + 50) == 1
    assert get(store, j3).state == JobState.PENDING
    assert running_ids(store) == {j1, j2}
    assert get(store, j4).state == JobState.PENDING

    assert record(store, c1, JobState.DONE, now=BASE + 51) == []
    renewal = store.job_renew_leases(owner="o1", lease_until=BASE + 200)
    assert renewal.alive == {(j2, 1)}
    assert renewal.cancel_requested == {j2}
    assert store.job_renew_leases(owner="o2", lease_until=BASE + 200).alive == set()


def test_renew_reports_the_current_attempt(store: Store) -> None:
    id_ = insert_one(store, max_attempts=5)
    first = claim_exactly(store, id_, owner="o")
    assert record(store, first, JobState.PENDING, run_at=BASE) == []
    claim_exactly(store, id_, owner="o", now=BASE + 1)
    renewal = store.job_renew_leases(owner="o", lease_until=BASE + 99)
    assert renewal.alive == {(id_, 2)}
    assert renewal.cancel_requested == set()


# -- cancel and retry --------------------------------------------------------


def test_cancel_pending_running_finished_and_unknown(store: Store) -> None:
    pending = insert_one(store, queue="p")
    assert store.job_cancel(id=pending, now=BASE + 1) == JobState.CANCELLED
    info = get(store, pending)
    assert info.state == JobState.CANCELLED
    assert info.finished_at == utc(BASE + 1)
    assert claim(store, queues=["p"], now=BASE + 2) == []

    running = insert_one(store, queue="r")
    claim_exactly(store, running, owner="o")
    assert store.job_cancel(id=running, now=BASE + 1) == JobState.RUNNING
    assert get(store, running).state == JobState.RUNNING
    assert store.job_cancel_requested(owner="o") == {running}
    # Asking twice is harmless.
    assert store.job_cancel(id=running, now=BASE + 2) == JobState.RUNNING

    done = finished_job(store, JobState.DONE, queue="d")
    with pytest.raises(errors.InvalidState):
        store.job_cancel(id=done, now=BASE + 1)
    assert get(store, done).state == JobState.DONE
    failed = finished_job(store, JobState.FAILED, queue="f")
    with pytest.raises(errors.InvalidState):
        store.job_cancel(id=failed, now=BASE + 1)
    with pytest.raises(errors.InvalidState):
        store.job_cancel(id=pending, now=BASE + 3)
    with pytest.raises(errors.JobNotFound):
        store.job_cancel(id=123_456, now=BASE)


@pytest.mark.parametrize("state", [JobState.FAILED, JobState.CANCELLED])
def test_retry_makes_a_finished_job_pending_with_attempts_reset(
    store: Store, state: JobState
) -> None:
    id_ = finished_job(store, state, now=BASE, max_attempts=2)
    store.job_retry(id=id_, now=BASE + 10)
    info = get(store, id_)
    assert info.state == JobState.PENDING
    assert info.attempts == 0
    assert info.finished_at is None
    assert claim_exactly(store, id_, now=BASE + 10).attempt == 1


def test_retry_of_an_exhausted_job_runs_every_attempt_again(store: Store) -> None:
    id_ = insert_one(store, max_attempts=1)
    claimed = claim_exactly(store, id_, now=BASE)
    assert store.job_rescue_expired(now=BASE + LEASE + 1) == 1
    assert get(store, id_).state == JobState.FAILED
    assert record(store, claimed, JobState.DONE) == [id_]
    store.job_retry(id=id_, now=BASE + 100)
    assert claim_exactly(store, id_, now=BASE + 100).attempt == 1


def test_retry_refuses_other_states_and_unknown(store: Store) -> None:
    pending = insert_one(store, queue="p")
    with pytest.raises(errors.InvalidState):
        store.job_retry(id=pending, now=BASE)
    running = insert_one(store, queue="r")
    claim_exactly(store, running)
    with pytest.raises(errors.InvalidState):
        store.job_retry(id=running, now=BASE)
    done = finished_job(store, JobState.DONE, queue="d")
    with pytest.raises(errors.InvalidState):
        store.job_retry(id=done, now=BASE)
    with pytest.raises(errors.JobNotFound):
        store.job_retry(id=123_456, now=BASE)
    assert get(store, pending).state == JobState.PENDING
    assert get(store, running).state == JobState.RUNNING
    assert get(store, done).state == JobState.DONE


# -- rescue --------------------------------------------------------------------


def test_rescue_expired(store: Store) -> None:
    retryable = insert_one(store, queue="a", max_attempts=3)
    last = insert_one(store, queue="b", max_attempts=1)
    cancelled = insert_one(store, queue="c", max_attempts=3)
    alive = insert_one(store, queue="d")
    for id_ in (retryable, last, cancelled):
        claim_exactly(store, id_, owner="dead", now=BASE, lease=LEASE)
    claim_exactly(store, alive, owner="live", now=BASE, lease=1000)
    assert store.job_cancel(id=cancelled, now=BASE + 1) == JobState.RUNNING

    assert store.job_rescue_expired(now=BASE + LEASE - 1) == 0
    assert running_ids(store) == {retryable, last, cancelled, alive}

    now = BASE + LEASE + 1
    assert store.job_rescue_expired(now=now) == 3

    info = get(store, retryable)
    assert (info.state, info.attempts, info.finished_at) == (JobState.PENDING, 1, None)
    info = get(store, last)
    assert (info.state, info.attempts, info.finished_at) == (JobState.FAILED, 1, utc(now))
    info = get(store, cancelled)
    assert (info.state, info.finished_at) == (JobState.CANCELLED, utc(now))
    info = get(store, alive)
    assert (info.state, info.attempts) == (JobState.RUNNING, 1)

    assert store.job_renew_leases(owner="dead", lease_until=now + 100).alive == set()
    assert store.job_cancel_requested(owner="dead") == set()
    assert store.job_rescue_expired(now=now) == 0
    assert claim_ids(store, owner="next", now=now, count=10) == [retryable]
    assert get(store, retryable).attempts == 2


# -- prune -------------------------------------------------------------------


def test_prune_only_given_states_finished_before(store: Store) -> None:
    done_old = finished_job(store, JobState.DONE, now=BASE + 10, queue="d1")
    cancelled_old = finished_job(store, JobState.CANCELLED, now=BASE + 20, queue="c1")
    failed_old = finished_job(store, JobState.FAILED, now=BASE + 30, queue="f1")
    done_new = finished_job(store, JobState.DONE, now=BASE + 200, queue="d2")
    pending = insert_one(store, now=BASE, queue="p")
    running = insert_one(store, now=BASE, queue="r")
    claim_exactly(store, running, now=BASE)

    assert store.job_prune(states=["done", "cancelled"], before=BASE + 100, limit=100) == 2
    assert store.job_get(id=done_old) is None
    assert store.job_get(id=cancelled_old) is None
    remaining = {j.id for j in _all_jobs(store)}
    assert remaining == {failed_old, done_new, pending, running}

    assert store.job_prune(states=["failed"], before=BASE + 30, limit=100) == 0
    assert store.job_prune(states=["failed"], before=BASE + 31, limit=100) == 1
    assert {j.id for j in _all_jobs(store)} == {done_new, pending, running}


def test_prune_is_bounded_by_limit(store: Store) -> None:
    for i in range(5):
        finished_job(store, JobState.DONE, now=BASE + i)
    keep = finished_job(store, JobState.FAILED, now=BASE + 1, queue="f")
    batches = []
    while n := store.job_prune(states=["done"], before=BASE + 100, limit=2):
        batches.append(n)
    assert batches == [2, 2, 1]
    assert [j.id for j in _all_jobs(store)] == [keep]


# -- on_failure sweep and chores -------------------------------------------------


class _Handlers:
    """A `handler_job` for `job_sweep_failures` that records its calls."""

    def __init__(self, refuse: set[int] | None = None) -> None:
        self.calls: list[tuple[int, JobState, str]] = []
        self.refuse = refuse or set()

    def __call__(self, info: models.JobInfo, handler: str) -> models.NewJob:
        self.calls.append((info.id, info.state, handler))
        if info.id in self.refuse:
            raise errors.EnqueueError(f"no handler {handler!r}")
        return new_job(name=handler, args={"failed_job": info.id}, queue="handlers")


def _handler_jobs(store: Store) -> list[tuple[str, dict[str, Any]]]:
    jobs = _all_jobs(store, queue="handlers")
    return sorted(((j.name, j.args) for j in jobs), key=lambda t: (t[0], t[1]["failed_job"]))


def test_sweep_failures_enqueues_each_handler_once(store: Store) -> None:
    failed = finished_job(store, JobState.FAILED, queue="a", on_failure="app.alert")
    finished_job(store, JobState.FAILED, queue="b")
    finished_job(store, JobState.DONE, queue="c", on_failure="app.alert")
    finished_job(store, JobState.CANCELLED, queue="d", on_failure="app.alert")
    insert_one(store, queue="e", on_failure="app.alert")

    handlers = _Handlers()
    assert store.job_sweep_failures(now=BASE + 1, limit=10, handler_job=handlers) == 1
    assert handlers.calls == [(failed, JobState.FAILED, "app.alert")]
    assert _handler_jobs(store) == [("app.alert", {"failed_job": failed})]
    (handler_job,) = _all_jobs(store, queue="handlers")
    assert (handler_job.state, handler_job.created_at) == (JobState.PENDING, utc(BASE + 1))

    assert store.job_sweep_failures(now=BASE + 2, limit=10, handler_job=handlers) == 0
    assert len(handlers.calls) == 1
    assert len(_handler_jobs(store)) == 1


def test_sweep_failures_again_after_a_retry_gives_up_again(store: Store) -> None:
    id_ = finished_job(store, JobState.FAILED, queue="a", max_attempts=1, on_failure="app.h")
    handlers = _Handlers()
    assert store.job_sweep_failures(now=BASE + 1, limit=10, handler_job=handlers) == 1
    store.job_retry(id=id_, now=BASE + 2)
    assert store.job_sweep_failures(now=BASE + 3, limit=10, handler_job=handlers) == 0
    claimed = claim_exactly(store, id_, now=BASE + 4)
    assert record(store, claimed, JobState.FAILED, now=BASE + 5, error="again") == []
    assert store.job_sweep_failures(now=BASE + 6, limit=10, handler_job=handlers) == 1
    assert [c[0] for c in handlers.calls] == [id_, id_]
    assert len(_handler_jobs(store)) == 2


def test_sweep_failures_covers_deadline_and_lost_lease_give_ups(store: Store) -> None:
    late = insert_one(store, queue="a", deadline_at=BASE + 5, on_failure="app.h")
    lost = insert_one(store, queue="b", max_attempts=1, on_failure="app.h")
    claim_exactly(store, lost, now=BASE)
    assert store.job_fail_past_deadline(now=BASE + LEASE + 1) == 1
    assert store.job_rescue_expired(now=BASE + LEASE + 1) == 1
    handlers = _Handlers()
    assert store.job_sweep_failures(now=BASE + LEASE + 2, limit=10, handler_job=handlers) == 2
    assert sorted(c[0] for c in handlers.calls) == sorted([late, lost])


def test_sweep_failures_is_bounded_by_limit(store: Store) -> None:
    ids = [
        finished_job(store, JobState.FAILED, queue=f"q{i}", on_failure="app.h") for i in range(3)
    ]
    handlers = _Handlers()
    counts = [
        store.job_sweep_failures(now=BASE + 1, limit=2, handler_job=handlers) for _ in range(3)
    ]
    assert counts == [2, 1, 0]
    assert sorted(c[0] for c in handlers.calls) == sorted(ids)


def test_sweep_failures_skips_a_handler_that_cannot_be_built(store: Store) -> None:
    bad = finished_job(store, JobState.FAILED, queue="a", on_failure="app.gone")
    good = finished_job(store, JobState.FAILED, queue="b", on_failure="app.h")
    handlers = _Handlers(refuse={bad})
    assert store.job_sweep_failures(now=BASE + 1, limit=10, handler_job=handlers) == 1
    assert _handler_jobs(store) == [("app.h", {"failed_job": good})]
    # Marked: the refused handler is not tried again.
    assert store.job_sweep_failures(now=BASE + 2, limit=10, handler_job=handlers) == 0
    assert sorted(c[0] for c in handlers.calls) == sorted([bad, good])
    assert get(store, bad).state == JobState.FAILED


def test_sweep_failures_racing_sweepers_enqueue_each_handler_once(dsn: str, store: Store) -> None:
    ids = [
        finished_job(store, JobState.FAILED, queue=f"q{i}", on_failure="app.h") for i in range(20)
    ]
    barrier = threading.Barrier(4)

    def sweep(_: int) -> int:
        own = open_store(dsn)
        try:
            barrier.wait(timeout=30)
            return own.job_sweep_failures(now=BASE + 1, limit=100, handler_job=_Handlers())
        finally:
            own.close()

    with ThreadPoolExecutor(4) as pool:
        counts = list(pool.map(sweep, range(4)))
    assert sum(counts) == 20
    assert _handler_jobs(store) == [("app.h", {"failed_job": id_}) for id_ in sorted(ids)]


def test_chore_claim_once_per_period(store: Store) -> None:
    assert store.chore_claim(name="prune", every=60, now=BASE) is True
    assert store.chore_claim(name="prune", every=60, now=BASE) is False
    assert store.chore_claim(name="prune", every=60, now=BASE + 59) is False
    assert store.chore_claim(name="other", every=60, now=BASE + 59) is True
    assert store.chore_claim(name="prune", every=60, now=BASE + 61) is True
    assert store.chore_claim(name="prune", every=60, now=BASE + 100) is False
    assert store.chore_claim(name="prune", every=60, now=BASE + 122) is True


def test_chore_claim_race_has_one_winner(dsn: str, store: Store) -> None:
    def take(now: float) -> bool:
        own = open_store(dsn)
        try:
            barrier.wait(timeout=30)
            return own.chore_claim(name="prune", every=60, now=now)
        finally:
            own.close()

    for period in range(5):
        barrier = threading.Barrier(4)
        now = BASE + 100 * period
        with ThreadPoolExecutor(4) as pool:
            won = list(pool.map(take, [now] * 4))
        assert won.count(True) == 1, (period, won)
    assert store.chore_claim(name="prune", every=60, now=BASE + 459) is False


# -- queues ------------------------------------------------------------------


def test_queue_list_counts_settings_and_oldest_pending_age(store: Store) -> None:
    finished_job(store, JobState.DONE, now=BASE, queue="a")
    finished_job(store, JobState.FAILED, now=BASE, queue="a")
    finished_job(store, JobState.CANCELLED, now=BASE, queue="a")
    running = insert_one(store, now=BASE, queue="a")
    claim_exactly(store, running, now=BASE)
    insert_one(store, now=BASE + 10, queue="a")
    insert_one(store, now=BASE + 20, queue="a")
    finished_job(store, JobState.DONE, now=BASE, queue="c")
    store.queue_set_limit(queue="b", limit=3)
    store.queue_set_paused(queue="b", paused=True)

    queues = {q.name: q for q in store.queue_list(now=BASE + 60)}
    assert set(queues) == {"a", "b", "c"}
    a = queues["a"]
    assert (a.limit, a.paused) == (None, False)
    assert (a.pending, a.running, a.done, a.failed, a.cancelled) == (2, 1, 1, 1, 1)
    assert a.oldest_pending_age == pytest.approx(50.0)
    assert queues["b"] == models.QueueInfo(name="b", limit=3, paused=True)
    c = queues["c"]
    assert (c.pending, c.done, c.oldest_pending_age) == (0, 1, None)

    store.queue_set_limit(queue="b", limit=None)
    store.queue_set_paused(queue="b", paused=False)
    store.queue_set_limit(queue="a", limit=7)
    queues = {q.name: q for q in store.queue_list(now=BASE + 60)}
    assert (queues["b"].limit, queues["b"].paused) == (None, False)
    assert (queues["a"].limit, queues["a"].pending) == (7, 2)


def test_queue_list_empty_database(store: Store) -> None:
    assert store.queue_list(now=BASE) == []


# -- concurrency ---------------------------------------------------------------


def test_concurrent_claims_take_every_job_exactly_once(dsn: str, store: Store) -> None:
    ids = insert(store, *(new_job(args={"i": i}) for i in range(200)))
    workers = 4
    barrier = threading.Barrier(workers)

    def work(n: int) -> list[int]:
        own = open_store(dsn)
        taken: list[int] = []
        try:
            barrier.wait(timeout=30)
            while True:
                got = claim(own, owner=f"w{n}", count=3, now=BASE + 1, lease=3600)
                if not got:
                    return taken
                taken += [c.id for c in got]
        finally:
            own.close()

    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(work, range(workers)))
    everything = [id_ for r in results for id_ in r]
    assert len(everything) == 200
    assert len(set(everything)) == 200
    assert set(everything) == set(ids)
    assert _all_jobs(store, state="pending") == []
    assert len(running_ids(store)) == 200
    for n, taken in enumerate(results):
        alive = store.job_renew_leases(owner=f"w{n}", lease_until=BASE + 7200).alive
        assert alive == {(id_, 1) for id_ in taken}


# -- record and claim in one transaction ----------------------------------------


def test_record_and_claim_frees_a_serial_key_for_the_same_call(store: Store) -> None:
    first, second = insert(
        store, new_job(serial_key="k"), new_job(serial_key="k"), new_job(serial_key="k")
    )[:2]
    running = claim_exactly(store, first, owner="o")  # outcomes are fenced by owner too
    outcome = models.Outcome(id=first, attempt=running.attempt, state=JobState.DONE, result=b"1")
    stale = models.Outcome(id=second, attempt=7, state=JobState.DONE, result=b"1")
    cycle = store.job_record_and_claim(
        outcomes=[outcome, stale],
        owner="o",
        queues=None,
        count=2,
        lease_until=BASE + LEASE,
        now=BASE,
    )
    assert cycle.lost == [second]
    assert [c.id for c in cycle.claimed] == [second]  # one of "k" at a time
    assert get(store, first).state == JobState.DONE


def test_record_and_claim_without_a_claim_only_records(store: Store) -> None:
    (id_,) = insert(store, new_job())
    running = claim_exactly(store, id_, owner="o")  # outcomes are fenced by owner too
    cycle = store.job_record_and_claim(
        outcomes=[models.Outcome(id=id_, attempt=running.attempt, state=JobState.FAILED)],
        owner="o",
        queues=None,
        count=0,
        lease_until=BASE + LEASE,
        now=BASE,
    )
    assert cycle.lost == [] and cycle.claimed == []
    assert get(store, id_).state == JobState.FAILED
