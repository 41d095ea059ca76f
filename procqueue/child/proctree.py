"""A process and everything it started, read from /proc (Linux).

A job may start subprocesses, and those may leave its process group
(``setsid``) or outlive their parent. The child process is a subreaper,
so everything a job leaves behind stays among its descendants; these
helpers find, measure and signal that whole tree. Elsewhere (no /proc)
they see the process alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time

_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1


def children(pid: int) -> list[int]:
    """Direct children of `pid` (every thread's), empty when it is gone."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(p) for p in f.read().split())
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, parents before their children."""
    out: list[int] = []
    frontier = [pid]
    seen = {pid}
    while frontier:
        below = [p for parent in frontier for p in children(parent) if p not in seen]
        seen.update(below)
        out.extend(below)
        frontier = below
    return out


def rss_mb(pids: list[int]) -> float:
    """Resident memory of `pids` together, in MB (gone processes count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total * _PAGE_MB


KILL_PASSES_S = 2.0
"""How long `signal_tree` goes on killing a tree that keeps forking."""
QUIET_PASSES = 3
"""Passes in a row that find no new process before a tree counts as ended."""


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def signal_tree(pid: int, sig: signal.Signals, *, include_root: bool = True) -> None:
    """Sends `sig` to `pid`'s process group and to every descendant of `pid`
    (those that left the group too). Gone processes are fine.

    SIGKILL ends the whole tree, whatever it does meanwhile: `pid` is
    stopped first (it can start nothing more, and as a subreaper it still
    adopts the orphans), then its descendants are killed pass after pass,
    each pass finding what forked during the last, until passes find
    nothing new (or `KILL_PASSES_S` has passed), and `pid` last.
    """
    if sig == signal.SIGKILL:
        if include_root:
            _signal(pid, signal.SIGSTOP)
        _kill_below(pid)
    if include_root:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
    for p in descendants(pid):
        _signal(p, sig)
    if include_root and sig == signal.SIGKILL:
        _signal(pid, sig)  # also when it had left its own group


def _kill_below(pid: int) -> None:
    """SIGKILLs every descendant of `pid`, pass after pass, until
    `QUIET_PASSES` passes in a row find no process the earlier ones did not.

    Each pass signals every pid listed at once, zombies included (they are
    this tree's, so their pids can't be reused yet): asking each which is
    alive first takes longer than a hopping process lives. What forked
    during a pass is listed by the next.
    """
    give_up = time.monotonic() + KILL_PASSES_S
    seen: set[int] = set()
    quiet = 0
    ours = pid == os.getpid()
    while time.monotonic() < give_up:
        if ours:  # its zombies collected, each pass stays as short as the live tree
            reap_zombies()
        listed = descendants(pid)
        if not listed:  # the common case: the job left nothing behind
            return
        for p in listed:
            _signal(p, signal.SIGKILL)
        quiet = quiet + 1 if seen.issuperset(listed) else 0
        if quiet >= QUIET_PASSES:
            return
        seen.update(listed)
        time.sleep(0.001)


def reap_zombies() -> None:
    """Collects every exited child of this process (never blocks)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def become_subreaper() -> None:
    """Makes orphans among this process's descendants its children rather
    than init's, so that `descendants` still finds them (Linux; a no-op
    elsewhere)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def continue_when_orphaned() -> None:
    """Asks the kernel for a SIGCONT to this process when its parent (the
    supervisor, or the fork server's template, which ends with it) dies.

    Killing a tree stops its root first (`signal_tree`): a supervisor that
    dies between that SIGSTOP and its SIGKILL would leave the child stopped
    for ever, unable to see its pipe end. Continued, it sees the end and
    exits, ending its job's tree. A SIGCONT at any other time does nothing.
    Cleared by the kernel when credentials change: call it after them
    (Linux; a no-op elsewhere)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGCONT), 0, 0, 0)
