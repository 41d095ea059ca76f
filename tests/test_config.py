"""The config file and the environment (procqueue.config, docs/configuration.md):
where the file is found, every key decoded, one-line errors naming the file or
variable and the key, and precedence flag > environment > file > default."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from procqueue import App, errors
from procqueue import config as configfile
from procqueue.cli import logs
from procqueue.cli import main as cli
from procqueue.config import Config
from procqueue.supervisor import loop as supervisor
from procqueue.supervisor import settings as config
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "procqueue: error: "

FULL = """\
dsn = "sqlite:///from-file.db"
workers = 3
queues = ["default", "bulk"]
limits = { bulk = 2, mail = 5 }
lease = 20
poll = 0.5
grace = 10.5
kill_grace = 1
retention_days = 3
max_jobs_per_child = 100
max_memory_per_child = 512
cron = false
log_format = "json"
log_level = "warning"
metrics_port = 9100
metrics_host = "0.0.0.0"
"""

FULL_CONFIG = Config(
    dsn="sqlite:///from-file.db",
    workers=3,
    queues=["default", "bulk"],
    limits={"bulk": 2, "mail": 5},
    lease=20.0,
    poll=0.5,
    grace=10.5,
    kill_grace=1.0,
    retention_days=3.0,
    max_jobs_per_child=100,
    max_memory_per_child=512.0,
    cron=False,
    log_format="json",
    log_level="warning",
    metrics_port=9100,
    metrics_host="0.0.0.0",
)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty current directory and no PROCQUEUE_* settings in the environment."""
    for key in configfile.KEYS:  # set, then unset: restored after the test
        monkeypatch.setenv(configfile.env_var(key), "")
        monkeypatch.delenv(configfile.env_var(key))
    monkeypatch.delenv(configfile.CONFIG_ENV, raising=False)
    monkeypatch.delenv("PROCQUEUE_DASHBOARD_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    assert err.startswith(PREFIX) and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err[len(PREFIX) :].rstrip("\n")


# -- finding and decoding the file ----------------------------------------------------


def test_no_file_no_settings(tmp_path: Path) -> None:
    assert configfile.find(None, {}, tmp_path) is None
    assert configfile.layered(None) == Config()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert configfile.find(None, {}, tmp_path) is None  # no [tool.procqueue]: not a config


def test_procqueue_toml_has_every_key_at_top_level(tmp_path: Path) -> None:
    (tmp_path / "procqueue.toml").write_text(FULL)
    assert configfile.find(None, {}, tmp_path) == Path("procqueue.toml")
    assert configfile.layered(None) == FULL_CONFIG


def test_pyproject_tool_table(tmp_path: Path) -> None:
    indented = FULL.replace("limits = { bulk = 2, mail = 5 }\n", "")
    (tmp_path / "pyproject.toml").write_text(
        f'[project]\nname = "x"\n\n[tool.procqueue]\n{indented}\n'
        "[tool.procqueue.limits]\nbulk = 2\nmail = 5\n"
    )
    assert configfile.find(None, {}, tmp_path) == Path("pyproject.toml")
    assert configfile.layered(None) == FULL_CONFIG


def test_procqueue_toml_wins_over_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.procqueue]\nworkers = 2\n")
    (tmp_path / "procqueue.toml").write_text("workers = 5\n")
    assert configfile.layered(None).workers == 5


