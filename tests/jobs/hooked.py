"""Jobs with hooks around every run, enqueue and death, each hook writing
one JSON line to the file named by $PROCQUEUE_TEST_HOOK_LOG (children
inherit it), so a test reads what every process's hooks saw."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from procqueue import App, Permanent
from procqueue.jobs.hooks import Enqueue, Run, RunDied

app = App()
LOG_ENV = "PROCQUEUE_TEST_HOOK_LOG"


def note(**entry: Any) -> None:
    """Appends one line to the hook log (one write: lines from several
    processes never interleave)."""
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), **entry}, default=str) + "\n")


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@app.hooks.around_enqueue
@contextlib.contextmanager
def tag_request(jobs: list[Enqueue]) -> Iterator[None]:
    for job in jobs:
        job.headers["request"] = f"req-{job.args.get('a', 'x')}"
    yield
    note(at="enqueued", ids=[j.id for j in jobs], names=[j.name for j in jobs])


@app.hooks.around_enqueue
def enqueue_hook_that_raises(jobs: list[Enqueue]) -> contextlib.AbstractContextManager[None]:
    if any(j.args.get("boom") == "enqueue" for j in jobs):
        raise RuntimeError("enqueue hook failed")
    return contextlib.nullcontext()


def fields(run: Run, *names: str) -> dict[str, Any]:
    return {"id": run.job_id, **{n: getattr(run, n) for n in names}}


@app.hooks.around_run
@contextlib.contextmanager
def trace_run(run: Run) -> Iterator[None]:
    note(at="enter", **fields(run, "name", "queue", "attempt", "args", "headers"))
    try:
        yield
    except BaseException as exc:
        note(at="raised", id=run.job_id, exception=type(exc).__name__)
        raise
    finally:
        raised = None if run.exception is None else type(run.exception).__name__
        note(at="exit", exception=raised, **fields(run, "outcome", "result", "error"))


class Breaking:
    """A hook that raises entering or exiting when the job's args say so."""

    def __init__(self, run: Run) -> None:
        self.boom = run.args.get("boom")

    def __enter__(self) -> None:
        if self.boom == "enter":
            raise RuntimeError("hook failed entering")

    def __exit__(self, *exc: object) -> bool:
        if self.boom == "exit":
            raise RuntimeError("hook failed exiting")
        return True  # ignored: a hook can't swallow the job's failure


app.hooks.around_run(Breaking)


@app.hooks.on_run_died
def died(d: RunDied) -> None:
    note(at="died", id=d.job_id, **dataclasses.asdict(d))
    if d.name.endswith("segfault_twice"):
        raise RuntimeError("died hook failed")


@app.job(max_attempts=1)
def add(a: int, b: int = 0, boom: str | None = None) -> int:
    return a + b


@app.job(max_attempts=2)
def fail(a: int = 0, boom: str | None = None) -> None:
    raise ValueError(f"failing attempt with a={a}")


@app.job(max_attempts=1)
def refuse(a: int = 0) -> None:
    raise Permanent("no")


@app.job(max_attempts=2)
def segfault_twice(a: int = 0) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


@app.job(max_attempts=1, timeout=0.5)
def sleep_past_timeout(a: int = 0) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # so its kill is SIGKILL
    while True:
        signal.pause()


@app.job(max_attempts=1)
def modules(prefix: str) -> list[str]:
    """The modules this child has loaded whose names start with `prefix`."""
    return sorted(m for m in sys.modules if m.startswith(prefix))
