"""A supervisor started before its PostgreSQL server answers waits for it
(deployed together, or restarting) and then supervises; one given a login
the server refuses fails at once with one line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from procqueue import App, JobState
from tests.conftest import PG_URL, drop_pg_schema, make_pg_dsn
from tests.helpers import JOB, SPEC, finished, wait_until
from tests.jobs import basic
from tests.procs import ROOT

pytestmark = pytest.mark.usefixtures("pg_available")


class Forwarder:
    """A TCP listener on `port` that relays every connection to PostgreSQL's
    real port: until it starts, nothing listens where the supervisor dials."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_relay, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self.server.close()


def _relay(src: socket.socket, dst: socket.socket) -> None:
    with closing(src), closing(dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass


def _free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _supervise(dsn: str, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCQUEUE_")}
    env["PYTHONPATH"] = str(ROOT)
    argv = [sys.executable, "-m", "procqueue", "supervise", SPEC, "--dsn", dsn, "--workers", "1"]
    with open(log, "wb") as out:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


@pytest.fixture
def schema_dsn() -> Iterator[str]:
    url, schema = make_pg_dsn()
    yield url
    drop_pg_schema(schema)


def test_a_supervisor_started_before_its_server_listens_waits_and_then_runs_jobs(
    schema_dsn: str, tmp_path: Path
) -> None:
    port = _free_port()
    real = PG_URL.split("//", 1)[1].split("/", 1)[0]
    host, _, real_port = real.partition(":")
    away = schema_dsn.replace(f"//{real}/", f"//127.0.0.1:{port}/")
    log = tmp_path / "sup.log"
    proc = _supervise(away, log)
    forwarder: Forwarder | None = None
    app: App | None = None
    try:
        wait_until(lambda: "trying again" in log.read_text(), timeout=30, what="a retry")
        assert proc.poll() is None, log.read_text()
        forwarder = Forwarder(port, (host or "127.0.0.1", int(real_port or 5432)))
        app = basic.app.using(schema_dsn)
        job_id = app.enqueue(JOB + "add", {"a": 2, "b": 3})
        info = finished(app, job_id, timeout=60)
        assert info.state == JobState.DONE and info.result == 5
        assert "cannot connect to PostgreSQL" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if app is not None:
            app.close()
        if forwarder is not None:
            forwarder.close()


def test_a_refused_login_fails_at_once_with_one_line(schema_dsn: str, tmp_path: Path) -> None:
    refused = schema_dsn.replace("postgresql://", "postgresql://no_such_role_x@", 1)
    log = tmp_path / "sup.log"
    proc = _supervise(refused, log)
    assert proc.wait(timeout=30) == 1
    text = log.read_text()
    assert "trying again" not in text
    lines = [line for line in text.splitlines() if line.startswith("procqueue: error:")]
    assert len(lines) == 1 and "cannot connect to PostgreSQL" in lines[0], text
