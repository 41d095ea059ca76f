"""The operators' side of the store, on both backends: history
rows fenced like outcomes, lost attempts recorded once at rescue, history
pruned with its job, heartbeats, limits that are never overwritten, bulk
actions, and history or heartbeat rows that don't decode."""

from __future__ import annotations

import threading

from procqueue import models
from procqueue.models import JobState
from procqueue.store import open_store
from procqueue.store.base import Store
from procqueue.testing import wait_until
from tests.store.held import Held
from tests.store.rawdb import RawDb

NOW = 1_700_000_000.0


def _insert(store: Store, name: str = "j", queue: str = "default", now: float = NOW) -> int:
    job = models.NewJob(name=name, args=b"{}", queue=queue)
    (job_id,) = store.job_insert_many(jobs=[job], now=now)
    return job_id


def _claim(store: Store, owner: str = "host-a:100:tok", now: float = NOW) -> models.ClaimedJob:
    (claimed,) = store.job_claim(owner=owner, queues=None, count=1, lease_until=now + 30, now=now)
    return claimed


def _outcome(claimed: models.ClaimedJob, state: JobState, history: str) -> models.Outcome:
    return models.Outcome(
        id=claimed.id,
        attempt=claimed.attempt,
        state=state,
        error="boom" if state != JobState.DONE else None,
        run_at=NOW + 1 if state == JobState.PENDING else None,
        history=history,
        child_pid=4321,
        started_at=NOW + 0.5,
        exit_reason="SIGSEGV" if state != JobState.DONE else None,
        peak_memory=12.5,
    )


def test_history_rows_are_written_with_outcomes_and_fenced(store: Store) -> None:
    job_id = _insert(store)
    first = _claim(store)
    retried = _outcome(first, JobState.PENDING, "retried")
    assert store.job_record_many(outcomes=[retried], now=NOW + 2) == []
    assert store.job_record_many(outcomes=[retried], now=NOW + 3) == [job_id]  # fenced: no row
    second = _claim(store, owner="host-b:200:tok", now=NOW + 5)
    done = _outcome(second, JobState.DONE, "done")
    assert store.job_record_many(outcomes=[done], now=NOW + 6) == []
    history = store.attempt_list(id=job_id)
    assert [(h.attempt, h.outcome, h.host, h.supervisor_pid) for h in history] == [
        (1, "retried", "host-a", 100),
        (2, "done", "host-b", 200),
    ]
    one = history[0]
    assert (one.child_pid, one.exit_reason, one.error, one.peak_memory) == (
        4321,
        "SIGSEGV",
        "boom",
        12.5,
    )
    assert one.claimed_at == models.to_datetime(NOW) and one.seconds == 1.5
    assert store.job_get(id=job_id).history == history  # type: ignore[union-attr]


def test_a_cancel_that_wins_over_a_retry_is_recorded_as_cancelled(store: Store) -> None:
    job_id = _insert(store)
    claimed = _claim(store)
    assert store.job_cancel(id=job_id, now=NOW) == JobState.RUNNING
    store.job_record_many(outcomes=[_outcome(claimed, JobState.PENDING, "retried")], now=NOW + 1)
    assert [h.outcome for h in store.attempt_list(id=job_id)] == ["cancelled"]


def test_a_lost_lease_is_recorded_once_at_rescue_and_pruned_with_the_job(store: Store) -> None:
    job_id = _insert(store)
    _claim(store)
    assert store.job_rescue_expired(now=NOW + 60) == 1
    assert store.job_rescue_expired(now=NOW + 61) == 0
    (lost,) = store.attempt_list(id=job_id)
    # claimed for an idle child: started when claimed, as far as anyone knows
    assert (lost.outcome, lost.host, lost.started_at) == ("lost", "host-a", lost.claimed_at)
    assert lost.claimed_at is not None
    assert "lease ran out" in (lost.error or "")
    assert store.job_cancel(id=job_id, now=NOW + 62) == JobState.CANCELLED
    assert store.job_prune(states=["cancelled"], before=NOW + 100, limit=10) == 1
    assert store.attempt_list(id=job_id) == []


def test_heartbeats_list_alive_and_stale_supervisors(store: Store) -> None:
    beat = {
        "spec": "app.jobs",
        "version": "1.0",
        "queues": ["a", "b"],
        "limits": {"a": 2},
        "workers": 4,
        "busy": 1,
        "beat_every": 2.0,
        "started_at": NOW,
    }
    store.supervisor_beat(owner="h1:10:x", now=NOW, **beat)  # type: ignore[arg-type]
    store.supervisor_beat(owner="h2:20:y", now=NOW + 10, **{**beat, "queues": None})  # type: ignore[arg-type]
    found = {s.owner: s for s in store.supervisor_list(now=NOW + 10)}
    assert (found["h1:10:x"].alive, found["h2:20:y"].alive) == (False, True)
    h1 = found["h1:10:x"]
    assert (h1.host, h1.pid, h1.queues, h1.limits, h1.busy, h1.workers) == (
        "h1",
        10,
        ["a", "b"],
        {"a": 2},
        1,
        4,
    )
    assert found["h2:20:y"].queues is None
    store.supervisor_remove(owner="h2:20:y")
    store.supervisor_beat(owner="h3:30:z", now=NOW + 90_000, **beat)  # type: ignore[arg-type]
    assert [s.owner for s in store.supervisor_list(now=NOW + 90_000)] == ["h3:30:z"]  # h1 forgotten