def test_explicit_path_and_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "procqueue.toml").write_text("workers = 1\n")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "prod.toml").write_text("workers = 7\n")
    (tmp_path / "conf" / "pyproject.toml").write_text("[tool.procqueue]\nworkers = 8\n")
    monkeypatch.setenv("PROCQUEUE_CONFIG", "conf/prod.toml")
    assert configfile.layered(None).workers == 7
    assert configfile.layered("conf/pyproject.toml").workers == 8  # the flag wins
    assert configfile.layered(str(tmp_path / "conf" / "prod.toml")).workers == 7


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("wrkers = 4", "procqueue.toml: unknown key 'wrkers' (known keys: dsn, workers,"),
        ('workers = "4"', "procqueue.toml: 'workers': expected int, got str"),
        ("workers = 0", "procqueue.toml: 'workers': expected int >= 1, got 0"),
        ("workers = 2.5", "procqueue.toml: 'workers': expected int, got float"),
        ("lease = 0.5", "procqueue.toml: 'lease': expected float >= 1.0, got 0.5"),
        ("poll = 0", "procqueue.toml: 'poll': expected float > 0.0, got 0"),
        ("grace = inf", "procqueue.toml: 'grace': expected a finite number, got inf"),
        ('queues = "a,b"', "procqueue.toml: 'queues': expected array, got str"),
        ("queues = [1]", "procqueue.toml: 'queues[0]': expected str, got int"),
        ("limits = [1]", "procqueue.toml: 'limits': expected table, got array"),
        ("limits = { bulk = 0 }", "procqueue.toml: 'limits': expected int >= 1"),
        ('cron = "no"', "procqueue.toml: 'cron': expected bool, got str"),
        ('log_format = "xml"', "procqueue.toml: 'log_format': expected one of text, json"),
        ("metrics_port = 70000", "procqueue.toml: 'metrics_port': expected int <= 65535"),
        ("workers = ", "procqueue.toml: invalid TOML: "),
    ],
)
def test_bad_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    (tmp_path / "procqueue.toml").write_text(text + "\n")
    code, out, err = run(capsys, "jobs")
    assert (code, out) == (2, "")
    assert one_error_line(err).startswith(message)
    assert not (tmp_path / "procqueue.db").exists()  # nothing was opened


def test_bad_pyproject_names_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.procqueue]\nwrkers = 4\n")
    code, _, err = run(capsys, "stats")
    assert code == 2
    assert one_error_line(err).startswith(
        "pyproject.toml: unknown key 'wrkers' in [tool.procqueue]"
    )
    (tmp_path / "pyproject.toml").write_text('[tool.procqueue]\nworkers = "x"\n')
    code, _, err = run(capsys, "stats")
    assert one_error_line(err) == (
        "pyproject.toml: 'workers' in [tool.procqueue]: expected int, got str"
    )


def test_missing_explicit_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "jobs", "--config", "nope.toml")
    assert code == 2
    assert one_error_line(err) == "cannot read config file nope.toml: No such file or directory"


# -- the environment ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        ("dsn", "sqlite:///env.db", "sqlite:///env.db"),
        ("workers", "4", 4),
        ("queues", "a, b", ["a", "b"]),
        ("limits", "bulk=2,mail=5", {"bulk": 2, "mail": 5}),
        ("lease", "12.5", 12.5),
        ("poll", "0.2", 0.2),
        ("grace", "0", 0.0),
        ("kill_grace", "3", 3.0),
        ("outcome_wait", "7.5", 7.5),
        ("retention_days", "0.5", 0.5),
        ("max_jobs_per_child", "10", 10),
        ("max_memory_per_child", "256", 256.0),
        ("max_memory_per_job", "128", 128.0),
        ("cron", "false", False),
        ("cron", "1", True),
        ("log_format", "json", "json"),
        ("log_level", "debug", "debug"),
        ("metrics_port", "9100", 9100),
        ("metrics_host", "0.0.0.0", "0.0.0.0"),
        ("job_user", "nobody:nogroup", "nobody:nogroup"),
    ],
)
def test_every_key_has_an_environment_variable(key: str, text: str, value: Any) -> None:
    parsed = configfile.from_env({configfile.env_var(key): text})
    assert parsed.given() == {key: value}


