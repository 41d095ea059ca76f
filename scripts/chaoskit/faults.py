"""The controller: SIGKILL of supervisors and children, SIGTERM drains, SIGSTOP freezes,
database stalls (a lock held) and broken connections, at the configured rates; never two of
the exclusive ones at once.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time

from scripts.chaoskit import bulk
from scripts.chaoskit.batch import BatchPart
from scripts.chaoskit.sidelog import wait_for
from scripts.chaoskit.state import ChaosState
from scripts.chaoskit.workflow import WorkflowPart
from tests.chaos import cluster, procfs


class Faults(ChaosState):
    """The controller's faults: kills, drains, freezes, database stalls and broken connections,
    at the configured rates.
    """

    def _chaos(self) -> None:
        cfg = self.cfg
        duration = cfg.minutes * 60
        plan = self.plan()
        self.phase = "chaos"
        self.batch = BatchPart(
            self.app, cfg.batch_members, self.say, queue=bulk.QUEUE if cfg.bulk_ops else None
        )
        self.batch.reopens = cfg.bulk_ops > 0
        if cfg.bulk_ops:  # members due until the last bulk operation (first half of the run)
            self.batch.spread_s = duration * 0.5
        self.batch.enqueue(self.seed, self.enqueue)
        self.workflow = WorkflowPart(self.app, cfg.workflow_nodes, self.say)
        self.workflow.enqueue_graph(self.seed, self.enqueue)
        self.flow.enqueue(self.seed, self.enqueue)
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
        # Due in the first 70 % of the run: one comes due while another drains, during a
        # stall or a server restart's recovery, and waits its turn (they are counted).
        drains = max(2, round(duration / 15))
        drain_at = [t0 + duration * 0.7 * (i + 1) / (drains + 1) for i in range(drains)]
        # Stalls in the middle of the run (clear of the terminations at 1/3 and
        # 2/3 when there is one), each over before the chaos ends; freezes earlier.
        lo, hi = cfg.stall_seconds
        stall_at = []
        for i in range(cfg.stalls):
            seconds = self.rng.uniform(lo, hi)
            at = min(0.15 + 0.6 * (i + 0.5) / cfg.stalls, max(0.0, 0.9 - seconds / duration))
            stall_at.append((t0 + duration * at, seconds))
        bulk_at = self.bulk.schedule(t0, duration)
        freeze_at = [t0 + duration * 0.8 * (i + 0.25) / cfg.freezes for i in range(cfg.freezes)]
        next_report = t0 + 10
        while True:
            now = time.monotonic()
            if now >= t0 + duration:
                break
            while drain_at and drain_at[0] <= now:
                drain_at.pop(0)
                if not self.drains_due:
                    self.drain_due_since = now
                self.drains_due += 1
            # During a stall or a freeze enqueues wait for it: a supervisor frozen inside
            # a SQLite transaction holds the file's write lock until it is thawed, and
            # an enqueue waiting here would hold up the thaw itself.
            while (
                schedule
                and schedule[0][0] <= now
                and not self.stalling.is_set()
                and not self.frozen
            ):
                batch = schedule.pop(0)[1]
                if batch:
                    self.enqueue(batch)
            if bulk_at and bulk_at[0][0] <= now and not self.stalling.is_set() and not self.frozen:
                self.bulk.run(bulk_at.pop(0)[1])
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
                self.db_fault_spans.append((requested, released))
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
        elif self.drains_due and not draining and len(live) >= 2 and not self.db_away(time.time()):
            # one running a job longer than the grace, whose job it hands back;
            # any, once none did for 4 s. Not while leases may run out because the
            # database was away (a hand-back written after its lease ran out is late).
            ready = [s for s in live if s.ready()]
            holding = [s for s in ready if any(".slow#" in procfs.title(k) for k in s.children())]
            if holding or (ready and time.monotonic() > self.drain_due_since + 4):
                self.drain(self.rng.choice(holding or ready))
                self.drains_due -= 1
                self.drain_due_since = time.monotonic()
        elif r < 0.40:
            # One that supervises: on a loaded machine (or after a server restart) a
            # start takes seconds, and killing starts alone would leave no supervisor
            # running (nor cron); any that supervises is a fair target.
            supervising = [s for s in live if s.ready()]
            if supervising:
                self.kill_supervisor(target if target.ready() else self.rng.choice(supervising))
        elif r < 0.92:
            self.kill_child(target)

    def _db_fault(self, what: str) -> None:
        if what == "terminate":
            n = self.db.terminate_backends()
            self.terminated.append(n)
            self.db_fault_spans.append((time.time(), time.time()))
            self.faults["terminate every procqueue backend"] += 1
            self.event("terminate_backends", count=n)
            self.say(f"terminated {n} procqueue backends")
        else:
            self.say("restarting the PostgreSQL server")
            t0 = time.time()
            procfs.set_subreaper(False)  # the new postmaster must not become our child
            try:
                took = self.server.restart() if self.server else cluster.restart_postgres()
            finally:
                procfs.set_subreaper(True)
            # Leases may expire while the server is away; until the old owner's
            # next renewal its child may still run (docs/guarantees.md, Fencing).
            self.restart_windows.append((t0, time.time() + 2 * self.cfg.lease + 5.0))
            self.db_fault_spans.append((t0, time.time()))
            self.restart_seconds.append(took)
            self.faults["PostgreSQL server restart"] += 1
            self.event("restart_server", seconds=took)
            self.say(f"PostgreSQL restarted in {took:.1f}s")
