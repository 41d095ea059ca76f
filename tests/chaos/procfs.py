"""What /proc says about processes: children, liveness, titles, memory.

Linux only, like the guarantees it checks (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal

_PR_SET_CHILD_SUBREAPER = 36
_JOB_IN_TITLE = re.compile(r"#(\d+)$")


def children(pid: int) -> set[int]:
    """Direct children of `pid` (every thread's), empty when it is gone."""
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found.update(int(p) for p in f.read().split())
        except OSError:
            continue
    return found


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    # the command may hold spaces and parentheses: split after the last ')'
    return text[text.rindex(")") + 2 :].split()


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def stopped(pid: int) -> bool:
    """True while `pid` is stopped by a signal (SIGSTOP)."""
    fields = _stat(pid)
    return fields is not None and fields[0] == "T"


def parent(pid: int) -> int | None:
    fields = _stat(pid)
    return None if fields is None else int(fields[1])


def title(pid: int) -> str:
    """The process title (setproctitle rewrites the command line), '' when gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def job_in_title(text: str) -> int | None:
    """The job id a child's title names (``procqueue child 2 NAME#ID``)."""
    m = _JOB_IN_TITLE.search(text)
    return int(m.group(1)) if m else None


def status_kb(pid: int, field: str) -> int | None:
    """A ``kB`` field of /proc/PID/status (``VmRSS``, ``VmHWM``), None when gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def set_subreaper(on: bool = True) -> bool:
    """Makes orphans of our descendants our children (so we can see and reap
    them); off again around commands that daemonize (a restarted server)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def reap(pid: int) -> None:
    """Collects `pid` if it is our zombie child (never blocks)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def kill_pid(pid: int, sig: signal.Signals, *, expected_parent: int | None = None) -> bool:
    """Signals `pid` through a pidfd (no pid-reuse race once it is open), only
    if its parent is still `expected_parent` when given. True if sent."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if expected_parent is not None and parent(pid) != expected_parent:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def diagnose(pid: int) -> str:
    """Why `pid` may still live, in one line: its state, each thread's wait
    channel, and for each pipe it reads, which other processes hold it."""
    fields = _stat(pid)
    if fields is None:
        return "gone"
    waits = []
    with contextlib.suppress(OSError):
        for task in sorted(os.listdir(f"/proc/{pid}/task")):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/wchan") as f:
                waits.append(f.read().strip() or "-")
    pipes: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("pipe:"):
                    pipes[target] = int(fd)
    holders: dict[str, list[int]] = {p: [] for p in pipes}
    for other in (d for d in os.listdir("/proc") if d.isdigit() and int(d) != pid):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{other}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{other}/fd/{fd}")
                    if target in holders:
                        holders[target].append(int(other))
    held = ", ".join(f"fd {pipes[p]} {p} also held by {sorted(set(h))}" for p, h in holders.items())
    return f"state {fields[0]}, parent {fields[1]}, threads waiting in {waits}; pipes: {held}"
