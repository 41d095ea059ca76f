"""The threads that watch while chaos runs: killed supervisors' children until they are gone,
orphaned children, and the limited queue's running count.
"""

from __future__ import annotations

import os
import time

from scripts.chaoskit.config import CHILD_DEATH_LIMIT_S, LIMITED
from scripts.chaoskit.state import ChaosState
from tests.chaos import jobs as chaos_jobs
from tests.chaos import procfs


class Watchers(ChaosState):
    """The threads watching during the run: killed supervisors' children until they are dead,
    and the limited queue's running count.
    """

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
                    elif pid not in check.dead_at and now - check.t > CHILD_DEATH_LIMIT_S:
                        check.stuck.setdefault(pid, procfs.diagnose(pid))
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
                    self.orphan_violations.append(
                        f"pid {pid} ({title}) orphaned for > 2 s: {procfs.diagnose(pid)}"
                    )

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
