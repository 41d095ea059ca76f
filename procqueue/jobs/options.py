"""Job options and argument encoding: everything checked at enqueue, before
anything is written."""

from __future__ import annotations

import datetime as dt
import inspect
import math
from typing import Any

import msgspec

from procqueue import errors, models, rates
from procqueue.codec import MAX_DEPTH, Codec, too_deep

MAX_ARGS_BYTES = 64 * 1024 * 1024
"""Largest encoded arguments accepted (the pipe frame limit is well above)."""

_REGISTER_OPTIONS = frozenset(
    {
        "queue",
        "priority",
        "max_attempts",
        "timeout",
        "backoff",
        "deadline",
        "tags",
        "max_memory",
        "on_failure",
        "max_snoozes",
        "rate_limit",
        "group_rate",
        "group_limit",
    }
)
_CALL_OPTIONS = _REGISTER_OPTIONS | {
    "delay",
    "run_at",
    "key",
    "serial_key",
    "after",
    "allow_failure",
    "group",
    "debounce",
    "debounce_max",
}

MAX_AFTER = 10_000
"""Most dependencies one job may name."""


class JobOptions(msgspec.Struct, frozen=True):
    """A job's defaults, overridable per enqueue."""

    queue: str = "default"
    priority: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    backoff: models.Backoff = models.Backoff()
    deadline: float | None = None
    """Seconds after enqueue."""
    tags: tuple[str, ...] = ()
    max_memory: int | None = None
    """MB of RSS; the child is killed past it."""
    on_failure: str | None = None
    """Name of the job run once, with this job's JobInfo, after it gives up."""
    max_snoozes: int = 100
    """How many times it may `Snooze`; one more fails it."""
    rate_limit: str | None = None
    """Starts of this job per window, ``"N/s"``, ``"N/m"`` or ``"N/h"``, cluster-wide."""
    group_rate: str | None = None
    """Starts per window of each group's jobs."""
    group_limit: int | None = None
    """Jobs of one group held (running or reserved) at once, cluster-wide."""


class Flow(msgspec.Struct, frozen=True):
    """The per-enqueue flow options (`flow_options`)."""

    group: str | None = None
    debounce: float | None = None
    debounce_max: float = 60.0


class ParsedOptions(msgspec.Struct, frozen=True):
    options: JobOptions
    run_at: float | None = None
    deadline_at: float | None = None
    key: str | None = None
    serial_key: str | None = None
    after: tuple[int, ...] = ()
    allow_failure: bool = False
    flow: Flow = Flow()


_MAX = f"{models.MAX_SECONDS:.0f}"


def _seconds_ok(value: float | None) -> bool:
    """None, or a finite number of seconds in (0, MAX_SECONDS]."""
    return value is None or (math.isfinite(value) and 0 < value <= models.MAX_SECONDS)


def _fail(message: str, registering: bool) -> errors.ProcqueueError:
    return errors.ConfigError(message) if registering else errors.EnqueueError(message)


def _seconds_at(value: Any, what: str, registering: bool) -> float:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise _fail(f"{what} must be timezone-aware", registering)
        return value.timestamp()
    raise _fail(f"{what} must be a datetime, got {type(value).__name__}", registering)


