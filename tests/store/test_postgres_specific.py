"""PostgreSQL-only behaviour of `PostgresStore`: the claim index, LISTEN/NOTIFY
wake-ups, enqueue inside the caller's transaction, racing migrations,
cluster-wide limits across store instances, reconnects and error messages.

The shared behaviour is in test_conformance.py. Nothing here sleeps: waits
are `select` on the wake socket or on a test LISTEN connection, with timeouts.
"""

from __future__ import annotations

import select
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import psycopg.rows
import pytest
from psycopg import sql

from procqueue import errors, models
from procqueue.models import JobState
from procqueue.store import _queries, open_store
from procqueue.store.base import SCHEMA_VERSION
from procqueue.store.postgres import PostgresStore, split_dsn
from procqueue.testing import wait_until
from tests.conftest import PG_URL, drop_pg_schema, make_pg_dsn
from tests.store.factories import BASE, claim, claim_ids, insert, new_job

WAIT_S = 10.0


@pytest.fixture
def store(pg: tuple[str, str]) -> Iterator[PostgresStore]:
    s = PostgresStore(pg[0])
    s.migrate(now=BASE)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def admin(pg: tuple[str, str]) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection whose search_path is the test's schema."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(pg[1])))
        yield conn


def _readable(fd: int, timeout: float = WAIT_S) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def _count_jobs(admin: psycopg.Connection[Any]) -> int:
    row = admin.execute("SELECT count(*) FROM jobs").fetchone()
    assert row is not None
    return int(row[0])


# -- DSN and connection errors -------------------------------------------------


def test_split_dsn_strips_schema_and_keeps_other_parameters() -> None:
    assert split_dsn("postgresql://h:5/db?sslmode=disable&schema=s_1&connect_timeout=3") == (
        "postgresql://h:5/db?sslmode=disable&connect_timeout=3",
        "s_1",
    )
    assert split_dsn("postgresql://h/db") == ("postgresql://h/db", "procqueue")


@pytest.mark.parametrize(
    "query", ["schema=Bad", "schema=1abc", "schema=a-b", "schema=", "schema=a&schema=b"]
)
def test_invalid_schema_is_a_config_error(query: str) -> None:
    with pytest.raises(errors.ConfigError, match="schema"):
        PostgresStore(f"postgresql://u:pw@127.0.0.1:5432/test?{query}")


def test_schema_too_long_for_a_notify_channel_is_a_config_error() -> None:
    with pytest.raises(errors.ConfigError, match="1-53"):
        PostgresStore(f"postgresql://127.0.0.1/test?schema={'a' * 54}")


def test_malformed_dsn_is_a_config_error_without_the_password() -> None:
    with pytest.raises(errors.ConfigError) as info:
        open_store("postgresql://bob:hunter2@127.0.0.1:5432/test?no_such_option=1")
    message = str(info.value)
    assert "hunter2" not in message
    assert "no_such_option" in message
    assert "\n" not in message


def test_unreachable_server_says_where_and_why_without_the_password() -> None:
    with pytest.raises(errors.StoreError) as info:
        open_store("postgresql://bob:hunter2@127.0.0.1:1/mydb?schema=x&connect_timeout=3")
    message = str(info.value)
    assert message.startswith("cannot connect to PostgreSQL at 127.0.0.1:1 database mydb: ")
    assert "hunter2" not in message
    assert "\n" not in message
    # not a psycopg exception; nothing listens there, which may pass
    assert type(info.value) is errors.StoreUnavailable


def test_missing_tables_say_which_query_and_to_migrate(pg: tuple[str, str]) -> None:
    s = PostgresStore(pg[0])  # never migrated
    try:
        with pytest.raises(errors.StoreError, match=r"query job_get failed: .*jobs.*migrate"):
            s.job_get(id=1)
    finally:
        s.close()


