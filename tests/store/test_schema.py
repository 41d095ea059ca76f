"""The schema the migrations make: the same tables, columns, keys and indexes
on both backends (modulo dialect), ids never reused, the time of each
migration taken from the caller, and an older SQLite file upgraded in place.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from procqueue import errors
from procqueue.models import JobState
from procqueue.store import _queries, open_store
from procqueue.store.base import SCHEMA_VERSION, Store
from procqueue.store.sqlite import SqliteStore
from tests.conftest import drop_pg_schema, make_pg_dsn
from tests.store.factories import BASE, get, insert_one
from tests.store.rawdb import RawDb

Shape = dict[str, Any]


# -- the same schema on both backends ----------------------------------------------


def sqlite_shape(raw: RawDb) -> Shape:
    """Tables with their columns and primary keys, unique constraints and
    named indexes, as SQLite reports them (its own sqlite_* tables left out)."""
    tables = [
        name
        for (name,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not name.startswith("sqlite_")
    ]
    columns, primary, unique, indexes = {}, set(), set(), set()
    for table in tables:
        info = raw.execute(f"PRAGMA table_info({table})")
        columns[table] = {row[1] for row in info}
        primary.add((table, tuple(row[1] for row in sorted(info, key=lambda r: r[5]) if row[5])))
        for _, index, _, origin, _ in raw.execute(f"PRAGMA index_list({table})"):
            if origin == "c":  # CREATE INDEX; "u"/"pk" back constraints
                indexes.add((table, index))
            elif origin == "u":
                cols = tuple(row[2] for row in raw.execute(f"PRAGMA index_info({index})"))
                unique.add((table, cols))
    return {"columns": columns, "primary": primary, "unique": unique, "indexes": indexes}


def postgres_shape(raw: RawDb) -> Shape:
    """The same, from PostgreSQL's catalogs (indexes that back a constraint
    are counted as the constraint)."""
    columns: dict[str, set[str]] = {}
    for table, column in raw.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = ?",
        (raw.schema,),
    ):
        columns.setdefault(table, set()).add(column)
    keys = raw.execute(
        """SELECT c.contype, t.relname, array_agg(a.attname ORDER BY k.n)
           FROM pg_constraint c
           JOIN pg_class t ON t.oid = c.conrelid
           JOIN pg_namespace s ON s.oid = t.relnamespace
           CROSS JOIN unnest(c.conkey) WITH ORDINALITY AS k(attnum, n)
           JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
           WHERE s.nspname = ? AND c.contype IN ('p', 'u')
           GROUP BY c.oid, c.contype, t.relname""",
        (raw.schema,),
    )
    indexes = raw.execute(
        """SELECT i.tablename, i.indexname FROM pg_indexes i
           WHERE i.schemaname = ? AND NOT EXISTS (
               SELECT 1 FROM pg_constraint c
               JOIN pg_class x ON x.oid = c.conindid
               JOIN pg_namespace s ON s.oid = x.relnamespace
               WHERE x.relname = i.indexname AND s.nspname = i.schemaname)""",
        (raw.schema,),
    )
    return {
        "columns": columns,
        "primary": {(t, tuple(cols)) for kind, t, cols in keys if kind == "p"},
        "unique": {(t, tuple(cols)) for kind, t, cols in keys if kind == "u"},
        "indexes": {(t, name) for t, name in indexes},
    }


def _migrated_shape(dsn: str) -> Shape:
    s = open_store(dsn)
    try:
        assert s.migrate(now=BASE) == SCHEMA_VERSION
        raw = RawDb(dsn)
        try:
            return sqlite_shape(raw) if raw.backend == "sqlite" else postgres_shape(raw)
        finally:
            raw.close()
    finally:
        s.close()


def test_migrations_make_the_same_schema_on_both_backends(
    tmp_path: Path, pg_available: None
) -> None:
    url, schema = make_pg_dsn()
    try:
        pg = _migrated_shape(url)
    finally:
        drop_pg_schema(schema)
    lite = _migrated_shape(f"sqlite:///{tmp_path}/queue.db")
    assert set(lite["columns"]) == {
        *("jobs", "queues", "chores", "procqueue_schema"),
        *("job_attempts", "supervisors", "batches", "job_steps", "job_deps"),
        *("flow_limits", "flow_starts", "flow_groups"),
    }
    assert lite == pg
    assert ("jobs", "jobs_claim") in lite["indexes"]


# -- migrations ---------------------------------------------------------------------


def test_each_migration_records_the_callers_time(store: Store, raw: RawDb) -> None:
    rows = raw.execute("SELECT version, applied_at FROM procqueue_schema ORDER BY version")
    # (Each version with a file: test_queries checks they run 1..SCHEMA_VERSION.)
    assert rows == [(v, BASE) for v, _ in _queries.migrations(store.backend)]
    assert store.migrate(now=BASE + 99) == SCHEMA_VERSION  # nothing applied, nothing recorded
    assert raw.execute("SELECT max(applied_at) FROM procqueue_schema") == [(BASE,)]


def test_newer_schema_is_refused_naming_both_versions(store: Store, raw: RawDb) -> None:
    raw.execute("INSERT INTO procqueue_schema VALUES (?, 0)", (SCHEMA_VERSION + 7,))
    with pytest.raises(
        errors.SchemaTooNew, match=rf"version {SCHEMA_VERSION + 7}.* up to {SCHEMA_VERSION}"
    ):
        store.migrate(now=BASE)


# -- ids are never reused --------------------------------------------------------------


def _prune_cancelled(store: Store) -> int:
    return store.job_prune(states=["cancelled"], before=BASE + 1, limit=1000)


def test_ids_are_never_reused_after_pruning_the_newest(store: Store) -> None:
    ids = [insert_one(store) for _ in range(3)]
    assert store.job_cancel(id=ids[-1], now=BASE) == JobState.CANCELLED
    assert _prune_cancelled(store) == 1
    new = insert_one(store)
    assert new > max(ids)
    for id_ in (*ids[:2], new):
        store.job_cancel(id=id_, now=BASE)
    assert _prune_cancelled(store) == 3  # the table is empty
    assert insert_one(store) > new


def test_a_version_2_sqlite_file_is_upgraded_in_place(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE procqueue_schema (version INTEGER PRIMARY KEY, applied_at REAL)")
    for version, script in _queries.migrations("sqlite")[:2]:
        db.executescript(script)
        db.execute("INSERT INTO procqueue_schema VALUES (?, 0)", (version,))
    for n in (1, 2, 3):
        db.execute(
            """INSERT INTO jobs (name, queue, state, max_attempts, args, backoff, run_at,
                                 created_at, key)
               VALUES ('old', 'default', 'pending', 3, ?, '{}', ?, ?, ?)""",
            (f'{{"n": {n}}}', BASE, BASE, f"k{n}"),
        )
    db.close()
    s = SqliteStore(path)
    try:
        assert s.migrate(now=BASE) == SCHEMA_VERSION
        assert [get(s, id_).args for id_ in (1, 2, 3)] == [{"n": 1}, {"n": 2}, {"n": 3}]
        assert s.job_cancel(id=3, now=BASE) == JobState.CANCELLED
        assert _prune_cancelled(s) == 1
        assert insert_one(s) == 4
        raw = RawDb(f"sqlite:///{path}")
        try:
            shape = sqlite_shape(raw)
        finally:
            raw.close()
    finally:
        s.close()
    fresh = _migrated_shape(f"sqlite:///{tmp_path}/fresh.db")
    assert shape == fresh


def test_steps_saved_before_version_7_are_kept_by_the_upgrade(tmp_path: Path) -> None:
    path = str(tmp_path / "v6.db")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE procqueue_schema (version INTEGER PRIMARY KEY, applied_at REAL)")
    for version, script in _queries.migrations("sqlite")[:6]:
        db.executescript(script)
        db.execute("INSERT INTO procqueue_schema VALUES (?, 0)", (version,))
    db.execute(
        """INSERT INTO jobs (name, queue, state, max_attempts, args, backoff, run_at,
                             created_at, steps)
           VALUES ('old', 'default', 'pending', 3, '{}', '{}', ?, ?, ?)""",
        (BASE, BASE, '{"decode": [1, 2], "say \\"hi\\"": "done", "t": true, "n": null, "x": 1.5}'),
    )
    db.close()
    s = SqliteStore(path)
    try:
        assert s.migrate(now=BASE) == SCHEMA_VERSION
        (claimed,) = s.job_claim(owner="o", queues=None, count=1, lease_until=BASE + 30, now=BASE)
        steps = {k: msgspec.json.decode(v) for k, v in claimed.steps.items()}
        assert steps == {"decode": [1, 2], 'say "hi"': "done", "t": True, "n": None, "x": 1.5}
    finally:
        s.close()
