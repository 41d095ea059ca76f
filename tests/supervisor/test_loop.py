"""The supervision loop stepped on a `FakeClock` with children that are
records (`FakeChildren`), against the real store: what the loop asks of
its children, and when, is exact to the clock, and what it writes is read
back from the database.

No process is started: a child here is what the loop knows of one (a pid,
the frames it was sent, whether it was asked to stop or killed), and it
exits when a test or a kill says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest

from procqueue import App, JobState, protocol
from procqueue import store as store_mod
from procqueue.clock import FakeClock
from procqueue.supervisor.children.slots import Death
from procqueue.supervisor.loop import Supervisor
from procqueue.supervisor.settings import Settings
from tests.helpers import JOB, SPEC
from tests.jobs import basic
from tests.supervisor.stepping import until

KILLED = "child process killed by SIGKILL"


@dataclass
class FakeChild:
    pid: int
    sent: list[protocol.Message] = field(default_factory=list)
    stopping: bool = False
    kill_at: float | None = None
    exited: str | None = None
    """Why it exited (a `Death.reason`), once it did: the next reap reports it."""
    last_words: tuple[protocol.Message, ...] = ()
    jobs_run: int = 0


class FakeChildren:
    """The `slots.Children` a supervisor asks of its pool, kept in memory:
    every child is ready at once, ignores SIGTERM (a Stop frame), dies of
    a kill at the next reap and is replaced unless the pool is stopping.

    `asked` lists what the loop asked: ``("stop", index, job_id, at)`` and
    ``("kill", index, at)``, `at` the monotonic time it was asked."""

    def __init__(self, *, workers: int, clock: FakeClock) -> None:
        self.clock = clock
        self._pids = iter(range(40_001, 50_000))
        self.slots: dict[int, FakeChild | None] = {
            i: FakeChild(pid=next(self._pids)) for i in range(1, workers + 1)
        }
        self.asked: list[tuple[Any, ...]] = []
        self.respawn = True

    def child(self, index: int) -> FakeChild:
        child = self.slots[index]
        assert child is not None, f"slot {index} has no child"
        return child

    def runs(self, index: int) -> list[protocol.Run]:
        """The Run frames the slot's child was sent."""
        return [m for m in self.child(index).sent if isinstance(m, protocol.Run)]

    def exit(self, index: int, reason: str, *frames: protocol.Message) -> None:
        """The slot's child exits, having written `frames` nobody read yet."""
        child = self.child(index)
        child.exited, child.last_words = reason, frames

    # -- slots.Children ---------------------------------------------------------

    def start(self) -> None:
        pass

    def pid(self, index: int) -> int:
        child = self.slots[index]
        return 0 if child is None else child.pid

    def available(self) -> list[int]:
        return [i for i, c in self.slots.items() if c is not None and not c.stopping]

    def jobs_left(self, index: int) -> int | None:
        return None

    def stopping(self, index: int) -> bool:
        return self.child(index).stopping

    def all_ready(self) -> bool:
        return all(c is not None for c in self.slots.values())

    def any_dead(self) -> bool:
        return any(c is not None and c.exited for c in self.slots.values())

    def next_kill(self) -> float | None:
        due = [c.kill_at for c in self.slots.values() if c is not None and c.kill_at is not None]
        return min(due) if due else None

    def rss_mb(self, index: int) -> float:
        return 0.0

    def send(self, index: int, message: protocol.Message) -> bool:
        child = self.slots[index]
        if child is None or child.exited:
            return False
        child.sent.append(message)
        return True

    def flush(self, index: int | None = None) -> None:
        pass

    def read(self, index: int) -> tuple[list[protocol.Message], str | None]:
        return [], None

    def relay(self, index: int, fd: int, job_id: int | None) -> None:
        pass

    def end_output(self, index: int, job_id: int) -> None:
        pass

    def pump(self) -> None:
        pass

    def stop(self, index: int, job_id: int, *, grace: float | None) -> None:
        child = self.child(index)
        child.stopping = True
        now = self.clock.monotonic()
        self.asked.append(("stop", index, job_id, now))
        if grace is not None and grace <= 0:
            self.kill(index)
        elif grace is not None and child.kill_at is None:
            child.kill_at = now + grace

    def kill(self, index: int) -> None:
        child = self.child(index)
        child.stopping, child.kill_at = True, None
        self.asked.append(("kill", index, self.clock.monotonic()))
        child.exited = child.exited or KILLED

    def escalate(self, now: float) -> None:
        for index, child in self.slots.items():
            if child is not None and child.kill_at is not None and now >= child.kill_at:
                self.kill(index)

    def unfinished(self, now: float) -> list[int]:
        return []  # its frames are whole messages

    def job_done(self, index: int) -> None:
        self.child(index).jobs_run += 1

    def reap(self, job_of: dict[int, int]) -> list[Death]:
        deaths = []
        for index, child in self.slots.items():
            if child is None or child.exited is None:
                continue
            death = Death(index, child.pid, child.exited, False, child.stopping, child.last_words)
            deaths.append(death)
            self.slots[index] = FakeChild(pid=next(self._pids)) if self.respawn else None
        return deaths

    def stop_respawning(self) -> None:
        self.respawn = False

    def shutdown(self, *, wait: float) -> None:
        for child in self.slots.values():
            if child is not None:
                child.exited = child.exited or "child process exited with code 0"
        self.reap({})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def app(dsn: str, clock: FakeClock) -> Iterator[App]:
    a = basic.app.using(dsn, clock=clock)
    yield a
    a.close()