def test_permission_error_names_the_query(
    store: PostgresStore, pg: tuple[str, str], admin: psycopg.Connection[Any]
) -> None:
    row = admin.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    if not row or not row[0]:
        pytest.skip("needs a superuser to create a role")
    role = f"pq_noperm_{uuid.uuid4().hex[:8]}"
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        url = pg[0].replace("postgresql://", f"postgresql://{role}@", 1)
        limited = PostgresStore(url)
        try:
            with pytest.raises(errors.StoreError, match=r"job_get failed: .*grant USAGE"):
                limited.job_get(id=1)  # the schema is invisible without USAGE
            admin.execute(
                sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                    sql.Identifier(pg[1]), sql.Identifier(role)
                )
            )
            with pytest.raises(errors.StoreError) as info:
                limited.job_get(id=1)
            assert "query job_get failed: permission denied for table jobs" in str(info.value)
            with pytest.raises(
                errors.StoreError, match="query job_record_and_claim failed: permission"
            ):
                limited.job_claim(owner="o", queues=None, count=1, lease_until=BASE, now=BASE)
        finally:
            limited.close()
    finally:
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_closed_store_raises_store_errors(pg: tuple[str, str]) -> None:
    s = PostgresStore(pg[0])
    s.migrate(now=BASE)
    s.close()
    with pytest.raises(errors.StoreError):
        s.job_get(id=1)
    s.close()  # twice is fine
    assert s.wake_fileno() is None
    assert s.wake_drain() is False


# -- schema --------------------------------------------------------------------


def test_migrate_races_from_four_threads(
    pg: tuple[str, str], admin: psycopg.Connection[Any]
) -> None:
    barrier = threading.Barrier(4)

    def migrate(_: int) -> int:
        s = PostgresStore(pg[0])
        try:
            barrier.wait(timeout=WAIT_S)
            return s.migrate(now=BASE)
        finally:
            s.close()

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(migrate, range(4))) == [SCHEMA_VERSION] * 4
    rows = admin.execute("SELECT version FROM procqueue_schema ORDER BY version").fetchall()
    assert [r[0] for r in rows] == [v for v, _ in _queries.migrations("postgres")]