def test_every_key_is_covered_by_the_env_test() -> None:
    marks = test_every_key_has_an_environment_variable.pytestmark  # type: ignore[attr-defined]
    covered = {case[0] for case in marks[0].args[1]}
    assert covered == set(configfile.KEYS)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("PROCQUEUE_WORKERS", "four", "PROCQUEUE_WORKERS: expected an integer, got 'four'"),
        ("PROCQUEUE_WORKERS", "0", "PROCQUEUE_WORKERS: expected int >= 1, got 0"),
        ("PROCQUEUE_LEASE", "soon", "PROCQUEUE_LEASE: expected a number, got 'soon'"),
        ("PROCQUEUE_CRON", "maybe", "PROCQUEUE_CRON: expected true or false, got 'maybe'"),
        ("PROCQUEUE_LIMITS", "bulk", "PROCQUEUE_LIMITS: expected NAME=LIMIT[,NAME=LIMIT...]"),
        ("PROCQUEUE_LOG_FORMAT", "xml", "PROCQUEUE_LOG_FORMAT: expected one of text, json"),
    ],
)
def test_bad_environment_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    text: str,
    message: str,
) -> None:
    monkeypatch.setenv(name, text)
    code, out, err = run(capsys, "jobs")
    assert (code, out) == (2, "")
    assert one_error_line(err).startswith(message)


def test_empty_environment_variable_is_unset() -> None:
    assert configfile.from_env({"PROCQUEUE_WORKERS": " "}) == Config()


# -- precedence: flag > environment > file > default -------------------------------


class FakeSupervisor:
    seen: dict[str, Any] = {}

    def __init__(self, app: App, *, spec: str, settings: config.Settings) -> None:
        FakeSupervisor.seen = {"dsn": app.dsn, "settings": settings}

    def prepare(self) -> None:
        """Nothing to migrate: no database is opened."""

    def run(self, *, install_signals: bool) -> int:
        return 0


@pytest.fixture
def supervise(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    """Runs ``procqueue supervise tests.jobs.basic ARGS`` with a fake Supervisor;
    returns the (dsn, Settings, logging setup) it was given."""
    monkeypatch.setattr(supervisor, "Supervisor", FakeSupervisor)
    setups: list[tuple[str, str]] = []
    monkeypatch.setattr(logs, "setup", lambda level, fmt: setups.append((level, fmt)))
    monkeypatch.syspath_prepend(str(ROOT))

    def supervise(*argv: str) -> tuple[str, config.Settings, tuple[str, str]]:
        code, out, err = run(capsys, "supervise", "tests.jobs.basic", *argv)
        assert (code, out, err) == (0, "", "")
        return FakeSupervisor.seen["dsn"], FakeSupervisor.seen["settings"], setups[-1]

    return supervise


def test_defaults_without_any_source(supervise: Any) -> None:
    dsn, settings, setup = supervise()
    assert (dsn, settings, setup) == (
        "sqlite:///procqueue.db",
        config.Settings(titles=True),
        ("info", "text"),
    )


def test_the_file_sets_every_supervisor_setting(tmp_path: Path, supervise: Any) -> None:
    (tmp_path / "procqueue.toml").write_text(FULL.replace("metrics_port = 9100\n", ""))
    dsn, settings, setup = supervise()
    assert dsn == "sqlite:///from-file.db"
    assert settings == config.Settings(
        workers=3,
        queues=["default", "bulk"],
        limits={"bulk": 2, "mail": 5},
        lease=20.0,
        poll=0.5,
        grace=10.5,
        kill_grace=1.0,
        retention_days=3.0,
        max_jobs_per_child=100,
        max_memory_per_child=512.0,
        cron=False,
        metrics_host="0.0.0.0",
        titles=True,
    )
    assert setup == ("warning", "json")


def test_flag_beats_environment_beats_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, supervise: Any
) -> None:
    (tmp_path / "procqueue.toml").write_text(
        'dsn = "sqlite:///file.db"\nworkers = 2\nlease = 40\ngrace = 5\n'
        'limits = { bulk = 2 }\ncron = false\nlog_format = "json"\n'
    )
    monkeypatch.setenv("PROCQUEUE_WORKERS", "3")
    monkeypatch.setenv("PROCQUEUE_LEASE", "50")
    monkeypatch.setenv("PROCQUEUE_DSN", "sqlite:///env.db")
    monkeypatch.setenv("PROCQUEUE_LOG_FORMAT", "text")
    dsn, settings, setup = supervise("--workers", "4", "--queue", "mail=1", "--cron")
    assert dsn == "sqlite:///env.db"
    assert (settings.workers, settings.lease, settings.grace) == (4, 50.0, 5.0)
    assert settings.limits == {"mail": 1}  # a key is taken whole from one source
    assert settings.cron is True
    assert setup == ("info", "text")
    dsn, settings, setup = supervise("--dsn", "sqlite:///flag.db", "--log-format", "json")
    assert (dsn, settings.workers, settings.cron) == ("sqlite:///flag.db", 3, False)
    assert setup == ("info", "json")


