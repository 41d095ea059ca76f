"""Celery's first-steps app and RQ's word-count example, ported with only the
renames docs/migrating.md lists, run as a user runs them: a module in a
folder, ``procqueue supervise MODULE`` and a producer script started there,
on both backends. The ported files are quoted in the guide verbatim."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "migrating.md"

CELERY_TASKS = """\
from procqueue import App

app = App()


@app.job
def add(x, y):
    return x + y
"""

CELERY_PRODUCER = """\
from tasks import add, app

job_id = add.enqueue(4, 4)
print(app.result(job_id, timeout=10))
"""

RQ_MODULE = """\
import urllib.request

from procqueue import App

app = App()


@app.job
def count_words_at_url(url):
    resp = urllib.request.urlopen(url)
    return len(resp.read().split())
"""

RQ_PRODUCER = """\
import sys

from my_module import app, count_words_at_url

job_id = count_words_at_url.enqueue(sys.argv[1])
print(app.result(job_id, timeout=10))
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "app").mkdir()
    return tmp_path / "app"


def _env(dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PROCQUEUE_DSN": dsn}


@pytest.fixture
def supervise(folder: Path, dsn: str) -> Iterator[Callable[[str], None]]:
    """Starts ``procqueue supervise MODULE`` in the folder; drains it at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(module: str) -> None:
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "procqueue", "supervise", module, "--workers", "1"],
                cwd=folder,
                env=_env(dsn),
            )
        )

    yield start
    for process in started:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def _run(folder: Path, dsn: str, *argv: str) -> str:
    out = subprocess.run(
        [sys.executable, *argv],
        cwd=folder,
        env=_env(dsn),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_guide_quotes_the_ported_files() -> None:
    guide = GUIDE.read_text()
    for text in (CELERY_TASKS, CELERY_PRODUCER, RQ_MODULE, RQ_PRODUCER):
        assert text in guide


def test_celerys_first_steps(folder: Path, dsn: str, supervise: Any) -> None:
    (folder / "tasks.py").write_text(CELERY_TASKS)
    (folder / "producer.py").write_text(CELERY_PRODUCER)
    supervise("tasks")
    assert _run(folder, dsn, "producer.py") == "8"
    job_id = _run(folder, dsn, "-m", "procqueue", "enqueue", "tasks.add", "--args", "[2, 2]")
    check = f"from tasks import app; print(app.result({job_id}, timeout=10))"
    assert _run(folder, dsn, "-c", check) == "4"


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"the quick brown fox jumps over the lazy dog"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def test_rqs_word_count(folder: Path, dsn: str, supervise: Any) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (folder / "my_module.py").write_text(RQ_MODULE)
        (folder / "producer.py").write_text(RQ_PRODUCER)
        supervise("my_module")
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        assert _run(folder, dsn, "producer.py", url) == "9"
    finally:
        server.shutdown()
        server.server_close()
