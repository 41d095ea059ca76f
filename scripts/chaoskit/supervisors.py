"""The run's supervisor processes: started, restarted when dead, killed with SIGKILL (their
children then tracked until dead), drained with SIGTERM, stopped at the end.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
import time
from typing import Any

from procqueue import errors
from scripts.chaoskit.config import LIMITED, SPEC
from scripts.chaoskit.sidelog import wait_for
from scripts.chaoskit.state import ChaosState, DeathCheck
from tests.chaos import cluster, procfs


def _drained(sup: cluster.SupervisorProcess) -> bool:
    return sup.fate == "drained"


class Supervisors(ChaosState):
    """Starting, killing, draining and stopping the run's supervisor processes."""

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
