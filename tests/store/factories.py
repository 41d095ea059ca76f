"""Small builders for the storage conformance suite.

Every time is explicit: tests pass ``now`` values built from `BASE`, since a
store never reads the clock itself.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from procqueue import models, rates
from procqueue.store.base import Store

BASE = 1_000_000.0
"""The suite's epoch (UNIX seconds); tests add offsets to it."""

LEASE = 30.0
"""Lease length the helpers use, in seconds."""

DEFAULT_NAME = "tests.jobs.echo"


def new_job(**overrides: Any) -> models.NewJob:
    """A `NewJob` with sensible defaults; ``args`` is given as a Python value
    and JSON-encoded here."""
    args = overrides.pop("args", {"n": 1})
    flow = {k: overrides.pop(k) for k in rates.Flow.__struct_fields__ if k in overrides}
    fields: dict[str, Any] = {"name": DEFAULT_NAME, "args": msgspec.json.encode(args)}
    if flow:  # the flow options as keywords too (group=..., rate_limit=...)
        fields["flow"] = rates.Flow(**flow)
    fields.update(overrides)
    return models.NewJob(**fields)


def utc(seconds: float) -> dt.datetime:
    """`seconds` (UNIX) as an aware UTC datetime, as `JobInfo` reports times."""
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def insert(store: Store, *jobs: models.NewJob, now: float = BASE) -> list[int]:
    """Inserts `jobs` in one batch and returns their ids."""
    return store.job_insert_many(jobs=list(jobs), now=now)


def insert_one(store: Store, *, now: float = BASE, **overrides: Any) -> int:
    """Inserts one `new_job(**overrides)` and returns its id."""
    (id_,) = insert(store, new_job(**overrides), now=now)
    return id_


def claim(
    store: Store,
    *,
    owner: str = "owner-1",
    now: float = BASE,
    count: int = 1,
    queues: list[str] | None = None,
    lease: float = LEASE,
) -> list[models.ClaimedJob]:
    """Claims up to `count` jobs for `owner`, with a lease of `lease` seconds."""
    return store.job_claim(
        owner=owner, queues=queues, count=count, lease_until=now + lease, now=now
    )


def claim_ids(store: Store, **kwargs: Any) -> list[int]:
    """The ids `claim(store, **kwargs)` took."""
    return [c.id for c in claim(store, **kwargs)]


def claim_exactly(
    store: Store, id_: int, *, owner: str = "owner-1", now: float = BASE, lease: float = LEASE
) -> models.ClaimedJob:
    """Claims one job from `id_`'s queue and checks it is `id_`."""
    info = store.job_get(id=id_)
    assert info is not None
    claimed = claim(store, owner=owner, now=now, queues=[info.queue], lease=lease)
    assert [c.id for c in claimed] == [id_]
    return claimed[0]


def record(
    store: Store,
    claimed: models.ClaimedJob,
    state: models.JobState,
    *,
    now: float = BASE,
    **fields: Any,
) -> list[int]:
    """Records one outcome of `claimed`'s attempt; returns the lost ids."""
    outcome = models.Outcome(id=claimed.id, attempt=claimed.attempt, state=state, **fields)
    return store.job_record_many(outcomes=[outcome], now=now)


def finished_job(
    store: Store,
    state: models.JobState,
    *,
    now: float = BASE,
    **overrides: Any,
) -> int:
    """Inserts a job and takes it to `state` (done, failed or cancelled) at `now`.

    The job is inserted due at `now` and claimed from its own queue, so its
    queue must hold no other due pending job.
    """
    id_ = insert_one(store, now=now, **overrides)
    if state == models.JobState.CANCELLED:
        assert store.job_cancel(id=id_, now=now) == models.JobState.CANCELLED
        return id_
    claimed = claim_exactly(store, id_, owner="finisher", now=now)
    error = "boom" if state == models.JobState.FAILED else None
    assert record(store, claimed, state, now=now, error=error) == []
    return id_


def get(store: Store, id_: int) -> models.JobInfo:
    """`store.job_get(id=id_)`, which must exist."""
    info = store.job_get(id=id_)
    assert info is not None, f"job {id_} vanished"
    return info


def running_ids(store: Store, *, queue: str | None = None) -> set[int]:
    """Ids of every running job (optionally of one queue)."""
    return {j.id for j in store.job_list(state="running", queue=queue, name=None, limit=100_000)}
