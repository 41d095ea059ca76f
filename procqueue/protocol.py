"""The supervisor/child pipe protocol.

Each message is a msgspec Struct in one tagged union, encoded with
msgpack and framed by a 4-byte big-endian length. The pipes are dedicated
(never the child's stdout). A frame that is oversized, truncated or not a
known message raises `errors.ProtocolError`; the side that sees it kills
(or is killed by) the other.
"""

from __future__ import annotations

import os
import struct

import msgspec

from procqueue import errors
from procqueue.codec import DECODE_ERRORS

PROTOCOL_VERSION = 1
CHILD_IDS_ENV = "PROCQUEUE_CHILD_IDS"
"""The environment variable that gives a child ``UID:GID`` of the job user
(``--job-user``): it switches to them before its Hello."""
FENCE_EXIT = 70
"""Exit code of a child that ended its job itself because its lease ran out or its
supervisor was gone: the supervisor names it so in the attempt's exit reason."""
MAX_FRAME = 256 * 1024 * 1024
"""Largest frame a child accepts: room for 64 MiB of arguments and saved steps."""
MAX_REPLY = 8 * 1024 * 1024
"""Largest frame the supervisor accepts from a child (a result, a step value, an
error): job code is untrusted, so a header announcing more fails the attempt
at once instead of making the supervisor buffer it. The child refuses a
larger result or step value itself, with a clear error."""
_HEADER = struct.Struct(">2sI")
_MAGIC = b"PQ"
"""Opens every frame: bytes a job writes to the pipe by mistake fail at once
instead of being taken for the length of a frame that never completes."""


class Message(msgspec.Struct, tag=True):
    """Base of every frame."""


# supervisor -> child


class Run(Message):
    """Run one attempt; `args` and each of `steps` are JSON bytes. `lease`:
    seconds left on the job's lease (0: unfenced); the child ends the job
    itself shortly before it runs out. `parents`: the JSON results of the
    job's done dependencies, by id (bounded by the store). `headers`: what
    the producer's `around_enqueue` hooks stored with the job."""

    job_id: int
    attempt: int
    name: str
    args: bytes
    steps: dict[str, bytes]
    lease: float = 0.0
    parents: dict[int, bytes] = {}
    queue: str = ""
    headers: dict[str, str] = {}


class Lease(Message):
    """The job's lease was renewed: `left` seconds from now."""

    job_id: int
    left: float


class Stop(Message):
    """End the running job politely: its process tree gets SIGTERM and the job
    sees `cx.cancelled`; for a job still waiting in the pipe, as Revoke. A
    job that is no longer running is left alone. `kill_in`: seconds until the
    tree gets SIGKILL, when that is decided (timeout, cancel, a drain's end):
    the job's code then gets `Stopped` at once; None (a drain's first
    request) lets it finish."""

    job_id: int
    kill_in: float | None = None


class Revoke(Message):
    """A job waiting in the child's pipe is taken back: skip it (reply Failed
    with kind "revoked") if it has not started."""

    job_id: int


class StepSaved(Message):
    """The step's result is durable; the job may go on."""

    job_id: int
    name: str


class Shutdown(Message):
    """Exit once idle."""


# child -> supervisor


class Hello(Message):
    """Sent once at start: the child imported the app (or says why not)."""

    pid: int
    version: int
    error: str | None = None


class Progress(Message):
    job_id: int
    text: str | None
    fraction: float | None


class Step(Message):
    """A durable step returned `value` (JSON); the child waits for StepSaved."""

    job_id: int
    name: str
    value: bytes


class StepClock(Message):
    """Step `name` started with a `timeout` (seconds): past it, the
    supervisor ends the job's process tree. None: the step ended without a
    result (it raised); a Step frame also ends it."""

    job_id: int
    name: str
    timeout: float | None


class Done(Message):
    """The job returned `result` (JSON). `progress`/`fraction`: its last
    progress, when it was not sent in a Progress frame (coalesced)."""

    job_id: int
    result: bytes
    progress: str | None = None
    fraction: float | None = None


