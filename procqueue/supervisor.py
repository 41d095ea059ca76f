"""The supervisor: claims jobs, hands them to children, keeps their leases,
enforces timeouts, cancels and memory ceilings, and records every outcome
fenced by its attempt number.

One thread, one selector: the children's pipes, a self-pipe for wake-ups
and signals, and the database's notification socket when it has one.
"""

from __future__ import annotations

import logging
import os
import random
import secrets
import selectors
import signal
import socket
import threading
from typing import Any

from procqueue import _clock, config, errors, models, protocol, retry
from procqueue import store as store_mod
from procqueue._faults import Faults
from procqueue.app import App
from procqueue.maintenance import Maintenance
from procqueue.metrics import Metrics
from procqueue.pool import Pool, Slot

log = logging.getLogger("procqueue.supervisor")

_MEMORY_CHECK_S = 0.25
_PID_AFTER_S = 1.0
_OUTAGE_BACKOFF_MAX_S = 5.0


class Supervisor:
    """Runs the jobs of `app` (imported from `spec` by each child)."""

    def __init__(
        self,
        app: App,
        *,
        spec: str,
        settings: config.Settings,
        faults: Faults | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.app = app
        self.spec = spec
        self.settings = settings
        self.clock: _clock.Clock = app.clock
        self.faults = faults
        self.rng = rng or random.Random()
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.store = store_mod.open_store(store_mod.resolve_dsn(app.dsn))
        self.selector = selectors.DefaultSelector()
        self.pool = Pool(spec=spec, settings=settings, clock=self.clock, selector=self.selector)
        self.metrics = Metrics()
        self.metrics.children.set(settings.workers)
        self.maintenance = Maintenance(app=app, store=self.store, settings=settings, db=self._db)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stops = 0
        self._outcomes: list[models.Outcome] = []
        self._want_claim = True
        self._draining_until: float | None = None
        self._drain_killed = False
        self._outage_since: float | None = None
        self._retry_db_at = 0.0
        self._outage_backoff = 0.25
        self._listen_fd: int | None = None
        self._busy_title = -1
        self.counts = {"claimed": 0, "done": 0, "failed": 0, "retried": 0, "cancelled": 0}

    # -- control from other threads / signal handlers --------------------

    def wake(self) -> None:
        """Claims as soon as possible (safe from any thread)."""
        if self._wake_w < 0:
            return  # stopped: the descriptor number may belong to another file now
        try:
            os.write(self._wake_w, b"w")
        except (BlockingIOError, OSError):
            pass

    def request_stop(self) -> None:
        """First call drains gracefully; the second stops at once."""
        self._stops += 1
        self.wake()

    # -- the loop -----------------------------------------------------------

    def run(self, *, install_signals: bool = False) -> int:
        """Supervises until stopped; returns the exit code (0 after a drain)."""
        previous = {}
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: self.request_stop())
        # The pool logs every failed reconnect; the supervisor says one line
        # per outage instead (see _db).
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        self.store.migrate()
        for queue, limit in self.settings.limits.items():
            self.store.queue_set_limit(queue=queue, limit=limit)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._listen()
        self.app.on_enqueue(self.wake)
        self.pool.start()
        if self.settings.metrics_port is not None:
            self.metrics.serve(self.settings.metrics_port)
        log.info(
            "supervising %s with %d children (owner %s)",
            self.spec,
            self.settings.workers,
            self.owner,
        )
        now = self.clock.monotonic()
        timers = {
            "claim": now,
            "renew": now + self.settings.lease / 3,
            "maintain": now,
            "cancel": now,
        }
        try:
            while not self._finished():
                self._step(timers)
        finally:
            self._close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        log.info("stopped: %s", ", ".join(f"{k} {v}" for k, v in self.counts.items()))
        return 0

    def _finished(self) -> bool:
        if self._stops and self._draining_until is None:
            self._draining_until = self.clock.monotonic() + self.settings.grace
            log.info(
                "draining: %d running, up to %.1fs", len(self.pool.busy()), self.settings.grace
            )
        if self._draining_until is None:
            return False
        if not self._drain_killed and (
            self._stops > 1 or self.clock.monotonic() >= self._draining_until
        ):
            self._drain_killed = True
            for slot in self.pool.busy():
                self.pool.kill(slot, "drain", "handed back at shutdown", hard=True)
        if self.pool.busy():
            return False
        # Outcomes a database outage holds back get 30 s more; after that
        # their leases expire and the jobs are rescued elsewhere.
        return not self._outcomes or self.clock.monotonic() >= self._draining_until + 30

    def _step(self, timers: dict[str, float]) -> None:
        s = self.settings
        for key, _ in self.selector.select(self._timeout(timers)):
            self._readable(key)
        self._reap()
        self.pool.escalate()
        now = self.clock.monotonic()
        self._enforce_limits(now)
        self._note_pids(now)
        self._flush_progress(now)
        if self._db_ok(now):
            self._flush_outcomes()
        if now >= timers["renew"] and self._db_ok(now):
            timers["renew"] = now + s.lease / 3
            self._renew()
        if now >= timers["cancel"] and self.pool.busy() and self._db_ok(now):
            timers["cancel"] = now + min(s.poll, 1.0)
            self._cancel_requested(self._db(self.store.job_cancel_requested, owner=self.owner))
        if now >= timers["maintain"] and self._db_ok(now):
            timers["maintain"] = now + min(1.0, s.lease / 4)
            if self.maintenance.step(self.clock.now()):
                self._want_claim = True
        if self.maintenance.pruning and self._db_ok(now):
            self.maintenance.prune_batch(self.clock.now())
        claim_due = self._want_claim or now >= timers["claim"]
        if self._draining_until is None and claim_due and self._db_ok(now) and self.pool.idle():
            timers["claim"] = now + s.poll
            self._claim()
        self._title()

    def _timeout(self, timers: dict[str, float]) -> float:
        now = self.clock.monotonic()
        if any(s.dead for s in self.pool.slots):
            return 0.005
        if self._want_claim and self._draining_until is None and self.pool.idle():
            return 0.0
        due = [timers["renew"], timers["maintain"], now + self.settings.poll]
        if self._draining_until is None and self.pool.idle():
            due.append(timers["claim"])
        for slot in self.pool.busy():
            due.append(timers["cancel"])
            if slot.timeout_at is not None:
                due.append(slot.timeout_at)
            if slot.kill_at is not None:
                due.append(slot.kill_at)
            if slot.job is not None and (slot.job.max_memory or slot.progress is not None):
                due.append(now + _MEMORY_CHECK_S)
        if self._draining_until is not None:
            due.append(self._draining_until)
        if self._outcomes or self._outage_since is not None:
            due.append(max(self._retry_db_at, now + 0.01))
        return max(0.0, min(due) - now)

    # -- events -------------------------------------------------------------

    def _readable(self, key: selectors.SelectorKey) -> None:
        if key.data is None:
            if key.fd == self._wake_r:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            else:
                self.store.wake_drain()
                self._listen(force=True)
            self._want_claim = True
            return
        slot, kind = key.data
        child = slot.child
        if child is None:
            return
        now = self.clock.monotonic()
        if kind != "proto":
            if child.relay_output(key.fd, tag=slot.tag, now=now):
                self.selector.unregister(key.fd)
            return
        try:
            messages = child.read_messages()
        except errors.ProtocolError as exc:
            self.pool.kill(slot, "error", f"protocol error: {exc}", hard=True)
            messages = []
        for message in messages:
            self._message(slot, message)
        if child.eof:
            self.selector.unregister(key.fd)
            slot.dead = True

    def _message(self, slot: Slot, message: protocol.Message) -> None:
        if isinstance(message, protocol.Hello):
            if message.error is not None:
                raise errors.ConfigError(message.error)
            if message.version != protocol.PROTOCOL_VERSION:
                raise errors.ProtocolError(f"child speaks protocol {message.version}")
            assert slot.child is not None
            slot.child.ready = True
            self.pool.startup_failures = 0
            self._want_claim = True
            return
        job = slot.job
        if (
            job is None
            or slot.kill_reason is not None
            or getattr(message, "job_id", None) != job.id
        ):
            return  # the attempt's outcome is already decided
        if isinstance(message, protocol.Progress):
            text, fraction = slot.progress or (None, None)
            slot.progress = (
                message.text or text,
                message.fraction if message.fraction is not None else fraction,
            )
        elif isinstance(message, protocol.Step):
            self._save_step(slot, job, message)
        elif isinstance(message, protocol.Done):
            self._finish(
                slot,
                models.Outcome(
                    id=job.id,
                    attempt=job.attempt,
                    state=models.JobState.DONE,
                    result=message.result,
                ),
            )
        elif isinstance(message, protocol.Failed):
            outcome = retry.after_failure(
                job,
                error=message.error,
                permanent=message.kind == "permanent",
                delay=message.delay,
                now=self.clock.now(),
                rng=self.rng,
            )
            self._finish(slot, outcome)

    def _save_step(self, slot: Slot, job: models.ClaimedJob, message: protocol.Step) -> None:
        if self.faults is not None and self.faults.kills(message.name):
            self.pool.kill(
                slot, "error", f"killed by fault injector in step {message.name!r}", hard=True
            )
            return
        saved = self._db(
            self.store.job_save_step,
            id=job.id,
            attempt=job.attempt,
            name=message.name,
            value=message.value,
        )
        if saved is None:
            self.pool.kill(slot, "error", f"could not save step {message.name!r}", hard=True)
        elif not saved:
            self.pool.kill(slot, "lease", "lease lost", hard=True)
        else:
            assert slot.child is not None
            slot.child.send(protocol.StepSaved(job_id=job.id, name=message.name))

    def _finish(self, slot: Slot, outcome: models.Outcome) -> None:
        assert slot.job is not None
        self._record(slot.job, slot, outcome)
        self.pool.finished_job(slot)
        self._want_claim = True

    def _record(self, job: models.ClaimedJob, slot: Slot, outcome: models.Outcome) -> None:
        """Queues `outcome` for the next batch write, and counts and logs it."""
        if outcome.refund:
            event = "handed_back"
        elif outcome.state == models.JobState.PENDING:
            event = "retried"
        else:
            event = outcome.state.value
        if event in self.counts:
            self.counts[event] += 1
        self.metrics.finished.labels(job.queue, job.name, event).inc()
        self.metrics.run_seconds.labels(job.queue, job.name).observe(
            self.clock.monotonic() - slot.started
        )
        if event == "done":
            log.debug("job %d done", job.id)
        elif event == "retried":
            log.info(
                "job %d attempt %d failed, retry in %.1fs: %s",
                job.id,
                job.attempt,
                (outcome.run_at or 0) - self.clock.now(),
                _first_line(outcome.error),
            )
        elif event == "handed_back":
            log.info("job %d handed back (attempt %d not spent)", job.id, job.attempt)
        else:
            log.info("job %d %s: %s", job.id, event, _first_line(outcome.error))
        self._outcomes.append(outcome)

    def _reap(self) -> None:
        for slot in self.pool.slots:
            job, reason, retiring = slot.job, slot.kill_reason, slot.retiring
            died = self.pool.reap(slot)
            if died is None:
                continue
            kind, words = reason or (("recycle" if retiring else "crash"), "")
            self.metrics.restarts.labels(kind).inc()
            slot.job = None
            if job is None:
                continue
            self._want_claim = True
            if kind == "lease":
                self.metrics.leases_lost.inc()
                log.warning("job %d: lease lost, its child was killed", job.id)
                continue
            if kind == "cancel":
                outcome = models.Outcome(
                    id=job.id,
                    attempt=job.attempt,
                    state=models.JobState.CANCELLED,
                    error="cancelled while running",
                )
            elif kind == "drain":
                outcome = models.Outcome(
                    id=job.id,
                    attempt=job.attempt,
                    state=models.JobState.PENDING,
                    run_at=self.clock.now(),
                    refund=True,
                )
            else:
                outcome = retry.after_failure(
                    job,
                    error=died if kind in ("crash", "recycle") else f"{words} ({died})",
                    permanent=False,
                    delay=None,
                    now=self.clock.now(),
                    rng=self.rng,
                )
            self._record(job, slot, outcome)

    def _enforce_limits(self, now: float) -> None:
        for slot in self.pool.busy():
            job = slot.job
            if job is None or slot.kill_reason is not None or slot.child is None:
                continue
            if slot.timeout_at is not None and now >= slot.timeout_at:
                self.pool.kill(slot, "timeout", f"timed out after {job.timeout:g}s")
            elif job.max_memory is not None and now - slot.memory_checked >= _MEMORY_CHECK_S:
                slot.memory_checked = now
                rss = slot.child.rss_mb()
                if rss > job.max_memory:
                    self.pool.kill(
                        slot,
                        "memory",
                        f"exceeded max_memory ({rss:.0f} MB > {job.max_memory} MB)",
                        hard=True,
                    )

    def _note_pids(self, now: float) -> None:
        """Writes the child's pid of jobs running over a second (for operators);
        short jobs never pay for it."""
        for slot in self.pool.busy():
            job, child = slot.job, slot.child
            if job is None or child is None or slot.pid_written or slot.kill_reason is not None:
                continue
            if now - slot.started < _PID_AFTER_S or not self._db_ok(now):
                continue
            slot.pid_written = True
            if (
                self._db(self.store.job_set_pid, id=job.id, attempt=job.attempt, pid=child.pid)
                is False
            ):
                self.pool.kill(slot, "lease", "lease lost", hard=True)

    def _flush_progress(self, now: float) -> None:
        for slot in self.pool.busy():
            job = slot.job
            if (
                job is None
                or slot.progress is None
                or now - slot.progress_written < self.settings.progress_interval
            ):
                continue
            if not self._db_ok(now):
                return
            text, fraction = slot.progress
            slot.progress = None
            slot.progress_written = now
            if (
                self._db(
                    self.store.job_set_progress,
                    id=job.id,
                    attempt=job.attempt,
                    text=text,
                    fraction=fraction,
                )
                is False
            ):
                self.pool.kill(slot, "lease", "lease lost", hard=True)

    # -- database -------------------------------------------------------------

    def _db_ok(self, now: float) -> bool:
        return self._outage_since is None or now >= self._retry_db_at

    def _db(self, fn: Any, **kwargs: Any) -> Any:
        """Calls a store method; on a database error logs one line per outage,
        backs off, and returns None."""
        try:
            result = fn(**kwargs)
        except errors.StoreError as exc:
            now = self.clock.monotonic()
            if self._outage_since is None:
                self._outage_since = now
                log.error("database unavailable, retrying with backoff: %s", _first_line(str(exc)))
            else:
                self._outage_backoff = min(self._outage_backoff * 2, _OUTAGE_BACKOFF_MAX_S)
            self._retry_db_at = now + self._outage_backoff
            return None
        if self._outage_since is not None:
            log.warning("database back after %.1fs", self.clock.monotonic() - self._outage_since)
            self._outage_since = None
            self._outage_backoff = 0.25
            self._listen()
        return result

    def _listen(self, *, force: bool = False) -> None:
        """(Re-)registers the store's wake-up descriptor, which changes when
        the store reconnects; `force` re-registers even the same number."""
        try:
            fd = self.store.wake_fileno()
        except errors.StoreError:
            fd = None
        if fd == self._listen_fd and not force:
            return
        if self._listen_fd is not None:
            try:
                self.selector.unregister(self._listen_fd)
            except (KeyError, ValueError):
                pass
        self._listen_fd = fd
        if fd is not None:
            self.selector.register(fd, selectors.EVENT_READ, None)

    def _flush_outcomes(self) -> None:
        if not self._outcomes:
            return
        batch = self._outcomes
        lost = self._db(self.store.job_record_many, outcomes=batch, now=self.clock.now())
        if lost is None:
            return
        self._outcomes = self._outcomes[len(batch) :]
        for id_ in lost:
            log.warning(
                "job %d: outcome not recorded, its lease was lost to another supervisor", id_
            )

    def _renew(self) -> None:
        renewal = self._db(
            self.store.job_renew_leases,
            owner=self.owner,
            lease_until=self.clock.now() + self.settings.lease,
        )
        if renewal is None:
            return
        self.metrics.renewals.inc()
        for slot in self.pool.busy():
            job = slot.job
            if (
                job is not None
                and (job.id, job.attempt) not in renewal.alive
                and slot.kill_reason is None
            ):
                self.pool.kill(slot, "lease", "lease lost", hard=True)
        kept = [o for o in self._outcomes if (o.id, o.attempt) in renewal.alive]
        if len(kept) != len(self._outcomes):
            log.warning(
                "dropped %d outcomes whose leases were lost", len(self._outcomes) - len(kept)
            )
            self._outcomes = kept
        self._cancel_requested(renewal.cancel_requested)

    def _cancel_requested(self, ids: set[int] | None) -> None:
        for slot in self.pool.busy():
            if ids and slot.job is not None and slot.job.id in ids:
                self.pool.kill(slot, "cancel", "cancelled")

    def _claim(self) -> None:
        idle = self.pool.idle()
        now = self.clock.now()
        jobs = self._db(
            self.store.job_claim,
            owner=self.owner,
            queues=self.settings.queues,
            count=len(idle),
            lease_until=now + self.settings.lease,
            now=now,
        )
        if jobs is None:
            return
        self._want_claim = len(jobs) == len(idle)
        self.counts["claimed"] += len(jobs)
        self.metrics.claim_batch.observe(len(jobs))
        for slot, job in zip(idle, jobs, strict=False):
            log.debug("job %d %s attempt %d -> child %d", job.id, job.name, job.attempt, slot.index)
            self.metrics.claimed.labels(job.queue, job.name).inc()
            self.metrics.wait_seconds.labels(job.queue).observe(max(0.0, now - job.run_at))
            if not self.pool.dispatch(slot, job):
                slot.dead = True

    def _title(self) -> None:
        busy = len(self.pool.busy())
        self.metrics.busy.set(busy)
        if not self.settings.titles or busy == self._busy_title:
            return
        self._busy_title = busy
        try:
            import setproctitle

            setproctitle.setproctitle(
                f"procqueue supervisor {self.spec} {busy}/{self.settings.workers} busy"
            )
        except ImportError:
            pass

    def _close(self) -> None:
        if self._wake_hook_registered():
            self.app._wake_hooks.remove(self.wake)
        for slot in self.pool.busy():
            self.pool.kill(slot, "drain", "supervisor stopped", hard=True)
        self.pool.shutdown(wait=self.settings.kill_grace)
        self._flush_outcomes()
        self.selector.close()
        wake_r, wake_w = self._wake_r, self._wake_w
        self._wake_r = self._wake_w = -1
        os.close(wake_r)
        os.close(wake_w)
        self.store.close()

    def _wake_hook_registered(self) -> bool:
        return self.wake in self.app._wake_hooks


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""
