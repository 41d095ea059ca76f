"""Running one attempt of a job in the current process: argument
conversion, the call, result encoding, and turning what was raised into
a protocol message. Used by the child and by `App.run_inline`."""

from __future__ import annotations

import inspect
import os
import traceback
from typing import TYPE_CHECKING, Any

import msgspec

from procqueue import errors, protocol
from procqueue.jobs import hooks, options, stopping
from procqueue.jobs.context import Channel, Context
from procqueue.jobs.stopping import EventLoop, Guard

if TYPE_CHECKING:
    from procqueue.jobs.registry import Job

_TRACEBACK_FRAMES = 8
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""procqueue's own folder: frames of files under it are not the job's."""


def decode_args(job: Job[Any, Any], encoded: bytes) -> dict[str, Any]:
    """The stored arguments of `job`, decoded; Permanent unless a JSON object."""
    try:
        args = msgspec.json.decode(encoded)
    except msgspec.DecodeError as exc:
        raise errors.Permanent(f"arguments of {job.name} are not valid JSON: {exc}") from None
    if not isinstance(args, dict):
        raise errors.Permanent(f"arguments of {job.name} are not an object")
    return args


def convert_args(job: Job[Any, Any], args: dict[str, Any]) -> dict[str, Any]:
    """A copy of `args` with each typed parameter converted with msgspec.

    Raises Permanent naming the argument that does not fit.
    """
    try:
        job.arg_signature.bind(**args)
    except TypeError as exc:
        raise errors.Permanent(f"arguments no longer fit {job.name}: {exc}") from None
    types = job.arg_types
    converted = dict(args)
    for name, value in args.items():
        wanted = types.get(name)
        if wanted is None or wanted is Any:
            continue
        try:
            converted[name] = job.codec.convert(value, wanted)
        except msgspec.ValidationError as exc:
            raise errors.Permanent(f"argument {name!r} of {job.name}: {exc}") from None
    return converted


def describe(exc: BaseException) -> str:
    """Type, message and the innermost frames of `exc`'s traceback that are
    the job's: procqueue's own frames (the runner, `Context.step`) are left
    out."""
    head = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    summary = traceback.extract_tb(exc.__traceback__)
    own = [f for f in summary if not _is_procqueue(f.filename)] or list(summary)
    frames = traceback.format_list(own[-_TRACEBACK_FRAMES:])
    return head + ("\n" + "".join(frames).rstrip() if frames else "")


def _is_procqueue(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep)


def call(
    job: Job[Any, Any], run: hooks.Run, channel: Channel, guard: Guard, loop: EventLoop | None
) -> Any:
    """Converts `run`'s arguments and calls the job, an async one run to its
    end on `loop` (a loop made and closed for this call when None); its
    exceptions propagate, and so does the `Stopped` that `guard` delivers.

    Raises Permanent, having closed it, when a sync function returns a
    coroutine; RuntimeError for an async job called from a running loop.
    """
    args = convert_args(job, dict(run.args))
    cx = Context(id=run.job_id, attempt=run.attempt, channel=channel) if job.takes_context else None
    head = () if cx is None else (cx,)
    with guard.running():
        result = job.fn(*head, **args)
        if not inspect.iscoroutine(result):
            return result
        if not job.is_async:
            result.close()
            raise errors.Permanent(f"{job.name} returned a coroutine; declare it async def")
        if loop is not None:
            return loop.run(result, guard)
        own = EventLoop()
        try:
            return own.run(result, guard)
        finally:
            own.close()


def execute(
    job: Job[Any, Any],
    message: protocol.Run,
    *,
    channel: Channel,
    guard: Guard | None = None,
    loop: EventLoop | None = None,
) -> protocol.Done | protocol.Failed:
    """Runs one attempt (see `call`) inside the job's `around_run` hooks and
    reports it as the message the supervisor expects.

    Catches everything the job raises, `SystemExit`, `KeyboardInterrupt`
    and `Stopped` included: a job cannot stop its child by raising.
    """
    run, around = attempt(job, message, channel=channel, guard=guard or Guard(), loop=loop)
    reply: protocol.Done | protocol.Failed
    if run.exception is not None:
        reply = failure(run.job_id, run.exception)
    else:
        # Encoded in this frame, as shallow on the stack as it can be: a
        # deeply nested result must fit the encoder's recursion limit.
        try:
            encoded = job.codec.encode(run.result)
            if b"null" in encoded and options.non_finite(job.codec.to_builtins(run.result)):
                raise ValueError("it holds NaN or infinity, which JSON cannot carry")
        except RecursionError:  # its path would be as long as it is deep: say what it is
            reply = _unencodable(run.job_id, "it is nested too deep for the encoder's stack")
        except (TypeError, ValueError, msgspec.EncodeError, OverflowError) as exc:
            path = (
                None if isinstance(exc, ValueError) else job.codec.unencodable(run.result, "result")
            )
            reply = _unencodable(run.job_id, path or str(exc))
        else:
            reply = protocol.Done(job_id=run.job_id, result=encoded)
    finish(run, reply, around)
    return reply


def attempt(
    job: Job[Any, Any],
    message: protocol.Run,
    *,
    channel: Channel,
    guard: Guard,
    loop: EventLoop | None,
) -> tuple[hooks.Run, hooks.Around]:
    """Enters the job's `around_run` hooks and runs the attempt in them;
    returns what their `Run` says of it (the result, or the exception) and
    the hooks, still entered: `finish` exits them."""
    try:
        args, bad = decode_args(job, message.args), None
    except errors.Permanent as exc:
        args, bad = {}, exc
    run = hooks.Run(
        job_id=message.job_id,
        name=job.name,
        queue=message.queue,
        attempt=message.attempt,
        args=args,
        headers=message.headers,
    )
    around = hooks.Around(job.hooks.run, run)
    around.enter()
    try:
        if bad is not None:
            raise bad
        run.result = call(job, run, channel, guard, loop)
    except BaseException as exc:
        run.exception = exc
    return run, around


def finish(run: hooks.Run, reply: protocol.Done | protocol.Failed, around: hooks.Around) -> None:
    """Tells `run` its outcome (`reply`) and exits the hooks with its exception."""
    if isinstance(reply, protocol.Failed):
        run.outcome, run.error = reply.kind, reply.error
    else:
        run.outcome = "done"
    around.exit(run.exception)


def failure(job_id: int, exc: BaseException) -> protocol.Failed:
    """What the supervisor is told of an attempt that raised `exc`."""
    if isinstance(exc, errors.Snooze):
        words = f"Snooze: {exc}" if str(exc) else f"Snooze({exc.seconds:g})"
        return protocol.Failed(job_id=job_id, kind="snooze", error=words, delay=exc.seconds)
    if isinstance(exc, errors.Retry):  # deliberate: the message says it all
        return protocol.Failed(job_id=job_id, kind="retry", error=f"Retry: {exc}", delay=exc.delay)
    if isinstance(exc, errors.Permanent):
        return protocol.Failed(job_id=job_id, kind="permanent", error=f"Permanent: {exc}")
    return protocol.Failed(job_id=job_id, kind="error", error=describe(exc))


def _unencodable(job_id: int, why: str) -> protocol.Failed:
    return protocol.Failed(
        job_id=job_id, kind="permanent", error=f"the result cannot be encoded: {why}"
    )


class InlineChannel:
    """A Channel in memory, for `run_inline`."""

    def __init__(self) -> None:
        self.steps: dict[str, bytes] = {}

    def progress(self, text: str | None, fraction: float | None) -> None:
        """Dropped: inline there is no record to show it on."""

    def step_saved(self, name: str) -> bytes | None:
        return self.steps.get(name)

    def step_done(self, name: str, value: bytes) -> None:
        self.steps[name] = value

    def cancelled(self) -> bool:
        return False

    def parent_results(self) -> dict[int, bytes]:
        """Inline, a job has no dependencies."""
        return {}

    def step_clock(self, name: str, timeout: float | None) -> None:
        """Inline, a step's timeout is not enforced (nothing can kill it)."""


def run_inline(job: Job[Any, Any], encoded: bytes) -> Any:
    """One attempt in this process, inside the job's `around_run` hooks (an
    async job on an event loop of its own, like `asyncio.run`); the result
    round-trips through JSON, and the job's exception propagates.

    Raises RuntimeError for an async job when called from a running event
    loop, before the job runs.
    """
    if job.is_async and stopping.loop_running():
        raise RuntimeError(
            f"run_inline({job.name!r}) was called from a running event loop; an async "
            "job's run needs a loop of its own: call it from synchronous code, "
            "e.g. await asyncio.to_thread(app.run_inline, job, ...)"
        )
    message = protocol.Run(
        job_id=0, attempt=1, name=job.name, args=encoded, steps={}, queue=job.options.queue
    )
    run, around = attempt(job, message, channel=InlineChannel(), guard=Guard(), loop=None)
    done = protocol.Done(job_id=0, result=b"")
    finish(run, done if run.exception is None else failure(0, run.exception), around)
    if run.exception is not None:
        raise run.exception
    return msgspec.json.decode(job.codec.encode(run.result))
