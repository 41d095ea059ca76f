"""Supervisors as real separate processes, for tests that kill or race them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_SCRIPT = """
import sys
from procqueue.supervisor import settings as config
from procqueue.producer.app import load_app
from procqueue.supervisor.loop import Supervisor
dsn, spec, workers, lease, limits = sys.argv[1:6]
app = load_app(spec).using(dsn)
queue_limits = dict((k, int(v)) for k, v in (p.split("=") for p in limits.split(",") if p))
settings = config.Settings(
    workers=int(workers), lease=float(lease), poll=0.05, grace=2.0, kill_grace=0.3,
    limits=queue_limits,
)
sys.exit(Supervisor(app, spec=spec, settings=settings).run(install_signals=True))
"""


def start_supervisor(
    dsn: str,
    *,
    spec: str = "tests.jobs.basic",
    workers: int = 2,
    lease: float = 10.0,
    limits: dict[str, int] | None = None,
    clock_file: Path | None = None,
) -> subprocess.Popen[bytes]:
    """A supervisor in its own process (stderr to the test's stderr)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if clock_file is not None:
        env["PROCQUEUE_TEST_CLOCK"] = str(clock_file)
    limit_arg = ",".join(f"{k}={v}" for k, v in (limits or {}).items())
    return subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, dsn, spec, str(workers), str(lease), limit_arg],
        cwd=ROOT,
        env=env,
    )
