"""Where a child's `faulthandler` writes the Python stack of a fatal signal
(SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL), so that the supervisor can put
it into the error of the attempt that crashed.

One file per child process, named by its pid in the temporary directory:
the child creates it at start, the supervisor reads and deletes it when it
reaps that child, whatever the child died of.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import tempfile
from pathlib import Path
from typing import IO

TAIL_CHARS = 1500
"""Of a stack dump, the last this-many characters are kept (the innermost frames come first)."""
_OWN_FRAMES = (
    f'File "{os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}{os.sep}',
    'File "<frozen runpy>"',
)
"""How the frames of procqueue's own code (and of ``python -m``) start in a dump."""


def path(pid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"procqueue-faults-{pid}.log"


def enable() -> IO[str] | None:
    """Turns `faulthandler` on for this process, writing to its file; the
    caller keeps the returned file open for the life of the process (None
    when the file can't be made: the stack then goes nowhere)."""
    target = path(os.getpid())
    with contextlib.suppress(FileNotFoundError):
        target.unlink()  # a file left by an earlier process of the same pid
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    out = os.fdopen(fd, "w")
    faulthandler.enable(file=out, all_threads=False)
    return out


def collect(pid: int) -> str | None:
    """The stack dump child `pid` left (trimmed), or None; deletes its file."""
    if pid <= 0:
        return None
    target = path(pid)
    try:
        text = target.read_text(errors="replace").strip()
    except OSError:
        return None
    with contextlib.suppress(OSError):
        target.unlink()
    if not text:
        return None
    text = _job_frames(text)
    if len(text) > TAIL_CHARS:
        text = text[:TAIL_CHARS] + "\n[...]"
    return text


def _job_frames(dump: str) -> str:
    """`dump` without the frames of procqueue's own code (the runner, the
    child's loop) that every crash shares: the job's frames are what tell
    one crash from another."""
    lines = dump.splitlines()
    kept = [line for line in lines if not line.strip().startswith(_OWN_FRAMES)]
    if len(kept) == len(lines):
        return dump
    return "\n".join([*kept, f"({len(lines) - len(kept)} frames of procqueue's own left out)"])
