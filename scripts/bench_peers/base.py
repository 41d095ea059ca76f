"""What every system adapter provides to the harness, and the plumbing they share.

An adapter owns one system for one run: it makes a clean state (a fresh
PostgreSQL schema, a flushed Redis database or a fresh SQLite file), starts
the system's workers as separate processes with `slots` worker slots, enqueues
the shared jobs of ``bench_jobs`` (one at a time or in a batch), and stops
everything it started. Workers learn where to write their records from
``$BENCH_DIR``; everything else they need is in constants of their module.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import bench_jobs

SCRIPTS = Path(__file__).resolve().parent.parent
PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_DATABASE = "procqueue_bench"
PG_ADMIN_DSN = f"postgresql://{PG_HOST}:{PG_PORT}/test"
PG_DSN = f"postgresql://{PG_HOST}:{PG_PORT}/{PG_DATABASE}"
REDIS_URL = "redis://127.0.0.1:6379/9"
"""A database number of its own: flushing it touches nobody else's keys."""

Job = dict[str, Any]
"""A job's keyword arguments, e.g. ``{"seq": 3}``."""

SHARED_JOBS: dict[str, Callable[..., None]] = {
    "noop": bench_jobs.noop,
    "gate": bench_jobs.gate,
    "cpu": bench_jobs.cpu,
    "crashy": bench_jobs.crashy,
}
"""The job bodies of the shared workloads by kind; every system knows a kind's
job as ``bench.<kind>``."""


def register_jobs(task: Callable[[str], Callable[[Callable[..., None]], Any]]) -> dict[str, Any]:
    """Registers each shared job body under ``bench.<kind>`` with `task`, a
    system's decorator for a job name (e.g. ``lambda name: app.task(name=name)``);
    returns what the system made of each, by kind."""
    return {kind: task(f"bench.{kind}")(body) for kind, body in SHARED_JOBS.items()}


def bin_path(name: str) -> str:
    """A console script of the interpreter environment running the harness."""
    return str(Path(sys.executable).parent / name)


def pg_conninfo(schema: str) -> str:
    """The benchmark database with `schema` first on the search path."""
    return f"{PG_DSN}?options=-csearch_path%3D{schema}"


def fresh_pg_schema(schema: str) -> None:
    """Drops and recreates `schema` in the benchmark database (created if missing)."""
    import psycopg

    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,)
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{PG_DATABASE}"')
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{schema}"')


def drop_pg_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def flush_redis() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.flushdb()
    finally:
        client.close()


@dataclass
class Adapter:
    """One system under test, for one run (see the module docstring)."""

    bench_dir: Path
    slots: int = 2
    knobs: dict[str, Any] = field(default_factory=dict)
    """This run's configuration, one of ``configs`` (empty: the first)."""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    name: ClassVar[str] = ""
    """Short id used in results (``procqueue-pg``, ``celery``...)."""
    title: ClassVar[str] = ""
    """Human name with the essential configuration."""
    store: ClassVar[str] = ""
    """``postgres``, ``redis`` or ``sqlite``."""
    batch_api: ClassVar[str | None] = None
    """The batch enqueue call used, or None when jobs are sent one by one."""
    packages: ClassVar[tuple[str, ...]] = ()
    """Distributions whose versions are recorded."""
    notes: ClassVar[str] = ""
    workloads: ClassVar[tuple[str, ...] | None] = None
    """The shared workloads this system runs; None: all of them."""
    configs: ClassVar[tuple[dict[str, Any], ...]] = ({},)
    """The configurations ``--sweep`` tries, each a set of the system's knobs; the
    first is its 2-slot configuration (the one a run falls back to without a sweep)."""

    def __post_init__(self) -> None:
        self.knobs = {**self.configs[0], **self.knobs}
        self.slots = self.knobs.get("workers", self.slots)

    @classmethod
    def label(cls, knobs: dict[str, Any]) -> str:
        """The configuration `knobs` in words, as the page names it."""
        return ", ".join(f"{k} {v}" for k, v in knobs.items()) or "as documented"

    def gates(self) -> int:
        """How many gate jobs hold all of the workers' capacity for jobs like them."""
        return self.slots

    @classmethod
    def on_two_slots(cls, knobs: dict[str, Any]) -> dict[str, Any]:
        """`knobs` with the number of worker slots set to 2 (the CPU-heavy and crashy
        workloads are defined for 2 slots on the 2 cores)."""
        return {**knobs, "workers": 2} if "workers" in knobs else dict(knobs)

    # -- lifecycle --------------------------------------------------------

    def setup(self) -> None:
        """Makes the clean state of a run (before any worker starts)."""

    def start(self) -> None:
        """Starts the workers (returns at once; readiness is checked with a job)."""
        raise NotImplementedError

    def close_client(self) -> None:
        """Closes the harness's producer connections."""

    def teardown(self) -> None:
        """Removes the run's state (after the workers stopped)."""

    # -- producing --------------------------------------------------------

    def enqueue(self, kind: str, job: Job) -> None:
        raise NotImplementedError

    def enqueue_batch(self, kind: str, jobs: list[Job]) -> None:
        """Enqueues `jobs` with the system's batch API, or one by one."""
        for job in jobs:
            self.enqueue(kind, job)

    # -- processes ----------------------------------------------------------

    def env(self) -> dict[str, str]:
        paths = [str(SCRIPTS), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        return dict(
            os.environ,
            BENCH_DIR=str(self.bench_dir),
            PYTHONPATH=os.pathsep.join(paths),
            PYTHONUNBUFFERED="1",
        )

    def spawn(self, argv: list[str], *, env: dict[str, str] | None = None) -> None:
        """Starts one worker process in a new session (so it and its children
        can be stopped together), its output to the run's worker.log."""
        log = (self.bench_dir / "worker.log").open("ab")
        proc = subprocess.Popen(
            argv,
            cwd=self.bench_dir,
            env=env or self.env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)

    def alive(self) -> bool:
        """True while every worker process started is still running."""
        return all(p.poll() is None for p in self.procs)

    def main_pid(self) -> int | None:
        """The pid whose CPU and RSS are measured (procqueue's supervisor)."""
        return None

    def stop(self, grace: float = 8.0) -> None:
        """SIGTERM to each worker's process group, SIGKILL after `grace`."""
        for proc in self.procs:
            _signal_group(proc, signal.SIGTERM)
        give_up = time.monotonic() + grace
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, give_up - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs:
            _signal_group(proc, signal.SIGKILL)  # leftovers of the group too
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()


@dataclass
class RedisAdapter(Adapter):
    """A system on the benchmark's own Redis database, flushed before and after a run."""

    store: ClassVar[str] = "redis"

    def setup(self) -> None:
        flush_redis()

    def teardown(self) -> None:
        flush_redis()


@dataclass
class PgSchemaAdapter(Adapter):
    """A system in a schema of its own in the benchmark database, created fresh for
    a run and dropped after it."""

    store: ClassVar[str] = "postgres"
    schema: ClassVar[str] = ""

    def setup(self) -> None:
        fresh_pg_schema(self.schema)

    def teardown(self) -> None:
        drop_pg_schema(self.schema)


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the session leader's pid is its group id
    except (ProcessLookupError, PermissionError):
        pass
