"""The command line: in-process through `cli.main`, plus real subprocesses of
``python -m procqueue`` for the entry point and the supervisor."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest

from procqueue import App, StoreError, models
from procqueue.cli import commands as _commands
from procqueue.cli import main as cli
from procqueue.cli import render
from procqueue.store.base import SCHEMA_VERSION
from procqueue.supervisor import loop as supervisor
from procqueue.supervisor import settings as config
from procqueue.testing import wait_until
from tests.helpers import free_port
from tests.jobs import basic

ROOT = Path(__file__).resolve().parents[2]
ADD = "tests.jobs.basic.add"
PREFIX = "procqueue: error: "


@pytest.fixture(autouse=True)
def _restore_import_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """`enqueue` and `supervise` put the cwd on sys.path and PYTHONPATH."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("PROCQUEUE_DSN", "")  # restored after the test: supervise sets it
    monkeypatch.delenv("PROCQUEUE_DSN")


@pytest.fixture(autouse=True)
def _unbound_job_app(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI uses the job module's App on --dsn unless that App has a DSN of
    its own: in-process, make sure no other test left it with one."""
    monkeypatch.setattr(basic.app, "dsn", None)


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """Runs ``procqueue ARGS...`` in-process: (exit code, stdout, stderr)."""

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def app(dsn: str) -> Iterator[App]:
    """An App on the test database (migrated, as a producer or supervisor
    leaves it), for checking what the CLI wrote."""
    a = App(dsn)
    a.store  # noqa: B018 - reading commands never migrate: the schema exists first
    yield a
    a.close()


def enqueue(run: Run, dsn: str, *extra: str, args: str = '{"a": 1, "b": 2}') -> int:
    code, out, err = run("enqueue", ADD, "--args", args, "--dsn", dsn, *extra)
    assert (code, err) == (0, ""), err
    return int(out)


def assert_one_error_line(err: str) -> None:
    assert err.startswith(PREFIX), err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err


def make_failed(app: App, id: int) -> None:
    """Moves pending job `id` (alone in its queue) to failed as a supervisor would."""
    now = time.time()
    (claimed,) = app.store.job_claim(
        owner="test", queues=[app.get(id).queue], count=1, lease_until=now + 30, now=now
    )
    assert claimed.id == id
    outcome = models.Outcome(
        id=id, attempt=claimed.attempt, state=models.JobState.FAILED, error="boom"
    )
    assert app.store.job_record_many(outcomes=[outcome], now=time.time()) == []


# -- round trips on both backends ------------------------------------------------


def test_enqueue_jobs_show(run: Run, dsn: str, app: App) -> None:
    first = enqueue(run, dsn)
    second = enqueue(run, dsn, "--queue", "bulk", "--priority", "5", "--key", "k1")
    assert enqueue(run, dsn, "--key", "k1") == second  # idempotent
    delayed = enqueue(run, dsn, "--delay", "60", "--serial-key", "user:7")
    info = app.get(delayed)
    assert info.serial_key == "user:7"
    assert (info.run_at - info.created_at).total_seconds() == pytest.approx(60, abs=1)
    assert app.get(second).queue == "bulk" and app.get(second).priority == 5

    code, out, _ = run("jobs", "--dsn", dsn)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 4
    assert lines[0].split() == ["ID", "NAME", "QUEUE", "STATE", "ATTEMPTS", "PROGRESS", "CREATED"]
    assert lines[1].split()[:5] == [str(delayed), ADD, "default", "pending", "0/3"]
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", lines[1])

    code, out, _ = run("jobs", "--dsn", dsn, "--json", "--queue", "bulk")
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["id"] for r in records] == [second]
    assert records[0]["created_at"].endswith("Z")
    assert set(records[0]) == set(models.JobInfo.__struct_fields__)

    assert run("jobs", "--dsn", dsn, "--json", "--limit", "1")[1].count("\n") == 1
    assert run("jobs", "--dsn", dsn, "--json", "--name", "x.y")[1] == ""
    assert run("jobs", "--dsn", dsn, "--state", "done")[2] == "no jobs\n"

    code, out, _ = run("show", str(first), "--dsn", dsn)
    fields = dict(line.split(":", 1) for line in out.splitlines())
    assert code == 0 and list(fields) == list(models.JobInfo.__struct_fields__)
    assert fields["args"].strip() == '{"a":1,"b":2}'
    assert fields["state"].strip() == "pending" and fields["result"].strip() == "-"

    code, out, _ = run("show", str(first), "--json", "--dsn", dsn)
    shown = msgspec.json.decode(out.encode(), type=models.JobInfo)
    assert code == 0 and shown == app.get(first)


def test_stats_json_shape(run: Run, dsn: str, app: App) -> None:
    assert run("stats", "--json", "--dsn", dsn)[1] == '{"queues":{}}\n'
    enqueue(run, dsn)
    enqueue(run, dsn)
    cancelled = enqueue(run, dsn, "--queue", "bulk")
    assert run("cancel", str(cancelled), "--dsn", dsn)[::2] == (0, "")
    app.pause("bulk")

    code, out, _ = run("stats", "--json", "--dsn", dsn)
    doc = json.loads(out)
    assert code == 0 and list(doc) == ["queues"] and sorted(doc["queues"]) == ["bulk", "default"]
    default = doc["queues"]["default"]
    assert list(default) == [
        "blocked",
        "pending",
        "reserved",
        "running",
        "done",
        "failed",
        "cancelled",
        "oldest_pending_age",
        "limit",
        "paused",
    ]
    assert default["pending"] == 2 and default["running"] == default["done"] == 0
    assert isinstance(default["oldest_pending_age"], float) and default["limit"] is None
    bulk = doc["queues"]["bulk"]
    assert (bulk["cancelled"], bulk["pending"], bulk["paused"]) == (1, 0, True)
    assert bulk["oldest_pending_age"] is None

    code, out, _ = run("stats", "--dsn", dsn)
    assert code == 0 and out.splitlines()[0].split()[:3] == ["QUEUE", "BLOCKED", "PENDING"]
    assert out.splitlines()[2].split()[:4] == ["default", "0", "2", "0"]


def test_cancel_and_retry(run: Run, dsn: str, app: App) -> None:
    id = enqueue(run, dsn)
    code, out, err = run("retry", str(id), "--dsn", dsn)  # pending: not retryable
    assert code == 1 and out == ""
    assert_one_error_line(err)

    assert run("cancel", str(id), "--dsn", dsn)[:2] == (0, f"job {id} cancelled\n")
    assert app.get(id).state == "cancelled"
    code, _, err = run("cancel", str(id), "--dsn", dsn)  # finished: not cancellable
    assert code == 1
    assert_one_error_line(err)

    code, out, _ = run("retry", str(id), "--dsn", dsn)
    assert code == 0 and "pending again" in out
    assert app.get(id).state == "pending"

    failed = enqueue(run, dsn, "--queue", "doomed")
    make_failed(app, failed)
    assert run("retry", str(failed), "--dsn", dsn)[0] == 0
    info = app.get(failed)
    assert (info.state, info.attempts) == ("pending", 0)


@pytest.mark.parametrize("command", ["show", "cancel", "retry"])
def test_unknown_id_fails_with_exit_1(run: Run, dsn: str, app: App, command: str) -> None:
    code, out, err = run(command, "12345", "--dsn", dsn)
    assert (code, out) == (1, "")
    assert_one_error_line(err)
    assert "12345" in err


def test_prune(run: Run, dsn: str, app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = [enqueue(run, dsn, "--queue", "doomed") for _ in range(5)]
    for id in ids[:4]:
        app.cancel(id)
    make_failed(app, ids[4])  # the only job of its queue still pending
    kept = enqueue(run, dsn)
    assert run("prune", "--dsn", dsn)[:2] == (0, "pruned 0 jobs\n")  # younger than 7 days

    monkeypatch.setattr(_commands, "PRUNE_BATCH", 3)  # 4 cancelled jobs take two batches
    assert run("prune", "--older-than", "0", "--dsn", dsn)[:2] == (0, "pruned 4 jobs\n")
    assert app.get(ids[4]).state == "failed"  # failed jobs stay ...
    assert run("prune", "--older-than", "0", "--failed", "--dsn", dsn)[1] == "pruned 1 job\n"
    assert [j.id for j in app.jobs()] == [kept]  # ... pending ones always


def test_queues_pause_resume(run: Run, dsn: str, app: App) -> None:
    assert run("queues", "--dsn", dsn)[:3] == (0, "", "no queues\n")
    enqueue(run, dsn)
    code, out, _ = run("queues", "pause", "default", "--dsn", dsn)
    assert code == 0 and "paused" in out
    assert app.stats()["default"].paused
    code, out, _ = run("queues", "--dsn", dsn)
    header, row = out.splitlines()
    assert header.split("  ")[0] == "QUEUE"
    assert [h.strip() for h in header.split("  ") if h.strip()] == [
        "QUEUE",
        "LIMIT",
        "LIMIT SET BY",
        "RATE",
        "PAUSED",
        "PENDING",
        "RESERVED",
        "RUNNING",
        "OLDEST PENDING",
        "DONE",
        "FAILED",
        "CANCELLED",
    ]
    cells = row.split()
    assert cells[:7] == ["default", "none", "-", "none", "yes", "1", "0"]
    assert cells[-3:] == ["0", "0", "0"]
    assert run("queues", "--dsn", dsn, "resume", "default")[0] == 0
    assert not app.stats()["default"].paused


def test_migrate(run: Run, dsn: str) -> None:
    expected = f"schema at version {SCHEMA_VERSION}\n"
    assert run("migrate", "--dsn", dsn) == (0, expected, "")
    assert run("migrate", "--dsn", dsn) == (0, expected, "")  # idempotent


def test_dsn_from_top_level_option_and_environment(
    run: Run, dsn: str, app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run("--dsn", dsn, "enqueue", ADD, "--args", '{"a": 1, "b": 1}')
    id = out.strip()
    assert code == 0 and app.get(int(id)).name == ADD
    monkeypatch.setenv("PROCQUEUE_DSN", dsn)
    code, out, _ = run("show", id, "--json")
    assert code == 0 and json.loads(out)["args"] == {"a": 1, "b": 1}
    monkeypatch.delenv("PROCQUEUE_DSN")
    assert run("--dsn", "mysql://x", "show", id, "--dsn", dsn)[0] == 0  # the later one wins


def test_enqueue_with_app_option(run: Run, dsn: str, app: App) -> None:
    code, _, err = run("enqueue", ADD, "--app", "tests.jobs.basic:app", "--dsn", dsn)
    assert code == 2  # arguments that don't bind are refused as usual
    assert_one_error_line(err)
    code, out, _ = run("enqueue", ADD, "--app", "tests.jobs.basic", "--args", "{}", "--dsn", dsn)
    assert code == 2
    args = '{"a": 1, "b": 2}'
    code, out, _ = run("enqueue", ADD, "--app", "tests.jobs.basic", "--args", args, "--dsn", dsn)
    assert code == 0 and app.get(int(out)).args == {"a": 1, "b": 2}
    code, _, err = run("enqueue", ADD, "--app", "tests.jobs.basic:nothing", "--dsn", dsn)
    assert code == 1  # the App can't be loaded
    assert_one_error_line(err)


def test_enqueue_prefers_the_apps_own_dsn(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """App(dsn=...) in the job module wins over --dsn (DESIGN section 1)."""
    own = f"sqlite:///{tmp_path}/own.db"
    (tmp_path / "cli_own_dsn_jobs.py").write_text(
        f"from procqueue import App\n\napp = App({own!r})\n\n\n"
        "@app.job\ndef ping() -> str:\n    return 'pong'\n"
    )
    monkeypatch.chdir(tmp_path)  # enqueue imports from the current directory
    monkeypatch.delitem(sys.modules, "cli_own_dsn_jobs", raising=False)
    code, out, err = run("enqueue", "cli_own_dsn_jobs.ping", "--dsn", "sqlite:///other.db")
    assert (code, err) == (0, "")
    check = App(own)
    assert check.get(int(out)).name == "cli_own_dsn_jobs.ping"
    check.close()
    assert not (tmp_path / "other.db").exists()


def test_supervise_options_become_settings(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, object] = {}

    class FakeSupervisor:
        def __init__(self, app: App, *, spec: str, settings: config.Settings) -> None:
            seen.update(dsn=app.dsn, spec=spec, settings=settings)

        def prepare(self) -> None:
            seen["prepared"] = True

        def run(self, *, install_signals: bool) -> int:
            seen["install_signals"] = install_signals
            return 0

    monkeypatch.setattr(supervisor, "Supervisor", FakeSupervisor)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    argv = ["supervise", "tests.jobs.basic", "--workers", "3", "--queues", "a,b"]
    argv += ["--queue", "a=2", "--queue", "b=5", "--lease", "12.5", "--poll", "0.2"]
    argv += ["--grace", "0", "--max-jobs-per-child", "10", "--max-memory-per-child", "256"]
    argv += ["--no-cron", "--retention-days", "0.5", "--log-level", "warning"]
    argv += ["--kill-grace", "0.5", "--metrics-port", str(free_port())]
    assert run(*argv) == (0, "", "")
    assert seen["settings"] == config.Settings(
        workers=3,
        queues=["a", "b"],
        limits={"a": 2, "b": 5},
        lease=12.5,
        poll=0.2,
        grace=0.0,
        max_jobs_per_child=10,
        max_memory_per_child=256.0,
        cron=False,
        retention_days=0.5,
        kill_grace=0.5,
        metrics_port=int(argv[-1]),
        titles=True,
    )
    assert seen["spec"] == "tests.jobs.basic" and seen["install_signals"] is True
    assert seen["dsn"] == "sqlite:///procqueue.db"
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [str(tmp_path), "/elsewhere"]
    assert sys.path[0] == str(tmp_path)

    assert run("supervise", "tests.jobs.basic", "--dsn", "sqlite:///x.db") == (0, "", "")
    assert (seen["settings"], seen["dsn"]) == (config.Settings(titles=True), "sqlite:///x.db")


# -- bad input: one line, exit 2, nothing written ------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["enqueue", "tests.jobs.basic.nope"],
        ["enqueue", "nojobname"],
        ["enqueue", ADD, "--args", "{not json"],
        ["enqueue", ADD, "--args", '{"a": ' + "[" * 100_000 + "]" * 100_000 + ', "b": 1}'],
        ["enqueue", ADD, "--args", "[1, 2, 3]"],
        ["enqueue", ADD, "--args", "7"],
        ["enqueue", ADD, "--args", '{"a": 1}'],
        ["enqueue", ADD, "--args", '{"a": 1, "b": 2, "c": 3}'],
        ["enqueue", ADD, "--args", '{"a": 1, "b": 2}', "--delay", "-1"],
        ["enqueue", ADD, "--args", '{"a": 1, "b": 2}', "--delay", "soon"],
        ["enqueue", ADD, "--args", '{"a": 1, "b": 2}', "--bogus"],
        ["enqueue", ADD, "--args", '{"a": 1, "b": 2}', "--queue", ""],
        ["enqueue", ADD, "--args", '{"a": 1, "b": 2}', "--priority", "high"],
        ["enqueue", ADD, "--args", '{"a": 1, "b": 2}', "--del", "5"],  # no abbreviations
        ["enqueue"],
        ["jobs", "--state", "lost"],
        ["jobs", "--limit", "0"],
        ["show", "one"],
        ["frobnicate"],
        [],
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    run: Run, dsn: str, app: App, argv: list[str]
) -> None:
    code, out, err = run(*argv, "--dsn", dsn) if argv else run("--dsn", dsn)
    assert (code, out) == (2, "")
    assert_one_error_line(err)
    assert app.jobs() == []


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "99999999999999999999"],
        ["show", "0"],
        ["cancel", "99999999999999999999"],
        ["retry", "-5"],
        ["batch", "show", "99999999999999999999"],
    ],
)
def test_an_id_no_job_can_have_is_not_found(run: Run, dsn: str, app: App, argv: list[str]) -> None:
    """The same one line on both backends (past 64 bits a driver would overflow)."""
    code, out, err = run(*argv, "--dsn", dsn)
    assert (code, out) == (1, "")
    assert "no job" in err or "no batch" in err
    assert_one_error_line(err)


@pytest.mark.parametrize(
    ("given", "module"), [("tasks.py", "tasks"), ("./app/tasks.py", "app.tasks")]
)
def test_a_module_given_as_a_file_gets_a_hint(run: Run, given: str, module: str) -> None:
    code, out, err = run("supervise", given)
    assert (code, out) == (1, "")
    assert_one_error_line(err)
    assert f"name its module instead, e.g. {module!r}" in err


@pytest.mark.parametrize(
    "argv",
    [["jobs"], ["show", "1"], ["stats"], ["queues"], ["supervisors"], ["batches"]],
)
def test_reading_commands_never_create_or_migrate(
    run: Run, dsn: str, tmp_path: Path, argv: list[str]
) -> None:
    """A mistyped DSN is an error, not an empty queue: a reading command on a
    database without procqueue's schema says so and leaves it as it is."""
    target = f"sqlite:///{tmp_path}/typo.db" if dsn.startswith("sqlite") else dsn
    code, out, err = run(*argv, "--dsn", target)
    assert (code, out) == (1, "")
    assert_one_error_line(err)
    assert "procqueue migrate" in err
    if dsn.startswith("sqlite"):
        assert not (tmp_path / "typo.db").exists()
    else:
        probe = App(dsn)
        probe.migrate = False
        with pytest.raises(StoreError, match="no procqueue schema"):
            probe.jobs()
    assert run("migrate", "--dsn", target)[0] == 0
    assert run("jobs", "--dsn", target) == (0, "", "no jobs\n")  # migrated: now it reads


def test_args_as_a_json_list_are_positional(run: Run, dsn: str, app: App) -> None:
    code, out, err = run("enqueue", ADD, "--args", "[2, 2]", "--dsn", dsn)
    assert (code, err) == (0, "")
    assert app.get(int(out)).args == {"a": 2, "b": 2}
    code, out, err = run("enqueue", "no_such_module.fetch", "--args", "[1]", "--dsn", dsn)
    assert (code, out) == (2, "")
    assert "needs the job's code" in err


def test_enqueue_by_name_on_a_host_without_the_code(run: Run, dsn: str, app: App) -> None:
    """As ``App.enqueue`` by name: the arguments are stored as given, and a
    one-line note says they were not checked."""
    args = '{"url": "https://example.com", "n": [1, 2]}'
    code, out, err = run("enqueue", "no_such_module.fetch", "--args", args, "--dsn", dsn)
    assert code == 0
    assert err.count("\n") == 1 and err.startswith("note: ") and "Traceback" not in err
    job = app.get(int(out))
    assert (job.name, job.args, job.state) == (
        "no_such_module.fetch",
        {"url": "https://example.com", "n": [1, 2]},
        models.JobState.PENDING,
    )


@pytest.mark.parametrize(
    "argv",
    [["jobs"], ["enqueue", ADD, "--args", '{"a": 1, "b": 2}'], ["migrate"], ["stats"]],
)
def test_malformed_dsn_is_a_usage_error(run: Run, argv: list[str]) -> None:
    code, out, err = run(*argv, "--dsn", "mysql://x")
    assert (code, out) == (2, "")
    assert_one_error_line(err)
    assert "mysql://x" in err


def test_unreachable_database_fails_with_exit_1(run: Run, tmp_path: Path) -> None:
    code, _, err = run("jobs", "--dsn", f"sqlite:///{tmp_path}/missing/dir/q.db")
    assert code == 1
    assert_one_error_line(err)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["supervise", "tests.jobs.basic", "--metrics-port", "0"], 2),
        (["supervise", "tests.jobs.basic", "--metrics-port", "65536"], 2),
        (["supervise", "tests.jobs.basic", "--log-format", "xml"], 2),
        (["supervise", "tests.jobs.basic", "--kill-grace", "-1"], 2),
        (["supervise", "tests.jobs.basic", "--lease", "0.5"], 2),  # Settings refuses it
        (["supervise", "tests.jobs.basic", "--workers", "0"], 2),
        (["supervise", "tests.jobs.basic", "--queue", "bulk"], 2),
        (["supervise", "tests.jobs.basic", "--queue", "bulk=0"], 2),
        (["supervise", "tests.jobs.basic", "--poll", "-1"], 2),
        (["supervise", "tests.jobs.basic", "--dsn", "mysql://x"], 2),
        (["supervise", "no_such_module_here"], 1),
        (["supervise", "tests.jobs.basic:missing"], 1),
        (["supervise", "tests.jobs"], 1),  # no App in it
    ],
)
def test_supervise_refuses_before_starting(
    run: Run, tmp_path: Path, argv: list[str], expected: int
) -> None:
    if "--dsn" not in argv:
        argv = [*argv, "--dsn", f"sqlite:///{tmp_path}/q.db"]
    code, out, err = run(*argv)
    assert (code, out) == (expected, "")
    assert_one_error_line(err)


