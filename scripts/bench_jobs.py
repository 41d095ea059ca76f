"""Job bodies shared by every benchmarked system, and the record file they write.

Every system's adapter registers thin wrappers around these functions, so the
work done inside a job and the way it is measured are identical everywhere:
each finished job appends one fixed-size record to ``$BENCH_DIR/records.bin``
with a single ``O_APPEND`` ``write`` (atomic for a record this small), and the
harness reads that file to learn when jobs started and ended. Times are
``time.monotonic()``: one system-wide clock (CLOCK_MONOTONIC) shared by the
harness, the workers and their children. The CPU-heavy job also records the
CPU time its own thread spent (``time.thread_time()``), so a run can be
compared with the work the jobs actually did, not with a nominal duration.
"""

from __future__ import annotations

import ctypes
import os
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

RECORD = struct.Struct("<8sqqddd")
"""kind (8 bytes), seq, pid, start, end, cpu: 48 bytes."""

RECORD_FILE = "records.bin"
GATE_FILE = "gate.open"

_clock = time.monotonic


@dataclass(frozen=True, slots=True)
class Record:
    kind: str
    seq: int
    pid: int
    start: float
    end: float
    cpu: float = 0.0
    """CPU seconds of the job's own thread (cpu jobs), or a count (storm jobs); else 0."""


def _bench_dir() -> str:
    return os.environ["BENCH_DIR"]


def write_record(kind: str, seq: int, start: float, end: float, cpu: float = 0.0) -> None:
    """Appends one record with one write (O_APPEND: concurrent writers never interleave)."""
    data = RECORD.pack(kind.encode(), seq, os.getpid(), start, end, cpu)
    fd = os.open(
        os.path.join(_bench_dir(), RECORD_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
    )
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read_records(bench_dir: str | Path, offset: int = 0) -> tuple[list[Record], int]:
    """The whole records written since byte `offset`, and the offset after them."""
    path = Path(bench_dir) / RECORD_FILE
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    usable = len(data) - len(data) % RECORD.size
    records = [
        Record(kind.rstrip(b"\0").decode(), seq, pid, start, end, cpu)
        for kind, seq, pid, start, end, cpu in RECORD.iter_unpack(data[:usable])
    ]
    return records, offset + usable


# -- job bodies ---------------------------------------------------------------


def noop(seq: int) -> None:
    """Does nothing but record itself."""
    start = _clock()
    write_record("noop", seq, start, _clock())


def gate(seq: int) -> None:
    """Holds its worker slot until the harness creates the gate file."""
    start = _clock()
    write_record("gatein", seq, start, start)
    path = os.path.join(_bench_dir(), GATE_FILE)
    give_up = start + 300.0
    while not os.path.exists(path) and _clock() < give_up:
        time.sleep(0.0005)
    write_record("gate", seq, start, _clock())


def spin(n: int) -> int:
    """Pure-Python CPU work: `n` iterations of integer arithmetic."""
    acc = 0
    for i in range(n):
        acc = (acc + i * i) % 1_000_003
    return acc


def cpu(seq: int, n: int) -> None:
    """~50 ms of pure-Python CPU (the harness calibrates `n`)."""
    start = _clock()
    cpu0 = time.thread_time()
    spin(n)
    cpu_s = time.thread_time() - cpu0
    write_record("cpu", seq, start, _clock(), cpu_s)


def crashy(seq: int, crash: bool) -> None:
    """Segfaults when `crash`; otherwise a no-op that records itself."""
    start = _clock()
    if crash:
        ctypes.string_at(0)  # SIGSEGV: reads address 0
    write_record("crashy", seq, start, _clock())


def sleep(seq: int, seconds: float) -> None:
    """Sleeps `seconds` (a job that waits, e.g. on I/O: no CPU to compete for)."""
    start = _clock()
    time.sleep(seconds)
    write_record("sleep", seq, start, _clock())


def storm(seq: int, seconds: float, progress: Callable[[float], None]) -> None:
    """Calls `progress(fraction)` in a tight loop for `seconds`.

    Records ``stormin`` when it starts and ``storm`` when it ends, with the
    number of calls made in the ``cpu`` field.
    """
    start = _clock()
    write_record("stormin", seq, start, start)
    end = start + seconds
    calls = 0
    now = start
    while now < end:
        progress(min(1.0, (now - start) / seconds))
        calls += 1
        now = _clock()
    write_record("storm", seq, start, now, float(calls))


def calibrate(target_s: float = 0.050, rounds: int = 25) -> int:
    """Iterations of `spin` that take `target_s` of CPU in this interpreter.

    Uses the process's CPU time and the fastest of `rounds`, so time spent
    waiting for a core on a busy machine does not shrink the job.
    """
    n = 20_000
    while True:
        t0 = time.process_time()
        spin(n)
        if time.process_time() - t0 > 0.02:
            break
        n *= 2
    best = float("inf")
    for _ in range(rounds):
        time.sleep(0.005)
        t0 = time.process_time()
        spin(n)
        best = min(best, time.process_time() - t0)
    return max(1, round(target_s * n / best))


def iter_kinds(records: list[Record], kind: str) -> Iterator[Record]:
    return (r for r in records if r.kind == kind)
