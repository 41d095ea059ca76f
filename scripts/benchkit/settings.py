"""What a benchmark run is made of: paths, the systems, workloads and extras, the job counts of a
full and a quick run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPTS = ROOT / "scripts"
DEFAULT_VENV = Path("/tmp/procqueue-bench-venv")
PEER_REQUIREMENTS = [
    "procrastinate",
    "pgqueuer[asyncpg]",
    "celery[redis]",
    "rq",
    "huey",
    "redis",
    "matplotlib>=3.8",
    "py-spy",
]
PG_START = "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
REDIS_START = (
    'redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" '
    "--appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log"
)

WORKLOADS = ("throughput_noop", "latency", "cpu_heavy", "crashy")
SYSTEMS = (
    "procqueue-pg",
    "procqueue-sqlite",
    "pgqueuer",
    "procrastinate",
    "celery",
    "rq",
    "huey-redis",
    "huey-pg",
)
PQ_SYSTEMS = ("procqueue-pg", "procqueue-sqlite")
EXTRAS = (
    "cost",
    "scale",
    "prune",
    "cluster",
    "scaling",
    "backlog",
    "pending",
    "storm",
    "long_jobs",
    "fresh_child",
    "profile",
)
"""The procqueue-only parts, run once each after the repetitions (``--extras``)."""
FRESH_CHILD_SYSTEMS = ("procqueue-sqlite",)
CPU_JOB_S = 0.050
CRASH_EVERY = 50  # 2 %


@dataclass(frozen=True)
class Sizes:
    reps: int
    noop_jobs: int
    latency_jobs: int
    latency_budget_s: float
    cpu_jobs: int
    crashy_jobs: int
    drain_timeout_s: float
    stall_s: float
    scaling_workers: tuple[int, ...]
    scaling_jobs: int
    backlog_jobs: int
    backlog_budget_s: float
    backlog_budget_sqlite_s: float
    profile_jobs: int
    storm_jobs: int
    """progress-storm jobs per phase (each ~storm_s), one after the other"""
    storm_s: float
    long_jobs: int
    """1-second jobs on long_children children"""
    long_children: int
    long_job_s: float
    pending_per_child: tuple[int, ...]
    fresh_child_jobs: int
    """no-op drain with --max-jobs-per-child 1"""
    cluster_jobs: int
    """no-op drain by 1 supervisor with 4 children, then by 4 with 1 each"""
    count_pg_transactions: bool = True
    """pg_stat_database before/after each PostgreSQL no-op drain (costs 2.4 s a run)."""


FULL = Sizes(
    reps=3,
    noop_jobs=5000,
    latency_jobs=200,
    latency_budget_s=4.0,
    cpu_jobs=40,
    crashy_jobs=2000,
    drain_timeout_s=15.0,
    stall_s=8.0,
    scaling_workers=(1, 2, 4, 8),
    scaling_jobs=2000,
    backlog_jobs=100_000,
    backlog_budget_s=20.0,
    backlog_budget_sqlite_s=60.0,
    profile_jobs=2000,
    storm_jobs=3,
    storm_s=1.0,
    long_jobs=2000,
    long_children=8,
    long_job_s=1.0,
    pending_per_child=(10, 100, 1000),
    fresh_child_jobs=300,
    cluster_jobs=20_000,
)
QUICK = Sizes(
    reps=1,
    noop_jobs=1000,
    latency_jobs=30,
    latency_budget_s=1.5,
    cpu_jobs=20,
    crashy_jobs=300,
    drain_timeout_s=6.0,
    stall_s=5.0,
    scaling_workers=(1, 2, 4, 8),
    scaling_jobs=300,
    backlog_jobs=10_000,
    backlog_budget_s=5.0,
    backlog_budget_sqlite_s=10.0,
    profile_jobs=400,
    storm_jobs=2,
    storm_s=1.0,
    long_jobs=80,
    long_children=8,
    long_job_s=1.0,
    pending_per_child=(10, 100, 1000),
    fresh_child_jobs=100,
    cluster_jobs=4000,
    count_pg_transactions=False,
)


def say(text: str) -> None:
    print(text, flush=True)
