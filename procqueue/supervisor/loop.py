"""The supervisor: claims jobs, hands them to children, keeps their leases,
enforces timeouts, cancels and memory ceilings, and records every outcome
fenced by its attempt number.

One thread, one selector (the children's pipes, a self-pipe for wake-ups,
answers and signals, and the database's notification socket), and one
deterministic pass, `tick(now)`, after each wait. Database calls run on
their own thread (`dbthread`): the loop submits them and reacts to their
answers, so a database that stalls never stops a timeout, a cancel already
known, a kill, a drain or a signal. `run()` is `start()`, then `step()`
until stopped, then `close()`; tests may drive `step` and `tick` themselves
with a `FakeClock`, and may give it its store and its children.

The loop owns no attempt and no flag of its parts: it asks them (`Attempts`
alone writes attempts, `Outbox` their unwritten outcomes, `Claims` its claim
state, the pool its children).
"""

from __future__ import annotations

import functools
import logging
import os
import random
import secrets
import selectors
import signal
import socket
import threading

from procqueue import events, protocol
from procqueue import store as store_mod
from procqueue.clock import Clock
from procqueue.producer.app import App
from procqueue.store.base import Store
from procqueue.supervisor.children.pool import Pool
from procqueue.supervisor.children.slots import Children
from procqueue.supervisor.claims import Claims
from procqueue.supervisor.dbthread import DbCalls
from procqueue.supervisor.drain import Drain
from procqueue.supervisor.faults import Faults
from procqueue.supervisor.heartbeat import Heartbeat
from procqueue.supervisor.lease import Lease
from procqueue.supervisor.limits import Limits
from procqueue.supervisor.maintenance import Maintenance
from procqueue.supervisor.metrics import Metrics
from procqueue.supervisor.outbox import Outbox
from procqueue.supervisor.reports import AttemptWrites
from procqueue.supervisor.running import Attempts
from procqueue.supervisor.settings import Settings
from procqueue.supervisor.title import BusyTitle
from procqueue.supervisor.wakeups import Wakeups

log = logging.getLogger("procqueue.supervisor")


