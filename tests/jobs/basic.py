"""Jobs the process tests run in real children (imported by each child)."""

from __future__ import annotations

import ctypes
import datetime
import os
import signal
import sys
import time
from pathlib import Path

from procqueue import App, Context, Permanent, Retry

app = App()


@app.job
def add(a: int, b: int) -> int:
    return a + b


@app.job
def whoami() -> int:
    return os.getpid()


@app.job
def ids() -> list[int]:
    """The user and group the job runs as."""
    return [os.getuid(), os.getgid()]


@app.job(max_attempts=1)
def signal_process(pid: int) -> str:
    """Tries to stop process `pid`: what a hostile job would do to its supervisor."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except PermissionError:
        return "refused"
    os.kill(pid, signal.SIGCONT)
    return "stopped it"


@app.job
def echo(value: object) -> object:
    return value


@app.job(max_attempts=1)
def segfault() -> None:
    ctypes.string_at(0)


@app.job(max_attempts=1)
def exit3() -> None:
    os._exit(3)


@app.job(max_attempts=1)
def raise_system_exit() -> None:
    raise SystemExit(4)


@app.job(max_attempts=1)
def raise_keyboard_interrupt() -> None:
    raise KeyboardInterrupt


@app.job(max_attempts=1, timeout=0.5)
def ignore_sigterm_and_sleep(marker: str) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(marker).write_text(str(os.getpid()))
    time.sleep(60)


@app.job(max_attempts=1)
def sleep_forever(marker: str) -> None:
    Path(marker).write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)


@app.job(max_attempts=1)
def allocate(mb: int) -> int:
    blob = bytearray(mb * 1024 * 1024)
    for i in range(0, len(blob), 4096):
        blob[i] = 1
    globals().setdefault("_hold", []).append(blob)
    return os.getpid()


@app.job(max_attempts=1, max_memory=100)
def allocate_forever() -> None:
    hold = []
    while True:
        block = bytearray(16 * 1024 * 1024)
        for i in range(0, len(block), 4096):
            block[i] = 1
        hold.append(block)
        time.sleep(0.01)


@app.job
def flood(mb: int) -> str:
    line = "x" * 1023 + "\n"
    for _ in range(mb * 1024):
        sys.stdout.write(line)
    sys.stdout.flush()
    return "flooded"


@app.job(max_attempts=3, backoff={"base": 0.01, "jitter": False})
def fail_then_succeed(cx: Context, times: int) -> int:
    if cx.attempt <= times:
        raise RuntimeError(f"failing attempt {cx.attempt}")
    return cx.attempt


@app.job
def permanent() -> None:
    raise Permanent("no point retrying")


@app.job(max_attempts=5)
def retry_later(cx: Context) -> int:
    if cx.attempt == 1:
        raise Retry("not yet", delay=0.0)
    return cx.attempt


@app.job
def progress(cx: Context, marker: str) -> str:
    cx.progress("half", 0.5)
    while not Path(marker).exists():
        time.sleep(0.01)
    return "ok"


@app.job(max_attempts=3)
def durable(cx: Context, log: str) -> list[int]:
    def work(n: int) -> int:
        with open(log, "a") as f:
            f.write(f"{n}\n")
        return n * 10

    a = cx.step("first", work, 1)
    b = cx.step("second", work, 2)
    return [a, b]


@app.job
def typed(when: datetime.datetime, n: int = 1) -> str:
    return f"{when.isoformat()} x{n}"


@app.job
def span(path: str, seconds: float) -> None:
    start = time.time()
    time.sleep(seconds)
    with open(path, "a") as f:
        f.write(f"{start} {time.time()}\n")


@app.job(max_attempts=3)
def stall_first(cx: Context, marker: str) -> int:
    if cx.attempt == 1:
        Path(marker).write_text(str(os.getpid()))
        while True:
            time.sleep(0.05)
    return cx.attempt
