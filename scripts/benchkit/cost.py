"""Where procqueue's time goes (``--extras cost``): per no-op job of a gate-held drain, and
per job enqueued into an idle supervisor, the SQL statements, commits, client sends
(round trips), WAL bytes, protocol frames, and the CPU of the supervisor by thread, of its
children and of its PostgreSQL backends.

The supervisor runs under ``benchkit.counted`` (statement, commit and frame counters, read
with SIGUSR1). Two phases: the first, unobserved but for those counters, gives the counts
and the CPU; the second repeats the drain and the idle jobs with ``strace`` attached to
count the supervisor's waits for its database (``poll`` calls: psycopg waits with poll, the
loop with epoll) and its ``sendto`` calls; strace slows the process, so no CPU is taken
from this phase.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from benchkit.extras import probe
from benchkit.measurement import Tracker, wait_records
from benchkit.settings import Sizes
from benchkit.workloads import hold_slots, one_line, open_gate, running, warm_up

COST_JOBS = 5000
IDLE_JOBS = 100


def _task_cpu_s(pid: int) -> dict[int, float]:
    """Run time of each thread of `pid`, seconds (``/proc/PID/task/*/schedstat``)."""
    out: dict[int, float] = {}
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with (
                contextlib.suppress(OSError, ValueError),
                open(f"/proc/{pid}/task/{task}/schedstat") as f,
            ):
                out[int(task)] = int(f.read().split()[0]) / 1e9
    return out


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids.extend(int(x) for x in f.read().split())
    return kids


def _local_ports(pid: int) -> list[int]:
    """The local TCP ports of `pid`'s sockets (its PostgreSQL connections among them)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class Probe:
    """Snapshots of one supervisor's counters, CPU and (on PostgreSQL) its database's."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.pid = adapter.main_pid()
        self.counts_file = adapter.bench_dir / "counts.json"
        self.pg = None
        if adapter.store == "postgres":
            import psycopg
            from bench_peers import base

            self.pg = psycopg.connect(base.PG_DSN, autocommit=True)

    def close(self) -> None:
        if self.pg is not None:
            self.pg.close()

    def counts(self) -> dict[str, Any]:
        self.counts_file.unlink(missing_ok=True)
        os.kill(self.pid, signal.SIGUSR1)
        give_up = time.monotonic() + 5
        while not self.counts_file.exists():
            if time.monotonic() > give_up:
                raise RuntimeError("the counted supervisor wrote no counts")
            time.sleep(0.005)
        return dict(json.loads(self.counts_file.read_text()))

    def take(self) -> dict[str, Any]:
        snap: dict[str, Any] = {"at": time.monotonic(), **self.counts()}
        snap["threads_cpu"] = _task_cpu_s(self.pid)
        snap["children_cpu"] = sum(sum(_task_cpu_s(kid).values()) for kid in _children(self.pid))
        if self.pg is not None:
            from bench_peers import base

            row = self.pg.execute(
                "SELECT xact_commit, pg_current_wal_lsn() - '0/0'::pg_lsn, "
                "(SELECT array_agg(pid) FROM pg_stat_activity WHERE datname = %s "
                "AND client_port = ANY(%s)) FROM pg_stat_database WHERE datname = %s",
                (base.PG_DATABASE, _local_ports(self.pid), base.PG_DATABASE),
            ).fetchone()
            assert row is not None
            snap["xact_commit"], snap["wal"], backends = int(row[0]), int(row[1]), row[2] or []
            snap["backends_cpu"] = {pid: sum(_task_cpu_s(pid).values()) for pid in backends}
        return snap


def per_job(a: dict[str, Any], b: dict[str, Any], jobs: int, idle_wal_s: float) -> dict[str, Any]:
    """The differences between snapshots `a` and `b`, per job."""
    names = b["threads"]
    cpu = {"main loop": 0.0, "database thread": 0.0, "other threads": 0.0}
    for tid, t in b["threads_cpu"].items():
        spent = t - a["threads_cpu"].get(tid, 0.0)
        name = names.get(str(tid), "")
        key = {"MainThread": "main loop", "procqueue-db": "database thread"}.get(
            name, "other threads"
        )
        cpu[key] += spent
    out: dict[str, Any] = {"jobs": jobs, "seconds": b["at"] - a["at"]}
    for key, spent in cpu.items():
        out[f"supervisor {key} µs"] = spent / jobs * 1e6
    out["supervisor µs"] = sum(cpu.values()) / jobs * 1e6
    out["children µs"] = (b["children_cpu"] - a["children_cpu"]) / jobs * 1e6
    totals: dict[str, int] = {}
    for key, n in b["counts"].items():
        thread, what = key.split("|", 1)
        delta = n - a["counts"].get(key, 0)
        totals[what] = totals.get(what, 0) + delta
        if what == "statements":
            where = "database thread" if thread == "procqueue-db" else "other threads"
            totals[f"statements ({where})"] = totals.get(f"statements ({where})", 0) + delta
    for what, n in totals.items():
        out[what] = n / jobs
    if "xact_commit" in b:
        out["commits"] = (b["xact_commit"] - a["xact_commit"]) / jobs
        # cluster-wide: other sessions of the shared server write WAL too (an upper bound)
        out["WAL bytes"] = (b["wal"] - a["wal"]) / jobs
        out["WAL bytes, others' rate subtracted"] = (
            max(0.0, b["wal"] - a["wal"] - idle_wal_s * out["seconds"]) / jobs
        )
        spent = sum(t - a["backends_cpu"].get(pid, 0.0) for pid, t in b["backends_cpu"].items())
        out["PostgreSQL backends µs"] = spent / jobs * 1e6
    return out


def _gate_closed(adapter: Any, tracker: Tracker, round_: int) -> None:
    """Closes the gate and holds every slot again with gate jobs of round `round_`."""
    import bench_jobs

    (adapter.bench_dir / bench_jobs.GATE_FILE).unlink(missing_ok=True)
    hold_slots(adapter, tracker, first_seq=round_ * 1000)


def _drain(adapter: Any, tracker: Tracker, first: int, n: int, sizes: Sizes) -> None:
    open_gate(adapter)
    waited = wait_records(
        tracker,
        lambda: len(tracker.of("noop", min_seq=first)) >= n,
        adapter=adapter,
        timeout=sizes.drain_timeout_s * 8,
        stall_s=sizes.stall_s,
    )
    if waited.status != "ok":
        raise RuntimeError(f"drain {waited.status}")


def _idle_jobs(adapter: Any, tracker: Tracker, first: int, n: int) -> None:
    rng = random.Random(11)
    for seq in range(first, first + n):
        time.sleep(rng.uniform(0.010, 0.030))
        if probe(adapter, tracker, seq) is None:
            raise RuntimeError("an idle job did not start")
        tracker.records.clear()


def _sends(pid: int, out: Path) -> subprocess.Popen[bytes]:
    spy = subprocess.Popen(
        ["strace", "-f", "-qq", "-e", "trace=sendto,poll", "-p", str(pid), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # attached to every thread
    return spy


def _count_sends(spy: subprocess.Popen[bytes], out: Path, jobs: int) -> dict[str, float]:
    """Per job: the waits for the database (round trips) and the sends."""
    spy.send_signal(signal.SIGINT)
    spy.wait(timeout=30)
    lines = out.read_text().splitlines()
    return {
        "round trips": sum(1 for line in lines if " poll(" in line) / jobs,
        "sends": sum(1 for line in lines if " sendto(" in line) / jobs,
    }


def _round_trips(
    adapter: Any, tracker: Tracker, n: int, idle: int, sizes: Sizes, result: dict[str, Any]
) -> None:
    """The drain and the idle jobs again, under strace: round trips and sends per job."""
    _gate_closed(adapter, tracker, 1)
    adapter.enqueue_batch("noop", [{"seq": 200_000 + i} for i in range(n)])
    trace = adapter.bench_dir / "sendto.txt"
    spy = _sends(adapter.main_pid(), trace)
    _drain(adapter, tracker, 200_000, n, sizes)
    result["drain"].update(_count_sends(spy, trace, n))
    spy = _sends(adapter.main_pid(), trace)
    _idle_jobs(adapter, tracker, 300_000, idle)
    result["idle"].update(_count_sends(spy, trace, idle))


def run_cost(name: str, cls: Any, work_dir: Path, sizes: Sizes) -> dict[str, Any]:
    """The cost table's columns for system `name` (see the module docstring)."""
    n = COST_JOBS if sizes.reps > 1 else 1000
    idle = IDLE_JOBS if sizes.reps > 1 else 30
    result: dict[str, Any] = {"system": name, "jobs": n, "idle_jobs": idle}
    try:
        with running(cls, work_dir, f"{name}-cost", counted=True) as adapter:
            tracker = Tracker(adapter.bench_dir)
            warm_up(adapter, tracker, sizes)
            snap = Probe(adapter)
            try:
                _gate_closed(adapter, tracker, 0)
                adapter.enqueue_batch("noop", [{"seq": i} for i in range(n)])
                time.sleep(1.2)  # the backends report their statistics about once a second
                quiet = snap.take()
                time.sleep(1.0)
                s0 = snap.take()  # WAL written meanwhile by others (the server is shared)
                idle_wal_s = max(0, s0.get("wal", 0) - quiet.get("wal", 0)) / (
                    s0["at"] - quiet["at"]
                )
                _drain(adapter, tracker, 0, n, sizes)
                time.sleep(1.2)
                s1 = snap.take()
                result["drain"] = per_job(s0, s1, n, idle_wal_s)
                _idle_jobs(adapter, tracker, 100_000, idle)
                time.sleep(1.2)
                s2 = snap.take()
                result["idle"] = per_job(s1, s2, idle, idle_wal_s)
                result["status"] = "ok"
                if adapter.store == "postgres":  # SQLite has no sockets: no round trips
                    try:
                        _round_trips(adapter, tracker, n, idle, sizes, result)
                    except Exception as exc:  # the counts above stand without it
                        result["round_trips_error"] = one_line(exc)
            finally:
                snap.close()
    except Exception as exc:
        result.update(status="error", error=one_line(exc))
    return result
