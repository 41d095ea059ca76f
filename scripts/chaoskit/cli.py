"""The command line of scripts/chaos.py: options into a Config, one run, the exit status."""

from __future__ import annotations

import argparse
import signal
import sys

from scripts.chaoskit.config import Config
from scripts.chaoskit.run import Chaos
from tests.chaos import cluster


def _seconds_range(text: str) -> tuple[float, float]:
    """``MIN-MAX`` or ``N`` seconds, as (min, max)."""
    try:
        lo, _, hi = text.partition("-")
        low, high = float(lo), float(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not MIN-MAX seconds: {text!r}") from None
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(f"need 0 < MIN <= MAX: {text!r}")
    return (low, high)


def parse_args(argv: list[str] | None) -> Config:
    p = argparse.ArgumentParser(
        prog="scripts/chaos.py",
        description="Chaos run: real supervisors killed, drained and cut off from "
        "their database while thousands of jobs run; then the invariants are checked.",
    )
    p.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--minutes", type=float, default=3.0, help="length of the chaos")
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument(
        "--restart-server",
        action="store_true",
        help="PostgreSQL: also restart the server twice (the shared one only on a machine "
        "of your own; with --private-server, the run's own)",
    )
    p.add_argument(
        "--private-server",
        action="store_true",
        help="PostgreSQL: run against a server of the run's own (initdb into a temporary "
        "folder, a free port from 5499, removed afterwards), so that restarts disturb nobody",
    )
    p.add_argument("--seed", type=int)
    p.add_argument("--supervisors", type=int, default=3)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--lease", type=float, default=3.0)
    p.add_argument(
        "--stalls",
        type=int,
        default=2,
        help="database stalls: SQLite, BEGIN EXCLUSIVE held on the file; PostgreSQL, "
        "ACCESS EXCLUSIVE lock on the jobs table in an open transaction (default 2)",
    )
    p.add_argument(
        "--stall-seconds",
        type=_seconds_range,
        default=(5.0, 20.0),
        metavar="MIN-MAX",
        help="length of each stall, drawn from MIN-MAX seconds (or one number; default 5-20)",
    )
    p.add_argument(
        "--freezes",
        type=int,
        default=2,
        help="supervisors SIGSTOPped while they hold jobs, then SIGCONTed (default 2)",
    )
    p.add_argument(
        "--freeze-seconds",
        type=float,
        help="how long each stays stopped (default: the lease + 2 s, so its leases lapse)",
    )
    p.add_argument("--flood-seconds", type=float, default=60.0, help="0 skips the flood")
    p.add_argument("--orphan-probes", type=int, default=3)
    p.add_argument("--settle-timeout", type=float, default=240.0)
    p.add_argument("--workdir")
    p.add_argument("--keep", action="store_true", help="keep the database and logs")
    p.add_argument("--report", help="write the figures and invariants as JSON here")
    p.add_argument("--quiet", action="store_true")
    p.add_argument(
        "--batch-members",
        type=int,
        default=0,
        metavar="N",
        help="also enqueue N cheap jobs as one batch with completion handlers",
    )
    p.add_argument(
        "--workflow-nodes",
        type=int,
        default=0,
        metavar="N",
        help="also enqueue a workflow of N nodes (chains of diamonds with after=, some "
        "failing for good) as one batch with an on_complete handler",
    )
    p.add_argument(
        "--bulk-ops",
        type=int,
        default=0,
        metavar="N",
        help="with --batch-members: N bulk cancels and retries of the batch's members "
        "(alternating) during the first half of the chaos",
    )
    p.add_argument(
        "--flow-jobs",
        type=int,
        default=0,
        metavar="N",
        help="also enqueue N rate-limited jobs (5/s) and N grouped ones (group_limit=2: one "
        "big tenant's backlog, then small tenants, two with a group rate of 2/s)",
    )
    a = p.parse_args(argv)
    if (a.restart_server or a.private_server) and a.backend != "postgres":
        p.error("--restart-server and --private-server need --backend postgres")
    if a.bulk_ops and a.batch_members <= 0:
        p.error("--bulk-ops needs --batch-members")
    if a.stalls < 0 or a.freezes < 0:
        p.error("--stalls and --freezes take a count >= 0")
    return Config(
        backend=a.backend,
        minutes=a.minutes,
        jobs=a.jobs,
        restart_server=a.restart_server,
        private_server=a.private_server,
        seed=a.seed,
        supervisors=a.supervisors,
        workers=a.workers,
        lease=a.lease,
        stalls=a.stalls,
        stall_seconds=a.stall_seconds,
        freezes=a.freezes,
        freeze_seconds=a.freeze_seconds,
        flood_seconds=a.flood_seconds,
        orphan_probes=a.orphan_probes,
        settle_timeout=a.settle_timeout,
        workdir=a.workdir,
        keep=a.keep,
        report=a.report,
        quiet=a.quiet,
        batch_members=a.batch_members,
        workflow_nodes=a.workflow_nodes,
        bulk_ops=a.bulk_ops,
        flow_jobs=a.flow_jobs,
    )


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    if cfg.backend == "postgres" and not cfg.private_server:
        reason = cluster.postgres_reason()
        if reason is not None:
            print(f"chaos: PostgreSQL unreachable at {cluster.PG_URL}: {reason}", file=sys.stderr)
            return 2
    try:
        chaos = Chaos(cfg)
    except RuntimeError as exc:  # the private server could not be made
        print(f"chaos: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    return 0 if chaos.run() else 1
