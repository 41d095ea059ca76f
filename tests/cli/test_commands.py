"""`procqueue cron`, `procqueue dashboard` and the supervisor's log formats."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import types
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from procqueue import App
from procqueue.cli import logs, web
from procqueue.cli import main as cli
from procqueue.testing import wait_until
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "procqueue: error: "


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    for name in ("PROCQUEUE_DSN", "PROCQUEUE_CONFIG", "PROCQUEUE_DASHBOARD_TOKEN"):
        monkeypatch.setenv(name, "")  # set, then unset: restored after the test
        monkeypatch.delenv(name)
    for name in list(os.environ):
        if name.startswith("PROCQUEUE_LOG_"):
            monkeypatch.delenv(name)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    assert err.startswith(PREFIX) and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err[len(PREFIX) :].rstrip("\n")


def write_module(directory: Path, name: str, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (directory / f"{name}.py").write_text("from procqueue import App, Context\n\n" + body)
    monkeypatch.chdir(directory)  # the commands import from the current directory
    monkeypatch.delitem(sys.modules, name, raising=False)


# -- procqueue cron ---------------------------------------------------------------------


def test_cron_lists_schedules_with_the_next_three_ticks(capsys: pytest.CaptureFixture[str]) -> None:
    before = dt.datetime.now(dt.UTC)
    code, out, err = run(capsys, "cron", "tests.jobs.lifecycle")
    assert (code, err) == (0, "")
    header, row = out.splitlines()
    assert header.split() == ["JOB", "EXPRESSION", "TIMEZONE", "QUEUE", "NEXT"]
    job, expr, rest = row.split("  ", 2)
    assert job == "tests.jobs.lifecycle.every_minute" and expr == "* * * * *"
    zone, queue, *ticks = rest.split()
    assert (zone, queue) == ("UTC", "default")
    times = [dt.datetime.fromisoformat(t.rstrip(",")) for t in ticks]
    assert len(times) == 3 and all(t.second == 0 and t.tzinfo is not None for t in times)
    assert before < times[0] <= before + dt.timedelta(minutes=1)
    assert [b - a for a, b in itertools.pairwise(times)] == [dt.timedelta(minutes=1)] * 2

    code, out, _ = run(capsys, "cron", "tests.jobs.lifecycle", "--json")
    (doc,) = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and list(doc) == ["job", "expr", "timezone", "queue", "next"]
    assert doc["next"][0].endswith("Z") and len(doc["next"]) == 3


def test_cron_shows_timezone_and_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_module(
        tmp_path,
        "cron_tz_jobs",
        "app = App()\n\n\n"
        '@app.cron("0 9 * * 1-5", timezone="Europe/Paris", queue="reports")\n'
        "def report(cx: Context) -> None: ...\n\n\n"
        '@app.cron("*/5 * * * *")\n'
        "def sweep() -> None: ...\n",
        monkeypatch,
    )
    code, out, _ = run(capsys, "cron", "cron_tz_jobs:app", "--json")
    report, sweep = (json.loads(line) for line in out.splitlines())
    assert code == 0
    assert (report["timezone"], report["queue"]) == ("Europe/Paris", "reports")
    ticks = [dt.datetime.fromisoformat(t) for t in report["next"]]
    assert all(t.hour == 9 and t.minute == 0 and t.weekday() < 5 for t in ticks)
    assert all(t.utcoffset() in (dt.timedelta(hours=1), dt.timedelta(hours=2)) for t in ticks)
    assert (sweep["job"], sweep["queue"]) == ("cron_tz_jobs.sweep", "default")
    assert all(dt.datetime.fromisoformat(t).minute % 5 == 0 for t in sweep["next"])


def test_cron_without_schedules(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "cron", "tests.jobs.basic") == (0, "", "no schedules\n")


@pytest.mark.parametrize("command", ["cron", "supervise"])
def test_malformed_cron_expression_fails_at_import(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    write_module(
        tmp_path,
        "bad_cron_jobs",
        'app = App()\n\n\n@app.cron("61 * * *")\ndef tick() -> None: ...\n',
        monkeypatch,
    )
    code, out, err = run(capsys, command, "bad_cron_jobs", "--dsn", f"sqlite:///{tmp_path}/q.db")
    assert (code, out) == (1, "")
    assert "'61 * * *'" in one_error_line(err)
    assert not (tmp_path / "q.db").exists()


def test_cron_unknown_module(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "cron", "no_such_module_anywhere")
    assert code == 1 and "no_such_module_anywhere" in one_error_line(err)


# -- procqueue dashboard ------------------------------------------------------------------


def test_dashboard_without_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "procqueue.dashboard.app", None)
    code, out, err = run(capsys, "dashboard")
    assert (code, out) == (1, "")
    assert one_error_line(err) == web.DASHBOARD_MISSING
    assert "pip install 'procqueue[dashboard]'" in err


@pytest.fixture
def fake_dashboard(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    module = types.ModuleType("procqueue.dashboard.app")

    def serve(
        dsn: str, host: str = "127.0.0.1", port: int = 8040, token: str | None = None
    ) -> None:
        calls.append({"dsn": dsn, "host": host, "port": port, "token": token})

    module.serve = serve  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "procqueue.dashboard.app", module)
    return calls


def test_dashboard_arguments(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fake_dashboard: list[dict[str, Any]],
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("procqueue.db", "file.db", "x.db"):  # a dashboard never creates one
        assert run(capsys, "migrate", "--dsn", f"sqlite:///{name}")[0] == 0
    assert run(capsys, "dashboard") == (0, "", "")
    assert fake_dashboard[-1] == {
        "dsn": "sqlite:///procqueue.db",
        "host": "127.0.0.1",
        "port": 8040,
        "token": None,
    }
    monkeypatch.setenv("PROCQUEUE_DASHBOARD_TOKEN", "from-env")
    (tmp_path / "procqueue.toml").write_text('dsn = "sqlite:///file.db"\n')
    port = str(free_port())
    assert run(capsys, "dashboard", "--host", "localhost", "--port", port)[0] == 0
    assert fake_dashboard[-1] == {
        "dsn": "sqlite:///file.db",
        "host": "localhost",
        "port": int(port),
        "token": "from-env",
    }
    assert run(capsys, "dashboard", "--token", "flag", "--dsn", "sqlite:///x.db")[0] == 0
    assert (fake_dashboard[-1]["token"], fake_dashboard[-1]["dsn"]) == ("flag", "sqlite:///x.db")
    port = str(free_port())
    assert run(capsys, "dashboard", "--host", "0.0.0.0", "--token", "t", "--port", port)[0] == 0
    assert fake_dashboard[-1]["host"] == "0.0.0.0"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--port", "0"], 2),
        (["--port", "70000"], 2),
        (["--port", "http"], 2),
        (["--dsn", "mysql://x"], 2),
        (["--bogus"], 2),
        (["--host", "no-such-host.invalid"], 1),
        (["--host", "0.0.0.0"], 2),  # beyond loopback without a token
        (["--host", "0.0.0.0", "--token", "   "], 2),  # a blank token is none
        (["--token", " secret"], 2),
    ],
)
def test_dashboard_refuses_before_serving(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fake_dashboard: list[dict[str, Any]],
    argv: list[str],
    expected: int,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "dashboard", *argv)
    assert (code, out) == (expected, "")
    one_error_line(err)
    assert fake_dashboard == []


def test_dashboard_port_in_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_dashboard: list[dict[str, Any]]
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run(
            capsys, "dashboard", "--port", str(port), "--dsn", f"sqlite:///{tmp_path}/q.db"
        )
    assert code == 1 and f"127.0.0.1:{port}" in one_error_line(err)
    assert fake_dashboard == []


def _get(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.slow
def test_dashboard_serves_in_a_real_process(tmp_path: Path) -> None:
    pytest.importorskip("procqueue.dashboard.app")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCQUEUE_")}
    env["PROCQUEUE_DASHBOARD_TOKEN"] = "s3cret"
    log = tmp_path / "dashboard.log"
    migrate = [sys.executable, "-m", "procqueue", "migrate"]  # a dashboard never creates one
    subprocess.run(migrate, cwd=tmp_path, env=env, check=True, stdout=subprocess.DEVNULL)
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "procqueue", "dashboard", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    url = f"http://127.0.0.1:{port}/"

    def answers() -> int | None:
        assert proc.poll() is None, log.read_text()
        try:
            return _get(url, "s3cret")
        except OSError:
            return None

    try:
        assert wait_until(answers, timeout=30, what="the dashboard") == 200
        assert _get(url) == 401
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert f"http://127.0.0.1:{port}/" in log.read_text()
    assert (tmp_path / "procqueue.db").exists()  # the default DSN, in the current directory


# -- log formats ---------------------------------------------------------------------------


def _record(**extra: Any) -> logging.LogRecord:
    record = logging.makeLogRecord(
        {"name": "procqueue.test", "levelname": "WARNING", "levelno": 30, "msg": "job %d: %s"}
    )
    record.args = (7, "two\nlines")
    record.created, record.msecs = 1714564800.25, 250.0
    record.__dict__.update(extra)
    return record


def test_json_formatter_one_object_a_line() -> None:
    line = logs.formatter("json").format(_record(job_id=7, owner=object()))
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["time"] == "2024-05-01T12:00:00.250Z"
    assert (doc["level"], doc["logger"], doc["message"]) == (
        "WARNING",
        "procqueue.test",
        "job 7: two\nlines",
    )
    assert doc["job_id"] == 7 and doc["owner"].startswith("<object")
    assert list(doc)[:4] == ["time", "level", "logger", "message"]


def test_json_formatter_exception() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        record = _record()
        record.exc_info = sys.exc_info()
    line = logs.formatter("json").format(record)
    assert "\n" not in line
    assert "ValueError: bad" in json.loads(line)["exception"]


def test_text_formatter() -> None:
    line = logs.formatter("text").format(_record())
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,250 WARNING procqueue.test: job 7: two\nlines", line
    )


HELLO = (
    "import time\n\nfrom procqueue import App\n\napp = App()\n\n\n"
    "@app.job\ndef hello(who: str) -> str:\n    print(f'hello {who}')\n"
    "    time.sleep(0.5)\n    return who\n"
)
"""The sleep: the supervisor reads stdout and the result on separate pipes, so a
line printed just before returning may be read after the result and is then
tagged with the child ("child 1 stdout: ...") instead of the job."""


def _supervise_once(tmp_path: Path, who: str, *extra: str) -> tuple[int, list[str]]:
    """Runs one `hello` job under a real ``procqueue supervise``; its id and stderr lines."""
    (tmp_path / "hello_jobs.py").write_text(HELLO)
    app = App(f"sqlite:///{tmp_path}/q.db")
    try:
        sys.path.insert(0, str(tmp_path))
        sys.modules.pop("hello_jobs", None)
        app.registry = __import__("hello_jobs").app.registry
        id = app.enqueue("hello_jobs.hello", {"who": who})
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROCQUEUE_")}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "procqueue",
                "supervise",
                "hello_jobs",
                *extra,
                "--workers",
                "1",
                "--dsn",
                "sqlite:///q.db",
                "--poll",
                "0.1",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until(lambda: app.get(id).state == "done", timeout=30, what="the job done")
            time.sleep(0.2)  # the line is relayed as it arrives; let it be logged
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, err
        return id, err.splitlines()
    finally:
        app.close()


@pytest.mark.slow
def test_supervise_logs_json_lines(tmp_path: Path) -> None:
    (tmp_path / "procqueue.toml").write_text('log_format = "json"\n')
    id, lines = _supervise_once(tmp_path, "json")
    docs = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all(list(d)[:4] == ["time", "level", "logger", "message"] for d in docs)
    assert any(
        d["logger"] == "procqueue.supervisor" and d["message"].startswith("supervising hello_jobs")
        for d in docs
    )
    job_lines = [d for d in docs if d["logger"] == "procqueue.child"]
    assert [d["message"] for d in job_lines] == [f"job {id} stdout: hello json"]
    assert job_lines[0]["level"] == "INFO" and job_lines[0]["time"].endswith("Z")


@pytest.mark.slow
def test_supervise_logs_text_lines(tmp_path: Path) -> None:
    (tmp_path / "procqueue.toml").write_text('log_format = "json"\n')  # the flag wins
    id, lines = _supervise_once(tmp_path, "text", "--log-format", "text")
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
    assert all(re.match(rf"{stamp} [A-Z]+ procqueue\.\w+: ", line) for line in lines), lines
    assert any(
        re.fullmatch(rf"{stamp} INFO procqueue.child: job {id} stdout: hello text", line)
        for line in lines
    )


FOLLOW_UP = (
    "from procqueue import App\n\napp = App()\n\n\n"
    "@app.job\ndef second() -> str:\n    return 'second'\n\n\n"
    "@app.job\ndef first() -> int:\n    return second.enqueue()\n"
)


@pytest.mark.slow
def test_follow_up_jobs_go_to_the_supervisors_database(tmp_path: Path) -> None:
    """Job code's App() in a child finds the database the supervisor was given
    (here by the config file), not the default file."""
    (tmp_path / "follow_jobs.py").write_text(FOLLOW_UP)
    (tmp_path / "data").mkdir()
    (tmp_path / "procqueue.toml").write_text('dsn = "sqlite:///data/q.db"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCQUEUE_")}
    done = subprocess.run(
        [sys.executable, "-m", "procqueue", "enqueue", "follow_jobs.first"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    app = App(f"sqlite:///{tmp_path}/data/q.db")
    proc = subprocess.Popen(
        [sys.executable, "-m", "procqueue", "supervise", "follow_jobs", "--workers", "1"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        first = wait_until(
            lambda: (j := app.get(int(done.stdout))).state == "done" and j, timeout=30
        )
        wait_until(lambda: app.get(first.result).state == "done", timeout=30)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        app.close()
    assert not (tmp_path / "procqueue.db").exists()
