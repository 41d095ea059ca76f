"""Jobs of the chaos run (imported by every child of every chaos supervisor).

Each job appends ``ID ATTEMPT PID EVENT TIME [EXTRA]`` to the side log named
by ``$PROCQUEUE_CHAOS_LOG`` when its work starts and ends, in one
``O_APPEND`` write per line so that lines of concurrent children never mix.
Every run of every job holds an exclusive ``flock`` on ``job-<id>`` in
``$PROCQUEUE_CHAOS_LOCKS`` while it executes (`exclusive`), and serial-key
and limited-queue jobs also take ``serial-<key>`` and ``limited-<slot>``
locks there: a lock already held by another live process is an overlap
seen at the moment it happens, killed runs included (the kernel drops a
dead process's locks).
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from procqueue import App, BatchInfo, Context, Permanent

app = App()

BACKOFF: dict[str, Any] = {"base": 0.05, "factor": 2.0, "max": 0.5, "jitter": True}
"""Short retries: the run must settle within seconds of the chaos stopping."""
PATIENT = 40
"""Attempts of jobs that should end done: enough for any number of lost leases."""
TIMEOUT_S = 0.5
CRON = "* * * * * */5"
"""Every 5 seconds (croniter's sixth field is seconds)."""

_fd: int | None = None


def record(cx: Context, event: str, extra: str = "") -> None:
    """One line in the side log (nothing when the log is not set)."""
    global _fd
    path = os.environ.get("PROCQUEUE_CHAOS_LOG")
    if not path:
        return
    if _fd is None:
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    line = f"{cx.id} {cx.attempt} {os.getpid()} {event} {time.time():.6f} {extra}".rstrip()
    os.write(_fd, (line + "\n").encode())


def _lock_path(name: str) -> str | None:
    folder = os.environ.get("PROCQUEUE_CHAOS_LOCKS")
    return None if not folder else os.path.join(folder, name)


def _try_lock(name: str) -> int | None:
    """An fd holding an exclusive flock on `name`, or None if another process holds it."""
    path = _lock_path(name)
    if path is None:
        return -1
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _unlock(fd: int | None) -> None:
    if fd is not None and fd >= 0:
        os.close(fd)


F = TypeVar("F", bound=Callable[..., Any])


def exclusive(fn: F) -> F:
    """Holds an exclusive flock on ``job-<id>`` while a run of the job executes
    (applied under ``@app.job``; `functools.wraps` keeps the signature and the
    `Context` annotation procqueue reads). A lock already held is another run
    of the same job still executing: an ``overlap-run`` line in the side log.
    The job runs anyway, so the overlap shows in its start/end times too."""

    @functools.wraps(fn)
    def run(cx: Context, *args: Any, **kwargs: Any) -> Any:
        fd = _try_lock(f"job-{cx.id}")
        if fd is None:
            record(cx, "overlap-run")
        try:
            return fn(cx, *args, **kwargs)
        finally:
            _unlock(fd)

    return run  # type: ignore[return-value]


@app.job(max_attempts=PATIENT, backoff=BACKOFF)
@exclusive
def short(cx: Context, n: int) -> int:
    record(cx, "start")
    record(cx, "end")
    return n


@app.job(max_attempts=PATIENT, backoff=BACKOFF)
@exclusive
def cpu(cx: Context, n: int, rounds: int) -> str:
    record(cx, "start")
    digest = str(n).encode()
    for _ in range(rounds):
        digest = hashlib.sha256(digest).digest()
    record(cx, "end")
    return digest.hex()


@app.job(max_attempts=2, timeout=TIMEOUT_S, backoff=BACKOFF)
@exclusive
def oversleep(cx: Context, seconds: float, cooperative: bool) -> None:
    """Sleeps past its timeout, so every attempt is killed: at once when it
    stops on `cx.cancelled`, after the kill grace when it sleeps on."""
    record(cx, "start")
    if not cooperative:
        time.sleep(seconds)
    give_up = time.monotonic() + seconds
    while not cx.cancelled and time.monotonic() < give_up:
        time.sleep(0.01)
    if cx.cancelled:  # a cooperative job says it stopped: not done
        raise Permanent("stopped on request")
    record(cx, "end")


@app.job(max_attempts=2, backoff=BACKOFF)
@exclusive
def crash(cx: Context, how: str) -> None:
    """Dies on every attempt: a segfault or ``os._exit``."""
    record(cx, "start")
    _die(how)


@app.job(max_attempts=PATIENT, backoff=BACKOFF)
@exclusive
def crash_once(cx: Context, how: str) -> int:
    """Dies on its first attempt, succeeds on the next."""
    record(cx, "start")
    if cx.attempt == 1:
        _die(how)
    record(cx, "end")
    return cx.attempt


def _die(how: str) -> None:
    if how == "segv":
        ctypes.string_at(0)
    os._exit(7)


@app.job(max_attempts=PATIENT, backoff=BACKOFF)
@exclusive
def serial(cx: Context, key: str, seconds: float) -> None:
    """A job with a serial key: its lock file is held while it runs."""
    fd = _try_lock(f"serial-{key}")
    record(cx, "start", key)
    if fd is None:
        record(cx, "overlap", key)
    time.sleep(seconds)
    record(cx, "end", key)
    _unlock(fd)


@app.job(queue="limited", max_attempts=PATIENT, backoff=BACKOFF)
@exclusive
def limited(cx: Context, limit: int, seconds: float) -> None:
    """A job of the limited queue: holds one of `limit` slot locks while it runs."""
    fd = None
    for slot in range(limit):
        fd = _try_lock(f"limited-{slot}")
        if fd is not None:
            break
    record(cx, "start")
    if fd is None:
        record(cx, "overlimit")
    time.sleep(seconds)
    record(cx, "end")
    _unlock(fd)


@app.job(max_attempts=PATIENT, backoff=BACKOFF)
@exclusive
def steps(cx: Context, n: int, seconds: float) -> list[int]:
    """Two durable steps; each records the attempt that did its work."""

    def work(name: str) -> int:
        record(cx, f"step:{name}")
        time.sleep(seconds)
        return cx.attempt

    record(cx, "start")
    a = cx.step("a", work, "a")
    b = cx.step("b", work, "b")
    record(cx, "end")
    return [a, b]


@app.job(max_attempts=PATIENT, backoff=BACKOFF)
@exclusive
def slow(cx: Context, seconds: float) -> None:
    """Longer than a drain's grace: a drain hands it back."""
    record(cx, "start")
    time.sleep(seconds)
    record(cx, "end")


@app.job(max_attempts=PATIENT, backoff=BACKOFF)
@exclusive
def hold(cx: Context, seconds: float) -> int:
    """Holds its first attempt for `seconds` (to be orphaned); later ones return at once."""
    record(cx, "start")
    if cx.attempt == 1:
        time.sleep(seconds)
    record(cx, "end")
    return cx.attempt


@app.cron(CRON, max_attempts=PATIENT, backoff=BACKOFF)
@exclusive
def tick(cx: Context) -> int:
    record(cx, "start")
    record(cx, "end")
    return cx.id


# -- batches: the chaos batch's handlers, run like any job ----------------------------


@app.job(max_attempts=PATIENT, backoff=BACKOFF)
def batch_done(cx: Context, info: BatchInfo) -> int:
    """on_complete and on_success of the chaos batch (scripts/chaoskit/batch.py)."""
    record(cx, "start", f"batch {info.id} {info.state}")
    record(cx, "end")
    return info.total


# -- workflows: the nodes of the chaos workflow (scripts/chaoskit/workflow.py) -------


@app.job(max_attempts=PATIENT, backoff=BACKOFF)
@exclusive
def node(cx: Context, seconds: float, fail: bool) -> list[int]:
    """A node of the chaos workflow: records its start with the ids of the
    dependencies whose results it was handed, works for `seconds`, then
    fails for good when `fail`; returns those ids."""
    parents = sorted(cx.parent_results)
    record(cx, "start", ",".join(map(str, parents)))
    time.sleep(seconds)
    if fail:
        record(cx, "fail")
        raise Permanent("a node that fails by design")
    record(cx, "end")
    return parents


# -- flow control: the rate-limited and grouped jobs (scripts/chaoskit/flow.py) -----

PACED_RATE = "5/s"
"""The rate of `paced`: at most 5 starts (claims) in any second, across every supervisor."""
GROUP_LIMIT = 2
"""The group limit of `tenant`: at most 2 attempts of one group held at once."""


@app.job(rate_limit=PACED_RATE, max_attempts=PATIENT, backoff=BACKOFF)
@exclusive
def paced(cx: Context, n: int, seconds: float) -> int:
    """A rate-limited job."""
    record(cx, "start")
    time.sleep(seconds)
    record(cx, "end")
    return n


@app.job(queue="tenants", group_limit=GROUP_LIMIT, max_attempts=PATIENT, backoff=BACKOFF)
@exclusive
def tenant(cx: Context, group: str, seconds: float) -> None:
    """A job of one tenant's group (its `group` option is `group` too)."""
    record(cx, "start", group)
    time.sleep(seconds)
    record(cx, "end", group)
