"""A mistyped DSN must not look like an empty queue: on a database without
procqueue's schema, the read-only commands and the dashboard exit 1 with
one line and create nothing (no file, no schema); malformed DSNs are usage
errors. `migrate`, `enqueue` and `supervise` still create."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from starlette.testclient import TestClient

from procqueue import StoreError
from procqueue.dashboard import create_app
from tests.cli.test_commands import run
from tests.conftest import PG_URL
from tests.helpers import free_port
from tests.store.rawdb import RawDb

READ_ONLY: list[tuple[str, ...]] = [
    ("jobs",),
    ("jobs", "--json"),
    ("show", "1"),
    ("stats",),
    ("queues",),
    ("batches",),
    ("batch", "show", "1"),
    ("supervisors",),
]


def created(dsn: str) -> bool:
    """Whether anything exists at `dsn`: the SQLite file, or any table in the schema."""
    if dsn.startswith("sqlite:"):
        return Path(dsn[len("sqlite:///") :]).exists()
    raw = RawDb(dsn)
    try:
        rows = raw.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = ?", (raw.schema,)
        )
    finally:
        raw.close()
    return bool(rows[0][0])


@pytest.mark.parametrize("argv", READ_ONLY, ids=[" ".join(a) for a in READ_ONLY])
def test_a_read_only_command_on_a_database_without_the_schema_creates_nothing(
    capsys: pytest.CaptureFixture[str], dsn: str, argv: tuple[str, ...]
) -> None:
    code, out, err = run(capsys, *argv, "--dsn", dsn)
    assert code == 1, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "no procqueue schema" in err or "no SQLite database" in err, err
    assert "check the DSN" in err, err
    assert not created(dsn)


def test_the_dashboard_on_a_database_without_the_schema_creates_nothing(dsn: str) -> None:
    with pytest.raises(StoreError, match="check the DSN"), TestClient(create_app(dsn)) as client:
        client.get("/")
    assert not created(dsn)


def test_the_dashboard_command_refuses_a_database_without_the_schema(
    capsys: pytest.CaptureFixture[str], dsn: str
) -> None:
    code, _, err = run(capsys, "dashboard", "--dsn", dsn, "--port", str(free_port()))
    assert code == 1 and "check the DSN" in err and err.count("\n") == 1, err
    assert not created(dsn)


PUBLIC_TABLES = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
"""The tables a DSN without ``?schema=`` would use (other tests use schemas of their own)."""


def test_the_postgres_database_itself_gets_no_schema(
    capsys: pytest.CaptureFixture[str], pg_available: None
) -> None:
    with psycopg.connect(PG_URL) as conn:
        before = conn.execute(PUBLIC_TABLES).fetchall()
    code, _, err = run(capsys, "jobs", "--dsn", PG_URL)
    assert code in (0, 1), err  # 0 only when the shared database really has procqueue's schema
    with psycopg.connect(PG_URL) as conn:
        after = conn.execute(PUBLIC_TABLES).fetchall()
    assert before == after


@pytest.mark.parametrize("dsn", ["sqlite://relative.db", "", "   ", "sqlite:", "mysql://x/y"])
def test_a_malformed_dsn_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, dsn: str
) -> None:
    os.chdir(tmp_path)
    for argv in (("jobs",), ("stats",), ("migrate",), ("enqueue", "a.b")):
        code, _, err = run(capsys, *argv, "--dsn", dsn)
        assert code == 2, (argv, err)
        assert err.count("\n") == 1 and "DSN" in err.upper(), err
    assert list(tmp_path.iterdir()) == []


def test_migrate_then_reading_works(capsys: pytest.CaptureFixture[str], dsn: str) -> None:
    assert run(capsys, "migrate", "--dsn", dsn)[0] == 0
    assert created(dsn)
    code, out, err = run(capsys, "jobs", "--dsn", dsn)
    assert code == 0 and out == "", err


def test_ctrl_c_while_the_command_line_loads_exits_130_without_a_traceback() -> None:
    """SIGINT arrives (as a KeyboardInterrupt) while the entry point imports
    the command line's modules."""
    code = (
        "import signal, procqueue\n"
        "def interrupt(*_):\n"
        "    raise KeyboardInterrupt\n"
        "signal.signal(signal.SIGALRM, interrupt)\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.005)\n"
        "from procqueue.cli import entry\n"
        "raise SystemExit(entry())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "jobs"], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stderr) == (130, "")