def test_newer_schema_is_refused_naming_both_versions(
    store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    newer = SCHEMA_VERSION + 41
    admin.execute("INSERT INTO procqueue_schema VALUES (%s, 0)", [newer])
    with pytest.raises(errors.SchemaTooNew) as info:
        store.migrate(now=BASE)
    assert str(newer) in str(info.value)
    assert f"up to {SCHEMA_VERSION}" in str(info.value)


# -- the claim index -----------------------------------------------------------


def _plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


@pytest.mark.parametrize("plan", ["custom", "generic"])
@pytest.mark.parametrize("queues", [None, ["q0", "q2"]])
def test_candidate_query_walks_the_claim_index(
    store: PostgresStore, admin: psycopg.Connection[Any], queues: list[str] | None, plan: str
) -> None:
    admin.execute(
        """INSERT INTO jobs (name, queue, state, priority, max_attempts, args, backoff,
                             run_at, created_at, finished_at)
           SELECT 'j', 'q' || (i %% 3), CASE WHEN i <= 20000 THEN 'pending' ELSE 'done' END,
                  i %% 5, 3, '{}', '{}', %(base)s + i, %(base)s + i,
                  CASE WHEN i > 20000 THEN %(base)s + i END
           FROM generate_series(1, 25000) AS i""",
        {"base": BASE},
    )
    store.queue_set_limit(queue="q1", limit=2)
    store.queue_set_paused(queue="q3", paused=True)
    admin.execute("ANALYZE jobs")
    admin.execute("ANALYZE queues")
    query = _queries.load("postgres")["job_candidates"]
    params = {"now": BASE + 30_000, "queues": queues, "limit": 48}
    if plan == "custom":
        row = admin.execute("EXPLAIN (FORMAT JSON) " + query, params).fetchone()
    else:
        # psycopg prepares a statement after 5 runs and the server may then
        # settle on a generic plan (parameters unknown): it must use the index too.
        for n, name in enumerate(params, 1):
            query = query.replace(f"%({name})s", f"${n}")
        admin.execute("SET plan_cache_mode = force_generic_plan")
        admin.execute("PREPARE candidates(float8, text[], bigint) AS " + query)
        explain = "EXPLAIN (FORMAT JSON) EXECUTE candidates(%(now)s, %(queues)s, %(limit)s)"
        row = psycopg.ClientCursor(admin).execute(explain, params).fetchone()
    assert row is not None
    nodes = list(_plan_nodes(row[0][0]["Plan"]))
    # (the spent rates are read once, before the walk: an InitPlan beside it)
    walk = [row[0][0]["Plan"]]
    while outer := [c for c in walk[-1].get("Plans", []) if c["Parent Relationship"] == "Outer"]:
        walk.append(outer[0])
    assert [n["Node Type"] for n in walk] == ["Limit", "LockRows", "Index Scan"]
    nodes = walk + nodes
    assert nodes[2]["Index Name"] == "jobs_claim"
    assert ("$1" in nodes[2]["Index Cond"]) == (plan == "generic")
    assert not [n for n in nodes if n["Node Type"] == "Sort"], "the index gives the order"
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan" and n["Relation Name"] == "jobs"]
    assert len(claim_ids(store, now=BASE + 30_000, count=5, queues=queues)) == 5


def test_group_heads_probe_each_group_by_index(
    store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    admin.execute(
        """INSERT INTO jobs (name, queue, state, max_attempts, args, backoff, run_at, created_at,
                             group_key, group_limit)
           SELECT 'j', 'default', 'pending', 3, '{}', '{}', %(base)s + i, %(base)s + i,
                  'g' || (i %% 1000), 2
           FROM generate_series(1, 100000) AS i""",
        {"base": BASE},
    )
    admin.execute(
        "INSERT INTO flow_groups (group_key, served_at)"
        " SELECT 'g' || i, i FROM generate_series(0, 999) AS i"
    )
    admin.execute("ANALYZE")
    query = _queries.load("postgres")["job_group_heads"]
    params = {"now": BASE + 200_000, "queues": None, "limit": 48}
    row = admin.execute("EXPLAIN (FORMAT JSON) " + query, params).fetchone()
    assert row is not None
    nodes = list(_plan_nodes(row[0][0]["Plan"]))
    used = {n.get("Index Name") for n in nodes}
    assert {"flow_groups_served", "jobs_group_claim"} <= used
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan" and n["Relation Name"] == "jobs"]
    assert not [n for n in nodes if n["Node Type"] == "Sort"]
    assert len(claim_ids(store, now=BASE + 200_000, count=5)) == 5


# -- LISTEN/NOTIFY ---------------------------------------------------------------


def test_enqueue_wakes_a_listening_store(store: PostgresStore, pg: tuple[str, str]) -> None:
    fd = store.wake_fileno()
    assert fd is not None
    store.wake_drain()
    producer = PostgresStore(pg[0])
    try:
        insert(producer, new_job())
    finally:
        producer.close()
    assert _readable(fd)
    assert store.wake_drain() is True
    assert store.wake_drain() is False


def test_wake_survives_the_listening_connection_being_killed(
    store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    fd = store.wake_fileno()
    pid = store.listener.backend_pid()
    assert fd is not None and pid is not None
    admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    for _ in range(5):  # the socket turns readable; a drain then notices the loss
        assert _readable(fd)
        if store.wake_drain():
            break
    else:
        pytest.fail("wake_drain never reported the lost connection")
    old_fd, fd = fd, store.wake_fileno()  # reconnects
    assert fd is not None and fd != old_fd  # so callers comparing numbers re-register
    assert store.listener.backend_pid() not in (None, pid)
    store.wake_drain()
    insert(store, new_job())
    assert _readable(fd)
    assert store.wake_drain() is True


def test_pool_replaces_connections_killed_by_a_restart(
    pg: tuple[str, str], admin: psycopg.Connection[Any]
) -> None:
    app_name = f"pq_test_{uuid.uuid4().hex[:8]}"
    s = PostgresStore(f"{pg[0]}&application_name={app_name}")
    try:
        s.migrate(now=BASE)
        (id_,) = insert(s, new_job())
        s.check_idle = 0.0  # as if the connections had idled past the check threshold
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s",
            [app_name],
        ).fetchone()
        assert killed is not None and killed[0] >= 1
        info = s.job_get(id=id_)  # the dead connection is checked and replaced
        assert info is not None and info.id == id_
    finally:
        s.close()


def test_a_busy_connection_killed_is_replaced_without_an_error(
    pg: tuple[str, str], admin: psycopg.Connection[Any]
) -> None:
    app_name = f"pq_test_{uuid.uuid4().hex[:8]}"
    s = PostgresStore(f"{pg[0]}&application_name={app_name}")
    try:
        s.migrate(now=BASE)
        (id_,) = insert(s, new_job())
        s.check_idle = 3600.0  # busy: only the socket tells the connection died
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            [app_name],
        )
        wait_until(
            lambda: (
                not admin.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE application_name = %s", [app_name]
                ).fetchone()
            ),
            what="the backends to exit",
        )
        info = s.job_get(id=id_)
        assert info is not None and info.id == id_
    finally:
        s.close()


