"""What a chaos run is configured with: the job mix, the kinds that must fail and how, the
limits checked, and Config (the command line's options).
"""

from __future__ import annotations

from dataclasses import dataclass

from procqueue import JobState

SPEC = "tests.chaos.jobs"
J = "tests.chaos.jobs."
LIMITED = "limited"
TERMINAL = {JobState.DONE, JobState.FAILED, JobState.CANCELLED}
CHILD_DEATH_LIMIT_S = 2.0

KINDS: dict[str, float] = {
    "short": 0.28,
    "cpu": 0.14,
    "oversleep": 0.03,
    "crash": 0.04,
    "crash_once": 0.05,
    "serial": 0.16,
    "limited": 0.15,
    "steps": 0.12,
    "slow": 0.05,
}
"""The job mix (weights)."""
SHOULD_FAIL = {"oversleep", "crash"}
"""Kinds whose every attempt fails by design; every other kind must end done."""
FAILURE_WORDS = {
    "oversleep": ("timed out after", "child process killed by SIGKILL", "lost its lease"),
    "crash": ("child process", "lost its lease"),
}
"""What their error must say: their own failure, or the chaos's kill of the last attempt."""
PART_KINDS = {"node"}
"""Kinds whose endings a part of the run checks against its own plan (the workflow's)."""


@dataclass
class Config:
    backend: str = "sqlite"
    minutes: float = 1.0
    jobs: int = 500
    restart_server: bool = False
    private_server: bool = False
    """PostgreSQL: run against a server of the run's own (`tests/chaos/pgserver.py`),
    created for it and removed after, instead of the shared one."""
    seed: int | None = None
    supervisors: int = 3
    workers: int = 3
    lease: float = 3.0
    poll: float = 0.2
    grace: float = 1.0
    limit: int = 2
    kill_every: float = 0.5
    terminations: int = 2
    stalls: int = 0
    """Database stalls: a lock of the harness's own held on the database."""
    stall_seconds: tuple[float, float] = (5.0, 20.0)
    """Length of each stall, drawn uniformly from (min, max)."""
    freezes: int = 0
    """Supervisors SIGSTOPped (then SIGCONTed) while their jobs run."""
    freeze_seconds: float | None = None
    """How long a supervisor stays stopped (None: the lease + 2 s, so its
    jobs' leases lapse and other supervisors rescue them)."""
    settle_timeout: float = 150.0
    orphan_probes: int = 3
    flood_seconds: float = 0.0
    workdir: str | None = None
    keep: bool = False
    report: str | None = None
    quiet: bool = False
    batch_members: int = 0
    workflow_nodes: int = 0
    """Nodes of the chaos workflow (scripts/chaoskit/workflow.py); 0: none."""
    bulk_ops: int = 0
    """Bulk cancels and retries of the batch's members during the chaos (chaoskit/bulk.py)."""
    flow_jobs: int = 0
    """Rate-limited jobs, and as many grouped ones (scripts/chaoskit/flow.py); 0: none."""
