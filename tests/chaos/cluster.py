"""Databases and real ``procqueue supervise`` processes for the chaos and
resource tests: start, kill, drain, and the PostgreSQL faults."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

import psycopg

from tests.chaos import procfs

ROOT = Path(__file__).resolve().parents[2]
PG_URL = os.environ.get("PROCQUEUE_TEST_PG", "postgresql://127.0.0.1:5432/test")
CONTROLLER_NAME = "procqueue-chaos-controller"
"""application_name of our own control connections (never terminated by us)."""


def procqueue_command() -> list[str]:
    """The ``procqueue`` entry point of this interpreter's environment."""
    script = Path(sys.executable).parent / "procqueue"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "procqueue"]


@dataclass
class Database:
    """One empty queue database: a SQLite file or a PostgreSQL schema."""

    backend: str
    dsn: str
    path: Path | None = None
    schema: str | None = None
    url: str = PG_URL
    """PostgreSQL: the server's URL (the shared one unless a run brings its own)."""

    @classmethod
    def create(cls, backend: str, folder: Path, url: str = PG_URL) -> Database:
        if backend == "sqlite":
            path = folder / "queue.db"
            return cls(backend, f"sqlite:///{path}", path=path)
        if backend == "postgres":
            schema = f"chaos_{uuid.uuid4().hex[:12]}"
            return cls(backend, f"{url}?schema={schema}", schema=schema, url=url)
        raise ValueError(f"unknown backend {backend!r}")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of `sql` (``?`` placeholders on SQLite, ``%s`` on PostgreSQL),
        through a connection of our own."""
        if self.path is not None:
            db = sqlite3.connect(self.path, timeout=60)
            try:
                return db.execute(sql, params).fetchall()
            finally:
                db.close()
        with psycopg.connect(self.url, application_name=CONTROLLER_NAME, connect_timeout=5) as conn:
            conn.execute(f'SET search_path TO "{self.schema}"')
            return conn.execute(sql.replace("?", "%s"), params).fetchall()

    def terminate_backends(self) -> int:
        """Terminates every connection procqueue holds to our schema (and no one
        else's); how many."""
        assert self.schema is not None
        with psycopg.connect(
            self.url, application_name=CONTROLLER_NAME, autocommit=True, connect_timeout=5
        ) as conn:
            row = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()",
                (f"procqueue:{self.schema}",),
            ).fetchone()
        return int(row[0]) if row else 0

    def stall(self, seconds: float, *, held: Callable[[float], None] | None = None) -> float:
        """Holds the database for `seconds` through a connection of our own,
        so that every procqueue write waits (and, on PostgreSQL, every read of
        the jobs table): SQLite, ``BEGIN EXCLUSIVE`` on the file (in WAL mode
        readers go on); PostgreSQL, ``LOCK TABLE <schema>.jobs IN ACCESS
        EXCLUSIVE MODE`` in an open transaction, the schema read from the
        DSN's ``?schema=``. `held(t)` is called with the time the lock was
        taken; returns the time it was released (or lost: a server restart
        ends the transaction)."""
        if self.path is not None:
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            try:
                db.execute("BEGIN EXCLUSIVE")
                if held is not None:
                    held(time.time())
                time.sleep(seconds)
                db.execute("COMMIT")
            finally:
                db.close()
            return time.time()
        schema = parse_qs(urlsplit(self.dsn).query)["schema"][0]
        with psycopg.connect(self.url, application_name=CONTROLLER_NAME, connect_timeout=5) as conn:
            try:
                conn.execute("SET lock_timeout = '60s'")
                conn.execute("SET idle_in_transaction_session_timeout = 0")
                conn.execute(f'LOCK TABLE "{schema}".jobs IN ACCESS EXCLUSIVE MODE')
                if held is not None:
                    held(time.time())
                time.sleep(seconds)
                conn.rollback()
            except psycopg.OperationalError:
                pass  # the server went away: the lock went with it
        return time.time()

    def drop(self) -> None:
        if self.schema is None:
            return
        with psycopg.connect(self.url, application_name=CONTROLLER_NAME, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


def restart_postgres() -> float:
    """Restarts the system's PostgreSQL server, the one on 5432 (only behind an
    explicit flag, on a machine nobody else tests on); seconds taken."""
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    started = time.monotonic()
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return time.monotonic() - started


def postgres_reason() -> str | None:
    """Why PostgreSQL can't be used (None when it answers)."""
    try:
        with psycopg.connect(PG_URL, connect_timeout=3, application_name=CONTROLLER_NAME):
            return None
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


@dataclass
class SupervisorProcess:
    """One ``procqueue supervise`` process and what happened to it."""

    index: int
    generation: int
    popen: subprocess.Popen[bytes]
    log_path: Path
    started_at: float
    fate: str = "running"
    """running | frozen (SIGSTOPped) | killed | draining | drained | stopping |
    stopped | crashed"""
    ended_at: float | None = None
    exit_code: int | None = None
    drain: dict[str, Any] = field(default_factory=dict)
    _log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        code = self.popen.poll()
        if code is not None and self._log is not None:
            self._log.close()
            self._log = None
        return code

    def kill(self) -> None:
        self.popen.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.popen.send_signal(signal.SIGTERM)

    def freeze(self) -> None:
        """SIGSTOP: the supervisor stops, its children (in their own
        sessions) run on."""
        self.popen.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.popen.send_signal(signal.SIGCONT)

    def wait(self, timeout: float) -> int | None:
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.poll()

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def ready_at(self) -> float | None:
        """When it logged that it supervises (UNIX time), or None."""
        try:
            with open(self.log_path, "rb") as f:
                for line in f:
                    if b"supervising " in line:
                        stamp = line[:23].decode(errors="replace")
                        return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except (OSError, ValueError):
            pass
        return None

    def ready(self) -> bool:
        """True once it logged that it supervises (its signal handlers are in place)."""
        try:
            with open(self.log_path, "rb") as f:
                return b"supervising " in f.read()
        except OSError:
            return False

    def children(self) -> set[int]:
        """Its child processes: those it started clean, and those its fork
        server's template forked for it (the template itself left out: it
        runs no job, and killing it orphans the children it forked)."""
        if self.poll() is not None:
            return set()
        found: set[int] = set()
        for pid in procfs.children(self.pid):
            if procfs.title(pid).startswith("procqueue template"):
                found |= procfs.children(pid)
            else:
                found.add(pid)
        return found


def start_supervisor(
    dsn: str,
    *,
    spec: str,
    log_path: Path,
    index: int = 0,
    generation: int = 0,
    workers: int = 3,
    lease: float = 3.0,
    poll: float = 0.2,
    grace: float = 1.0,
    limits: dict[str, int] | None = None,
    cron: bool = True,
    env: dict[str, str] | None = None,
    extra: Sequence[str] = (),
) -> SupervisorProcess:
    """A real ``procqueue supervise SPEC`` process, its log in `log_path`."""
    argv = [
        *procqueue_command(),
        "supervise",
        spec,
        "--dsn",
        dsn,
        "--workers",
        str(workers),
        "--lease",
        f"{lease:g}",
        "--poll",
        f"{poll:g}",
        "--grace",
        f"{grace:g}",
        "--log-level",
        "info",
        *extra,
    ]
    for name, limit in (limits or {}).items():
        argv += ["--queue", f"{name}={limit}"]
    if not cron:
        argv.append("--no-cron")
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    full_env.pop("PROCQUEUE_TEST_CLOCK", None)
    log = open(log_path, "ab")  # noqa: SIM115 - closed when the process is reaped
    popen = subprocess.Popen(
        argv, cwd=ROOT, env=full_env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
    )
    return SupervisorProcess(
        index=index,
        generation=generation,
        popen=popen,
        log_path=log_path,
        started_at=time.time(),
        _log=log,
    )
