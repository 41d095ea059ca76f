"""Cross-process wake-ups for SQLite: Unix datagram sockets beside the file.

Each supervisor binds a socket in ``<database>.wake/``; an enqueue sends one
empty datagram to every socket there after its commit. Best effort by
design: a lost datagram costs at most one poll interval, a socket whose
owner died is removed by the next sender.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket

_MAX_PATH = 100  # sun_path is 108 bytes on Linux


class WakeDir:
    """The wake-up sockets of one SQLite database."""

    def __init__(self, db_path: str) -> None:
        self.dir = os.path.abspath(db_path) + ".wake"
        self._sock: socket.socket | None = None
        self._path: str | None = None

    def listen(self) -> int | None:
        """Binds this process's socket (once); its fd, or None if impossible."""
        if self._sock is not None:
            return self._sock.fileno()
        path = os.path.join(self.dir, secrets.token_hex(4))
        if len(path) > _MAX_PATH:
            return None
        try:
            os.makedirs(self.dir, exist_ok=True)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(path)
        except OSError:
            return None
        sock.setblocking(False)
        self._sock, self._path = sock, path
        return sock.fileno()

    def drain(self) -> bool:
        """Consumes queued wake-ups; True if there was one."""
        if self._sock is None:
            return False
        got = False
        while True:
            try:
                self._sock.recv(64)
            except (BlockingIOError, OSError):
                return got
            got = True

    def notify(self) -> None:
        """Wakes every listening supervisor; never raises."""
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.setblocking(False)
            for name in names:
                path = os.path.join(self.dir, name)
                try:
                    sender.sendto(b"", path)
                except (ConnectionRefusedError, FileNotFoundError):
                    with contextlib.suppress(OSError):
                        os.unlink(path)  # its owner is gone
                except OSError:
                    continue  # full or otherwise busy: it wakes on its next poll

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._path)
                os.rmdir(self.dir)  # only when no other supervisor listens
            self._path = None
