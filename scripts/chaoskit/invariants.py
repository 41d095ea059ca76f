"""What must hold after the run, each checked from the database's rows and the side log:
nothing lost, each kind ends as it must, no duplicate or overlapping runs, the queue limit,
cron, children of killed supervisors, drains, durable steps.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter, defaultdict

from procqueue import JobInfo, JobState, errors
from scripts.chaoskit.config import (
    CHILD_DEATH_LIMIT_S,
    FAILURE_WORDS,
    LIMITED,
    PART_KINDS,
    SHOULD_FAIL,
    TERMINAL,
)
from scripts.chaoskit.figures import Evidence, Figures
from scripts.chaoskit.sidelog import (
    Record,
    kind_of,
    peak_concurrency,
    read_side_log,
    tick_time,
)
from scripts.chaoskit.state import Invariant


class Invariants(Figures):
    """The invariants checked after the run, each from the database's rows and the side log of
    the jobs' own records.
    """

    def stalled_between(self, a: float, b: float) -> float:
        """Seconds of [a, b] during which the database was stalled by us."""
        with self.lock:
            windows = list(self.stall_windows)
        return sum(max(0.0, min(b, e) - max(a, s)) for s, e in windows)

    def excused(self, t: float) -> bool:
        """Whether `t` falls where the database was away for longer than a lease."""
        return any(a <= t <= b for a, b in self.restart_windows)

    def db_away(self, a: float, b: float | None = None) -> bool:
        """Whether a lease running in [a, b] (default [a, a]) may have run out because
        we took the database away: a restart, a stall or broken connections, each
        followed by a lease and a reconnection."""
        b = a if b is None else b
        with self.lock:
            spans = list(self.db_fault_spans)
        return any(s <= b and a - self.cfg.lease <= e + 2.0 for s, e in spans)

    def retried(self, id: int) -> bool:
        """Whether job `id` was retried after it ran (a bulk retry resets its
        attempts, so its history repeats an attempt number)."""
        if not self.cfg.bulk_ops:
            return False
        try:
            history = self.app.get(id).history
        except errors.ProcqueueError:
            return False
        numbers = [a.attempt for a in history]
        return len(numbers) != len(set(numbers))

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.invariants.append(Invariant(name, ok, detail))

    def _analyse(self) -> None:
        ev = self._analyse_jobs()
        found = self.batch.check(self.all_jobs()) if self.batch is not None else None
        if found is not None:
            self.check(*found)
        if self.cfg.bulk_ops:
            self.figures["bulk"] = self.bulk.figures()
        for found in self.flow.check(ev.infos, ev.by_id):
            self.check(*found)
        if self.flow.figures:
            self.figures["flow"] = self.flow.figures
        if self.workflow is not None and self.workflow.nodes:
            for found in self.workflow.check_graph(ev.infos, ev.by_id):
                self.check(*found)
            span = self.workflow.span
            with self.lock:
                during = Counter(e["kind"] for e in self.events if span[0] <= e["t"] <= span[1])
            self.figures["workflow"] = {"seconds": round(span[1] - span[0], 1), "faults": during}

    def _analyse_jobs(self) -> Evidence:
        """Every invariant over the jobs, in the order the report lists them;
        the evidence they were checked against."""
        ev = self._evidence()
        lost = self._check_nothing_lost(ev)
        self._check_endings(ev)
        self._check_done_runs(ev)
        dups = self._check_duplicate_attempts(ev)
        self._check_serial_keys(ev)
        self._check_overlapping_runs(ev.infos)
        self._check_queue_limit(ev)
        self._check_cron(ev)
        self._check_children_died()
        self._check_drains(ev)
        self._check_orphan_probes()
        self._check_no_crashes()
        self._check_durable_steps(ev)
        self._record_figures(ev, lost, dups)
        return ev

    def _evidence(self) -> Evidence:
        """The rows of the run's jobs (probes left out) and their side-log records."""
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
        return Evidence(infos, records, by_id, kinds)

    def _check_nothing_lost(self, ev: Evidence) -> int:
        """Nothing lost, nothing stuck: every job enqueued is in the database and
        terminal; returns how many are not."""
        cfg = self.cfg
        infos = ev.infos
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
        return lost

    def _check_endings(self, ev: Evidence) -> None:
        """Each kind ends as it must: done, or failed naming its own failure."""
        infos, kinds = ev.infos, ev.kinds
        wrong = []
        for i, info in infos.items():
            kind = kinds[i]
            if kind in PART_KINDS:
                continue
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

    def _check_done_runs(self, ev: Evidence) -> None:
        """A done job's recorded attempt ran to its end, and nothing ran after it."""
        infos, by_id = ev.infos, ev.by_id
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

    def _check_duplicate_attempts(self, ev: Evidence) -> dict[tuple[int, int], list[int]]:
        """No attempt was run to its end by two processes; returns those that were."""
        records = ev.records
        started: dict[tuple[int, int], set[int]] = defaultdict(set)
        ended: dict[tuple[int, int], set[int]] = defaultdict(set)
        for r in records:
            if r.event == "start":
                started[(r.id, r.attempt)].add(r.pid)
            elif r.event == "end":
                ended[(r.id, r.attempt)].add(r.pid)
        dups = {k: sorted(started[k] & ended[k]) for k in started if len(started[k] & ended[k]) > 1}
        # A retry resets a job's attempts: its next runs reuse the numbers.
        retried = {k for k in dups if self.retried(k[0])}
        dups = {k: v for k, v in dups.items() if k not in retried}
        self.figures["attempt_numbers_reused_after_a_retry"] = len(retried)
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
        return dups

    def _check_serial_keys(self, ev: Evidence) -> None:
        """No two runs of one serial key overlapped (outside a server restart)."""
        infos, records, by_id, kinds = ev.infos, ev.records, ev.by_id, ev.kinds
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

    def _check_queue_limit(self, ev: Evidence) -> None:
        """The limited queue never ran more than its limit, sampled fast enough to tell."""
        cfg = self.cfg
        infos, records, by_id, kinds = ev.infos, ev.records, ev.by_id, ev.kinds
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
        peak = peak_concurrency(
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

    def _check_cron(self, ev: Evidence) -> None:
        """Each cron tick was enqueued once and ran, with none missing during the chaos."""
        infos, kinds = ev.infos, ev.kinds
        ticks = sorted(
            (info.key or "", i, info.state) for i, info in infos.items() if kinds[i] == "tick"
        )
        per_key = Counter(k for k, _, _ in ticks)
        twice = [k for k, n in per_key.items() if n > 1]
        undone = [f"{k} {s}" for k, _, s in ticks if s != JobState.DONE]
        stamps = sorted(tick_time(k) for k in per_key)
        chaos_ticks = [s for s in stamps if self.t_start + 5 <= s <= self.t_chaos_end]
        gaps = [
            a + 5 * n
            for a, b in itertools.pairwise(chaos_ticks)
            for n in range(1, round((b - a) / 5))
        ]
        # A tick is enqueued by a supervisor's chores between it and the next one
        # (a supervisor starting later enqueues only the latest): missing is a
        # fault only if one supervised meanwhile, for several passes of chores
        # (each lease/4; slower on a loaded machine).
        unsupervised = [t for t in gaps if self.supervised_within(t, t + 5) < 3.0]
        missing = [t for t in gaps if t not in unsupervised]
        self.check(
            "each cron tick was enqueued once and ran (one done job per cron:NAME:TICK)",
            bool(ticks) and not twice and not undone and not missing,
            f"{len(per_key)} ticks; keys twice {len(twice)}; not done {len(undone)}; "
            f"ticks missing during chaos while a supervisor supervised {_hms(missing[:5])}"
            + (
                f"; {len(unsupervised)} while none did for 3 s (all killed, starting, frozen "
                f"or without their database): {_hms(unsupervised[:5])}"
                if unsupervised
                else ""
            ),
        )
        self.figures["cron_ticks_missed_unsupervised"] = len(unsupervised)

    def supervised_within(self, a: float, b: float) -> float:
        """The longest time of [a, b] that one supervisor spent supervising
        (started, not yet killed or stopped, not frozen, its database there)."""
        best = 0.0
        for sup in self.history:
            ready = sup.ready_at()
            if ready is None:
                continue
            lo, hi = max(a, ready), min(b, sup.ended_at or time.time())
            if hi <= lo:
                continue
            away = self.stalled_between(lo, hi) + sum(
                max(0.0, min(hi, e) - max(lo, s)) for s, e in self.restart_windows
            )
            away += sum(
                max(0.0, min(hi, f["thawed"]) - max(lo, f["t"]))
                for f in self.freeze_windows
                if f["pid"] == sup.pid
            )
            best = max(best, hi - lo - away)
        return best

    def _check_children_died(self) -> None:
        """Every killed supervisor's children died within the limit; no orphan outlived it."""
        slow: list[str] = []
        worst = 0.0
        for c in self.death_checks:
            for pid, title in c.children.items():
                died = c.dead_at.get(pid)
                if died is None or died - c.t > CHILD_DEATH_LIMIT_S:
                    slow.append(
                        f"pid {pid} ({title}) of supervisor {c.supervisor}: "
                        + ("never seen dead" if died is None else f"{died - c.t:.2f}s")
                        + (f" ({c.stuck[pid]})" if pid in c.stuck else "")
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

    def _check_drains(self, ev: Evidence) -> None:
        """Graceful drains exit 0 and spend no attempt of the jobs they hand back."""
        infos, by_id, kinds = ev.infos, ev.by_id, ev.kinds
        drains = [s for s in self.history if s.drain]
        bad_exit = [
            f"{s.index}.{s.generation}: {s.drain.get('exit_code')}"
            for s in drains
            if s.drain.get("exit_code") != 0
        ]
        bad_exit += [f"{n}: {c}" for n, c in self.stop_codes if c != 0]
        spent, handed_back = [], 0
        late = [  # the database taken away between the signal and the exit: leases may run out
            s for s in drains if self.db_away(s.drain["t"], s.drain.get("exited", s.drain["t"]))
        ]
        for s in drains:
            if s in late:
                continue
            for job_id, pid in s.drain["held"].items():
                i = int(job_id)
                if i not in infos or kinds[i] in SHOULD_FAIL:
                    continue
                run = next((r for r in by_id[i] if r.pid == pid and r.event == "start"), None)
                if run is None or (kinds[i] == "crash_once" and run.attempt == 1):
                    continue
                if self.retried(i):
                    continue  # its attempts were reset since: the numbers prove nothing
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
                    state in ("reserved", "running", "done") and attempts == run.attempt
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
            + (f" ({len(late)} drains overlapped a database fault, not judged)" if late else "")
            + (f"; bad exits {bad_exit}" if bad_exit else "")
            + (": " + "; ".join(spent[:5]) if spent else ""),
        )

    def _check_orphan_probes(self) -> None:
        """Each orphan probe ran, and ran again after its supervisor's kill -9."""
        cfg = self.cfg
        if cfg.orphan_probes:
            self.check(
                "each orphan probe ran, and ran again after its supervisor's kill -9",
                not self.probe_errors,
                f"{len(self.figures.get('orphan_probe_s', []))} of {cfg.orphan_probes} probes "
                f"measured" + (": " + "; ".join(self.probe_errors) if self.probe_errors else ""),
            )

    def _check_no_crashes(self) -> None:
        """No supervisor exited unless killed or asked to stop."""
        self.check(
            "no supervisor exited unless killed or asked to stop",
            not self.crashes,
            f"{len(self.history)} supervisor processes; crashes {len(self.crashes)}"
            + (": " + " | ".join(self.crashes[:3]) if self.crashes else ""),
        )

    def _check_durable_steps(self, ev: Evidence) -> None:
        """A durable step saved once never runs again."""
        infos, by_id, kinds = ev.infos, ev.by_id, ev.kinds
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


def _hms(times: list[float]) -> list[str]:
    return [time.strftime("%H:%M:%S", time.gmtime(t)) for t in times]
