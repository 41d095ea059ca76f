"""Records shared by every layer: what a job is, what a claim returns, what
an outcome records. Pure data, no I/O."""

from __future__ import annotations

import datetime as dt
import enum
import math
import re
from typing import Any

import msgspec

from procqueue import rates

PARENT_RESULTS_MAX = 64 * 1024 * 1024
"""Largest total of a job's dependencies' results handed to it: past it,
the job fails at its claim (the frame that carries them stays bounded)."""
ERROR_MAX_CHARS = 2000
"""Error text stored for a job is capped, so a huge traceback cannot bloat rows."""


class JobState(enum.StrEnum):
    BLOCKED = "blocked"
    """Waiting for its dependencies (`NewJob.after`) to end; never claimed."""
    PENDING = "pending"
    RESERVED = "reserved"
    """Claimed by a supervisor and waiting in its memory for an idle child (in
    the database it is ``running``: it counts against limits and serial keys)."""
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATES = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED})
HELD_STATES = frozenset({JobState.RESERVED, JobState.RUNNING})
"""Held by a supervisor under a lease (``running`` in the database)."""
STORED_STATES = frozenset(JobState) - {JobState.RESERVED}
"""The states a row holds; ``reserved`` is a ``running`` row no child started yet."""


MAX_SECONDS = 10 * 365 * 86400.0
"""The longest delay, timeout, deadline or backoff accepted (ten years): any
longer is a mistake, and sums of times stay far from overflow."""
INT32 = (-(2**31), 2**31 - 1)
"""The range of priority, max_attempts and max_memory on both backends
(PostgreSQL stores them as integer)."""


