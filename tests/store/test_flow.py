"""Flow control in the claim, on each backend: rate limits per job, group
and queue (counted at start, never spent by a throttled job), groups served
in rotation, group limits counting reserved jobs, debounced enqueues, and
what `job_waits` says about a job that waits."""

from __future__ import annotations

import concurrent.futures

from procqueue import models
from procqueue.clock import FakeClock
from procqueue.store.base import Store
from tests.store.factories import (
    BASE,
    LEASE,
    claim,
    claim_ids,
    get,
    insert,
    insert_one,
    new_job,
    record,
)
from tests.store.rawdb import RawDb

DONE = models.JobState.DONE


def _claim_started(
    store: Store, now: float, count: int, start: int | None = None
) -> list[models.ClaimedJob]:
    """Claims up to `count`, the first `start` of them started (None: all)."""
    cycle = store.job_record_and_claim(
        outcomes=(),
        owner="owner-1",
        queues=None,
        count=count,
        lease_until=now + LEASE,
        now=now,
        start=start,
    )
    return cycle.claimed


# -- rates ---------------------------------------------------------------------


def test_a_job_rate_allows_n_starts_per_sliding_window(store: Store) -> None:
    ids = insert(store, *[new_job(rate_limit="3/s") for _ in range(8)])
    assert claim_ids(store, now=BASE, count=8) == ids[:3]
    assert claim_ids(store, now=BASE + 0.5, count=8) == []
    # the window slides: the three starts at BASE leave it at BASE + 1
    assert claim_ids(store, now=BASE + 0.99, count=8) == []
    assert claim_ids(store, now=BASE + 1.0, count=8) == ids[3:6]
    throttled = get(store, ids[6])
    assert (throttled.state, throttled.attempts) == (models.JobState.PENDING, 0)


def test_throttled_work_does_not_hide_other_due_work(store: Store) -> None:
    limited = insert(store, *[new_job(rate_limit="1/m", priority=5) for _ in range(200)])
    other = insert_one(store, name="tests.jobs.other")
    assert claim_ids(store, now=BASE, count=2) == [limited[0], other]


def test_a_rate_counts_every_job_of_a_batch_claim_and_spans_owners(store: Store) -> None:
    insert(store, *[new_job(rate_limit="4/s") for _ in range(10)])
    first = claim(store, owner="a", now=BASE, count=3)
    second = claim(store, owner="b", now=BASE + 0.1, count=3)
    assert (len(first), len(second)) == (3, 1)


def test_a_claim_stamped_before_one_that_committed_first_still_counts_its_window(
    store: Store,
) -> None:
    # Claims are stamped before they wait for the claim lock: one stamped at +10.0 may
    # commit after one stamped at +10.5, whose trim must not forget the starts at +9.2.
    ids = insert(store, *[new_job(rate_limit="5/s") for _ in range(12)])
    assert claim_ids(store, now=BASE + 9.2, count=5) == ids[:5]
    assert claim_ids(store, now=BASE + 10.5, count=1) == ids[5:6]
    assert claim_ids(store, now=BASE + 10.0, count=5) == []


def test_a_group_rate_limits_each_group_apart(store: Store) -> None:
    a = insert(store, *[new_job(group="a", group_rate="2/m") for _ in range(3)])
    b = insert(store, *[new_job(group="b", group_rate="2/m") for _ in range(3)])
    assert sorted(claim_ids(store, now=BASE, count=10)) == sorted(a[:2] + b[:2])


def test_a_queue_rate_set_by_an_operator_and_cleared(store: Store) -> None:
    store.queue_set_rate(queue="default", rate="2/h", now=BASE)
    insert(store, *[new_job() for _ in range(4)])
    assert len(claim_ids(store, now=BASE, count=4)) == 2
    (info,) = [q for q in store.queue_list(now=BASE) if q.name == "default"]
    assert (info.rate, info.rate_used) == ("2/h", 2)
    assert claim_ids(store, now=BASE + 1, count=4) == []
    store.queue_set_rate(queue="default", rate=None, now=BASE + 1)
    assert len(claim_ids(store, now=BASE + 1, count=4)) == 2


def test_rate_limited_jobs_are_never_reserved_ahead(store: Store) -> None:
    limited = insert(store, *[new_job(rate_limit="10/s") for _ in range(4)])
    plain = insert(store, *[new_job(name="tests.jobs.other") for _ in range(4)])
    taken = [c.id for c in _claim_started(store, BASE, count=6, start=2)]
    assert taken[:2] == limited[:2]
    assert set(taken[2:]) <= set(plain)
    # started by the claim, at the time its rate counted
    assert get(store, limited[0]).started_at == models.to_datetime(BASE)


def test_show_says_which_rate_a_job_waits_for_and_until_when(store: Store) -> None:
    ids = insert(store, *[new_job(rate_limit="2/m") for _ in range(3)])
    claim_ids(store, now=BASE, count=1)
    claim_ids(store, now=BASE + 10, count=1)
    waits = store.job_waits(id=ids[2], now=BASE + 20)
    assert waits == [
        f"throttled by rate 2/m of job:tests.jobs.echo until {models.to_datetime(BASE + 60)}"
    ]
    assert store.job_waits(id=ids[0], now=BASE + 20) == []


# -- groups --------------------------------------------------------------------


