"""What happens to each attempt a supervisor runs: child messages and deaths
turned into outcomes (fenced, batched), timeouts, memory ceilings, progress
and pid writes. Owns the outcomes not yet written."""

from __future__ import annotations

import logging
import random

from procqueue import _clock, config, errors, models, protocol, retry
from procqueue._faults import Faults
from procqueue.dbguard import DbGuard, first_line
from procqueue.metrics import Metrics
from procqueue.pool import Pool, Slot
from procqueue.store.base import Store

log = logging.getLogger("procqueue.supervisor")

_MEMORY_CHECK_S = 0.25
_PID_AFTER_S = 1.0


class Attempts:
    """The attempts running in one supervisor's pool."""

    def __init__(
        self,
        *,
        pool: Pool,
        store: Store,
        db: DbGuard,
        clock: _clock.Clock,
        settings: config.Settings,
        metrics: Metrics,
        faults: Faults | None,
        rng: random.Random,
    ) -> None:
        self.pool = pool
        self.store = store
        self.db = db
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.faults = faults
        self.rng = rng
        self.outcomes: list[models.Outcome] = []
        self.freed = False
        """Set when a slot may have become free: the supervisor claims again."""
        self.counts = {"claimed": 0, "done": 0, "failed": 0, "retried": 0, "cancelled": 0}

    def message(self, slot: Slot, message: protocol.Message) -> None:
        if isinstance(message, protocol.Hello):
            assert slot.child is not None
            if slot.child.ready:  # only a child's first frame may be Hello: job code wrote this
                self.pool.kill(slot, "error", "protocol error: a second Hello", hard=True)
                return
            if message.error is not None:
                raise errors.ConfigError(message.error)
            if message.version != protocol.PROTOCOL_VERSION:
                raise errors.ProtocolError(f"child speaks protocol {message.version}")
            slot.child.ready = True
            self.pool.startup_failures = 0
            self.freed = True
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
                message.text.replace("\x00", "\\x00") if message.text else text,
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
        try:
            saved = self.db(
                self.store.job_save_step,
                id=job.id,
                attempt=job.attempt,
                name=message.name,
                value=message.value,
            )
        except errors.StoreRejected as exc:
            self.pool.kill(
                slot, "error", f"step {message.name!r} could not be saved: {exc}", hard=True
            )
            return
        if saved is None:
            self.pool.kill(slot, "error", f"could not save step {message.name!r}", hard=True)
        elif not saved:
            self.pool.kill(slot, "lease", "lease lost", hard=True)
        else:
            assert slot.child is not None
            slot.child.send(protocol.StepSaved(job_id=job.id, name=message.name))

    def _finish(self, slot: Slot, outcome: models.Outcome) -> None:
        assert slot.job is not None
        # The child flushed its output before replying: log it under this job.
        self.pool.relay_output(slot)
        self.record(slot.job, slot, outcome)
        self.pool.finished_job(slot)
        self.freed = True

    def record(self, job: models.ClaimedJob, slot: Slot, outcome: models.Outcome) -> None:
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
                first_line(outcome.error),
            )
        elif event == "handed_back":
            log.info("job %d handed back (attempt %d not spent)", job.id, job.attempt)
        else:
            log.info("job %d %s: %s", job.id, event, first_line(outcome.error))
        self.outcomes.append(outcome)

    def reap(self) -> None:
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
            self.freed = True
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
            self.record(job, slot, outcome)

    def enforce_limits(self, now: float) -> None:
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

    def note_pids(self, now: float) -> None:
        """Writes the child's pid of jobs that report progress or run over a
        second (for operators); short jobs never pay for it."""
        for slot in self.pool.busy():
            job, child = slot.job, slot.child
            if job is None or child is None or slot.pid_written or slot.kill_reason is not None:
                continue
            long_running = now - slot.started >= _PID_AFTER_S or slot.progress is not None
            if not long_running or not self.db.ok(now):
                continue
            slot.pid_written = True
            if (
                self.db(self.store.job_set_pid, id=job.id, attempt=job.attempt, pid=child.pid)
                is False
            ):
                self.pool.kill(slot, "lease", "lease lost", hard=True)

    def flush_progress(self, now: float) -> None:
        for slot in self.pool.busy():
            job = slot.job
            if (
                job is None
                or slot.progress is None
                or now - slot.progress_written < self.settings.progress_interval
            ):
                continue
            if not self.db.ok(now):
                return
            text, fraction = slot.progress
            slot.progress = None
            slot.progress_written = now
            if (
                self.db(
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

    def flush(self) -> None:
        """Writes the queued outcomes in one transaction (kept on a database error)."""
        if not self.outcomes:
            return
        batch = list(self.outcomes)
        try:
            lost = self.db(self.store.job_record_many, outcomes=batch, now=self.clock.now())
        except errors.StoreRejected:
            self.flush_each()
            return
        if lost is not None:
            self.recorded(len(batch), lost)

    def flush_each(self) -> None:
        """Writes the queued outcomes one by one, after the database refused a
        batch: an outcome it refuses (a result PostgreSQL can't store) is
        recorded as that attempt's failure instead, so one job's value never
        blocks the others."""
        while self.outcomes:
            outcome = self.outcomes[0]
            try:
                lost = self.db(self.store.job_record_many, outcomes=[outcome], now=self.clock.now())
            except errors.StoreRejected as exc:
                log.warning("job %d: outcome refused by the database: %s", outcome.id, exc)
                self.outcomes[0] = models.Outcome(
                    id=outcome.id,
                    attempt=outcome.attempt,
                    state=models.JobState.FAILED,
                    error=f"the outcome could not be stored: {exc}",
                )
                continue
            if lost is None:
                return  # the database is away: the rest waits
            self.recorded(1, lost)

    def recorded(self, count: int, lost: list[int]) -> None:
        """The first `count` queued outcomes were written, except `lost` ones
        whose attempt another supervisor owns now."""
        del self.outcomes[:count]
        for id_ in lost:
            log.warning(
                "job %d: outcome not recorded, its lease was lost to another supervisor", id_
            )

    def drop_lost(self, alive: set[tuple[int, int]]) -> None:
        """Forgets unwritten outcomes of attempts this owner no longer holds."""
        kept = [o for o in self.outcomes if (o.id, o.attempt) in alive]
        if len(kept) != len(self.outcomes):
            log.warning(
                "dropped %d outcomes whose leases were lost", len(self.outcomes) - len(kept)
            )
            self.outcomes = kept