@contextmanager
def supervising(
    app: App, clock: FakeClock, **settings: Any
) -> Iterator[tuple[Supervisor, FakeChildren]]:
    """A started supervisor on fake children and the real store; the test
    steps it (`until`, `tick`) and moves the clock."""
    options: dict[str, Any] = {"workers": 1, "poll": 1.0, "lease": 120.0, "kill_grace": 2.0}
    options.update(settings)
    children = FakeChildren(workers=options["workers"], clock=clock)
    store = store_mod.open_store(store_mod.resolve_dsn(app.dsn))
    sup = Supervisor(
        app, spec=SPEC, settings=Settings(**options), clock=clock, store=store, pool=children
    )
    sup.start()
    try:
        yield sup, children
    finally:
        sup.close()


def test_a_timed_out_job_is_stopped_at_its_deadline_then_killed_and_recorded_failed(
    app: App, clock: FakeClock
) -> None:
    with supervising(app, clock) as (sup, children):
        job_id = app.enqueue(JOB + "sleep_forever", {"marker": "unused"}, timeout=30)
        (run,) = until(sup, "the job handed to the child", lambda: children.runs(1))
        started, first_pid = clock.monotonic(), children.pid(1)
        assert (run.job_id, run.attempt) == (job_id, 1)
        clock.advance(29.5)
        sup.tick(clock.monotonic())
        assert children.asked == []  # half a second early: it runs on
        clock.advance(0.5)
        sup.tick(clock.monotonic())
        assert children.asked == [("stop", 1, job_id, started + 30.0)]
        clock.advance(1.5)
        sup.tick(clock.monotonic())
        assert children.asked[1:] == []  # within the kill grace: SIGTERM only
        clock.advance(0.5)
        sup.tick(clock.monotonic())
        assert children.asked[1:] == [("kill", 1, started + 32.0)]
        until(sup, "the failure written", lambda: app.get(job_id).state == JobState.FAILED)
        assert children.pid(1) != first_pid  # the killed child was replaced
        info = app.get(job_id)
    assert info.attempts == 1
    assert "timed out after 30s" in (info.error or "")


def test_a_reply_read_from_a_dead_childs_pipe_decides_its_outcome(
    app: App, clock: FakeClock
) -> None:
    with supervising(app, clock) as (sup, children):
        job_id = app.enqueue(JOB + "add", {"a": 2, "b": 3})
        until(sup, "the job handed to the child", lambda: children.runs(1))
        done = protocol.Done(job_id=job_id, result=msgspec.json.encode(5))
        children.exit(1, "child process exited with code 0", done)
        until(sup, "the result written", lambda: app.get(job_id).state == JobState.DONE)
        assert children.asked == []  # nothing to stop: it ended on its own
    assert app.get(job_id).result == 5


def test_a_child_that_dies_mid_job_has_its_job_retried_with_the_death_as_its_error(
    app: App, clock: FakeClock
) -> None:
    with supervising(app, clock) as (sup, children):
        job_id = app.enqueue(JOB + "add", {"a": 2, "b": 3})
        until(sup, "the job handed to the child", lambda: children.runs(1))
        children.exit(1, "child process killed by SIGSEGV")
        until(sup, "the retry written", lambda: app.get(job_id).state == JobState.PENDING)
        info = app.get(job_id)
    assert info.attempts == 1
    assert "child process killed by SIGSEGV" in (info.error or "")