# -- enqueue inside the caller's transaction ------------------------------------------


def _listen(channel: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(PG_URL, autocommit=True)
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    return conn


def _notifications_before_marker(listener: psycopg.Connection[Any], channel: str) -> list[str]:
    """Payloads on `channel` up to a marker sent now (NOTIFY delivers in commit order)."""
    with psycopg.connect(PG_URL, autocommit=True) as other:
        other.execute("SELECT pg_notify(%s, 'marker')", [channel])
    seen: list[str] = []
    for note in listener.notifies(timeout=WAIT_S):
        if note.payload == "marker":
            return seen
        seen.append(note.payload)
    pytest.fail("the marker notification never arrived")


def test_callers_transaction_rolled_back_leaves_no_job_and_no_wake(
    store: PostgresStore, pg: tuple[str, str], admin: psycopg.Connection[Any]
) -> None:
    channel = f"procqueue_{pg[1]}"
    with _listen(channel) as listener, psycopg.connect(PG_URL) as conn:
        (id_,) = store.job_insert_many(jobs=[new_job()], now=BASE, connection=conn)
        assert store.job_get(id=id_) is None  # not visible outside the transaction
        conn.rollback()
        assert store.job_get(id=id_) is None
        assert _count_jobs(admin) == 0
        assert _notifications_before_marker(listener, channel) == []


def test_callers_transaction_committed_shows_the_job_and_wakes(
    store: PostgresStore, pg: tuple[str, str]
) -> None:
    fd = store.wake_fileno()
    assert fd is not None
    store.wake_drain()
    with psycopg.connect(PG_URL) as conn:
        conn.execute("CREATE TEMP TABLE orders (id int)")  # the caller's own work
        ids = store.job_insert_many(
            jobs=[new_job(key="k"), new_job(key="k"), new_job()], now=BASE, connection=conn
        )
        assert ids[0] == ids[1] != ids[2]
        assert store.job_get(id=ids[0]) is None
        conn.execute("INSERT INTO orders VALUES (1)")
        conn.commit()
    assert _readable(fd)
    assert store.wake_drain() is True
    assert [c.id for c in claim(store, now=BASE, count=5)] == [ids[0], ids[2]]


def test_callers_search_path_and_cursor_settings_are_neither_needed_nor_changed(
    store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(
        PG_URL, cursor_factory=psycopg.RawCursor, row_factory=psycopg.rows.namedtuple_row
    ) as conn:
        conn.execute("SET search_path TO pg_catalog")
        conn.execute("SET LOCAL search_path TO public")
        store.job_insert_many(jobs=[new_job()], now=BASE, connection=conn)
        row = conn.execute("SHOW search_path").fetchone()
        assert row is not None and row[0] == "public"
        conn.commit()
        row = conn.execute("SHOW search_path").fetchone()
        assert row is not None and row[0] == "pg_catalog"
    assert _count_jobs(admin) == 1


def test_autocommit_connection_inside_a_transaction_block(
    store: PostgresStore, admin: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        with pytest.raises(errors.EnqueueError, match="transaction"):
            store.job_insert_many(jobs=[new_job()], now=BASE, connection=conn)
        with conn.transaction():
            store.job_insert_many(jobs=[new_job()], now=BASE, connection=conn)
            assert _count_jobs(admin) == 0
    assert _count_jobs(admin) == 1


def test_a_failed_enqueue_leaves_the_callers_transaction_usable(
    store: PostgresStore, pg: tuple[str, str]
) -> None:
    url, schema = make_pg_dsn()
    unmigrated = PostgresStore(url)
    try:
        with psycopg.connect(PG_URL) as conn:
            conn.execute("CREATE TEMP TABLE orders (id int)")
            with pytest.raises(errors.StoreError, match="job_insert"):
                unmigrated.job_insert_many(jobs=[new_job()], now=BASE, connection=conn)
            conn.execute("INSERT INTO orders VALUES (1)")  # the transaction still works
            store.job_insert_many(jobs=[new_job()], now=BASE, connection=conn)
            conn.commit()
    finally:
        unmigrated.close()
        drop_pg_schema(schema)
    assert len(claim(store, now=BASE, count=5)) == 1


def test_connection_must_be_a_usable_psycopg_connection(store: PostgresStore) -> None:
    with pytest.raises(errors.EnqueueError, match="psycopg"):
        store.job_insert_many(jobs=[new_job()], now=BASE, connection=object())
    with psycopg.connect(PG_URL) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1/0")
        with pytest.raises(errors.EnqueueError, match="failed transaction"):
            store.job_insert_many(jobs=[new_job()], now=BASE, connection=conn)


# -- cluster-wide limits ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["queue_limit", "serial_key"])
def test_limits_hold_across_store_instances_claiming_at_once(
    store: PostgresStore, pg: tuple[str, str], kind: str
) -> None:
    if kind == "queue_limit":
        store.queue_set_limit(queue="bulk", limit=3)
        insert(store, *(new_job(queue="bulk") for _ in range(40)))
        allowed = 3
    else:
        insert(store, *(new_job(queue="bulk", serial_key="user:7") for _ in range(40)))
        allowed = 1

    def work(own: PostgresStore) -> int:
        return sum(len(claim(own, owner=str(id(own)), count=2, now=BASE)) for _ in range(5))

    assert sum(_race(6, pg[0], work)) == allowed


def _race(workers: int, dsn: str, fn: Callable[[PostgresStore], int]) -> list[int]:
    """`fn` run at once by `workers` threads, each on its own store (own pool)."""
    barrier = threading.Barrier(workers)

    def work(_: int) -> int:
        own = PostgresStore(dsn)
        try:
            barrier.wait(timeout=WAIT_S)
            return fn(own)
        finally:
            own.close()

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(work, range(workers)))


def test_a_chore_is_taken_once_by_racing_stores(store: PostgresStore, pg: tuple[str, str]) -> None:
    taken = _race(6, pg[0], lambda s: int(s.chore_claim(name="prune", every=60, now=BASE)))
    assert sum(taken) == 1


def test_racing_sweepers_enqueue_each_failure_handler_once(
    store: PostgresStore, pg: tuple[str, str]
) -> None:
    (id_,) = insert(store, new_job(on_failure="tests.jobs.handler", max_attempts=1))
    (claimed,) = claim(store, now=BASE)
    outcome = models.Outcome(id=id_, attempt=claimed.attempt, state=JobState.FAILED, error="x")
    assert store.job_record_many(outcomes=[outcome], now=BASE) == []

    def handler(info: models.JobInfo, name: str) -> models.NewJob:
        return new_job(name=name, args={"failed": info.id})

    handled = _race(
        4, pg[0], lambda s: s.job_sweep_failures(now=BASE, limit=10, handler_job=handler)
    )
    assert sum(handled) == 1
    jobs = store.job_list(state=None, queue=None, name="tests.jobs.handler", limit=10)
    assert [j.args for j in jobs] == [{"failed": id_}]
