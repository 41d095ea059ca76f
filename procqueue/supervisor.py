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

from procqueue import _clock, config, errors
from procqueue import store as store_mod
from procqueue._faults import Faults
from procqueue.app import App
from procqueue.attempts import Attempts
from procqueue.dbguard import DbGuard
from procqueue.maintenance import Maintenance
from procqueue.metrics import Metrics
from procqueue.pool import Pool

log = logging.getLogger("procqueue.supervisor")

_MEMORY_CHECK_S = 0.25


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
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.store = store_mod.open_store(store_mod.resolve_dsn(app.dsn))
        self.selector = selectors.DefaultSelector()
        self.pool = Pool(spec=spec, settings=settings, clock=self.clock, selector=self.selector)
        self.metrics = Metrics()
        self.metrics.children.set(settings.workers)
        self.db = DbGuard(self.clock, on_recover=self._listen)
        self.attempts = Attempts(
            pool=self.pool,
            store=self.store,
            db=self.db,
            clock=self.clock,
            settings=settings,
            metrics=self.metrics,
            faults=faults,
            rng=rng or random.Random(),
        )
        self.counts = self.attempts.counts
        self.maintenance = Maintenance(app=app, store=self.store, settings=settings, db=self.db)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stops = 0
        self._want_claim = True
        self._draining_until: float | None = None
        self._drain_killed = False
        self._listen_fd: int | None = None
        self._busy_title = -1

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
        self.store.migrate(now=self.clock.now())
        for queue, limit in self.settings.limits.items():
            self.store.queue_set_limit(queue=queue, limit=limit)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._listen()
        self.app.on_enqueue(self.wake)
        self.pool.start()
        if self.settings.metrics_port is not None:
            self.metrics.serve(self.settings.metrics_port, self.settings.metrics_host)
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
        return not self.attempts.outcomes or self.clock.monotonic() >= self._draining_until + 30

    def _step(self, timers: dict[str, float]) -> None:
        s = self.settings
        for key, _ in self.selector.select(self._timeout(timers)):
            self._readable(key)
        self.attempts.reap()
        self.pool.escalate()
        now = self.clock.monotonic()
        self.attempts.enforce_limits(now)
        self.attempts.note_pids(now)
        self.attempts.flush_progress(now)
        if self.attempts.freed:
            self.attempts.freed = False
            self._want_claim = True
        if now >= timers["renew"] and self.db.ok(now):
            timers["renew"] = now + s.lease / 3
            self._renew()
        if now >= timers["cancel"] and self.pool.busy() and self.db.ok(now):
            timers["cancel"] = now + min(s.poll, 1.0)
            self._cancel_requested(self.db(self.store.job_cancel_requested, owner=self.owner))
        if now >= timers["maintain"] and self.db.ok(now):
            timers["maintain"] = now + min(1.0, s.lease / 4)
            if self.maintenance.step(self.clock.now()):
                self._want_claim = True
        if self.maintenance.pruning and self.db.ok(now):
            self.maintenance.prune_batch(self.clock.now())
        claim_due = self._want_claim or now >= timers["claim"]
        if self._draining_until is None and claim_due and self.db.ok(now) and self.pool.idle():
            timers["claim"] = now + s.poll
            self._claim()  # writes the queued outcomes in the same transaction
        elif self.db.ok(now):
            self.attempts.flush()
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
        if self.attempts.outcomes or self.db.down_since is not None:
            due.append(max(self.db.retry_at, now + 0.01))
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
                self._listen()  # a broken listener reconnects under a new number
            self._want_claim = True
            return
        slot, kind = key.data
        child = slot.child
        if child is None:
            return
        now = self.clock.monotonic()
        if kind != "proto":
            job_id = slot.job.id if slot.job else None
            if child.relay_output(key.fd, tag=slot.tag, now=now, job_id=job_id):
                self.selector.unregister(key.fd)
            return
        try:
            messages = child.read_messages()
        except errors.ProtocolError as exc:
            self.pool.kill(slot, "error", f"protocol error: {exc}", hard=True)
            messages = []
        for message in messages:
            self.attempts.message(slot, message)
        if child.eof:
            self.selector.unregister(key.fd)
            slot.dead = True

    def _listen(self) -> None:
        """(Re-)registers the store's wake-up descriptor, which changes when
        the store reconnects (always to a new number, so comparing suffices)."""
        try:
            fd = self.store.wake_fileno()
        except errors.StoreError:
            fd = None
        if fd == self._listen_fd:
            return
        if self._listen_fd is not None:
            try:
                self.selector.unregister(self._listen_fd)
            except (KeyError, ValueError):
                pass
        self._listen_fd = fd
        if fd is not None:
            self.selector.register(fd, selectors.EVENT_READ, None)

    def _renew(self) -> None:
        renewal = self.db(
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
        self.attempts.drop_lost(renewal.alive)
        self._cancel_requested(renewal.cancel_requested)

    def _cancel_requested(self, ids: set[int] | None) -> None:
        for slot in self.pool.busy():
            if ids and slot.job is not None and slot.job.id in ids:
                self.pool.kill(slot, "cancel", "cancelled")

    def _claim(self) -> None:
        idle = self.pool.idle()
        now = self.clock.now()
        outcomes = list(self.attempts.outcomes)
        try:
            cycle = self.db(
                self.store.job_record_and_claim,
                outcomes=outcomes,
                owner=self.owner,
                queues=self.settings.queues,
                count=len(idle),
                lease_until=now + self.settings.lease,
                now=now,
            )
        except errors.StoreRejected:  # an outcome the database can't store
            self.attempts.flush_each()
            self._want_claim = True
            return
        if cycle is None:
            return
        self.attempts.recorded(len(outcomes), cycle.lost)
        jobs = cycle.claimed
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
        self.attempts.flush()
        self.selector.close()
        wake_r, wake_w = self._wake_r, self._wake_w
        self._wake_r = self._wake_w = -1
        os.close(wake_r)
        os.close(wake_w)
        self.store.close()

    def _wake_hook_registered(self) -> bool:
        return self.wake in self.app._wake_hooks
