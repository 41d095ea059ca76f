"""Wake-ups, on both backends: every change that gives a supervisor
something to do at once (an enqueue, a retry, the cancel of a running job,
the resume of a queue) makes another store's wake descriptor readable.

The listening store starts listening only after the setup committed, so a
wake it sees comes from the action under test. Nothing sleeps: waits are
`select` with a deadline.
"""

from __future__ import annotations

import select
from collections.abc import Callable, Iterator

import pytest

from procqueue.models import JobState
from procqueue.store import open_store
from procqueue.store.base import Store
from tests.store.factories import BASE, claim_exactly, finished_job, insert_one

WAIT_S = 10.0


@pytest.fixture
def other(dsn: str, store: Store) -> Iterator[Store]:
    """A second store on the same database: a supervisor waiting for work."""
    s = open_store(dsn)
    try:
        yield s
    finally:
        s.close()


def _readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def _enqueue(store: Store) -> Callable[[], object]:
    return lambda: insert_one(store)


def _retry(store: Store) -> Callable[[], object]:
    id_ = finished_job(store, JobState.FAILED)
    return lambda: store.job_retry(id=id_, now=BASE + 1)


def _cancel_running(store: Store) -> Callable[[], object]:
    id_ = insert_one(store)
    claim_exactly(store, id_)

    def cancel() -> None:
        assert store.job_cancel(id=id_, now=BASE + 1) == JobState.RUNNING

    return cancel


def _resume(store: Store) -> Callable[[], object]:
    insert_one(store)
    store.queue_set_paused(queue="default", paused=True)
    return lambda: store.queue_set_paused(queue="default", paused=False)


@pytest.mark.parametrize("arrange", [_enqueue, _retry, _cancel_running, _resume])
def test_the_change_wakes_a_waiting_store(
    store: Store, other: Store, arrange: Callable[[Store], Callable[[], object]]
) -> None:
    act = arrange(store)
    fd = other.wake_fileno()
    assert fd is not None
    assert not _readable(fd, 0) and other.wake_drain() is False  # nothing stale
    act()
    assert _readable(fd, WAIT_S), "no wake-up arrived"
    assert other.wake_drain() is True
    assert other.wake_drain() is False
