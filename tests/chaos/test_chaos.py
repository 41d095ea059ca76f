"""A bounded chaos run per backend (CI): `scripts/chaos.py` as a real
process, 500 jobs under ~45 s of kill -9s, drains, one database stall of
5-8 s, one supervisor frozen (SIGSTOP) for the lease + 2 s and, on
PostgreSQL, terminated connections (and server restarts when
PROCQUEUE_TEST_RESTART_PG=1, which CI sets because it runs alone). Every
invariant of the run must hold, "no two runs of one job overlap in time"
among them. A shorter run per backend adds a workflow and a batch cancelled
and retried in bulk (docs/reliability.md, "Workflows and everything at
once")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import cluster

ROOT = Path(__file__).resolve().parents[2]
JOBS = 500
MINUTES = 0.75
LEASE = 3.0
STALL_S = (5.0, 8.0)
FREEZE_S = LEASE + 2
BATCH_MEMBERS = 300
"""Cheap jobs enqueued as one batch, beside the JOBS."""


def run_chaos(backend: str, tmp_path: Path, *extra: str) -> dict[str, Any]:
    report = tmp_path / "report.json"
    out = tmp_path / "chaos.out"
    argv = [
        sys.executable,
        str(ROOT / "scripts" / "chaos.py"),
        "--backend",
        backend,
        "--minutes",
        str(MINUTES),
        "--jobs",
        str(JOBS),
        "--lease",
        str(LEASE),
        "--flood-seconds",
        "0",
        "--orphan-probes",
        "1",
        "--stalls",
        "1",
        "--stall-seconds",
        f"{STALL_S[0]:g}-{STALL_S[1]:g}",
        "--freezes",
        "1",
        "--freeze-seconds",
        f"{FREEZE_S:g}",
        "--settle-timeout",
        "120",
        "--workdir",
        str(tmp_path / "work"),
        "--report",
        str(report),
        "--batch-members",
        str(BATCH_MEMBERS),
        *extra,
    ]
    with open(out, "wb") as f:
        code = subprocess.run(argv, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=280)
    text = out.read_text(errors="replace")
    assert report.exists(), f"chaos.py exited {code.returncode} without a report:\n{text[-3000:]}"
    doc: dict[str, Any] = json.loads(report.read_text())
    doc["output"] = text
    doc["exit_code"] = code.returncode
    return doc


def assert_invariants(doc: dict[str, Any]) -> None:
    failed = [f"{i['name']}: {i['detail']}" for i in doc["invariants"] if not i["ok"]]
    assert not failed, "invariants broken:\n" + "\n".join(failed) + "\n" + doc["output"][-2000:]
    assert doc["exit_code"] == 0, doc["output"][-2000:]
    assert len(doc["invariants"]) >= 12
    batch = [i for i in doc["invariants"] if i["name"].startswith("the batch completed once")]
    assert len(batch) == 1 and batch[0]["ok"], batch


def assert_chaos_happened(doc: dict[str, Any]) -> None:
    f = doc["figures"]
    faults = f["faults"]
    # only supervisors that supervise are killed (not ones starting or waiting out a
    # server restart), so a 45 s run on 2 cores reaches 8-15 of them
    assert faults.get("kill -9 supervisor", 0) >= 6, faults
    assert faults.get("kill -9 child", 0) >= 10, faults
    assert faults.get("SIGTERM (drain)", 0) >= 2, faults
    assert f["jobs"] >= JOBS, f
    assert f["lost"] == 0
    assert faults.get("database stall") == 1, faults
    assert all(STALL_S[0] - 0.5 <= s <= STALL_S[1] + 0.5 for s in f["stalls"]["seconds"]), f
    assert faults.get("SIGSTOP supervisor") == 1, faults
    assert all(s >= FREEZE_S for s in f["freezes"]["seconds"]), f
    assert f["overlap_runs"] == 0, f["overlap_runs_detail"]
    assert f["queue"]["max_running_sampled"] <= f["queue"]["limit"]
    assert f["queue"]["samples_per_s"] >= 10
    # an orphaned job runs again about one lease after its supervisor died
    assert f["orphan_probe_s"], f
    assert all(LEASE * 0.5 <= t <= LEASE + 3 for t in f["orphan_probe_s"]), f["orphan_probe_s"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_chaos_sqlite(tmp_path: Path) -> None:
    doc = run_chaos("sqlite", tmp_path)
    assert_invariants(doc)
    assert_chaos_happened(doc)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_chaos_postgres(tmp_path: Path) -> None:
    reason = cluster.postgres_reason()
    if reason is not None:
        if os.environ.get("PROCQUEUE_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL required but unreachable: {reason}")
        pytest.skip(f"no PostgreSQL at {cluster.PG_URL}: {reason}")
    restart = os.environ.get("PROCQUEUE_TEST_RESTART_PG") == "1"
    doc = run_chaos("postgres", tmp_path, *(["--restart-server"] if restart else []))
    assert_invariants(doc)
    assert_chaos_happened(doc)
    faults = doc["figures"]["faults"]
    assert faults.get("terminate every procqueue backend") == 2, faults
    assert all(n >= 1 for n in doc["figures"]["backends_terminated"]), doc["figures"]
    if restart:
        assert faults.get("PostgreSQL server restart") == 2, faults


WORKFLOW_NODES = 200
BULK_OPS = 4


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_chaos_workflow_and_bulk_operations(backend: str, tmp_path: Path) -> None:
    """30 s of chaos (kill -9s, drains, a freeze; on PostgreSQL terminated
    connections, and restarts when PROCQUEUE_TEST_RESTART_PG=1) through a
    workflow of 200 nodes (diamonds, permanent failures, allow_failure) and a
    batch whose members are cancelled and retried in bulk 4 times: every
    invariant holds, the workflow's and the batch's among them."""
    extra = ["--minutes", "0.5", "--jobs", "100", "--stalls", "0", "--orphan-probes", "0"]
    extra += ["--workflow-nodes", str(WORKFLOW_NODES), "--bulk-ops", str(BULK_OPS)]
    if backend == "postgres":
        reason = cluster.postgres_reason()
        if reason is not None:
            if os.environ.get("PROCQUEUE_REQUIRE_POSTGRES") == "1":
                pytest.fail(f"PostgreSQL required but unreachable: {reason}")
            pytest.skip(f"no PostgreSQL at {cluster.PG_URL}: {reason}")
        if os.environ.get("PROCQUEUE_TEST_RESTART_PG") == "1":
            extra.append("--restart-server")
    doc = run_chaos(backend, tmp_path, *extra)
    assert_invariants(doc)
    workflow = [i for i in doc["invariants"] if i["name"].startswith("workflow:")]
    assert len(workflow) == 6 and all(i["ok"] for i in workflow), workflow
    faults = doc["figures"]["faults"]
    # only supervisors that supervise are killed: a loaded machine starts them slowly
    assert faults.get("kill -9 supervisor", 0) >= 2, faults
    bulk = doc["figures"]["bulk"]
    assert bulk["operations"].get("cancel", 0) + bulk["operations"].get("retry", 0) >= 3, bulk
    assert bulk["members_acted_on"].get("cancel", 0) > 0, bulk