class Failed(Message):
    """The attempt failed. `kind`: "retry" (Retry raised), "permanent", "error",
    "snooze" (Snooze raised: pending again in `delay` seconds, no attempt
    spent), or "revoked" (taken back before it started)."""

    job_id: int
    kind: str
    error: str
    delay: float | None = None
    progress: str | None = None
    fraction: float | None = None


ToChild = Run | Lease | Stop | Revoke | StepSaved | Shutdown
ToSupervisor = Hello | Progress | Step | StepClock | Done | Failed

_encoder = msgspec.msgpack.Encoder()
_to_child = msgspec.msgpack.Decoder(ToChild)
_to_supervisor = msgspec.msgpack.Decoder(ToSupervisor)


def encode(message: Message, *, limit: int = MAX_FRAME) -> bytes:
    """`message` as one frame, header included; ProtocolError past `limit` bytes."""
    body = _encoder.encode(message)
    if len(body) > limit:
        raise errors.ProtocolError(f"frame of {len(body)} bytes exceeds {limit}")
    return _HEADER.pack(_MAGIC, len(body)) + body


def _decode(body: bytes, to_child: bool) -> Message:
    try:
        msg: Message = (_to_child if to_child else _to_supervisor).decode(body)
    except DECODE_ERRORS as exc:
        raise errors.ProtocolError(f"malformed frame: {type(exc).__name__}: {exc}") from None
    return msg


class FrameReader:
    """Reassembles frames from bytes as they arrive on a non-blocking pipe."""

    def __init__(self, *, to_child: bool) -> None:
        self._buf = bytearray()
        self._to_child = to_child
        self._limit = MAX_FRAME if to_child else MAX_REPLY

    def feed(self, data: bytes) -> list[Message]:
        """Adds `data`; returns every message now complete, in order."""
        self._buf += data
        out: list[Message] = []
        while len(self._buf) >= _HEADER.size:
            magic, size = _HEADER.unpack_from(self._buf)
            if magic != _MAGIC:
                raise errors.ProtocolError(f"not a frame (starts {bytes(self._buf[:6])!r})")
            if size > self._limit:
                raise errors.ProtocolError(f"frame of {size} bytes exceeds {self._limit}")
            end = _HEADER.size + size
            if len(self._buf) < end:
                break
            out.append(_decode(bytes(self._buf[_HEADER.size : end]), self._to_child))
            del self._buf[:end]
        return out

    def pending(self) -> int:
        """Bytes of an incomplete frame held back (non-zero at EOF means truncated)."""
        return len(self._buf)


def read_exact(fd: int, size: int) -> bytes | None:
    """Reads exactly `size` bytes from blocking `fd`; None on EOF before the first byte."""
    chunks: list[bytes] = []
    got = 0
    while got < size:
        chunk = os.read(fd, min(size - got, 1 << 20))
        if not chunk:
            if got == 0:
                return None
            raise errors.ProtocolError(f"truncated frame: got {got} of {size} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_message(fd: int, *, to_child: bool) -> Message | None:
    """Blocks for the next frame on `fd`; None on a clean EOF."""
    header = read_exact(fd, _HEADER.size)
    if header is None:
        return None
    magic, size = _HEADER.unpack(header)
    if magic != _MAGIC:
        raise errors.ProtocolError(f"not a frame (starts {header!r})")
    limit = MAX_FRAME if to_child else MAX_REPLY
    if size > limit:
        raise errors.ProtocolError(f"frame of {size} bytes exceeds {limit}")
    body = read_exact(fd, size) if size else b""
    if body is None:
        raise errors.ProtocolError("truncated frame: header without body")
    return _decode(body, to_child)


def write_all(fd: int, data: bytes) -> None:
    """Writes all of `data` to blocking `fd` (raises BrokenPipeError if the reader is gone)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
