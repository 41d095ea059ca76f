"""Every call is bounded: a table or file locked by someone else makes a
store call fail with `StoreError` within the store's bound, instead of
hanging, and the store works again once the lock is gone.

Stores here are given bounds of about a second so that the tests stay fast;
the defaults are checked separately.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from procqueue import errors, models
from procqueue.models import JobState
from procqueue.store import sqlite as sqlite_backend
from procqueue.store.postgres import Bounds, PostgresStore
from procqueue.store.sqlite import SqliteStore
from tests.conftest import PG_URL
from tests.store.factories import BASE, claim_exactly, get, insert_one

BOUND_S = 0.5
SLACK_S = 2.0  # connecting, a pool check, a slow shared machine


def _fails_within(bound: float, call: Callable[[], object]) -> str:
    """Calls `call`, which must raise StoreError within `bound` (plus slack); its message."""
    start = time.monotonic()
    with pytest.raises(errors.StoreError) as info:
        call()
    elapsed = time.monotonic() - start
    assert elapsed < bound + SLACK_S, f"took {elapsed:.1f}s"
    return str(info.value)


# -- PostgreSQL -----------------------------------------------------------------------


@pytest.fixture
def locker(pg: tuple[str, str]) -> Iterator[psycopg.Connection[Any]]:
    """A session of someone else's, in a transaction (rolled back at the end)."""
    with psycopg.connect(PG_URL) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(pg[1])))
        yield conn
        conn.rollback()


@pytest.mark.parametrize(
    ("bounds", "says"),
    [
        (Bounds(lock=BOUND_S), "lock timeout"),
        (Bounds(statement=BOUND_S, lock=30.0), "statement timeout"),
    ],
    ids=["lock", "statement"],
)
def test_a_locked_jobs_table_fails_claims_and_renewals_within_the_bound(
    pg: tuple[str, str], locker: psycopg.Connection[Any], bounds: Bounds, says: str
) -> None:
    store = PostgresStore(pg[0], bounds=bounds)
    try:
        store.migrate(now=BASE)
        claimed = claim_exactly(store, insert_one(store))
        insert_one(store)
        outcome = models.Outcome(id=claimed.id, attempt=claimed.attempt, state=JobState.DONE)
        locker.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")

        def record_and_claim() -> object:
            return store.job_record_and_claim(
                outcomes=[outcome], owner="o", queues=None, count=2, lease_until=BASE + 9, now=BASE
            )

        bound = bounds.lock if says == "lock timeout" else bounds.statement
        assert says in _fails_within(bound, record_and_claim)
        assert says in _fails_within(
            bound, lambda: store.job_renew_leases(owner="owner-1", lease_until=BASE + 9)
        )
        locker.rollback()
        assert store.job_renew_leases(owner="owner-1", lease_until=BASE + 9).alive == {
            (claimed.id, claimed.attempt)
        }
        assert store.job_record_many(outcomes=[outcome], now=BASE) == []
        assert get(store, claimed.id).state == JobState.DONE
    finally:
        store.close()


def test_every_session_runs_under_the_bounds(pg: tuple[str, str]) -> None:
    bounds = Bounds(statement=1.5, lock=0.25, idle_in_transaction=7.0, connect=3.0, tcp_user=4.0)
    kwargs = bounds.session({}, schema="x")
    assert kwargs["connect_timeout"] == 3 and kwargs["tcp_user_timeout"] == 4000
    assert kwargs["keepalives"] == 1 and kwargs["keepalives_idle"] > 0
    with psycopg.connect(PG_URL, **kwargs) as conn:
        shown = [
            conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            for name in (
                "statement_timeout",
                "lock_timeout",
                "idle_in_transaction_session_timeout",
                "jit",
            )
        ]
    assert shown == [("1500ms",), ("250ms",), ("7s",), ("off",)]


def test_the_dsn_overrides_the_bounds() -> None:
    kwargs = Bounds().session({"connect_timeout": "30", "options": "-c lock_timeout=0"}, schema="x")
    assert "connect_timeout" not in kwargs  # the DSN's own is used
    assert kwargs["options"].endswith("-c lock_timeout=0")  # the last -c wins


@pytest.mark.parametrize("field", Bounds.__struct_fields__)
@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan")])
def test_bounds_must_be_positive_and_finite(field: str, value: float) -> None:
    with pytest.raises(errors.ConfigError, match=field):
        Bounds(**{field: value})


# -- SQLite ---------------------------------------------------------------------------


def test_the_default_busy_timeout_is_about_five_seconds() -> None:
    assert 1.0 <= sqlite_backend.BUSY_TIMEOUT_DEFAULT <= 5.0


def test_a_file_held_exclusively_fails_writes_within_the_busy_timeout(tmp_path: Any) -> None:
    path = str(tmp_path / "queue.db")
    store = SqliteStore(path, busy_timeout=BOUND_S)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        store.migrate(now=BASE)
        claimed = claim_exactly(store, insert_one(store))
        other.execute("BEGIN EXCLUSIVE")
        says = _fails_within(BOUND_S, lambda: insert_one(store))
        assert "database is locked" in says
        _fails_within(
            BOUND_S,
            lambda: store.job_set_progress(
                id=claimed.id, attempt=claimed.attempt, text="x", fraction=None
            ),
        )
        _fails_within(BOUND_S, lambda: store.job_renew_leases(owner="owner-1", lease_until=BASE))
        assert get(store, claimed.id).state == JobState.RUNNING  # reads go on beside the lock
        other.execute("ROLLBACK")
        assert insert_one(store) > claimed.id
    finally:
        other.close()
        store.close()
