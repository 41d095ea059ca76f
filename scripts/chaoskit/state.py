"""A chaos run's state: every list, counter and window the controller, the watchers and the
invariants share.
"""

from __future__ import annotations

import itertools
import random
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.chaoskit.batch import BatchPart
from scripts.chaoskit.bulk import BulkOps
from scripts.chaoskit.config import Config
from scripts.chaoskit.flow import FlowPart
from scripts.chaoskit.workflow import WorkflowPart
from tests.chaos import cluster
from tests.chaos import jobs as chaos_jobs
from tests.chaos.pgserver import PrivateServer


@dataclass
class Invariant:
    name: str
    ok: bool
    detail: str


@dataclass
class DeathCheck:
    """The children of a supervisor killed at `t`, and when each was seen dead."""

    t: float
    supervisor: int
    children: dict[int, str]
    dead_at: dict[int, float] = field(default_factory=dict)
    done: bool = False
    stuck: dict[int, str] = field(default_factory=dict)
    """What /proc said of each child still alive past the limit (`procfs.diagnose`)."""


class ChaosState:
    """What a chaos run knows: its configuration, its database, its supervisors' history, and
    every figure the invariants are checked against.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.seed = cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(10**9)
        self.rng = random.Random(self.seed)
        self.work = Path(cfg.workdir or tempfile.mkdtemp(prefix=f"chaos-{cfg.backend}-"))
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "logs").mkdir(exist_ok=True)
        self.locks = self.work / "locks"
        self.locks.mkdir(exist_ok=True)
        self.side_log = self.work / "side.log"
        self.server = PrivateServer.create() if cfg.private_server else None
        """The run's own PostgreSQL server, if it has one (stopped by `Chaos.run`)."""
        url = self.server.url if self.server is not None else cluster.PG_URL
        self.db = cluster.Database.create(cfg.backend, self.work, url)
        self.env = {
            "PROCQUEUE_CHAOS_LOG": str(self.side_log),
            "PROCQUEUE_CHAOS_LOCKS": str(self.locks),
        }
        self.lock = threading.Lock()
        self.slots: list[cluster.SupervisorProcess | None] = [None] * cfg.supervisors
        self.history: list[cluster.SupervisorProcess] = []
        self.generation = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        self.faults: Counter[str] = Counter()
        self.death_checks: list[DeathCheck] = []
        self.orphans: dict[int, tuple[float, str]] = {}
        self.orphan_violations: list[str] = []
        self.crashes: list[str] = []
        self.keys: dict[str, str] = {}  # key -> kind
        self.ids: dict[str, int] = {}  # key -> id
        self.enqueue_retries = 0
        self.samples = 0
        self.sample_errors = 0
        self.sample_error_text = ""
        self.max_running = 0
        self.over_limit: list[tuple[float, int]] = []
        self.sampling_s = 0.0
        self.overdue_max = 0.0
        self.stop_threads = threading.Event()
        self.phase = "setup"
        self.t_start = 0.0
        self.t_chaos_end = 0.0
        self.t_settled = 0.0
        self.restart_seconds: list[float] = []
        self.terminated: list[int] = []
        self.figures: dict[str, Any] = {}
        self.invariants: list[Invariant] = []
        self.stop_codes: list[tuple[str, int | None]] = []
        self._reported: set[int] = set()
        self.drains_due = 0
        self.drain_due_since = 0.0
        self.backlog: list[int] = []
        self.restart_windows: list[tuple[float, float]] = []
        self.stalling = threading.Event()
        """Set from a stall's request to its end: no enqueue, restart, drain,
        supervisor kill or freeze starts meanwhile (see `_stall`)."""
        self.stall_thread: threading.Thread | None = None
        self.stall_windows: list[tuple[float, float]] = []
        self.db_fault_spans: list[tuple[float, float]] = []
        """When we took the database away (restarts, stalls, broken connections)."""
        """(requested, released) of each stall: from the request on, new
        requests queue behind it."""
        self.stall_held: list[float] = []
        self.stall_errors: list[str] = []
        self.frozen: list[tuple[cluster.SupervisorProcess, float, float, dict[int, int]]] = []
        """(supervisor, monotonic thaw time, time stopped, jobs held -> child pid)."""
        self.freeze_windows: list[dict[str, Any]] = []
        self.sample_times: list[float] = []
        self.probe_errors: list[str] = []
        self.app = chaos_jobs.app.using(self.db.dsn)
        self.batch: BatchPart | None = None
        """The run's batch part, made as the chaos starts."""
        self.bulk = BulkOps(self.app, cfg.bulk_ops, self.say)
        self.workflow: WorkflowPart | None = None
        """The run's workflow part, made as the chaos starts."""
        self.flow = FlowPart(self.app, cfg.flow_jobs, self.say)

    # -- output -------------------------------------------------------------

    def say(self, text: str) -> None:
        if not self.cfg.quiet:
            print(f"[chaos {time.strftime('%H:%M:%S')}] {text}", flush=True)

    def event(self, kind: str, **detail: Any) -> None:
        with self.lock:
            self.events.append({"t": time.time(), "kind": kind, **detail})
