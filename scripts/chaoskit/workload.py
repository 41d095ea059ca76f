"""The jobs of a run: the planned mix, enqueued through database outages, read back; and the
orphan probes (a job whose supervisor is killed while it runs must run again).
"""

from __future__ import annotations

import functools
import random
import time
from typing import Any

from procqueue import JobInfo, errors
from scripts.chaoskit.config import KINDS, J
from scripts.chaoskit.sidelog import Record, kind_of, read_side_log, wait_for
from scripts.chaoskit.state import ChaosState
from tests.chaos import cluster, procfs


class Workload(ChaosState):
    """The jobs: the planned mix, enqueued through outages, read back, and the orphan probes."""

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

    def enqueue(
        self, batch: list[tuple[str, dict[str, Any], dict[str, Any], str]]
    ) -> dict[str, int]:
        """Enqueues `batch`, retrying through outages (keys make retries
        idempotent); the id of each of its keys."""
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
        return dict(zip((key for _, _, _, key in batch), ids, strict=True))

    def all_jobs(self) -> dict[int, JobInfo]:
        give_up = time.monotonic() + 120
        while True:
            try:
                return {i.id: i for i in self.app.jobs(limit=10**7)}
            except errors.StoreError:
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.2)

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
