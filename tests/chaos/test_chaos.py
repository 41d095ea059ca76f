"""A bounded chaos run per backend (CI): `scripts/chaos.py` as a real
process, 500 jobs under ~45 s of kill -9s, drains and, on PostgreSQL,
terminated connections (and server restarts when PROCQUEUE_TEST_RESTART_PG=1,
which CI sets because it runs alone). Every invariant of the run must hold."""

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
BATCH_MEMBERS = 300
"""Cheap jobs enqueued as one batch (issue 15), beside the JOBS."""


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
    assert faults.get("kill -9 supervisor", 0) >= 10, faults
    assert faults.get("kill -9 child", 0) >= 10, faults
    assert faults.get("SIGTERM (drain)", 0) >= 2, faults
    assert f["jobs"] >= JOBS, f
    assert f["lost"] == 0
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