def test_help_exits_0(run: Run) -> None:
    code, out, _ = run("--help")
    assert code == 0 and "supervise" in out and "enqueue" in out
    code, out, _ = run("queues", "pause", "--help")
    assert code == 0 and "Q" in out


def test_interrupt_exits_130_quietly(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_migrate", interrupted)
    assert run("migrate") == (130, "", "")


# -- demo wiring -----------------------------------------------------------------


def test_demo_is_delegated(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[argparse.Namespace] = []
    demo = types.ModuleType("procqueue.demo")

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--jobs", type=int, default=3)

    def main(args: argparse.Namespace) -> int:
        seen.append(args)
        return 0

    demo.add_arguments = add_arguments  # type: ignore[attr-defined]
    demo.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "procqueue.demo", demo)
    assert run("demo", "--jobs", "7")[0] == 0
    assert seen[0].jobs == 7
    code, _, err = run("demo", "--nope")
    assert code == 2
    assert_one_error_line(err)
    assert "procqueue demo --help" in err
    assert run("demo", "--help")[0] == 0


def test_demo_missing_is_one_line(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "procqueue.demo", None)
    code, out, err = run("demo")
    assert (code, out) == (1, "")
    assert_one_error_line(err)


# -- the documentation matches the parser -------------------------------------------


Part = tuple[tuple[str, ...], str | None]


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Part]:
    """(command path, None) for every command, (command path, option) for every option."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), None
                yield from _walk(sub, (*path, name))
        else:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    yield path, option


def test_docs_cover_every_command_and_option() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    parts = list(_walk(cli.build_parser()))
    missing = []
    for path, option in parts:
        if option is None:
            if f"procqueue {' '.join(path)}" not in doc:
                missing.append(" ".join(path))
            continue
        # an option is documented in its command's own section
        section = doc.split(f"## `procqueue {path[0]}", 1)[-1] if path else doc
        if f"`{option}" not in section.split("\n## ", 1)[0]:
            missing.append(f"{' '.join(path)} {option}")
    assert len(parts) > 30
    assert missing == []


# -- real processes -------------------------------------------------------------------


def _procqueue(*argv: str, cwd: Path = ROOT, **kwargs: object) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PROCQUEUE_DSN"}
    return subprocess.Popen(  # type: ignore[no-any-return]
        [sys.executable, "-m", "procqueue", *argv],
        cwd=cwd,
        env=env,
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )


def _check(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    p = _procqueue(*argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=60)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_entry_point_round_trip(tmp_path: Path) -> None:
    dsn = f"sqlite:///{tmp_path}/q.db"
    done = _check("enqueue", ADD, "--args", '{"a": 2, "b": 3}', "--dsn", dsn)
    assert (done.returncode, done.stderr) == (0, "")
    id = int(done.stdout)
    done = _check("show", str(id), "--json", "--dsn", dsn)
    assert json.loads(done.stdout)["args"] == {"a": 2, "b": 3}
    bad = _check("enqueue", ADD, "--args", "{", "--dsn", dsn)
    assert (bad.returncode, bad.stdout) == (2, "")
    assert_one_error_line(bad.stderr)
    bad = _check("show", "999", "--dsn", "mysql://x")
    assert bad.returncode == 2
    assert_one_error_line(bad.stderr)


@pytest.mark.slow
def test_supervise_runs_a_job_and_drains_on_sigterm(tmp_path: Path) -> None:
    dsn = f"sqlite:///{tmp_path}/queue.db"
    app = App(dsn)
    assert cli.main(["enqueue", ADD, "--args", '{"a": 20, "b": 22}', "--dsn", dsn]) == 0
    (job,) = app.jobs()
    log = tmp_path / "supervisor.log"
    with log.open("w") as stderr:
        argv = ["supervise", "tests.jobs.basic", "--dsn", dsn, "--workers", "1", "--poll", "0.1"]
        proc = _procqueue(*argv, "--grace", "5", stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_until(lambda: app.get(job.id).state == "done", timeout=30, what="the job done")
        assert app.get(job.id).result == 42
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        app.close()
    text = log.read_text()
    assert re.search(
        r"^\S+ \S+ INFO procqueue.supervisor: supervising tests.jobs.basic", text, re.M
    )
    assert "Traceback" not in text


@pytest.mark.slow
def test_supervise_imports_the_module_from_the_current_directory(tmp_path: Path) -> None:
    """Children find a project module by the supervisor's working directory."""
    (tmp_path / "myproject").mkdir()
    (tmp_path / "myproject" / "__init__.py").write_text("")
    (tmp_path / "myproject" / "jobs.py").write_text(
        "from procqueue import App\n\napp = App()\n\n\n"
        "@app.job\ndef mul(a: int, b: int) -> int:\n    return a * b\n"
    )
    dsn = "sqlite:///queue.db"  # relative: the project directory
    args = '{"a": 6, "b": 7}'
    done = _check("enqueue", "myproject.jobs.mul", "--args", args, "--dsn", dsn, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    app = App(f"sqlite:///{tmp_path}/queue.db")
    proc = _procqueue(
        "supervise", "myproject.jobs", "--dsn", dsn, "--workers", "1", "--poll", "0.1",
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: app.get(int(done.stdout)).state == "done", timeout=30, what="done")
        assert app.get(int(done.stdout)).result == 42
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        app.close()


# -- what a job or a row controls is printed, never obeyed ---------------------------------

HOSTILE = "\x1b]0;PWN\x07\x1b[2J\rjob 1 done\n\u202eevil"


def test_control_characters_in_records_are_escaped(run: Run, dsn: str, app: App) -> None:
    """A name, a queue or an error can't retitle or clear the terminal or
    forge a line: every control character is printed as an escape."""
    id = app.enqueue(f"hostile.{HOSTILE}", {"x": HOSTILE}, queue=f"q{HOSTILE}".replace("\n", ""))
    outputs = [
        run("jobs", "--dsn", dsn),
        run("show", str(id), "--dsn", dsn),
        run("stats", "--dsn", dsn),
        run("queues", "--dsn", dsn),
    ]
    for code, out, err in outputs:
        assert (code, err) == (0, "")
        assert not any(ch in out for ch in "\x1b\x07\r\u202e"), out
        assert "\\x1b]0;PWN\\x07" in out, out
    show = outputs[1][1]
    assert len(show.splitlines()) == len(render.JOB_FIELDS)  # no forged field
