"""The machine and software a run measures: services started, the benchmark's own venv, versions,
machine facts, the revision measured.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchkit.settings import PEER_REQUIREMENTS, PG_START, REDIS_START, ROOT, say

# -- bootstrap: services and the benchmark's own virtual environment ----------------


def port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


def ensure_services() -> None:
    """Starts PostgreSQL and Redis when nothing listens on their ports."""
    for name, port, command, prepare in (
        ("PostgreSQL", 5432, PG_START, None),
        ("Redis", 6379, REDIS_START, ("/var/lib/redis", "/var/log/redis")),
    ):
        if port_open(port):
            continue
        say(f"{name} is not running on 127.0.0.1:{port}: starting it: {command}")
        for folder in prepare or ():
            Path(folder).mkdir(parents=True, exist_ok=True)
        subprocess.run(command, shell=True, check=True)
        give_up = time.monotonic() + 30
        while not port_open(port):
            if time.monotonic() > give_up:
                sys.exit(f"bench: {name} did not come up on port {port}")
            time.sleep(0.2)
        say(f"{name} started")


def wait_for_services(timeout: float = 60.0) -> None:
    """Waits (without starting anything) until PostgreSQL and Redis accept connections."""
    give_up = time.monotonic() + timeout
    while not (port_open(5432) and port_open(6379)) and time.monotonic() < give_up:
        time.sleep(0.5)
    time.sleep(1.0)


def ensure_venv(venv: Path, src: Path) -> Path:
    """The benchmark venv's python, creating the venv and installing into it if needed
    (procqueue editable from `src`)."""
    python = venv / "bin" / "python"
    # reinstall when procqueue's own dependencies change, too
    pyproject = (src / "pyproject.toml").read_text()
    wanted = "\n".join([f"-e {src}", *PEER_REQUIREMENTS, pyproject]) + "\n"
    stamp = venv / ".bench-requirements"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        say(f"creating the benchmark virtual environment {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    say(f"installing procqueue (editable) and the peers into {venv} ...")
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-e", str(src), *PEER_REQUIREMENTS], check=True)
    stamp.write_text(wanted)
    return python


# -- environment description -------------------------------------------------------------


def versions() -> dict[str, str]:
    from importlib import metadata

    names = [
        "procqueue",
        "procrastinate",
        "pgqueuer",
        "celery",
        "kombu",
        "rq",
        "huey",
        "peewee",
        "redis",
        "psycopg",
        "psycopg2-binary",
        "psycopg-pool",
        "asyncpg",
        "msgspec",
        "matplotlib",
        "py-spy",
    ]
    out: dict[str, str] = {"python": platform.python_version()}
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    with contextlib.suppress(Exception):
        import psycopg

        with psycopg.connect("postgresql://127.0.0.1:5432/test") as conn:
            row = conn.execute("SHOW server_version").fetchone()
            out["postgresql"] = str(row[0]) if row else "?"
            for setting in ("fsync", "synchronous_commit"):
                row = conn.execute(f"SHOW {setting}").fetchone()
                out[f"postgresql {setting}"] = str(row[0]) if row else "?"
    with contextlib.suppress(Exception):
        import redis

        client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
        out["redis-server"] = str(client.info("server")["redis_version"])
        client.close()
    return out


def machine() -> dict[str, Any]:
    model = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        mem = f"{int(f.readline().split()[1]) / 1024 / 1024:.1f} GiB"
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "memory": mem,
        "kernel": platform.release(),
        "loadavg_at_start": os.getloadavg(),
    }


def user_argv() -> list[str]:
    """The arguments the user gave (without those the re-run in the venv adds)."""
    out: list[str] = []
    argv = iter(sys.argv[1:])
    for arg in argv:
        if arg == "--in-venv":
            continue
        if arg == "--procqueue-src" and "--procqueue-rev" in sys.argv:
            next(argv, None)
            continue
        out.append(arg)
    return out


def export_revision(rev: str) -> Path:
    """A copy of procqueue at git revision `rev` (git archive), made once."""
    full = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", rev],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dest = Path("/tmp/procqueue-bench-src") / full
    if not (dest / "pyproject.toml").exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", full],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        say(f"exported procqueue at {full} to {dest}")
    return dest


def git_revision(args: argparse.Namespace) -> str:
    if args.procqueue_rev:
        return f"{Path(args.procqueue_src).name} (git archive of {args.procqueue_rev})"
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "procqueue"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return rev + (" (procqueue/ has uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"
