"""One chaos run from start to end: supervisors up, jobs enqueued, chaos for the configured
minutes, the settle, the analysis and the report.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time

from scripts.chaoskit.config import TERMINAL
from scripts.chaoskit.faults import Faults
from scripts.chaoskit.flood import flood_check
from scripts.chaoskit.invariants import Invariants
from scripts.chaoskit.report import Report
from scripts.chaoskit.sidelog import kind_of, wait_for
from scripts.chaoskit.state import Invariant
from scripts.chaoskit.supervisors import Supervisors
from scripts.chaoskit.watchers import Watchers
from scripts.chaoskit.workload import Workload
from tests.chaos import procfs


class Chaos(Supervisors, Watchers, Workload, Faults, Invariants, Report):
    """One chaos run against one database: setup, chaos, settle, analysis, report."""

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
            if self.server is not None:
                self.server.stop()
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
                cfg.backend, cfg.flood_seconds, self.work / "flood", url=self.db.url, say=self.say
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
            if time.monotonic() > give_up:
                break
            # bulk-cancelled members are retried until none is left
            if not open_ and not self.bulk.settle_step():
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
