"""The public surface: what ``import procqueue`` exports, the calls the
design documents (DESIGN.md sections 1-2), and the exception tree drawn in
the errors module's docstring."""

from __future__ import annotations

import inspect
import re

import pytest

import procqueue
from procqueue import App, errors
from procqueue.jobs.registry import Configured, Job

EXPORTED = [
    "App",
    "AttemptInfo",
    "Backoff",
    "BatchInfo",
    "BatchNotFound",
    "BatchState",
    "ConfigError",
    "Context",
    "EnqueueError",
    "InvalidState",
    "Job",
    "JobFailed",
    "JobFailure",
    "JobInfo",
    "JobNotFound",
    "JobState",
    "Permanent",
    "ProcqueueError",
    "ProtocolError",
    "QueueInfo",
    "QueueNotFound",
    "Retry",
    "SchemaTooNew",
    "Snooze",
    "Stopped",
    "StoreError",
    "StoreRejected",
    "StoreUnavailable",
    "SupervisorInfo",
    "load_app",
]

DOCUMENTED_NAMES = ["App", "Backoff", "Context", "JobInfo", "JobState", "Permanent", "Retry"]
"""Imported from procqueue by the examples of DESIGN.md sections 1-2."""

DOCUMENTED_CALLS = {
    App: [
        "job",
        "cron",
        "enqueue",
        "enqueue_many",
        "get",
        "wait",
        "result",
        "cancel",
        "retry",
        "jobs",
        "stats",
        "throughput",
        "pause",
        "resume",
        "queues",
        "set_limit",
        "supervisors",
        "retry_where",
        "cancel_where",
        "run_inline",
        "close",
        "using",
        "batch",
        "batch_info",
        "wait_batch",
        "batch_results",
        "batches",
        "cancel_batch",
        "retry_batch",
        "prune_batches",
    ],
    Job: ["enqueue", "configure"],
    Configured: ["enqueue"],
    procqueue.Context: ["progress", "step", "cancelled"],
}
"""The calls DESIGN.md sections 1-2 show, batches included."""


def test_all_is_sorted_and_pinned() -> None:
    assert procqueue.__all__ == sorted(procqueue.__all__)
    assert procqueue.__all__ == EXPORTED


def test_every_exported_name_exists() -> None:
    for name in procqueue.__all__:
        assert getattr(procqueue, name) is not None, name


def test_the_documented_names_are_exported() -> None:
    assert set(DOCUMENTED_NAMES) <= set(procqueue.__all__)


@pytest.mark.parametrize("owner", DOCUMENTED_CALLS, ids=lambda o: o.__name__)
def test_the_documented_calls_exist(owner: type) -> None:
    missing = [name for name in DOCUMENTED_CALLS[owner] if not hasattr(owner, name)]
    assert missing == []


def test_app_takes_dsn_clock_and_codec_hooks() -> None:
    params = inspect.signature(App).parameters
    assert list(params) == ["dsn", "clock", "enc_hook", "dec_hook"]
    for name in ("clock", "enc_hook", "dec_hook"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY


def _drawn_tree() -> dict[str, str | None]:
    """Class name -> parent name, from the tree in errors.__doc__."""
    doc = errors.__doc__ or ""
    lines = doc[doc.index("The tree::") :].splitlines()[2:]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []  # (column, name) of the open branches
    for line in lines:
        match = re.search(r"\w+", line)
        if match is None:
            break
        column, name = match.start(), match.group()  # four columns a level
        while stack and stack[-1][0] >= column:
            stack.pop()
        parents[name] = stack[-1][1] if stack else None
        stack.append((column, name))
    return parents


def test_the_exception_tree_matches_the_docstring() -> None:
    drawn = _drawn_tree()
    assert drawn["ProcqueueError"] is None and drawn["Permanent"] == "JobFailure"
    real: dict[str, str | None] = {}
    for name, cls in vars(errors).items():
        if isinstance(cls, type) and issubclass(cls, errors.ProcqueueError):
            base = cls.__bases__[0]
            real[name] = None if cls is errors.ProcqueueError else base.__name__
    assert real == drawn


def test_every_exception_is_exported() -> None:
    assert set(_drawn_tree()) <= set(procqueue.__all__)


def test_a_job_failure_keeps_the_message_job_code_gave() -> None:
    """Unlike other errors, no docstring default: the message is recorded as given."""
    assert str(errors.Retry()) == "" and str(errors.Permanent("why")) == "why"
    assert errors.Retry("later", delay=3).delay == 3
    assert str(errors.JobNotFound()) == "No such job."


def test_stopped_is_drawn_outside_the_tree_and_no_exception() -> None:
    """`except Exception` in job code must not swallow a stop."""
    assert issubclass(procqueue.Stopped, BaseException)
    assert not issubclass(procqueue.Stopped, Exception)
    doc = errors.__doc__ or ""
    assert re.search(r"BaseException\n\s+└── Stopped\b", doc)
    assert str(procqueue.Stopped()) == "the job was told to stop"
