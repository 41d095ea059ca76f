"""The chaos run: several real supervisors on one database, thousands of
jobs of every kind, and a controller that kills supervisors and children,
drains supervisors, freezes them (SIGSTOP), stalls the database and breaks
database connections, then checks what must still hold. `scripts/chaos.py`
is its command line; `tests/chaos/` runs a bounded version in CI.

Only real processes and real signals. Time is measured, never assumed:
the controller sleeps only for its own cadence, and every wait is for a
condition with a deadline.
"""

from __future__ import annotations

import argparse
import calendar
import contextlib
import functools
import itertools
import json
import math
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from procqueue import JobInfo, JobState, errors
from tests.chaos import cluster, procfs
from tests.chaos import jobs as chaos_jobs
from tests.chaos.batches import BatchPart

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


@dataclass
class Config:
    backend: str = "sqlite"
    minutes: float = 1.0
    jobs: int = 500
    restart_server: bool = False
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


@dataclass
class Record:
    """One line of the side log."""

    id: int
    attempt: int
    pid: int
    event: str
    t: float
    extra: str = ""


def read_side_log(path: Path) -> list[Record]:
    out: list[Record] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split(" ", 5)
        if len(parts) < 5:
            continue  # a torn line cannot happen with O_APPEND; counted by the caller if so
        out.append(
            Record(
                int(parts[0]),
                int(parts[1]),
                int(parts[2]),
                parts[3],
                float(parts[4]),
                parts[5] if len(parts) > 5 else "",
            )
        )
    return out


