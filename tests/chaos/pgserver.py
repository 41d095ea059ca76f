"""A private PostgreSQL server for chaos runs that restart their database:
``initdb`` into a folder of the run's own, ``pg_ctl start/restart/stop`` on
a port of its own, so that restarting it disturbs nobody else (the shared
server on 5432 is never touched). The binaries are the newest under
``/usr/lib/postgresql/*/bin`` (or on ``PATH``). ``initdb`` refuses to run as
root: as root, the folder belongs to the ``postgres`` user and every
command runs as that user (``runuser``)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

DATABASE = "chaos"
"""The database the runs use inside the private server."""


def binaries() -> Path | None:
    """The folder of ``pg_ctl`` and ``initdb``: the newest installed version's."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name)
    )
    if found:
        return found[-1].parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def free_port(first: int = 5499) -> int:
    """`first`, or the next port after it that nothing listens on."""
    for port in range(first, first + 100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise RuntimeError(f"no free port in {first}-{first + 99}")


@dataclass
class PrivateServer:
    """One PostgreSQL cluster in `data`, listening on 127.0.0.1:`port` only."""

    bin: Path
    data: Path
    port: int
    user: str | None
    """The user its commands run as (None: this process's own)."""

    @property
    def url(self) -> str:
        """The server's URL, naming the runs' database (no schema)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}"

    @classmethod
    def create(cls, port: int | None = None) -> PrivateServer:
        """A new cluster in a temporary folder of its own (`stop` removes it),
        started, with the runs' database.

        Raises:
            RuntimeError: no PostgreSQL binaries, or a command failed (its output said).
        """
        bin_ = binaries()
        if bin_ is None:
            raise RuntimeError("no PostgreSQL binaries (looked in /usr/lib/postgresql/*/bin)")
        user = "postgres" if os.geteuid() == 0 else None
        folder = Path(tempfile.mkdtemp(prefix="procqueue-chaos-pg-"))
        data = folder / "pgdata"
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(folder, entry.pw_uid, entry.pw_gid)
        server = cls(bin_, data, port or free_port(), user)
        server._run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        server.start()
        with psycopg.connect(server.url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as c:
            c.execute(f"CREATE DATABASE {DATABASE}")
        return server

    def _options(self) -> str:
        # Only TCP on localhost and a socket in the data folder: nothing of
        # the system's server (its socket in /var/run/postgresql) is shared.
        return (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data} "
            "-c max_connections=200 -c fsync=off"
        )

    def _run(self, tool: str, *args: str, timeout: float = 120) -> None:
        argv = [str(self.bin / tool), *args]
        if self.user is not None:
            argv = ["runuser", "-u", self.user, "--", *argv]
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            text = (done.stderr or done.stdout).strip().splitlines()
            raise RuntimeError(f"{tool} {' '.join(args[:2])}: {text[-1] if text else done}")

    def _ctl(self, action: str) -> None:
        log = self.data.parent / "postgres.log"
        if self.user is not None and not log.exists():
            log.touch()
            entry = pwd.getpwnam(self.user)
            os.chown(log, entry.pw_uid, entry.pw_gid)
        self._run(
            "pg_ctl", action, "-D", str(self.data), "-w", "-m", "fast", "-l", str(log),
            "-o", self._options(),
        )  # fmt: skip

    def start(self) -> None:
        """Starts the server and waits until it accepts connections."""
        self._ctl("start")

    def restart(self) -> float:
        """Restarts the server (a fast shutdown: every connection is cut);
        seconds taken until it accepts connections again."""
        t0 = time.monotonic()
        self._ctl("restart")
        return time.monotonic() - t0

    def stop(self) -> None:
        """Stops the server (if it runs) and removes its folder."""
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._run("pg_ctl", "stop", "-D", str(self.data), "-w", "-m", "immediate")
        shutil.rmtree(self.data.parent, ignore_errors=True)