class Backoff(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Delay before retry N: ``min(max, base * factor**(N-1))``, uniformly
    jittered over ``[0, delay]`` when `jitter` ("full jitter")."""

    base: float = 1.0
    factor: float = 2.0
    max: float = 3600.0
    jitter: bool = True

    def __post_init__(self) -> None:
        finite = all(math.isfinite(v) for v in (self.base, self.factor, self.max))
        if not finite or self.base < 0 or self.factor < 1 or not 0 <= self.max <= MAX_SECONDS:
            raise ValueError(
                f"Backoff needs finite base >= 0, factor >= 1, 0 <= max <= {MAX_SECONDS:.0f}"
            )


class AttemptInfo(msgspec.Struct, frozen=True):
    """One attempt of a job, as recorded when it ended (``procqueue show``)."""

    attempt: int
    outcome: str
    """done, failed, retried, cancelled, handed_back (refunded) or lost (its lease ran out)."""
    ended_at: dt.datetime
    host: str | None = None
    supervisor_pid: int | None = None
    child_pid: int | None = None
    claimed_at: dt.datetime | None = None
    started_at: dt.datetime | None = None
    """When its child started it (None: it never started)."""
    seconds: float | None = None
    """How long it ran in its child."""
    exit_reason: str | None = None
    """How its child ended, when it did not survive the attempt: an exit code or a signal name."""
    error: str | None = None
    peak_memory: float | None = None
    """Highest RSS (MB) of the job's process tree that its supervisor sampled."""


class JobInfo(msgspec.Struct, frozen=True):
    """One job's record (DESIGN.md section 5). Times are UTC."""

    id: int
    name: str
    queue: str
    state: JobState
    priority: int
    attempts: int
    max_attempts: int
    args: dict[str, Any]
    result: Any
    error: str | None
    progress: str | None
    fraction: float | None
    key: str | None
    serial_key: str | None
    tags: list[str]
    run_at: dt.datetime
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    deadline_at: dt.datetime | None
    pid: int | None = None
    """The child process running the job now, once known (None once the
    attempt ended: its history entry keeps the pid, ``AttemptInfo.child_pid``)."""
    undecodable: str | None = None
    """Set when the job's row holds values that do not decode (a corrupted
    or hand-edited row): names each such column and why, e.g. ``"column
    args: invalid JSON"``. Those fields hold placeholders (empty, zero, the
    epoch, state failed); the others are as stored."""
    owner: str | None = None
    """The supervisor (``host:pid:token``) holding the job while it runs."""
    orphaned: bool = False
    """Running, but its owner's heartbeat is stale (or absent): its
    supervisor is probably gone; the job is rescued when its lease passes."""
    history: list[AttemptInfo] = []
    """Every recorded attempt, oldest first (filled in by `get`, not by listings)."""


class NewJob(msgspec.Struct, frozen=True):
    """A job to insert. `args` is already-encoded JSON (validated at enqueue)."""

    name: str
    args: bytes
    queue: str = "default"
    priority: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    max_memory: int | None = None
    backoff: Backoff = Backoff()
    run_at: float | None = None
    deadline_at: float | None = None
    key: str | None = None
    serial_key: str | None = None
    tags: list[str] = []
    on_failure: str | None = None
    batch_id: int | None = None
    """The batch the job joins (an open batch; see `BatchInfo`)."""
    after: list[int] = []
    """Ids of the jobs it depends on (each must exist): it is blocked until
    every one is terminal, then pending if all are done, else cancelled."""
    allow_failure: bool = False
    """Pending once its dependencies are terminal, whatever their states."""
    max_snoozes: int = 100
    """How many times it may snooze before a snooze fails it."""
    headers: dict[str, str] = {}
    """What the producer's `around_enqueue` hooks store with it (a trace context...)."""
    flow: rates.Flow = rates.Flow()


class Dependency(msgspec.Struct, frozen=True):
    """One edge: job `job_id` waits for job `depends_on` (its name and
    state; None once that job was pruned)."""

    job_id: int
    depends_on: int
    name: str | None
    state: str | None


class ClaimedJob(msgspec.Struct, frozen=True):
    """What a supervisor needs to run one attempt of a job it now holds."""

    id: int
    attempt: int
    name: str
    queue: str
    args: bytes
    steps: dict[str, msgspec.Raw]
    max_attempts: int
    timeout: float | None
    max_memory: int | None
    backoff: Backoff
    deadline_at: float | None
    serial_key: str | None
    run_at: float
    snoozes: int = 0
    """Times it snoozed so far (none counts against max_attempts)."""
    max_snoozes: int = 100
    parents: dict[int, bytes] = {}
    """The JSON results of its done dependencies, by id (`Context.parent_results`)."""
    headers: dict[str, str] = {}
    """What its producer's hooks stored with it (text entries only)."""


class Outcome(msgspec.Struct, frozen=True):
    """How one attempt ended, as recorded (fenced by `attempt`).

    `state` is the state the job moves to: done, failed, cancelled, or
    pending (a retry at `run_at`, or a hand-back that refunds the attempt).
    """

    id: int
    attempt: int
    state: JobState
    result: bytes | None = None
    error: str | None = None
    run_at: float | None = None
    refund: bool = False
    progress: str | None = None
    """The attempt's last progress, when not written yet."""
    fraction: float | None = None
    history: str | None = None
    """The attempt's outcome for its history row (None: the attempt never
    reached a child, no row is written); see `AttemptInfo.outcome`."""
    child_pid: int | None = None
    started_at: float | None = None
    """Wall time its child started it."""
    exit_reason: str | None = None
    peak_memory: float | None = None
    snooze: bool = False
    """A snooze: pending again (with `refund`), one more against max_snoozes."""


class SupervisorInfo(msgspec.Struct, frozen=True):
    """One supervisor's heartbeat row (``procqueue supervisors``)."""

    owner: str
    host: str
    pid: int
    version: str
    spec: str
    queues: list[str] | None
    """The queues it claims from (None: every queue)."""
    limits: dict[str, int]
    """The ``--queue NAME=LIMIT`` it was started with."""
    workers: int
    busy: int
    started_at: dt.datetime
    last_seen: dt.datetime
    beat_every: float
    alive: bool = True
    """Its last heartbeat is recent (within `STALE_BEATS` beats)."""


STALE_BEATS = 3
"""A supervisor whose heartbeat is this many beats late (plus a second) is taken for dead."""


MAX_ID = 2**63 - 1
"""Job and batch ids are 64-bit signed integers on both backends."""


def is_id(value: object) -> bool:
    """Whether `value` is an int a job or batch could have as its id (past 64
    bits a driver would raise OverflowError, differently on each backend)."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ID


def alive(last_seen: float, beat_every: float, now: float) -> bool:
    """Whether a heartbeat at `last_seen`, every `beat_every` s, is recent at `now`."""
    return now - last_seen <= STALE_BEATS * beat_every + 1.0


def owner_parts(owner: str | None) -> tuple[str | None, int | None]:
    """(host, pid) of a supervisor's owner string ``host:pid:token``."""
    if not owner:
        return None, None
    parts = owner.split(":")
    if len(parts) < 3:
        return owner, None
    host, pid = ":".join(parts[:-2]), parts[-2]
    return host or None, int(pid) if pid.isdigit() else None


class Throughput(msgspec.Struct, frozen=True):
    """Jobs that ended per UTC minute, as the store counted them."""

    first_minute: int
    """The first minute counted, in minutes since the epoch."""
    done: list[int]
    """Jobs done in each minute from `first_minute` on, oldest first."""
    failed: list[int]
    """Jobs failed in each minute, as `done`."""
    last_60s: int
    """Jobs done or failed in the last 60 seconds."""


class QueueInfo(msgspec.Struct, frozen=True):
    name: str
    limit: int | None
    paused: bool
    blocked: int = 0
    """Waiting for their dependencies."""
    pending: int = 0
    reserved: int = 0
    """Claimed ahead, waiting in a supervisor's memory for an idle child."""
    running: int = 0
    done: int = 0
    failed: int = 0
    cancelled: int = 0
    oldest_pending_age: float | None = None
    """Seconds since the earliest due pending job's run_at."""
    limit_by: str | None = None
    """Who set the limit (``operator``, or ``supervise on HOST:PID``)."""
    limit_at: dt.datetime | None = None
    rate: str | None = None  # its start rate ("100/m"; None: none), for flow control
    rate_used: int = 0  # the starts counted in that rate's current window


class BatchState(enum.StrEnum):
    OPEN = "open"
    """Not sealed yet: members may still join; it cannot complete."""
    RUNNING = "running"
    """Sealed, with members not yet done, failed or cancelled."""
    COMPLETE = "complete"
    """Sealed, every member terminal; its callbacks were enqueued."""


class BatchInfo(msgspec.Struct, frozen=True):
    """One batch and the states of its members (what `on_complete` and
    `on_success` handlers receive). Times are UTC."""

    id: int
    name: str
    state: BatchState
    meta: dict[str, Any]
    total: int
    pending: int
    running: int
    done: int
    failed: int
    cancelled: int
    fraction: float
    """Members terminal (done, failed or cancelled) over `total`; 0.0 when empty."""
    created_at: dt.datetime
    sealed_at: dt.datetime | None
    started_at: dt.datetime | None
    """When its earliest member still on record started its latest attempt."""
    finished_at: dt.datetime | None
    """When it last completed (None while open or running)."""
    cancelled_at: dt.datetime | None
    completions: int
    """How many times it completed: a retry of its members reopens it."""
    on_complete: str | None
    on_success: str | None
    undecodable: str | None = None
    """As `JobInfo.undecodable`, for the batch's own row."""
    blocked: int = 0
    """Members waiting for their dependencies."""

    @property
    def succeeded(self) -> bool:
        """Complete with every member done."""
        return self.state == BatchState.COMPLETE and self.done == self.total


class BatchCallback(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A batch's handler job, checked against the registry when the batch was
    created. The store inserts `job` when the batch completes, with the
    batch's `BatchInfo` as the argument named `arg` (no argument if None)."""

    job: NewJob
    arg: str | None
    deadline: float | None = None
    """The handler's deadline in seconds, counted from the completion."""


_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_OR_NEWLINE = re.compile(f"{_CONTROL.pattern[:-1]}\n]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, lines: bool = False) -> str:
    """`text` with every control character written as an escape (``\\x1b``,
    ``\\r``, ``\\u202e``): a name, an error, a progress message or an output
    line a job controls can't move the cursor, retitle or clear the terminal,
    or forge a line. With `lines`, newlines are kept (multi-line values).
    The one escaping of what the CLI and the log print."""
    return (_CONTROL if lines else _CONTROL_OR_NEWLINE).sub(_escape, text)


def cap_error(text: str) -> str:
    """`text` cut to ERROR_MAX_CHARS, keeping its head and its tail (the raise
    site), with NUL characters (which PostgreSQL text refuses) made visible."""
    text = text.replace("\x00", "\\x00")
    if len(text) <= ERROR_MAX_CHARS:
        return text
    half = (ERROR_MAX_CHARS - 40) // 2  # room for the marker line
    return f"{text[:half]}\n[... {len(text) - 2 * half} chars cut ...]\n{text[-half:]}"


def to_datetime(seconds: float | None) -> dt.datetime | None:
    if seconds is None:
        return None
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