def test_a_stored_limit_is_never_overwritten_by_a_supervisor(store: Store) -> None:
    assert store.queue_init_limit(queue="q", limit=2, by="supervise on h:1", now=NOW) == (
        2,
        "supervise on h:1",
    )
    assert store.queue_init_limit(queue="q", limit=5, by="supervise on h:2", now=NOW) == (
        2,
        "supervise on h:1",
    )
    store.queue_set_limit(queue="q", limit=None, by="operator", now=NOW)
    assert store.queue_init_limit(queue="q", limit=5, by="supervise on h:2", now=NOW) == (
        None,
        "operator",
    )
    (q,) = store.queue_list(now=NOW)
    assert (q.limit, q.limit_by, q.limit_at) == (None, "operator", models.to_datetime(NOW))


def test_retry_and_cancel_where(store: Store) -> None:
    a = [_insert(store, name="a", now=NOW + i) for i in range(3)]
    b = _insert(store, name="b", queue="other", now=NOW + 5)
    running = _claim(store, now=NOW + 6)  # the oldest due: a[0]
    assert running.id == a[0]
    counts = store.job_count_where(states=["pending", "running"], queue=None, name="a", since=None)
    assert counts == 3
    since = NOW + 1
    assert store.job_cancel_where(
        states=["pending", "running"], queue=None, name="a", since=since, now=NOW + 7
    ) == (2, 0)
    assert store.job_cancel_where(
        states=["running"], queue=None, name=None, since=None, now=NOW + 7
    ) == (0, 1)
    assert store.job_get(id=b).state == JobState.PENDING  # type: ignore[union-attr]
    assert (
        store.job_retry_where(
            states=["failed", "cancelled"], queue="default", name=None, since=None, now=NOW + 8
        )
        == 2
    )
    assert {store.job_get(id=i).state for i in a[1:]} == {JobState.PENDING}  # type: ignore[union-attr]


def test_history_and_heartbeat_rows_that_do_not_decode_never_break_a_read(
    store: Store, raw: RawDb
) -> None:
    job_id = _insert(store)
    raw.execute(
        "INSERT INTO job_attempts (job_id, attempt, owner, ended_at, outcome, error) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (job_id, 1, "no-colons", NOW, "done", None),
    )
    if raw.backend == "sqlite":  # SQLite keeps any value in any column
        raw.execute(
            "INSERT INTO job_attempts (job_id, attempt, owner, ended_at, outcome, peak_memory) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (job_id, "two", 7, "later", b"\x01", "lots"),  # a blob stays one
        )
        raw.execute(
            "INSERT INTO supervisors VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ("x", "h", "pid", "v", "s", "not json", "{}", 1, 0, 2.0, NOW, NOW),
        )
    history = store.attempt_list(id=job_id)
    assert history[0].host == "no-colons" and history[0].supervisor_pid is None
    if raw.backend == "sqlite":
        assert (history[1].attempt, history[1].outcome, history[1].peak_memory) == (0, "?", None)
        assert store.supervisor_list(now=NOW) == []


def test_throughput_is_counted_per_minute_by_the_store(store: Store) -> None:
    now = 1_700_000_420.0  # 20 s into a UTC minute
    ends = [(JobState.DONE, now - 0.5 * i) for i in range(40)]  # 2/s for the last 20 s
    ends += [(JobState.FAILED, now - 30), (JobState.DONE, now - 185)]
    ends += [(JobState.DONE, now - 3600), (JobState.CANCELLED, now - 1)]
    for state, at in ends:
        id_ = _insert(store, now=at)
        if state == JobState.CANCELLED:
            store.job_cancel(id=id_, now=at)
            continue
        claimed = _claim(store, now=at)
        assert store.job_record_many(outcomes=[_outcome(claimed, state, state.value)], now=at) == []
    counts = store.job_finished_per_minute(minutes=15, now=now)
    assert counts.first_minute == int(now // 60) - 14
    assert (counts.done[-1], counts.failed[-1]) == (40, 0)  # this minute
    assert (counts.done[-2], counts.failed[-2]) == (0, 1)  # 30 s ago: the minute before
    assert counts.done[-4] == 1  # 185 s ago
    assert (sum(counts.done), sum(counts.failed)) == (41, 1)  # an hour ago is out of range
    assert counts.last_60s == 41


def test_an_outcome_and_a_rescue_racing_leave_one_history_row(store: Store, dsn: str) -> None:
    """A supervisor records its job done while a rescue takes the expired
    lease of the same attempt: whichever writes the row, the history tells
    that one ending and not the other's (each history row was read before
    its transaction locked the job's row)."""
    job_id = _insert(store)
    claimed = _claim(store)
    rescuer = open_store(dsn)
    # Both transactions wait for the job's row, held by the test, after their first read.
    held = Held(dsn, "SELECT id FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
    done = _outcome(claimed, JobState.DONE, "done")
    recording = threading.Thread(
        target=store.job_record_many, kwargs={"outcomes": [done], "now": NOW + 40}
    )
    rescue = threading.Thread(target=rescuer.job_rescue_expired, kwargs={"now": NOW + 60})
    try:
        recording.start()
        if held.conn is not None:
            wait_until(lambda: held.blocked_by(held.pid), what="the outcome to wait")
        else:
            recording.join()
        rescue.start()
        if held.conn is not None:
            wait_until(lambda: held.waiting() == 2, what="the rescue to wait")
        held.release()
        recording.join()
        rescue.join()
    finally:
        held.release()
        rescuer.close()
    info = store.job_get(id=job_id)
    assert info is not None and info.state == JobState.DONE
    assert [h.outcome for h in info.history] == ["done"]