def parse_options(
    given: dict[str, Any], defaults: JobOptions, *, now: float, registering: bool = False
) -> ParsedOptions:
    """Merges `given` over `defaults` and resolves times against `now`.

    Raises EnqueueError (ConfigError when `registering`) naming the option.
    """
    allowed = _REGISTER_OPTIONS if registering else _CALL_OPTIONS
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise _fail(
            f"unknown option {unknown[0]!r}; options are: {', '.join(sorted(allowed))}", registering
        )
    merged = msgspec.structs.asdict(defaults)
    deadline_at = None
    for name in _REGISTER_OPTIONS & set(given):
        value = given[name]
        if name == "deadline" and isinstance(value, dt.datetime):
            deadline_at = _seconds_at(value, "deadline", registering)
            value = None
        if name == "backoff" and isinstance(value, dict):
            try:
                value = msgspec.convert(value, models.Backoff)
            except (msgspec.ValidationError, ValueError) as exc:
                raise _fail(f"invalid option: backoff: {exc}", registering) from None
        if name == "tags" and isinstance(value, list):
            value = tuple(value)
        merged[name] = value
    try:
        options = msgspec.convert(merged, JobOptions, from_attributes=False)
    except (msgspec.ValidationError, ValueError) as exc:
        raise _fail(f"invalid option: {exc}", registering) from None
    low, high = models.INT32
    checks = [
        (options.queue != "" and len(options.queue) <= 100, "queue must be 1-100 characters"),
        (low <= options.priority <= high, f"priority must be from {low} to {high}"),
        (1 <= options.max_attempts <= high, f"max_attempts must be from 1 to {high}"),
        (_seconds_ok(options.timeout), f"timeout must be > 0 and <= {_MAX} seconds"),
        (
            options.max_memory is None or 1 <= options.max_memory <= high,
            f"max_memory must be from 1 to {high} MB",
        ),
        (0 <= options.max_snoozes <= high, f"max_snoozes must be from 0 to {high}"),
        (_seconds_ok(options.deadline), f"deadline must be > 0 and <= {_MAX} seconds"),
        (
            not any("\x00" in s for s in (options.queue, *options.tags)),
            "queue and tags can't hold NUL",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise _fail(message, registering)
    check_flow_defaults(options, registering)
    if options.deadline is not None:
        deadline_at = now + options.deadline
    run_at = None
    if "delay" in given:
        delay = given["delay"]
        if (
            not isinstance(delay, int | float)
            or isinstance(delay, bool)
            or not 0 <= delay <= models.MAX_SECONDS
        ):
            raise _fail(f"delay must be from 0 to {_MAX} seconds, got {delay!r}", registering)
        run_at = now + delay
    if given.get("run_at") is not None:
        run_at = _seconds_at(given["run_at"], "run_at", registering)
    for name in ("key", "serial_key"):
        value = given.get(name)
        if value is not None and (not isinstance(value, str) or not value or "\x00" in value):
            raise _fail(f"{name} must be a non-empty string without NUL", registering)
    return ParsedOptions(
        flow=flow_options(given, registering),
        after=_after(given.get("after"), registering),
        allow_failure=_flag(given.get("allow_failure", False), "allow_failure", registering),
        options=options,
        run_at=run_at,
        deadline_at=deadline_at,
        key=given.get("key"),
        serial_key=given.get("serial_key"),
    )


def check_flow_defaults(options: JobOptions, registering: bool) -> None:
    """The flow options a job may register: each rate parses and
    `group_limit` is from 1 to 2**31-1. Raises as `parse_options`."""
    for name in ("rate_limit", "group_rate"):
        value = getattr(options, name)
        if value is not None:
            try:
                rates.parse_rate(value)
            except ValueError as exc:
                raise _fail(f"{name}: {exc}", registering) from None
    if options.group_limit is not None and not 1 <= options.group_limit <= models.INT32[1]:
        raise _fail(f"group_limit must be from 1 to {models.INT32[1]}", registering)


def flow_options(given: dict[str, Any], registering: bool) -> Flow:
    """`group`, `debounce` and `debounce_max` of one enqueue: a group is a
    1-200 character string without NUL, debounce seconds are in
    (0, MAX_SECONDS] and debounce needs a `key`. Raises as `parse_options`."""
    group = given.get("group")
    if group is not None and (
        not isinstance(group, str) or not 0 < len(group) <= 200 or "\x00" in group
    ):
        raise _fail("group must be a string of 1-200 characters without NUL", registering)
    seconds: dict[str, float] = {}
    for name in ("debounce", "debounce_max"):
        value = given.get(name)
        if value is None:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool) or not _seconds_ok(value):
            raise _fail(f"{name} must be > 0 and <= {_MAX} seconds, got {value!r}", registering)
        seconds[name] = float(value)
    if "debounce" in seconds and given.get("key") is None:
        raise _fail("debounce needs a key: it replaces the pending job of that key", registering)
    return Flow(
        group=group,
        debounce=seconds.get("debounce"),
        debounce_max=seconds.get("debounce_max", 60.0),
    )


def _after(value: Any, registering: bool) -> tuple[int, ...]:
    """The `after` option: job ids (each a positive int), without repeats."""
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple) or not all(models.is_id(v) for v in value):
        raise _fail(f"after must be a list of job ids, got {value!r}", registering)
    if len(value) > MAX_AFTER:
        raise _fail(f"after names {len(value)} jobs; the limit is {MAX_AFTER}", registering)
    return tuple(sorted(set(value)))