def test_claims_rotate_across_groups_whatever_their_backlogs(store: Store) -> None:
    big = insert(store, *[new_job(group="big") for _ in range(2000)], now=BASE)
    small = [
        insert(store, *[new_job(group=f"small-{n}") for _ in range(3)], now=BASE + 1)
        for n in range(3)
    ]
    order: list[int] = []
    for i in range(12):
        order += claim_ids(store, now=BASE + 2 + i, count=1)
    assert set(order) >= {id_ for ids in small for id_ in ids}
    assert sum(1 for id_ in order if id_ in set(big)) == 3


def test_a_batch_claim_rotates_within_itself(store: Store) -> None:
    a = insert(store, *[new_job(group="a") for _ in range(5)])
    b = insert(store, *[new_job(group="b") for _ in range(5)])
    assert claim_ids(store, now=BASE, count=4) == [a[0], b[0], a[1], b[1]]


def test_a_group_limit_counts_reserved_and_running_jobs(store: Store) -> None:
    ids = insert(store, *[new_job(group="t", group_limit=2) for _ in range(5)])
    taken = _claim_started(store, BASE, count=5, start=1)  # one started, one reserved
    assert [c.id for c in taken] == ids[:2]
    assert claim_ids(store, now=BASE + 1, count=5) == []
    assert store.job_waits(id=ids[2], now=BASE + 1) == ["blocked by group t's limit (2 of 2 held)"]
    assert record(store, taken[1], DONE, now=BASE + 2) == []
    assert claim_ids(store, now=BASE + 3, count=5) == [ids[2]]


# -- debounce ------------------------------------------------------------------


def test_a_debounced_key_keeps_one_job_with_the_last_args(store: Store) -> None:
    first = insert(store, new_job(key="k", debounce=5.0, args={"n": 1}), now=BASE)
    again = insert(store, new_job(key="k", debounce=5.0, args={"n": 2}), now=BASE + 3)
    assert first == again
    info = get(store, first[0])
    assert (info.args, info.run_at) == ({"n": 2}, models.to_datetime(BASE + 8))
    assert claim_ids(store, now=BASE + 7, count=5) == []
    assert claim_ids(store, now=BASE + 8, count=5) == first


def test_debounce_never_delays_past_debounce_max(store: Store) -> None:
    (id_,) = insert(store, new_job(key="k", debounce=5.0, debounce_max=12.0), now=BASE)
    for t in (4.0, 8.0, 11.0):
        insert(store, new_job(key="k", debounce=5.0, debounce_max=12.0), now=BASE + t)
    assert get(store, id_).run_at == models.to_datetime(BASE + 12)


def test_debounce_never_touches_a_running_job(store: Store) -> None:
    (id_,) = insert(store, new_job(key="k", debounce=1.0, args={"n": 1}), now=BASE)
    assert claim_ids(store, now=BASE + 1, count=1) == [id_]
    assert insert(store, new_job(key="k", debounce=1.0, args={"n": 2}), now=BASE + 2) == [id_]
    info = get(store, id_)
    assert (info.state, info.args) == (models.JobState.RUNNING, {"n": 1})


def test_a_claim_names_the_limits_that_held_work_back(store: Store) -> None:
    insert(store, *[new_job(rate_limit="1/m") for _ in range(3)])
    insert(store, *[new_job(name="tests.jobs.other", group="g", group_limit=1) for _ in range(3)])
    first = store.job_record_and_claim(
        outcomes=(), owner="o", queues=None, count=4, lease_until=BASE + LEASE, now=BASE
    )
    assert len(first.claimed) == 2
    assert set(first.throttled) == {"rate job:tests.jobs.echo", "group_limit g"}
    again = store.job_record_and_claim(
        outcomes=(), owner="o", queues=None, count=4, lease_until=BASE + LEASE, now=BASE + 1
    )
    assert (again.claimed, again.throttled) == ([], ["group_limit g", "rate job:tests.jobs.echo"])


# -- the claim's time ------------------------------------------------------------


def test_a_claim_that_waited_for_the_database_stamps_the_time_it_got_the_lock(
    store: Store, raw: RawDb
) -> None:
    """A claim's times are read once its lock is held: after a stall the
    claimed job has its whole lease and its start counts in the window of
    when it started, not of when the claim was asked for."""
    first, second = insert(store, *[new_job(rate_limit="1/m") for _ in range(2)])
    clock = FakeClock(start=BASE)
    # the stall: a transaction holding what every claim waits for
    raw.execute("BEGIN IMMEDIATE" if raw.backend == "sqlite" else "BEGIN")
    if raw.backend == "postgres":
        raw.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        cycle = pool.submit(
            store.job_record_and_claim,
            outcomes=(),
            owner="owner-1",
            queues=None,
            count=2,
            lease_until=BASE + LEASE,
            now=BASE,
            clock=clock.now,
        )
        clock.advance(60)
        raw.execute("COMMIT")
        assert [job.id for job in cycle.result(timeout=30).claimed] == [first]
    [(claimed_at, lease_until)] = raw.execute(
        "SELECT claimed_at, lease_until FROM jobs WHERE id = ?", (first,)
    )
    assert (claimed_at, lease_until) == (BASE + 60, BASE + 60 + LEASE)
    # the window of "1/m" runs from the start at BASE + 60
    assert claim_ids(store, now=BASE + 119, count=1) == []
    assert claim_ids(store, now=BASE + 120, count=1) == [second]
