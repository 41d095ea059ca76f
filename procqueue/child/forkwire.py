"""The messages between a supervisor's fork server and its template process
(``python -m procqueue.child --template``), over a Unix socket that also
carries file descriptors (SCM_RIGHTS). Both ends import this module, so a
message's layout is written once."""

from __future__ import annotations

import array
import socket
import struct

SPAWN = struct.Struct("!cIi")
"""Supervisor -> template: b"S", request number, child index; with the child's
ends of its pipes (to_child read, from_child write, stdout, stderr)."""
SPAWNED = struct.Struct("!cIi")
"""Template -> supervisor: b"P", request number, pid; with a pidfd when the
platform has them. b"F" + request number + text: the fork failed."""
EXITED = struct.Struct("!cii")
"""Template -> supervisor: b"X", pid, returncode (`Popen` convention)."""
FAILED = struct.Struct("!cI")
MAX_MESSAGE = 4096
READY = b"R"
LOAD_ERROR = b"E"
"""Template -> supervisor, once: the app is loaded (b"R"), or b"E" + why not."""


def recv(sock: socket.socket, maxfds: int, flags: int = 0) -> tuple[bytes, list[int]]:
    """One message and the fds it carries (`socket.recv_fds` ignores
    `flags` before Python 3.12)."""
    data, ancdata, _, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(maxfds * 4), flags)
    fds = array.array("i")
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)
