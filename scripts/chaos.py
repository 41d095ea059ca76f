#!/usr/bin/env python3
"""Chaos run for procqueue: real supervisors on one database, killed with
SIGKILL, drained with SIGTERM and cut off from PostgreSQL while thousands
of jobs of every kind run; then the invariants of docs/guarantees.md are
checked and the figures printed (docs/reliability.md records them). The
program is the package scripts/chaoskit; the jobs its supervisors run are
tests/chaos/jobs.py (spec ``tests.chaos.jobs``).

    scripts/chaos.py --backend sqlite --minutes 3
    scripts/chaos.py --backend postgres --minutes 3 [--restart-server]

Exit status: 0 when every invariant held, 1 when one did not, 2 on bad usage.
--restart-server restarts the PostgreSQL server twice: only on a machine
nobody else is testing on.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.chaoskit.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