def kind_of(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def wait_for(
    predicate: Callable[[], Any], *, timeout: float, interval: float = 0.05, what: str = ""
) -> Any:
    """`predicate()`'s first truthy value; TimeoutError naming `what` after `timeout`."""
    give_up = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= give_up:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


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


class Chaos:
    """One chaos run against one database."""

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
        self.db = cluster.Database.create(cfg.backend, self.work)
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
        self.drain_due = False
        self.drain_due_since = 0.0
        self.backlog: list[int] = []
        self.restart_windows: list[tuple[float, float]] = []
        self.stalling = threading.Event()
        """Set from a stall's request to its end: no enqueue, restart, drain,
        supervisor kill or freeze starts meanwhile (see `_stall`)."""
        self.stall_thread: threading.Thread | None = None
        self.stall_windows: list[tuple[float, float]] = []
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

    # -- output -------------------------------------------------------------

    def say(self, text: str) -> None:
        if not self.cfg.quiet:
            print(f"[chaos {time.strftime('%H:%M:%S')}] {text}", flush=True)

    def event(self, kind: str, **detail: Any) -> None:
        with self.lock:
            self.events.append({"t": time.time(), "kind": kind, **detail})

    # -- supervisors --------------------------------------------------------

    def start(self, index: int, *, cron: bool = True) -> cluster.SupervisorProcess:
        gen = next(self.generation)
        sup = cluster.start_supervisor(
            self.db.dsn,
            spec=SPEC,
            log_path=self.work / "logs" / f"sup{index}-gen{gen}.log",
            index=index,
            generation=gen,
            workers=self.cfg.workers,
            lease=self.cfg.lease,
            poll=self.cfg.poll,
            grace=self.cfg.grace,
            limits={LIMITED: self.cfg.limit},
            cron=cron,
            env=self.env,
        )
        with self.lock:
            self.slots[index] = sup
            self.history.append(sup)
        return sup

    def live(self) -> list[cluster.SupervisorProcess]:
        return [s for s in self.slots if s is not None and s.fate == "running"]

    def supervisor_pids(self) -> set[int]:
        with self.lock:
            return {s.pid for s in self.history}

    def check_exits(self) -> None:
        """Notices supervisors that exited on their own: crashes."""
        for sup in list(self.history):
            if sup.fate in ("running", "killed", "stopping") and sup.poll() is not None:
                code = sup.poll()
                if sup.fate == "running":
                    sup.fate = "crashed"
                    sup.ended_at = time.time()
                    sup.exit_code = code
                    text = (
                        f"supervisor {sup.index}.{sup.generation} (pid {sup.pid}) exited "
                        f"by itself with {code}: {sup.log_tail(3)!r}"
                    )
                    self.crashes.append(text)
                    self.say("CRASH " + text)
                elif sup.fate == "killed":
                    sup.exit_code = code

    def restart_dead(self) -> None:
        if self.stalling.is_set():
            # A supervisor's start migrates and publishes queue limits, calls
            # bounded by the store's timeouts: it may give up during a stall.
            # The stall is for supervisors already supervising.
            return
        for index, sup in enumerate(self.slots):
            if sup is None or sup.fate in ("killed", "drained", "crashed"):
                self.start(index)

    def kill_supervisor(self, sup: cluster.SupervisorProcess) -> None:
        kids = sup.children()
        titles = {k: procfs.title(k) for k in kids}
        t = time.time()
        sup.kill()
        sup.fate = "killed"
        sup.ended_at = t
        with self.lock:
            self.death_checks.append(DeathCheck(t=t, supervisor=sup.pid, children=titles))
        self.faults["kill -9 supervisor"] += 1
        held = {procfs.job_in_title(v): k for k, v in titles.items() if procfs.job_in_title(v)}
        self.event("kill_supervisor", pid=sup.pid, children=sorted(kids), held=held)

    def kill_child(self, sup: cluster.SupervisorProcess) -> None:
        kids = [(k, procfs.title(k)) for k in sorted(sup.children())]
        ready = [(k, t) for k, t in kids if t and not t.endswith("starting")]
        busy = [(k, t) for k, t in ready if procfs.job_in_title(t)]
        pool = busy if busy and self.rng.random() < 0.8 else ready
        if not pool:
            return
        pid, title = self.rng.choice(pool)
        # its parent: the supervisor, or the fork server's template that forked it
        if procfs.kill_pid(pid, signal.SIGKILL, expected_parent=procfs.parent(pid)):
            self.faults["kill -9 child"] += 1
            self.event("kill_child", pid=pid, supervisor=sup.pid, job=procfs.job_in_title(title))

    def drain(self, sup: cluster.SupervisorProcess) -> None:
        kids = sup.children()
        titles = {k: procfs.title(k) for k in kids}
        held = {procfs.job_in_title(v): k for k, v in titles.items() if procfs.job_in_title(v)}
        t = time.time()
        sup.terminate()
        sup.fate = "draining"
        sup.drain = {"t": t, "held": {str(j): p for j, p in held.items()}}
        self.faults["SIGTERM (drain)"] += 1
        self.event("drain", pid=sup.pid, held=held)
        threading.Thread(target=self._await_drain, args=(sup,), daemon=True).start()

    def _await_drain(self, sup: cluster.SupervisorProcess) -> None:
        code = sup.wait(timeout=self.cfg.grace + 60)
        t = time.time()
        rows: dict[str, Any] = {}
        for job_id in sup.drain["held"]:
            try:
                info = self.app.get(int(job_id))
                rows[job_id] = (str(info.state), info.attempts)
            except errors.ProcqueueError as exc:
                rows[job_id] = ("unknown", str(exc))
        if code is None:
            sup.kill()
            code = sup.wait(timeout=10)
        sup.drain.update({"exit_code": code, "exited": t, "after": rows})
        sup.exit_code = code
        sup.ended_at = t
        sup.fate = "drained"

    def stop_all(self, *, timeout: float) -> list[tuple[str, int | None]]:
        """SIGTERM to every live supervisor; their exit codes."""
        stopping = [s for s in self.slots if s is not None and s.fate in ("running", "draining")]
        for sup in stopping:
            # before its handlers are installed, SIGTERM would just kill it
            with contextlib.suppress(TimeoutError):
                wait_for(sup.ready, timeout=30, what="a supervisor to start")
            if sup.fate == "running":
                sup.terminate()
                sup.fate = "stopping"
        codes = []
        for sup in stopping:
            code = sup.wait(timeout=timeout) if sup.fate == "stopping" else None
            if sup.fate == "draining":
                wait_for(functools.partial(_drained, sup), timeout=timeout, what="a drain")
                code = sup.exit_code
            if code is None:
                sup.kill()
                sup.wait(timeout=10)
            sup.fate = "stopped" if sup.fate == "stopping" else sup.fate
            sup.exit_code = code
            sup.ended_at = time.time()
            codes.append((f"{sup.index}.{sup.generation}", code))
        return codes

    # -- watchers -------------------------------------------------------------

    def _track(self) -> None:
        """20 times a second: the children of killed supervisors, and orphans."""
        me = os.getpid()
        while not self.stop_threads.wait(0.02):
            now = time.time()
            with self.lock:
                checks = [c for c in self.death_checks if not c.done]
            for check in checks:
                for pid in check.children:
                    if pid not in check.dead_at and not procfs.alive(pid):
                        check.dead_at[pid] = now
                        procfs.reap(pid)
                if len(check.dead_at) == len(check.children) or now - check.t > 10:
                    check.done = True
            sups = self.supervisor_pids()
            for pid in procfs.children(me) - sups:
                if not procfs.alive(pid):
                    procfs.reap(pid)
                    continue
                first, title = self.orphans.setdefault(pid, (now, procfs.title(pid)))
                if "procqueue" not in title:
                    continue  # not ours to judge
                if now - first > CHILD_DEATH_LIMIT_S and pid not in self._reported:
                    self._reported.add(pid)
                    self.orphan_violations.append(f"pid {pid} ({title}) orphaned for > 2 s")

    def _sample(self) -> None:
        """The limited queue's running count, through a connection of our own."""
        app = chaos_jobs.app.using(self.db.dsn)
        started = time.monotonic()
        try:
            while not self.stop_threads.is_set():
                t0 = time.monotonic()
                try:
                    stats = app.stats()
                    queue = stats.get(LIMITED)
                    running = queue.running if queue is not None else 0
                    if self.phase == "chaos":
                        self.backlog.append(sum(q.pending for q in stats.values()))
                    self.samples += 1
                    self.sample_times.append(time.time())
                    self.max_running = max(self.max_running, running)
                    if running > self.cfg.limit:
                        self.over_limit.append((time.time(), running))
                except Exception as exc:
                    self.sample_errors += 1
                    self.sample_error_text = str(exc).splitlines()[0] if str(exc) else repr(exc)
                self.stop_threads.wait(max(0.0, 0.05 - (time.monotonic() - t0)))
        finally:
            self.sampling_s = time.monotonic() - started
            app.close()

    # -- producing ------------------------------------------------------------

    def plan(self) -> list[tuple[str, dict[str, Any], dict[str, Any], str]]:
        """(name, args, options, key) of every job of the run, in enqueue order."""
        rng = random.Random(self.seed + 1)
        kinds = list(KINDS)
        weights = [KINDS[k] for k in kinds]
        serial_keys = [f"s{i}" for i in range(max(4, self.cfg.jobs // 50))]
        out = []
        for n in range(self.cfg.jobs):
            kind = rng.choices(kinds, weights)[0]
            options: dict[str, Any] = {}
            args: dict[str, Any]
            if kind == "short":
                args = {"n": n}
            elif kind == "cpu":
                args = {"n": n, "rounds": rng.randint(20_000, 120_000)}
            elif kind == "oversleep":
                args = {"seconds": 30.0, "cooperative": rng.random() < 0.5}
            elif kind in ("crash", "crash_once"):
                args = {"how": rng.choice(["segv", "exit"])}
            elif kind == "serial":
                key = rng.choice(serial_keys)
                args = {"key": key, "seconds": rng.uniform(0.02, 0.15)}
                options["serial_key"] = key
            elif kind == "limited":
                args = {"limit": self.cfg.limit, "seconds": rng.uniform(0.02, 0.15)}
            elif kind == "slow":
                args = {"seconds": rng.uniform(1.5, 3.0)}
            else:
                args = {"n": n, "seconds": rng.uniform(0.01, 0.05)}
            key = f"chaos:{self.seed}:{n}"
            options["key"] = key
            out.append((J + kind, args, options, key))
        return out

    def enqueue(self, batch: list[tuple[str, dict[str, Any], dict[str, Any], str]]) -> None:
        """Enqueues `batch`, retrying through outages (keys make retries idempotent)."""
        give_up = time.monotonic() + 120
        while True:
            try:
                ids = self.app.enqueue_many([(n, a, o) for n, a, o, _ in batch])
                break
            except errors.StoreError as exc:
                self.enqueue_retries += 1
                if time.monotonic() > give_up:
                    raise RuntimeError(f"could not enqueue for 120 s: {exc}") from None
                time.sleep(0.2)
        for (name, _, _, key), id_ in zip(batch, ids, strict=True):
            self.keys[key] = kind_of(name)
            self.ids[key] = id_

    def all_jobs(self) -> dict[int, JobInfo]:
        give_up = time.monotonic() + 120
        while True:
            try:
                return {i.id: i for i in self.app.jobs(limit=10**7)}
            except errors.StoreError:
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.2)

    # -- the run ----------------------------------------------------------------

    def run(self) -> bool:
        """The whole run; True when every invariant held. The database is
        dropped afterwards (and the work directory removed when all held)
        unless `keep`."""
        ok = False
        try:
            ok = self._run()
        finally:
            self.app.close()
            if not self.cfg.keep:
                self.db.drop()
                if ok:
                    shutil.rmtree(self.work, ignore_errors=True)
        return ok

    def _run(self) -> bool:
        cfg = self.cfg
        self.say(
            f"{cfg.backend}: {cfg.jobs} jobs, {cfg.minutes:g} min of chaos, "
            f"{cfg.supervisors}x{cfg.workers} workers, lease {cfg.lease:g}s, seed {self.seed}, "
            f"work dir {self.work}"
        )
        procfs.set_subreaper()
        self.app.store.migrate(now=self.app.clock.now())
        threads = [
            threading.Thread(target=self._track, name="track", daemon=True),
            threading.Thread(target=self._sample, name="sample", daemon=True),
        ]
        try:
            for t in threads:
                t.start()
            for index in range(cfg.supervisors):
                self.start(index)
            self._chaos()
            self._settle()
            if cfg.orphan_probes:
                self._orphan_probes()
        finally:
            self.stop_threads.set()
            for t in threads:
                t.join(timeout=10)
            for sup in self.history:
                if sup.poll() is None:
                    sup.kill()
                    sup.wait(timeout=10)
        self._analyse()
        if cfg.flood_seconds > 0:
            self.figures["flood"] = flood_check(
                cfg.backend, cfg.flood_seconds, self.work / "flood", say=self.say
            )
            self.invariants.append(
                Invariant(
                    "a child flooding stdout leaves the supervisor's memory bounded",
                    self.figures["flood"]["bounded"],
                    self.figures["flood"]["summary"],
                )
            )
        ok = all(i.ok for i in self.invariants)
        self._print()
        self._write_report(ok)
        return ok

    def _chaos(self) -> None:
        cfg = self.cfg
        duration = cfg.minutes * 60
        plan = self.plan()
        self.phase = "chaos"
        self.batch = BatchPart(self.app, cfg.batch_members, self.say)
        self.batch.enqueue(self.seed, self.enqueue)
        self.t_start = time.time()
        t0 = time.monotonic()
        batches = max(1, min(len(plan), int(duration * 0.7 / 1.0)))
        size = math.ceil(len(plan) / batches) if plan else 1
        schedule = [
            (t0 + i * duration * 0.7 / batches, plan[i * size : (i + 1) * size])
            for i in range(batches)
        ]
        db_faults: list[tuple[float, str]] = []
        if cfg.backend == "postgres":
            db_faults += [
                (t0 + duration * (i + 1) / (cfg.terminations + 1), "terminate")
                for i in range(cfg.terminations)
            ]
            if cfg.restart_server:
                db_faults += [(t0 + duration * f, "restart") for f in (0.3, 0.8)]
            db_faults.sort()
        drains = max(2, round(duration / 15))
        drain_at = [t0 + duration * (i + 1) / (drains + 1) for i in range(drains)]
        # Stalls in the middle of the run (clear of the terminations at 1/3 and
        # 2/3 when there is one), each over before the chaos ends; freezes earlier.
        lo, hi = cfg.stall_seconds
        stall_at = []
        for i in range(cfg.stalls):
            seconds = self.rng.uniform(lo, hi)
            at = min(0.15 + 0.6 * (i + 0.5) / cfg.stalls, max(0.0, 0.9 - seconds / duration))
            stall_at.append((t0 + duration * at, seconds))
        freeze_at = [t0 + duration * 0.8 * (i + 0.25) / cfg.freezes for i in range(cfg.freezes)]
        next_report = t0 + 10
        while True:
            now = time.monotonic()
            if now >= t0 + duration:
                break
            while drain_at and drain_at[0] <= now:
                drain_at.pop(0)
                if not self.drain_due:
                    self.drain_due, self.drain_due_since = True, now
            # During a stall enqueues wait for it (they would hold up the controller).
            while schedule and schedule[0][0] <= now and not self.stalling.is_set():
                batch = schedule.pop(0)[1]
                if batch:
                    self.enqueue(batch)
            while db_faults and db_faults[0][0] <= now:
                self._db_fault(db_faults.pop(0)[1])
            self._thaw(due_only=True)
            quiet = not self.stalling.is_set() and not self.frozen  # one at a time
            if quiet and stall_at and stall_at[0][0] <= now:
                self._start_stall(stall_at.pop(0)[1])
            elif quiet and freeze_at and freeze_at[0] <= now and self._freeze(now - freeze_at[0]):
                freeze_at.pop(0)
            self.check_exits()
            self.restart_dead()
            self._act()
            if now >= next_report:
                next_report = now + 15
                self.say(f"t+{now - t0:.0f}s enqueued {len(self.ids)}, faults {dict(self.faults)}")
            time.sleep(cfg.kill_every * self.rng.uniform(0.5, 1.5))
        if stall_at or freeze_at:
            self.say(f"chaos too short for {len(stall_at)} stalls, {len(freeze_at)} freezes")
        if self.stall_thread is not None:
            self.stall_thread.join()
        while self.frozen:  # each stays stopped as long as planned
            self._thaw(due_only=True)
            time.sleep(0.05)
        for _, batch in schedule:
            if batch:
                self.enqueue(batch)
        self.t_chaos_end = time.time()

    # -- stalls and freezes -------------------------------------------------------

    def _start_stall(self, seconds: float) -> None:
        self.stalling.set()
        self.stall_thread = threading.Thread(
            target=self._stall, args=(seconds,), name="stall", daemon=True
        )
        self.stall_thread.start()

    def _stall(self, seconds: float) -> None:
        """Holds the database for `seconds` (`cluster.Database.stall`). It
        waits first for every supervisor to be supervising (a start is not
        a supervision loop) and for no drain to be under way (a drain's last
        writes are bounded: one during a stall hands back nothing, by design)."""
        try:
            with contextlib.suppress(TimeoutError):
                wait_for(self._quiet_for_stall, timeout=20, interval=0.05, what="a quiet moment")
            requested = time.time()
            held: list[float] = []

            def taken(t: float) -> None:
                held.append(t)
                self.say(f"stalling the database for {seconds:.1f}s")

            released = self.db.stall(seconds, held=taken)
            start = held[0] if held else released
            with self.lock:
                self.stall_windows.append((requested, released))
                self.stall_held.append(released - start)
            self.faults["database stall"] += 1
            self.event("stall", requested=requested, held=start, released=released, seconds=seconds)
            self.say(f"database released after {released - start:.1f}s")
        except Exception as exc:
            self.stall_errors.append(f"{type(exc).__name__}: {exc}")
            self.say(f"stall failed: {exc}")
        finally:
            self.stalling.clear()

    def _quiet_for_stall(self) -> bool:
        sups = [s for s in self.slots if s is not None]
        return all(s.fate != "draining" for s in sups) and all(
            s.ready() for s in sups if s.fate == "running"
        )

    def _freeze(self, late: float) -> bool:
        """SIGSTOPs a supervisor for longer than the lease; False if none fits
        now. Wanted: one running a slow job (1.5-3 s, so it is likely still
        running when the lease could no longer be renewed and its child must
        end it); after 10 s of waiting, one running any job; after 20 s, any."""
        live = [s for s in self.live() if s.ready()]
        if len(live) < 2:
            return False  # another must be there to rescue its jobs
        titles = {s.pid: [procfs.title(k) for k in s.children()] for s in live}
        busy = [s for s in live if any(procfs.job_in_title(t) for t in titles[s.pid])]
        slow = [s for s in busy if any(".slow#" in t for t in titles[s.pid])]
        pool = slow or (busy if late > 10 else []) or (live if late > 20 else [])
        if not pool:
            return False
        sup = self.rng.choice(pool)
        held = {
            procfs.job_in_title(t): k
            for k in sup.children()
            if (t := procfs.title(k)) and procfs.job_in_title(t)
        }
        seconds = (
            self.cfg.freeze_seconds if self.cfg.freeze_seconds is not None else self.cfg.lease + 2
        )
        t = time.time()
        sup.freeze()
        sup.fate = "frozen"
        self.frozen.append((sup, time.monotonic() + seconds, t, held))
        self.faults["SIGSTOP supervisor"] += 1
        self.event("freeze", pid=sup.pid, held=held, seconds=seconds)
        self.say(f"SIGSTOP supervisor {sup.pid} for {seconds:g}s holding jobs {sorted(held)}")
        return True

    def _thaw(self, *, due_only: bool) -> None:
        now = time.monotonic()
        for entry in list(self.frozen):
            sup, thaw_at, t, held = entry
            if due_only and now < thaw_at:
                continue
            sup.thaw()
            if sup.fate == "frozen":
                sup.fate = "running"
            self.frozen.remove(entry)
            t_thaw = time.time()
            self.freeze_windows.append({"pid": sup.pid, "t": t, "thawed": t_thaw, "held": held})
            self.event("thaw", pid=sup.pid, seconds=t_thaw - t)
            self.say(f"SIGCONT supervisor {sup.pid} after {t_thaw - t:.1f}s")

    def _act(self) -> None:
        live = self.live()
        if not live:
            return
        draining = any(s is not None and s.fate == "draining" for s in self.slots)
        r = self.rng.random()
        target = self.rng.choice(live)
        if self.stalling.is_set():
            # Supervisors ride the stall out (none would be restarted meanwhile);
            # their children are still fair game.
            if r < 0.6:
                self.kill_child(target)
        elif self.drain_due and not draining and len(live) >= 2:
            # one running a job longer than the grace, whose job it hands back;
            # any, once none did for 10 s
            ready = [s for s in live if s.ready()]
            holding = [s for s in ready if any(".slow#" in procfs.title(k) for k in s.children())]
            if holding or (ready and time.monotonic() > self.drain_due_since + 10):
                self.drain(self.rng.choice(holding or ready))
                self.drain_due = False
        elif r < 0.40:
            self.kill_supervisor(target)
        elif r < 0.92:
            self.kill_child(target)

    def _db_fault(self, what: str) -> None:
        if what == "terminate":
            n = self.db.terminate_backends()
            self.terminated.append(n)
            self.faults["terminate every procqueue backend"] += 1
            self.event("terminate_backends", count=n)
            self.say(f"terminated {n} procqueue backends")
        else:
            self.say("restarting the PostgreSQL server")
            t0 = time.time()
            procfs.set_subreaper(False)  # the new postmaster must not become our child
            try:
                took = cluster.restart_postgres()
            finally:
                procfs.set_subreaper(True)
            # Leases may expire while the server is away; until the old owner's
            # next renewal its child may still run (docs/guarantees.md, Fencing).
            self.restart_windows.append((t0, time.time() + 2 * self.cfg.lease + 5.0))
            self.restart_seconds.append(took)
            self.faults["PostgreSQL server restart"] += 1
            self.event("restart_server", seconds=took)
            self.say(f"PostgreSQL restarted in {took:.1f}s")

    def _settle(self) -> None:
        """Chaos over: every job must reach a terminal state."""
        cfg = self.cfg
        self.phase = "settle"
        self.say(f"chaos over; settling (up to {cfg.settle_timeout:g}s)")
        t0 = time.monotonic()
        give_up = t0 + cfg.settle_timeout
        while True:
            self.check_exits()
            self.restart_dead()
            infos = self.all_jobs()
            open_ = [
                i for i in infos.values() if i.state not in TERMINAL and kind_of(i.name) != "tick"
            ]
            self._overdue()
            if not open_ or time.monotonic() > give_up:
                break
            time.sleep(0.5)
        self.figures["settle_s"] = round(time.monotonic() - t0, 1)
        self.stop_codes = self.stop_all(timeout=cfg.grace + 45)
        # The last ticks: one supervisor without cron runs whatever is left.
        final = self.start(0, cron=False)
        try:
            wait_for(
                lambda: all(i.state in TERMINAL for i in self.all_jobs().values()),
                timeout=60,
                interval=0.25,
                what="the last jobs",
            )
        except TimeoutError:
            pass
        with contextlib.suppress(TimeoutError):
            wait_for(final.ready, timeout=30, what="the final supervisor to start")
        final.terminate()
        final.fate = "stopping"
        code = final.wait(timeout=cfg.grace + 45)
        final.fate = "stopped"
        self.stop_codes.append((f"{final.index}.{final.generation} (final)", code))
        self.t_settled = time.time()

    def _overdue(self) -> None:
        """How long past its lease a running job has been (supervisors are up)."""
        try:
            rows = self.db.query("SELECT min(lease_until) FROM jobs WHERE state = 'running'", ())
        except Exception:
            return
        oldest = rows[0][0] if rows else None
        if oldest is not None:
            # No rescue can be written while the database is stalled: that
            # time does not count against the supervisors.
            now = time.time()
            late = now - float(oldest) - self.stalled_between(float(oldest), now)
            self.overdue_max = max(self.overdue_max, late)

    def _orphan_probes(self) -> None:
        """Quiet measurement: kill -9 the supervisor holding a job; time until
        another supervisor starts its next attempt."""
        self.phase = "probe"
        times: list[float] = []
        sups = [self.start(i, cron=False) for i in range(2)]
        try:
            self._probe_all(sups, times)
        except (TimeoutError, errors.ProcqueueError) as exc:  # an invariant, not a crash
            self.probe_errors.append(f"probe {len(times) + 1}: {exc}")
            self.say(f"orphan probe: {exc}")
        finally:
            for sup in sups:
                if sup.poll() is None:
                    sup.terminate()
                    sup.fate = "stopping"
                    sup.wait(timeout=30)
                    sup.fate = "stopped"
        self.figures["orphan_probe_s"] = [round(t, 2) for t in times]

    def _probe_all(self, sups: list[cluster.SupervisorProcess], times: list[float]) -> None:
        """The probes, each time appended to `times`; `sups` kept at two."""
        for n in range(self.cfg.orphan_probes):
            job_id = self.app.enqueue(J + "hold", {"seconds": 60.0}, key=f"probe:{n}")
            first = wait_for(
                functools.partial(self._started, job_id, 1), timeout=30, what="the probe"
            )
            owner = next((s for s in sups if first.pid in procfs.children(s.pid)), None)
            if owner is None:
                continue
            t_kill = time.time()
            owner.kill()
            owner.fate = "killed"
            owner.wait(timeout=10)
            second = wait_for(
                functools.partial(self._started, job_id, 2), timeout=30, what="attempt 2"
            )
            times.append(second.t - t_kill)
            self.app.wait(job_id, timeout=30)
            replacement = self.start(owner.index, cron=False)
            sups[sups.index(owner)] = replacement

    def _started(self, job_id: int, attempt: int) -> Record | None:
        for r in read_side_log(self.side_log):
            if r.id == job_id and r.attempt == attempt and r.event == "start":
                return r
        return None

    # -- checking -------------------------------------------------------------

    def stalled_between(self, a: float, b: float) -> float:
        """Seconds of [a, b] during which the database was stalled by us."""
        with self.lock:
            windows = list(self.stall_windows)
        return sum(max(0.0, min(b, e) - max(a, s)) for s, e in windows)

    def excused(self, t: float) -> bool:
        """Whether `t` falls where the database was away for longer than a lease."""
        return any(a <= t <= b for a, b in self.restart_windows)

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.invariants.append(Invariant(name, ok, detail))

    def _analyse(self) -> None:
        self._analyse_jobs()
        batch = getattr(self, "batch", None)
        found = batch.check(self.all_jobs()) if batch is not None else None
        if found is not None:
            self.check(*found)

    def _analyse_jobs(self) -> None:
        cfg = self.cfg
        infos = {
            i: info
            for i, info in self.all_jobs().items()
            if info.key is None or not info.key.startswith("probe:")
        }
        records = [r for r in read_side_log(self.side_log) if r.id in infos]
        by_id: dict[int, list[Record]] = defaultdict(list)
        for r in records:
            by_id[r.id].append(r)
        kinds = {i: kind_of(info.name) for i, info in infos.items()}

        # 1. nothing lost, nothing stuck
        missing = [k for k, id_ in self.ids.items() if id_ not in infos]
        open_ = {i: str(info.state) for i, info in infos.items() if info.state not in TERMINAL}
        lost = len(missing) + len(open_)
        self.check(
            "every job reached a terminal state (none lost, none stuck running)",
            lost == 0,
            f"{len(infos)} jobs, {len(missing)} missing, {len(open_)} not terminal"
            + (f": {dict(list(open_.items())[:10])}" if open_ else ""),
        )
        self.check(
            "no job stayed running long past its lease while supervisors were up",
            self.overdue_max < cfg.lease + 5,
            f"longest seen past its lease during the settle: "
            f"{max(0.0, self.overdue_max - cfg.lease):.1f}s (allowed: 5s for a rescue and a claim)",
        )

        # 2. each kind ends as it must
        wrong = []
        for i, info in infos.items():
            kind = kinds[i]
            want = JobState.FAILED if kind in SHOULD_FAIL else JobState.DONE
            if info.state != want:
                wrong.append(
                    f"{i} {kind} {info.state} after {info.attempts}: {(info.error or '')[:80]!r}"
                )
            elif kind in SHOULD_FAIL and not any(
                words in (info.error or "") for words in FAILURE_WORDS[kind]
            ):
                wrong.append(f"{i} {kind} failed with {(info.error or '')[:80]!r}")
        self.check(
            "every job ended as its kind dictates (done, or failed naming timeout/signal)",
            not wrong,
            f"{len(wrong)} wrong" + (": " + "; ".join(wrong[:8]) if wrong else ""),
        )

        # 3. a done job's recorded attempt is one that ran to its end, and nothing ran after
        not_ran, after_done = [], []
        for i, info in infos.items():
            if info.state != JobState.DONE:
                continue
            ends = {(r.attempt) for r in by_id[i] if r.event == "end"}
            if info.attempts not in ends:
                not_ran.append(f"{i} done at attempt {info.attempts}, ends seen {sorted(ends)}")
            if info.finished_at is not None:
                done_t = info.finished_at.timestamp()
                late = [r for r in by_id[i] if r.event == "start" and r.t > done_t + 0.001]
                if late:
                    after_done.append(
                        f"{i} started attempt {late[0].attempt} "
                        f"{late[0].t - done_t:.2f}s after done"
                    )
        self.check(
            "a done job was recorded by an attempt that ran to its end",
            not not_ran,
            f"{len(not_ran)} violations" + (": " + "; ".join(not_ran[:8]) if not_ran else ""),
        )
        self.check(
            "no job started again after it was recorded done",
            not after_done,
            f"{len(after_done)} violations"
            + (": " + "; ".join(after_done[:8]) if after_done else ""),
        )

        # 4. duplicate attempts
        started: dict[tuple[int, int], set[int]] = defaultdict(set)
        ended: dict[tuple[int, int], set[int]] = defaultdict(set)
        for r in records:
            if r.event == "start":
                started[(r.id, r.attempt)].add(r.pid)
            elif r.event == "end":
                ended[(r.id, r.attempt)].add(r.pid)
        dups = {k: sorted(started[k] & ended[k]) for k in started if len(started[k] & ended[k]) > 1}
        self.check(
            "no attempt (id, attempt) was started by two pids that both ended",
            not dups,
            f"{len(dups)} duplicate attempts"
            + (
                ": " + "; ".join(f"{k}: pids {v}" for k, v in list(dups.items())[:8])
                if dups
                else ""
            ),
        )

        # 5. serial keys never overlapped
        flock_all = [r for r in records if r.event == "overlap"]
        flock_overlaps = [r for r in flock_all if not self.excused(r.t)]
        spans: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
        for i in infos:
            if kinds[i] != "serial":
                continue
            starts = {(r.attempt, r.pid): r for r in by_id[i] if r.event == "start"}
            for r in by_id[i]:
                if r.event == "end" and (r.attempt, r.pid) in starts:
                    spans[r.extra].append((starts[(r.attempt, r.pid)].t, r.t, i))
        interval_overlaps, excused = [], len(flock_all) - len(flock_overlaps)
        for key, runs in spans.items():
            runs.sort()
            latest_end, latest_id = -math.inf, 0
            for start, end, job_id in runs:
                if start < latest_end:
                    if self.excused(start):
                        excused += 1
                    else:
                        interval_overlaps.append(
                            f"{key}: job {job_id} started {latest_end - start:.3f}s before "
                            f"job {latest_id} ended"
                        )
                if end > latest_end:
                    latest_end, latest_id = end, job_id
        serial_runs = sum(len(v) for v in spans.values())
        self.check(
            "no two runs of one serial key overlapped",
            not flock_overlaps and not interval_overlaps,
            f"{serial_runs} completed serial runs over {len(spans)} keys; lock-file overlaps "
            f"{len(flock_overlaps)}, overlapping (start, end) spans {len(interval_overlaps)}"
            + (
                f"; {excused} more while the server restarted (documented limit: a database "
                "lost for longer than the lease)"
                if excused
                else ""
            )
            + (": " + "; ".join(interval_overlaps[:5]) if interval_overlaps else "")
            + (
                ": "
                + "; ".join(
                    f"job {r.id} attempt {r.attempt} key {r.extra} at {r.t:.3f}"
                    for r in flock_overlaps[:5]
                )
                if flock_overlaps
                else ""
            ),
        )
        self.figures["serial_overlaps_during_restarts"] = excused

        # 5b. no two runs of one job overlapped: never excused, not by restarts,
        # stalls or freezes (children end their jobs before their leases run out)
        self._check_overlapping_runs(infos)

        # 6. the queue limit
        # On PostgreSQL a stall's ACCESS EXCLUSIVE lock holds every read of the
        # jobs table too, so nothing can be sampled then: the rate is measured
        # outside the stalls. (On SQLite in WAL mode readers go on: no excuse.)
        sampling_s, samples = self.sampling_s, self.samples
        if cfg.backend == "postgres" and self.stall_windows:
            t_end = max(self.sample_times, default=0.0)
            t_begin = t_end - self.sampling_s
            sampling_s -= self.stalled_between(t_begin, t_end)
            samples = sum(
                1 for t in self.sample_times if not any(a <= t <= b for a, b in self.stall_windows)
            )
        rate = samples / sampling_s if sampling_s > 0 else 0.0
        overlimit_all = [r for r in records if r.event == "overlimit"]
        overlimit = [r for r in overlimit_all if not self.excused(r.t)]
        peak = _peak_concurrency(
            (s.t, e.t)
            for i in infos
            if kinds[i] == "limited"
            for s in by_id[i]
            if s.event == "start" and not self.excused(s.t)
            for e in by_id[i]
            if e.event == "end" and e.pid == s.pid and e.attempt == s.attempt
        )
        self.check(
            f"the {LIMITED} queue never ran more than its limit ({cfg.limit})",
            not self.over_limit and not overlimit and peak <= cfg.limit and rate >= 10,
            f"max running sampled {self.max_running} over {self.samples} samples "
            f"({rate:.0f}/s{' outside stalls' if samples != self.samples else ''}, "
            f"{self.sample_errors} failed while the database was away); "
            f"slot-lock overflows {len(overlimit)}; peak of completed runs {peak}"
            + (
                f"; {len(overlimit_all) - len(overlimit)} slot-lock overflows while the "
                "server restarted (documented limit)"
                if len(overlimit_all) > len(overlimit)
                else ""
            )
            + (f"; over the limit at {self.over_limit[:5]}" if self.over_limit else ""),
        )
        self.figures["queue"] = {
            "limit": cfg.limit,
            "max_running_sampled": self.max_running,
            "samples": self.samples,
            "samples_per_s": round(rate, 1),
            "peak_completed_runs": peak,
        }

        # 7. cron
        ticks = sorted(
            (info.key or "", i, info.state) for i, info in infos.items() if kinds[i] == "tick"
        )
        per_key = Counter(k for k, _, _ in ticks)
        twice = [k for k, n in per_key.items() if n > 1]
        undone = [f"{k} {s}" for k, _, s in ticks if s != JobState.DONE]
        stamps = sorted(_tick_time(k) for k in per_key)
        chaos_ticks = [s for s in stamps if self.t_start + 5 <= s <= self.t_chaos_end]
        missing_ticks = [
            time.strftime("%H:%M:%S", time.gmtime(a + 5))
            for a, b in itertools.pairwise(chaos_ticks)
            if b - a > 5.5
        ]
        self.check(
            "each cron tick was enqueued once and ran (one done job per cron:NAME:TICK)",
            bool(ticks) and not twice and not undone and not missing_ticks,
            f"{len(per_key)} ticks; keys twice {len(twice)}; not done {len(undone)}; "
            f"ticks missing during chaos {missing_ticks[:5]}",
        )

        # 8. children of killed supervisors
        slow: list[str] = []
        worst = 0.0
        for c in self.death_checks:
            for pid, title in c.children.items():
                died = c.dead_at.get(pid)
                if died is None or died - c.t > CHILD_DEATH_LIMIT_S:
                    slow.append(
                        f"pid {pid} ({title}) of supervisor {c.supervisor}: "
                        + ("never seen dead" if died is None else f"{died - c.t:.2f}s")
                    )
                if died is not None:
                    worst = max(worst, died - c.t)
        children_total = sum(len(c.children) for c in self.death_checks)
        self.check(
            "every killed supervisor's children were gone within 2 s",
            not slow and not self.orphan_violations,
            f"{len(self.death_checks)} supervisors killed, {children_total} children tracked, "
            f"slowest death {worst:.3f}s; orphans alive > 2 s: {len(self.orphan_violations)}"
            + (
                ": " + "; ".join((slow + self.orphan_violations)[:5])
                if slow or self.orphan_violations
                else ""
            ),
        )
        self.figures["child_death_max_s"] = round(worst, 3)

        # 9. graceful drains
        drains = [s for s in self.history if s.drain]
        bad_exit = [
            f"{s.index}.{s.generation}: {s.drain.get('exit_code')}"
            for s in drains
            if s.drain.get("exit_code") != 0
        ]
        bad_exit += [f"{n}: {c}" for n, c in self.stop_codes if c != 0]
        spent, handed_back = [], 0
        for s in drains:
            for job_id, pid in s.drain["held"].items():
                i = int(job_id)
                if i not in infos or kinds[i] in SHOULD_FAIL:
                    continue
                run = next((r for r in by_id[i] if r.pid == pid and r.event == "start"), None)
                if run is None or (kinds[i] == "crash_once" and run.attempt == 1):
                    continue
                if any(r.pid == pid and r.event == "end" for r in by_id[i]):
                    continue  # finished within the grace
                handed_back += 1
                # The evidence: the job's next run reuses the attempt number. If that
                # run's claim was lost before the job started (a kill), the row read
                # as the supervisor exited must show the refund instead; that read
                # may come late on a busy machine, so it is second.
                nxt = next(
                    (
                        r
                        for r in sorted(by_id[i], key=lambda r: r.t)
                        if r.event == "start" and r.t > run.t and r.pid != pid
                    ),
                    None,
                )
                state, attempts = s.drain["after"].get(job_id, ("unknown", None))
                row_ok = (state == "pending" and attempts == run.attempt - 1) or (
                    state in ("running", "done") and attempts == run.attempt
                )
                if not (nxt is not None and nxt.attempt == run.attempt) and not row_ok:
                    spent.append(
                        f"job {i} attempt {run.attempt} handed back; next run's attempt "
                        f"{nxt.attempt if nxt else None}; row as the supervisor exited: "
                        f"{state} with {attempts} attempts"
                    )
        self.figures["drains"] = {"during_chaos": len(drains), "jobs_handed_back": handed_back}
        self.check(
            "graceful drains exit 0 and spend no attempt (handed-back jobs keep theirs)",
            not bad_exit and not spent,
            f"{len(drains)} drains during chaos + {len(self.stop_codes)} final stops; "
            f"{handed_back} jobs handed back"
            + (f"; bad exits {bad_exit}" if bad_exit else "")
            + (": " + "; ".join(spent[:5]) if spent else ""),
        )

        if cfg.orphan_probes:
            self.check(
                "each orphan probe ran, and ran again after its supervisor's kill -9",
                not self.probe_errors,
                f"{len(self.figures.get('orphan_probe_s', []))} of {cfg.orphan_probes} probes "
                f"measured" + (": " + "; ".join(self.probe_errors) if self.probe_errors else ""),
            )

        # 10. supervisors never crashed
        self.check(
            "no supervisor exited unless killed or asked to stop",
            not self.crashes,
            f"{len(self.history)} supervisor processes; crashes {len(self.crashes)}"
            + (": " + " | ".join(self.crashes[:3]) if self.crashes else ""),
        )

        # 11. durable steps
        step_bad = []
        for i in infos:
            if kinds[i] != "steps":
                continue
            rs = by_id[i]
            b_at = [r.attempt for r in rs if r.event == "step:b"]
            end_at = [r.attempt for r in rs if r.event == "end"]
            a_at = [r.attempt for r in rs if r.event == "step:a"]
            if b_at and any(a > min(b_at) for a in a_at):
                step_bad.append(f"{i}: step a ran at {a_at} after step b ran at {b_at}")
            if end_at and any(b > min(end_at) for b in b_at):
                step_bad.append(f"{i}: step b ran at {b_at} after the job ended at {end_at}")
            result = infos[i].result
            if infos[i].state == JobState.DONE and (
                not isinstance(result, list) or result[0] not in a_at or result[1] not in b_at
            ):
                step_bad.append(f"{i}: result {result} vs step a at {a_at}, b at {b_at}")
        self.check(
            "a durable step saved once never runs again",
            not step_bad,
            f"{sum(1 for i in infos if kinds[i] == 'steps')} step jobs"
            + (": " + "; ".join(step_bad[:5]) if step_bad else ""),
        )

        # figures
        starts_per_job = Counter(r.id for r in records if r.event == "start")
        by_design = {"crash_once"} | SHOULD_FAIL
        again = [i for i, n in starts_per_job.items() if n > 1]
        again_chaos = [i for i in again if kinds[i] not in by_design or starts_per_job[i] > 2]
        orphan_times = self._orphan_times(by_id)
        self.figures.update(
            {
                "backend": cfg.backend,
                "seed": self.seed,
                "chaos_minutes": cfg.minutes,
                "jobs": len(infos),
                "jobs_by_kind": dict(Counter(kinds.values())),
                "states": dict(Counter(str(i.state) for i in infos.values())),
                "attempts": sum(i.attempts for i in infos.values()),
                "runs_started": sum(starts_per_job.values()),
                "ran_more_than_once": len(again),
                "ran_more_than_once_by_chaos": len(again_chaos),
                "duplicate_attempts": len(dups),
                "lost": lost,
                "faults": dict(self.faults),
                "supervisor_processes": len(self.history),
                "backends_terminated": self.terminated,
                "server_restart_s": [round(x, 1) for x in self.restart_seconds],
                "stalls": {
                    "count": len(self.stall_held),
                    "seconds": [round(x, 1) for x in self.stall_held],
                    "errors": self.stall_errors,
                },
                "freezes": {
                    "count": len(self.freeze_windows),
                    "seconds": [round(w["thawed"] - w["t"], 1) for w in self.freeze_windows],
                    "jobs_held": [len(w["held"]) for w in self.freeze_windows],
                    "held_jobs_run_again_while_frozen": self._rescued_while_frozen(by_id),
                },
                "enqueue_retries": self.enqueue_retries,
                "orphan_rerun_s": orphan_times,
                "pending_during_chaos": {
                    "mean": round(statistics.mean(self.backlog), 1) if self.backlog else None,
                    "max": max(self.backlog, default=None),
                },
            }
        )

    def _rescued_while_frozen(self, by_id: dict[int, list[Record]]) -> int:
        """Jobs a frozen supervisor held that another run started before it was thawed."""
        n = 0
        for w in self.freeze_windows:
            for job_id, pid in w["held"].items():
                rs = by_id.get(job_id, [])
                if any(
                    x.event == "start" and x.pid != pid and w["t"] < x.t < w["thawed"] for x in rs
                ):
                    n += 1
        return n

    def _check_overlapping_runs(self, infos: dict[int, JobInfo]) -> None:
        """Every run holds the flock ``job-<id>`` while it executes: an
        ``overlap-run`` line is a run that started while another run of the
        same job was alive (killed runs included: the kernel drops a dead
        process's locks). Cross-checked with the (start, end) spans of runs
        that recorded both. Probe jobs count too."""
        records = read_side_log(self.side_log)
        by_id: dict[int, list[Record]] = defaultdict(list)
        for r in records:
            by_id[r.id].append(r)
        flagged = [r for r in records if r.event == "overlap-run"]
        spans_checked, crossed = 0, []
        for job_id, rs in by_id.items():
            starts = {(r.attempt, r.pid): r.t for r in rs if r.event == "start"}
            ends = {(r.attempt, r.pid): r.t for r in rs if r.event == "end"}
            spans = sorted((starts[k], ends[k], k) for k in starts if k in ends)
            spans_checked += len(spans)
            latest_end, latest = -math.inf, (0, 0)
            for start, end, k in spans:
                if start < latest_end:
                    crossed.append(
                        f"job {job_id}: attempt {k[0]} (pid {k[1]}) started "
                        f"{latest_end - start:.3f}s before attempt {latest[0]} (pid {latest[1]}) "
                        "ended"
                    )
                if end > latest_end:
                    latest_end, latest = end, k
        details = [self._overlap_story(r, by_id[r.id], infos.get(r.id)) for r in flagged]
        self.figures["overlap_runs"] = len(flagged)
        self.figures["overlap_runs_detail"] = details + crossed
        self.check(
            "no two runs of one job overlapped in time",
            not flagged and not crossed,
            f"{sum(1 for v in by_id.values() if any(r.event == 'start' for r in v))} jobs, "
            f"{sum(1 for r in records if r.event == 'start')} runs; overlap-run lock records "
            f"{len(flagged)}; overlapping (start, end) spans {len(crossed)} of "
            f"{spans_checked} completed runs (nothing excused, restarts and stalls included)"
            + (": " + " || ".join((details + crossed)[:3]) if flagged or crossed else ""),
        )

    def _overlap_story(self, r: Record, rs: list[Record], info: JobInfo | None) -> str:
        """What the side log and the controller saw around an overlap of job `r.id`."""
        lines = [
            f"job {r.id} attempt {r.attempt} (pid {r.pid}) found another run holding its "
            f"lock at {r.t:.3f}"
            + (
                f"; row now {info.state} after {info.attempts} attempts: "
                f"{(info.error or '')[:100]!r}"
                if info is not None
                else ""
            )
        ]
        for x in sorted(rs, key=lambda x: x.t):
            lines.append(f"  {x.t - r.t:+.3f}s attempt {x.attempt} pid {x.pid} {x.event}")
        pids = {x.pid for x in rs}
        with self.lock:
            events = list(self.events)
        for e in events:
            if not r.t - 3 * self.cfg.lease - 25 <= e["t"] <= r.t + 2:
                continue
            mentions = e.get("pid") in pids or r.id in (e.get("held") or {})
            mentions = mentions or e.get("job") == r.id
            if mentions or e["kind"] in ("stall", "freeze", "thaw", "terminate_backends"):
                extra = {k: v for k, v in e.items() if k not in ("t", "kind", "children")}
                lines.append(f"  {e['t'] - r.t:+.3f}s controller: {e['kind']} {extra}")
        return "\n".join(lines)

    def _orphan_times(self, by_id: dict[int, list[Record]]) -> dict[str, Any]:
        """From the chaos: kill -9 of a supervisor to the next start of each job it ran."""
        deltas = []
        for e in self.events:
            if e["kind"] != "kill_supervisor":
                continue
            for job_id, pid in e["held"].items():
                rs = by_id.get(job_id, [])
                if any(r.pid == pid and r.event == "end" and r.t < e["t"] for r in rs):
                    continue
                nxt = [r.t for r in rs if r.event == "start" and r.t > e["t"]]
                if nxt:
                    deltas.append(min(nxt) - e["t"])
        if not deltas:
            return {"n": 0}
        return {
            "n": len(deltas),
            "p50": round(statistics.median(deltas), 2),
            "p95": round(percentile(deltas, 0.95), 2),
            "max": round(max(deltas), 2),
        }

    # -- reporting --------------------------------------------------------------

    def _print(self) -> None:
        f = self.figures
        stalls, freezes = f.get("stalls", {}), f.get("freezes", {})
        lines = [
            "",
            f"== chaos run on {self.cfg.backend} (seed {self.seed}) ==",
            f"faults injected: {f.get('faults')}",
            f"jobs: {f.get('jobs')} {f.get('jobs_by_kind')}  states: {f.get('states')}",
            f"attempts: {f.get('attempts')}  runs started: {f.get('runs_started')}",
            f"ran more than once (allowed): {f.get('ran_more_than_once')} "
            f"({f.get('ran_more_than_once_by_chaos')} because of the chaos)",
            f"duplicate attempts: {f.get('duplicate_attempts')}  lost (must be 0): {f.get('lost')}",
            f"queue concurrency: {f.get('queue')}",
            f"orphaned job ran again after (chaos): {f.get('orphan_rerun_s')}; pending "
            f"jobs during the chaos {f.get('pending_during_chaos')} (a rescued job queues "
            "behind them)",
            f"orphaned job ran again after (quiet probe, lease {self.cfg.lease:g}s): "
            f"{f.get('orphan_probe_s')}",
            f"slowest child death after its supervisor's kill -9: {f.get('child_death_max_s')}s",
            f"database stalls: {stalls.get('count')} (held {stalls.get('seconds')}s)"
            + (f" errors {stalls['errors']}" if stalls.get("errors") else ""),
            f"frozen supervisors (SIGSTOP): {freezes.get('count')} ({freezes.get('seconds')}s, "
            f"jobs held {freezes.get('jobs_held')}, run again elsewhere while frozen "
            f"{freezes.get('held_jobs_run_again_while_frozen')})",
            f"overlap-run records (must be 0): {f.get('overlap_runs')}",
            f"settled in {f.get('settle_s')}s after the chaos",
        ]
        if "flood" in f:
            lines.append(f"flood: {f['flood']['summary']}")
        lines.append("")
        for inv in self.invariants:
            lines.append(f"[{'PASS' if inv.ok else 'FAIL'}] {inv.name}\n       {inv.detail}")
        if not self.cfg.quiet:
            print("\n".join(lines), flush=True)

    def _write_report(self, ok: bool) -> None:
        if not self.cfg.report:
            return
        doc = {
            "ok": ok,
            "config": asdict(self.cfg),
            "figures": self.figures,
            "invariants": [asdict(i) for i in self.invariants],
            "work": str(self.work),
        }
        Path(self.cfg.report).write_text(json.dumps(doc, indent=2, default=str))


def _drained(sup: cluster.SupervisorProcess) -> bool:
    return sup.fate == "drained"


def _tick_time(key: str) -> float:
    """The tick of a ``cron:NAME:2024-05-01T12:00:05Z`` key, as UNIX seconds."""
    text = ":".join(key.rsplit(":", 3)[-3:])
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


def _peak_concurrency(spans: Iterable[tuple[float, float]]) -> int:
    events = sorted(itertools.chain.from_iterable(((s, 1), (e, -1)) for s, e in spans))
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


# -- a child flooding its output ---------------------------------------------------


def flood_check(
    backend: str, seconds: float, folder: Path, say: Callable[[str], None] = print
) -> dict[str, Any]:
    """One supervisor whose children flood stdout (lines, and no newlines at all)
    for `seconds`; its RSS sampled from /proc. Returns the figures."""
    from tests.chaos import hostile

    folder.mkdir(parents=True, exist_ok=True)
    db = cluster.Database.create(backend, folder)
    app = hostile.app.using(db.dsn)
    app.store.migrate(now=app.clock.now())
    sup = cluster.start_supervisor(
        db.dsn, spec="tests.chaos.hostile", log_path=folder / "flood.log", workers=3, lease=10
    )
    try:
        warm = app.enqueue("tests.chaos.hostile.echo", {"value": "warm"})
        app.wait(warm, timeout=60)
        baseline = procfs.status_kb(sup.pid, "VmRSS") or 0
        say(f"flood: supervisor pid {sup.pid} RSS {baseline / 1024:.1f} MB before")
        floods = [
            app.enqueue("tests.chaos.hostile.flood", {"seconds": seconds, "newlines": nl})
            for nl in (True, False)
        ]
        rss: list[int] = []
        latencies: list[float] = []
        end = time.monotonic() + seconds
        next_probe = time.monotonic()
        while time.monotonic() < end + 1:
            kb = procfs.status_kb(sup.pid, "VmRSS")
            if kb is not None:
                rss.append(kb)
            if time.monotonic() >= next_probe:
                next_probe = time.monotonic() + 1.0
                t0 = time.monotonic()
                probe = app.enqueue("tests.chaos.hostile.echo", {"value": 1})
                app.wait(probe, timeout=30)
                latencies.append(time.monotonic() - t0)
            time.sleep(0.1)
        results = [app.wait(i, timeout=60) for i in floods]
        peak = procfs.status_kb(sup.pid, "VmHWM") or 0
        after = procfs.status_kb(sup.pid, "VmRSS") or 0
    finally:
        sup.terminate()
        sup.wait(timeout=30)
        app.close()
        db.drop()
    log_bytes = (folder / "flood.log").stat().st_size
    bytes_out = [r.result for r in results]
    growth_mb = (peak - baseline) / 1024
    bounded = growth_mb < 64 and all(r.state == JobState.DONE for r in results)
    written = ", ".join(f"{b / 1e9:.2f} GB" for b in bytes_out if isinstance(b, int))
    summary = (
        f"{seconds:g}s of flooding ({written} written); supervisor RSS "
        f"{baseline / 1024:.1f} MB before, peak {peak / 1024:.1f} MB "
        f"(VmHWM), {after / 1024:.1f} MB after; log {log_bytes / 1e6:.1f} MB; a short job "
        f"meanwhile took p50 {statistics.median(latencies) if latencies else math.nan:.3f}s, "
        f"max {max(latencies) if latencies else math.nan:.3f}s"
    )
    say("flood: " + summary)
    return {
        "seconds": seconds,
        "rss_before_mb": round(baseline / 1024, 1),
        "rss_peak_mb": round(peak / 1024, 1),
        "rss_after_mb": round(after / 1024, 1),
        "rss_sampled_max_mb": round(max(rss, default=0) / 1024, 1),
        "bytes_written": bytes_out,
        "log_mb": round(log_bytes / 1e6, 1),
        "probe_latency_max_s": round(max(latencies, default=math.nan), 3),
        "bounded": bounded,
        "summary": summary,
    }


# -- command line --------------------------------------------------------------------


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
        help="PostgreSQL: also restart the server twice (only on a machine of your own)",
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
        help="also enqueue N cheap jobs as one batch with completion handlers (issue 15)",
    )
    a = p.parse_args(argv)
    if a.restart_server and a.backend != "postgres":
        p.error("--restart-server needs --backend postgres")
    if a.stalls < 0 or a.freezes < 0:
        p.error("--stalls and --freezes take a count >= 0")
    return Config(
        backend=a.backend,
        minutes=a.minutes,
        jobs=a.jobs,
        restart_server=a.restart_server,
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
    )


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    if cfg.backend == "postgres":
        reason = cluster.postgres_reason()
        if reason is not None:
            print(f"chaos: PostgreSQL unreachable at {cluster.PG_URL}: {reason}", file=sys.stderr)
            return 2
    chaos = Chaos(cfg)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    return 0 if chaos.run() else 1