class Supervisor:
    """Runs the jobs of `app` (imported from `spec` by each child).

    Args:
        store: where the jobs are (default: opened from `app.dsn`); closed
            by `close`.
        pool: the children (default: a `Pool` of `settings.workers`
            processes registered in the supervisor's selector).
    """

    def __init__(
        self,
        app: App,
        *,
        spec: str,
        settings: Settings,
        faults: Faults | None = None,
        rng: random.Random | None = None,
        clock: Clock | None = None,
        store: Store | None = None,
        pool: Children | None = None,
    ) -> None:
        self.app = app
        self.spec = spec
        self.settings = settings
        self.clock: Clock = clock or app.clock
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.events = events.EventStream()
        self.counts = events.Counts()
        self.events.subscribe(self.counts)
        self.events.subscribe(events.log_event)
        self.metrics = Metrics()
        self.metrics.children.set(settings.workers)
        if settings.metrics_port is not None:  # counted only where a scrape can read them
            self.events.subscribe(self.metrics.observe)
        self.store = store or store_mod.open_store(store_mod.resolve_dsn(app.dsn))
        self._prepared = False
        self.selector = selectors.DefaultSelector()
        self.wakeups = Wakeups(selector=self.selector)
        self.db = DbCalls(clock=self.clock, events=self.events, wake=self.wakeups.wake)
        self.pool: Children = pool or Pool(
            spec=spec,
            settings=settings,
            clock=self.clock,
            selector=self.selector,
            events=self.events,
        )
        lease = Lease(settings.lease)
        self.outbox = Outbox()
        self.attempts = Attempts(
            pool=self.pool,
            outbox=self.outbox,
            clock=self.clock,
            settings=settings,
            lease=lease,
            events=self.events,
            rng=rng or random.Random(),
            on_died=app.hooks.tell_died,
        )
        self.writes = AttemptWrites(
            attempts=self.attempts,
            pool=self.pool,
            store=self.store,
            db=self.db,
            settings=settings,
            faults=faults,
        )
        self.limits = Limits(attempts=self.attempts, lease=lease)
        self.claims = Claims(
            attempts=self.attempts,
            outbox=self.outbox,
            pool=self.pool,
            store=self.store,
            db=self.db,
            clock=self.clock,
            settings=settings,
            lease=lease,
            events=self.events,
            owner=self.owner,
        )
        self.maintenance = Maintenance(app=app, store=self.store, settings=settings)
        self.heartbeat = Heartbeat(  # `procqueue supervisors` and orphaned jobs read its row
            store=self.store,
            db=self.db,
            clock=self.clock,
            settings=settings,
            owner=self.owner,
            spec=spec,
            busy=lambda: len(self.attempts.running),
        )
        self.title = BusyTitle(
            spec=spec, workers=settings.workers, titles=settings.titles, gauge=self.metrics.busy
        )
        self.drain = Drain(
            settings=settings,
            attempts=self.attempts,
            outbox=self.outbox,
            pool=self.pool,
            claims=self.claims,
            db=self.db,
        )
        self._timers: dict[str, float] = {}
        self._subscribed = False

    # -- control from other threads / signal handlers --------------------

    def wake(self) -> None:
        """Makes the loop run a pass as soon as possible (safe from any thread
        and from a signal handler)."""
        self.wakeups.wake()

    def request_stop(self) -> None:
        """First call drains gracefully; the second stops at once."""
        self.drain.request()
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

    def prepare(self) -> None:
        """Migrates and publishes queue limits (idempotent; StoreError propagates)."""
        self.store.migrate(now=self.clock.now())
        self.heartbeat.init_limits()
        self._prepared = True

    def start(self) -> None:
        """Migrates, publishes queue limits, starts the children and the
        database thread. Bounded by the store's own timeouts."""
        # The pool logs every failed reconnect; the supervisor says one line
        # per outage instead (DatabaseDown / DatabaseUp).
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        if not self._prepared:
            self.prepare()
        self.wakeups.start()
        self.app.on_enqueue(self.wake)
        self._subscribed = True
        self.db.start()
        self._listen()
        self.pool.start()
        if self.settings.metrics_port is not None:
            self.metrics.watch_batches(self.store)  # gauges per batch name, read at each scrape
            self.metrics.serve(self.settings.metrics_port, self.settings.metrics_host)
        now = self.clock.monotonic()
        self._timers = {"maintain": now}
        self.claims.start(now)
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
        for index in self.pool.unfinished(now):
            self.attempts.protocol_error(index, "protocol error: a frame was left unfinished")
        self.limits.enforce(now, wall=self.clock.now())
        self.drain.step(now)
        self.writes.flush(now)
        self.attempts.place()  # a child that became ready takes a reserved job
        if self.attempts.take_freed():
            self.claims.wake()
        if now >= self.claims.renew_at and not self.wakeups.listening():
            self._listen()  # a listener lost in an outage comes back with the database
        self.claims.renew(now)
        self.claims.poll_cancels(now)
        self._maintain(now)
        self.heartbeat.step(now)
        self.claims.step(now)
        self.pool.flush()  # every frame this pass queued, one write a child
        self.title.show(len(self.attempts.running))

    def finished(self) -> bool:
        """Whether the drain is over (see `Drain.finished`)."""
        return self.drain.finished(self.clock.monotonic())

    def _timeout(self, now: float) -> float:
        if self.pool.any_dead():
            return 0.005
        claimable = bool(self.claims.room())
        gather = self.claims.gathering()
        if gather:
            claimable = False  # due once the gathering ends (below), not before
        elif self.claims.want and claimable and not self.db.busy("cycle"):
            return 0.0
        due = [self.claims.renew_at, self._timers["maintain"], now + self.settings.poll]
        due.append(self.heartbeat.next_at)
        if claimable:
            due.append(self.claims.next_at)
        if self.attempts.holds():
            due.append(self.claims.cancels_at)
        if self.maintenance.pruning and not self.db.busy("maintain"):
            due.append(now + self.maintenance.prune_wait())
        extras = (
            now + gather if gather else None,
            self.limits.next_due(),
            self.writes.next_due(),
            self.pool.next_kill(),
        )
        for extra in extras:
            if extra is not None:
                due.append(extra)
        due.extend(self.drain.next_due())
        if self.db.down_since is not None:
            due.append(max(self.db.retry_at, now + 0.01))
        elif self.outbox.waiting() and not gather and not self.db.busy("cycle"):
            # else the gathering's end (above) or the cycle's answer wakes the loop
            due.append(now + 0.01)
        return max(0.0, min(due) - now)

    # -- I/O ------------------------------------------------------------------

    def _readable(self, key: selectors.SelectorKey) -> None:
        if key.data is None:
            if self.wakeups.readable(key.fd):  # jobs came: drained on the database thread
                # the drain goes first, the claim after it on that thread: the claim
                # sees every job it was told of, and a later one makes this readable again
                self._listen(claim=False)
                self.claims.wake()
            return
        index, kind = key.data
        if kind == "in":  # a child's pipe takes the frames that waited
            self.pool.flush(index)
            return
        if kind == "fork":
            self.pool.pump()
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

    def _listen(self, *, claim: bool = True) -> None:
        """Drains and watches the store's wake-up descriptor, then (`claim`)
        claims: jobs may have come while nothing listened."""
        then = self.claims.wake if claim else None
        self.wakeups.listen(db=self.db, store=self.store, then=then)

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
        elif self.maintenance.pruning and not self.maintenance.prune_wait():
            batch = functools.partial(
                self.maintenance.prune_batch, self.clock.now(), busy=self.attempts.holds()
            )
            self.db.submit("maintain", batch, on_done=_ignore)

    def _maybe_claim(self, woke: bool) -> None:
        if woke:  # a chore made jobs due (a rescue, a cron tick): claim them
            self.claims.wake()

    def close(self) -> None:
        """Stops every child and the database thread; writes what it can by
        the end of the drain's budget (or kill_grace + outcome_wait from now
        when no drain began). What is not written by then is logged with its
        job ids and left to lease rescue: a database that hangs never holds
        the process past its budget."""
        s = self.settings
        gone_by = self.drain.gone_by(self.clock.monotonic())
        if self._subscribed:
            self.app.off_enqueue(self.wake)
            self._subscribed = False
        self.claims.stop()
        self.pool.stop_respawning()
        self.attempts.hand_back_all()
        self.pool.shutdown(wait=min(s.kill_grace, max(0.0, gone_by - self.clock.monotonic())))
        self.attempts.abandon_all()
        outcomes = self.outbox.unwritten()
        if outcomes:  # after the cycles: the fences drop what one of them already wrote
            now = self.clock.now()
            self.db.submit(
                "last",
                lambda: self.store.job_record_many(outcomes=outcomes, now=now, owner=self.owner),
                on_done=lambda _: self.outbox.written(outcomes),
            )
        self.db.submit("heartbeat", self.heartbeat.stop, on_done=_ignore)
        stopped = self.db.stop(timeout=max(0.0, gone_by - self.clock.monotonic()))
        self.db.deliver()
        left = self.outbox.unwritten()
        if left:
            log.warning(
                "%d outcomes not written in time (jobs %s); their leases will expire "
                "and the jobs will be rescued",
                len(left),
                ", ".join(str(o.id) for o in left),
            )
        self.selector.close()
        self.wakeups.close()
        if stopped:  # else a call still hangs inside the store: leave it to the exit
            self.store.close()


def _ignore(_: object) -> None:
    pass


def _frames_last(item: tuple[selectors.SelectorKey, int]) -> bool:
    data = item[0].data
    return isinstance(data, tuple) and data[1] == "proto"