def test_settings_checks_still_apply_to_the_merge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    (tmp_path / "procqueue.toml").write_text("lease = 30\n")
    code, _, err = run(capsys, "supervise", "tests.jobs.basic", "--lease", "0.5")
    assert code == 2
    assert "lease must be >= 1" in one_error_line(err)


def test_dsn_precedence_for_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "procqueue.toml").write_text('dsn = "sqlite:///file.db"\n')
    assert run(capsys, "migrate")[0] == 0
    assert (tmp_path / "file.db").exists() and not (tmp_path / "procqueue.db").exists()
    monkeypatch.setenv("PROCQUEUE_DSN", "sqlite:///env.db")
    # A reading command never creates a database: its refusal names the one it chose.
    code, _, err = run(capsys, "stats")
    assert code == 1 and "env.db" in one_error_line(err)
    assert run(capsys, "migrate")[0] == 0 and run(capsys, "stats")[0] == 0
    assert (tmp_path / "env.db").exists()
    code, _, err = run(capsys, "jobs", "--dsn", "sqlite:///flag.db")
    assert code == 1 and "flag.db" in one_error_line(err)
    assert not (tmp_path / "flag.db").exists()
    monkeypatch.delenv("PROCQUEUE_DSN")
    (tmp_path / "procqueue.toml").write_text('dsn = "mysql://x"\n')
    code, _, err = run(capsys, "jobs")
    assert code == 2 and "mysql://x" in one_error_line(err)


def test_config_flag_on_every_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "other.toml").write_text('dsn = "sqlite:///other.db"\n')
    for argv in (["--config", "other.toml", "migrate"], ["migrate", "--config", "other.toml"]):
        assert run(capsys, *argv)[0] == 0
    assert (tmp_path / "other.db").exists() and not (tmp_path / "procqueue.db").exists()
    parser = cli.build_parser()
    missing = []
    for name, sub in parser._subparsers._group_actions[0].choices.items():  # type: ignore[union-attr]
        if name != "demo" and "--config" not in sub._option_string_actions:
            missing.append(name)
    assert missing == []


def test_metrics_port_from_the_file(tmp_path: Path, supervise: Any) -> None:
    port = free_port()
    (tmp_path / "procqueue.toml").write_text(f"metrics_port = {port}\n")
    _, settings, _ = supervise()
    assert settings.metrics_port == port


# -- the documentation ---------------------------------------------------------------

INTERNAL_SETTINGS = {"progress_interval", "titles"}
"""Settings fields that are not user configuration (tests and the CLI set them)."""


def test_configuration_page_documents_every_key() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z_]+)` \|.*$", doc, re.M)}
    missing = [key for key in configfile.KEYS if key not in rows]
    assert missing == []
    no_env = [key for key in configfile.KEYS if f"`{configfile.env_var(key)}`" not in rows[key]]
    assert no_env == []
    unconfigurable = set(config.Settings.__struct_fields__) - INTERNAL_SETTINGS - set(rows)
    assert unconfigurable == set()
    assert "`PROCQUEUE_CONFIG`" in doc and "`PROCQUEUE_DASHBOARD_TOKEN`" in doc


def test_configuration_page_flags_exist() -> None:
    """Every `--flag` the configuration page names is an option of supervise."""
    doc = (ROOT / "docs" / "configuration.md").read_text()
    parser = cli.build_parser()
    sub = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    options = {o for p in sub.values() for o in p._option_string_actions} | set(
        parser._option_string_actions
    )
    named = set(re.findall(r"`(--[a-z-]+)", doc))
    assert named and named <= options


def test_config_errors_are_config_errors() -> None:
    with pytest.raises(errors.ConfigError, match="PROCQUEUE_POLL"):
        configfile.from_env({"PROCQUEUE_POLL": "-1"})
