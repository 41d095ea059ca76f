"""Jobs that misbehave on purpose, for the adversarial and resource tests
(no cron here: a supervisor of this module does only what a test asks)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from procqueue import App, Context, protocol

app = App()


def protocol_fd() -> int:
    """The child's end of its pipe to the supervisor: ``python -m
    procqueue.child SPEC INDEX PARENT RFD WFD`` leaves WFD in ``sys.argv[5]``."""
    return int(sys.argv[5])


def note(path: str, text: str) -> None:
    """One line appended in one write."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (text + "\n").encode())
    finally:
        os.close(fd)


@app.job(max_attempts=1)
def echo(value: Any) -> Any:
    return value


@app.job(max_attempts=1)
def pipe_write(payload: str, then: str = "return") -> str:
    """Writes `payload` (hex) straight onto the protocol pipe, then returns,
    exits, or waits to be killed."""
    os.write(protocol_fd(), bytes.fromhex(payload))
    if then == "exit":
        os._exit(0)
    if then == "wait":
        time.sleep(60)
    return "wrote"


@app.job(max_attempts=1)
def flood(seconds: float, newlines: bool) -> int:
    """Writes to stdout as fast as the pipe takes it for `seconds`; bytes written."""
    chunk = (("x" * 1023 + "\n") * 64 if newlines else "y" * 65536).encode()
    fd = sys.stdout.fileno()
    written = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        written += os.write(fd, chunk)
    return written


@app.job(max_attempts=5, backoff={"base": 0.1, "factor": 1.0, "jitter": False})
def gated(cx: Context, gate: str, log: str, result_kb: int) -> str:
    """Records its start, waits for the file `gate`, returns `result_kb` KiB."""
    note(log, f"{cx.id} {cx.attempt} {os.getpid()} start")
    while not Path(gate).exists():
        time.sleep(0.01)
    note(log, f"{cx.id} {cx.attempt} {os.getpid()} end")
    return "r" * (result_kb * 1024)


@app.job(max_attempts=5, backoff={"base": 0.1, "factor": 1.0, "jitter": False})
def logged(cx: Context, log: str, seconds: float) -> int:
    """Records each run; takes `seconds`."""
    note(log, f"{cx.id} {cx.attempt} {os.getpid()} start {time.time():.6f}")
    time.sleep(seconds)
    note(log, f"{cx.id} {cx.attempt} {os.getpid()} end {time.time():.6f}")
    return cx.id


@app.job(max_attempts=1)
def bad_result(kind: str) -> Any:
    """A result JSON can't carry as is."""
    if kind == "nul":
        return "a\x00b"
    if kind == "surrogate":
        return "\ud800"
    if kind == "deep":
        value: list[Any] = []
        for _ in range(5000):
            value = [value]
        return value
    if kind == "nan":
        return float("nan")
    raise ValueError(kind)


@app.job(max_attempts=1)
def inject_step(cx: Context) -> str:
    """Sends a durable step's frame by hand, and never reads the reply."""
    from procqueue import protocol

    os.write(protocol_fd(), protocol.encode(protocol.Step(job_id=cx.id, name="s", value=b"1")))
    return "injected"


@app.job(max_attempts=1)
def step_flood(cx: Context, count: int, kb: int) -> str:
    """Sends `count` durable steps' frames of `kb` KB by hand, reading no reply."""
    from procqueue import protocol

    value = msgspec.json.encode("x" * (kb * 1024))
    for i in range(count):
        frame = protocol.encode(protocol.Step(job_id=cx.id, name=f"s{i}", value=value))
        os.write(protocol_fd(), frame)
    time.sleep(60)
    return "flooded"


@app.job(max_attempts=1)
def own_frame(cx: Context, frame: str, own: bool) -> str:
    """Writes one supervisor-bound frame (hex) onto the protocol pipe, with
    this job's id in it when `own`, then returns normally."""
    raw = bytes.fromhex(frame)
    if own:
        message = msgspec.msgpack.decode(raw[6:], type=protocol.ToSupervisor)
        raw = protocol.encode(msgspec.structs.replace(message, job_id=cx.id))
    os.write(protocol_fd(), raw)
    return "wrote"
