"""The supervisor: claims jobs, hands them to children, keeps their leases,
enforces timeouts, cancels and memory ceilings, and records every outcome
fenced by its attempt number.

One thread, one selector (the children's pipes, a self-pipe for wake-ups,
answers and signals, and the database's notification socket), and one
deterministic pass, `tick(now)`, after each wait. Database calls run on
their own thread (`dbcalls`): the loop submits them and reacts to their
answers, so a database that stalls never stops a timeout, a cancel already
known, a kill, a drain or a signal. `run()` is `start()`, then `step()`
until stopped, then `close()`; tests may drive `step` and `tick` themselves
with a `FakeClock`.
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

from procqueue import _clock, config, errors, events, protocol
from procqueue import store as store_mod
from procqueue._faults import Faults
from procqueue.app import App
from procqueue.attempt_writes import AttemptWrites
from procqueue.attempts import Attempts, lease_margin
from procqueue.claims import Claims
from procqueue.dbcalls import DbCalls
from procqueue.heartbeat import Heartbeat
from procqueue.limits import Limits
from procqueue.maintenance import Maintenance
from procqueue.metrics import Metrics
from procqueue.pool import Pool

log = logging.getLogger("procqueue.supervisor")

OUTCOME_WAIT_S = 30.0
"""After a drain, how long outcomes the database holds back may still be
written; after that their leases expire and the jobs are rescued elsewhere."""


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
        clock: _clock.Clock | None = None,
    ) -> None:
        self.app = app
        self.spec = spec
        self.settings = settings
        self.clock: _clock.Clock = clock or app.clock
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.events = events.EventStream()
        self.counts = events.Counts()
        self.events.subscribe(self.counts)
        self.events.subscribe(events.log_event)
        self.metrics = Metrics()
        self.metrics.children.set(settings.workers)
        self.events.subscribe(self.metrics.observe)
        self.store = store_mod.open_store(store_mod.resolve_dsn(app.dsn))
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.db = DbCalls(clock=self.clock, events=self.events, wake=self.wake)
        self.pool = Pool(
            spec=spec,
            settings=settings,
            clock=self.clock,
            selector=self.selector,
            events=self.events,
        )
        self.attempts = Attempts(
            pool=self.pool,
            clock=self.clock,
            settings=settings,
            events=self.events,
            rng=rng or random.Random(),
        )
        self.writes = AttemptWrites(
            attempts=self.attempts,
            pool=self.pool,
            store=self.store,
            db=self.db,
            settings=settings,
            faults=faults,
        )
        self.limits = Limits(attempts=self.attempts, pool=self.pool)
        self.claims = Claims(
            attempts=self.attempts,
            limits=self.limits,
            pool=self.pool,
            store=self.store,
            db=self.db,
            clock=self.clock,
            settings=settings,
            events=self.events,
            owner=self.owner,
        )
        self.maintenance = Maintenance(app=app, store=self.store, settings=settings)
        self.heartbeat = Heartbeat(  # issue 14: `procqueue supervisors`, orphaned jobs
            store=self.store,
            db=self.db,
            clock=self.clock,
            settings=settings,
            owner=self.owner,
            spec=spec,
            busy=lambda: len(self.attempts.running),
        )
        self._stops = 0
        self._draining_until: float | None = None
        self._drain_killed = False
        self._listen_fd: int | None = None
        self._busy_title = -1
        self._timers: dict[str, float] = {}
        self._subscribed = False

    # -- control from other threads / signal handlers --------------------

    def wake(self) -> None:
        """Makes the loop run a pass as soon as possible (safe from any thread
        and from a signal handler)."""
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
        try:
            self.start()
            while not self.finished():
                self.step()
        finally:
            self.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        log.info("stopped: %s", self.counts.summary())
        return 0

    def start(self) -> None:
        """Migrates, publishes queue limits, starts the children and the
        database thread. Bounded by the store's own timeouts."""
        # The pool logs every failed reconnect; the supervisor says one line
        # per outage instead (DatabaseDown / DatabaseUp).
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        self.store.migrate(now=self.clock.now())
        self.heartbeat.init_limits()
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self.app.on_enqueue(self.wake)
        self._subscribed = True
        self.db.start()
        self._listen()
        self.pool.start()
        if self.settings.metrics_port is not None:
            self.metrics.watch_batches(self.store)  # issue 15: gauges per batch name
            self.metrics.serve(self.settings.metrics_port, self.settings.metrics_host)
        now = self.clock.monotonic()
        self._timers = {"maintain": now}
        self.claims.renew_at = now + self.settings.lease / 3
        log.info(
            "supervising %s with %d children (owner %s)",
            self.spec,
            self.settings.workers,
            self.owner,
        )

    def step(self, timeout: float | None = None) -> None:
        """Waits for I/O until the next thing is due (at most `timeout` s when
        given), handles what arrived, then runs one `tick`."""
        wait = self._timeout(self.clock.monotonic()) if timeout is None else timeout
        # A child flushes its output before it replies: reading output before
        # frames logs each line under the job that wrote it.
        ready = sorted(self.selector.select(wait), key=_frames_last)
        for key, _ in ready:
            self._readable(key)
        self.tick(self.clock.monotonic())

    def tick(self, now: float) -> None:
        """One pass at monotonic time `now`: database answers, dead children,
        kill escalation, timeouts and memory, the drain, then database work
        that is due (never waited on here)."""
        self.db.deliver()
        for death in self.pool.reap(self.attempts.job_of()):
            for message in death.frames:  # a reply may be all that is left of a job
                self._frame(death.child, message)
            self.attempts.died(death)
        self.pool.escalate(now)
        self.limits.enforce(now, wall=self.clock.now(), margin=self._margin())
        self._drain(now)
        self.writes.flush(now)
        if self.attempts.freed:
            self.attempts.freed = False
            self.claims.want = True
        if now >= self.claims.renew_at and self._listen_fd is None:
            self._listen()  # a listener lost in an outage comes back with the database
        self.claims.renew(now)
        self.claims.poll_cancels(now)
        self._maintain(now)
        self.heartbeat.step(now)
        self.claims.step(now)
        self.pool.flush()  # every frame this pass queued, one write a child
        self._title()

    def finished(self) -> bool:
        """Whether the drain is over: nothing runs and the outcomes are written
        (or have waited long enough)."""
        if (
            self._draining_until is None
            or self.attempts.running
            or any(self.attempts.waiting.values())
        ):
            return False
        if not self.attempts.outcomes and not self.db.busy("cycle"):
            return True
        return self.clock.monotonic() >= self._draining_until + OUTCOME_WAIT_S

    def _drain(self, now: float) -> None:
        if self._stops and self._draining_until is None:
            self._draining_until = now + self.settings.grace
            log.info(
                "draining: %d running, up to %.1fs",
                len(self.attempts.running),
                self.settings.grace,
            )
            self.pool.respawn = False
            self.claims.stopped = True
            self.attempts.ask_to_stop()
        if (
            self._draining_until is not None
            and not self._drain_killed
            and (self._stops > 1 or now >= self._draining_until)
        ):
            self._drain_killed = True
            self.attempts.hand_back_all()

    def _margin(self) -> float:
        return lease_margin(self.settings.lease)

    def _timeout(self, now: float) -> float:
        if self.pool.any_dead():
            return 0.005
        claimable = bool(self.claims.room())
        if self.claims.want and claimable and not self.db.busy("cycle"):
            return 0.0
        due = [self.claims.renew_at, self._timers["maintain"], now + self.settings.poll]
        due.append(self.heartbeat.next_at)
        if claimable:
            due.append(self.claims.next_at)
        if self.attempts.all():
            due.append(self.claims.cancels_at)
        extras = (
            self.limits.next_due(),
            self.writes.next_due(),
            self.pool.next_kill(),
            self._draining_until,
        )
        for extra in extras:
            if extra is not None:
                due.append(extra)
        if self.attempts.outcomes or self.db.down_since is not None:
            due.append(max(self.db.retry_at, now + 0.01))
        return max(0.0, min(due) - now)

    # -- I/O ------------------------------------------------------------------

    def _readable(self, key: selectors.SelectorKey) -> None:
        if key.data is None:
            if key.fd == self._wake_r:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            else:  # the store's wake-up socket: drained on the database thread
                self.selector.unregister(key.fd)
                self._listen_fd = None
                self.claims.want = True  # the claim follows the drain on that thread
                self._listen()
            return
        index, kind = key.data
        if kind == "in":  # a child's pipe takes the frames that waited
            self.pool.flush(index)
            return
        if kind == "fork":
            self.pool.spawner.pump()
            return
        if kind != "proto":
            self.pool.relay(index, key.fd, self.attempts.job_of().get(index))
            return
        messages, problem = self.pool.read(index)
        for message in messages:
            self._frame(index, message)
        if problem is not None:
            self.attempts.protocol_error(index, problem)

    def _frame(self, index: int, message: protocol.Message) -> None:
        if isinstance(message, protocol.Step):
            self.writes.step(index, message)
        else:
            self.attempts.message(index, message)

    def _listen(self) -> None:
        """Drains and (re-)opens the store's wake-up descriptor on the database
        thread, then watches it; it changes when the store reconnects."""
        if self.db.busy("listen"):
            return

        def listen() -> int | None:
            self.store.wake_drain()
            try:
                return self.store.wake_fileno()
            except errors.StoreError:
                return None

        def listening(fd: int | None) -> None:
            self.claims.want = True
            if fd is None or self._wake_w < 0:
                return
            try:
                self.selector.register(fd, selectors.EVENT_READ, None)
                self._listen_fd = fd
            except (KeyError, ValueError):
                pass

        self.db.submit("listen", listen, on_done=listening)

    # -- database work (submitted, never waited on) -----------------------------

    def _maintain(self, now: float) -> None:
        if self.db.busy("maintain") or not self.db.ok(now):
            return
        if now >= self._timers["maintain"]:
            self._timers["maintain"] = now + min(1.0, self.settings.lease / 4)
            wall = self.clock.now()
            self.db.submit(
                "maintain", lambda: self.maintenance.step(wall), on_done=self._maybe_claim
            )
        elif self.maintenance.pruning:
            wall = self.clock.now()
            self.db.submit("maintain", lambda: self.maintenance.prune_batch(wall), on_done=_ignore)

    def _maybe_claim(self, woke: bool) -> None:
        if woke:
            self.claims.want = True

    def _title(self) -> None:
        busy = len(self.attempts.running)
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

    def close(self) -> None:
        """Stops every child and the database thread; writes what it can."""
        if self._subscribed:
            self.app.off_enqueue(self.wake)
            self._subscribed = False
        self.pool.respawn = False
        self.attempts.hand_back_all()
        self.pool.shutdown(wait=self.settings.kill_grace)
        self.attempts.abandon_all()
        stopped = self.db.stop(timeout=5.0)
        if stopped and self.attempts.outcomes:
            try:  # the loop is over: a last, bounded, synchronous write
                self.store.job_record_many(outcomes=self.attempts.outcomes, now=self.clock.now())
            except errors.StoreError as exc:
                log.warning(
                    "%d outcomes not written (%s); their leases will expire",
                    len(self.attempts.outcomes),
                    exc,
                )
        if stopped:
            self.heartbeat.stop()
        self.selector.close()
        wake_r, wake_w = self._wake_r, self._wake_w
        self._wake_r = self._wake_w = -1
        os.close(wake_r)
        os.close(wake_w)
        if stopped:  # else a call still hangs inside the store: leave it to the exit
            self.store.close()


def _ignore(_: object) -> None:
    pass


def _frames_last(item: tuple[selectors.SelectorKey, int]) -> bool:
    data = item[0].data
    return isinstance(data, tuple) and data[1] == "proto"