def _flag(value: Any, name: str, registering: bool) -> bool:
    if not isinstance(value, bool):
        raise _fail(f"{name} must be True or False, got {value!r}", registering)
    return value


def bind_args(
    name: str,
    signature: inspect.Signature | None,
    args: dict[str, Any],
    *,
    codec: Codec | None = None,
    types: dict[str, Any] | None = None,
) -> bytes:
    """`args` bound against `signature` (None: a job this process doesn't
    know, stored as given), JSON-encoded with `codec`, and each argument
    with a type in `types` converted to it as a child would.

    Raises EnqueueError saying which argument does not bind, encode or fit its type.
    """
    codec = codec or Codec()
    if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
        raise errors.EnqueueError(f"arguments of {name} must be an object with string keys")
    if signature is not None:
        try:
            signature.bind(**args)
        except TypeError as exc:
            raise errors.EnqueueError(f"arguments don't fit {name}{signature}: {exc}") from None
    try:
        encoded = codec.encode(args)
    except (TypeError, ValueError, msgspec.EncodeError, OverflowError, RecursionError) as exc:
        for key, value in args.items():
            where = codec.unencodable(value, f"args[{key!r}]")
            if where is not None:
                raise errors.EnqueueError(
                    f"argument {key!r} of {name} cannot be encoded: {where}"
                ) from None
        raise errors.EnqueueError(f"arguments of {name} cannot be encoded: {exc}") from None
    # JSON has no NaN/Infinity and msgspec writes them as null: refuse
    # rather than change the value (only searched when a null was written).
    if b"null" in encoded:
        for key, value in args.items():
            if non_finite(codec.to_builtins(value)):
                raise errors.EnqueueError(
                    f"argument {key!r} of {name} holds NaN or infinity, which JSON cannot carry"
                )
    if len(encoded) > MAX_ARGS_BYTES:
        raise errors.EnqueueError(
            f"arguments of {name} are {len(encoded)} bytes encoded; the limit is {MAX_ARGS_BYTES}"
        )
    if too_deep(encoded):  # a child would decode it on a deeper stack than this encoder
        raise errors.EnqueueError(f"arguments of {name} are nested deeper than {MAX_DEPTH} levels")
    if types:
        check_types(name, msgspec.json.decode(encoded), types, codec)
    return encoded


def check_types(name: str, decoded: dict[str, Any], types: dict[str, Any], codec: Codec) -> None:
    """Each argument converts to its annotated type, as in the child.

    Raises EnqueueError naming the first argument that does not.
    """
    for key, value in decoded.items():
        wanted = types.get(key)
        if wanted is None or wanted is Any:
            continue
        try:
            codec.convert(value, wanted)
        except msgspec.ValidationError as exc:
            raise errors.EnqueueError(f"argument {key!r} of {name}: {exc}") from None


def non_finite(value: Any) -> bool:
    """Whether `value` (plain builtins) holds a NaN or infinite float anywhere."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
