"""Every string a user or a job controls reaches a terminal escaped, on both
backends: names, queues, tags, progress, errors, batch names and
supervisor rows print their control characters as ``\\x1b``-style escapes,
so no value can retitle or clear the terminal, move the cursor, or forge a
line or a field."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from procqueue import App
from tests.cli.test_commands import run
from tests.store.rawdb import RawDb

EVIL = "\x1b]0;PWN\x07\x1b[2J\rforged\x9b"
"""Retitles the terminal, clears it, returns the cursor, and a C1 CSI."""
NAME_WITH_FIELD = "x.y\nstate:        done"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.fixture
def hostile(dsn: str) -> Iterator[tuple[int, int, int]]:
    """A database whose job, batch and supervisor rows hold control characters."""
    app = App(dsn)
    with app.batch(name="batch" + EVIL) as b:
        job = app.enqueue("evil" + EVIL, {}, queue="q" + EVIL[:-1], tags=["t" + EVIL])
    forged = app.enqueue(NAME_WITH_FIELD, {})
    raw = RawDb(dsn)
    try:
        raw.execute(
            "UPDATE jobs SET state = 'failed', progress = ?, fraction = 0.5, error = ?, "
            "finished_at = created_at WHERE id = ?",
            ("p" + EVIL, "boom" + EVIL + "\nline 2" + EVIL, job),
        )
        app.store.supervisor_beat(
            owner="host" + EVIL + ":1:abc",
            spec="spec" + EVIL,
            version="1",
            queues=["q" + EVIL],
            limits={},
            workers=1,
            busy=0,
            beat_every=5.0,
            started_at=app.clock.now(),
            now=app.clock.now(),
        )
    finally:
        raw.close()
    yield job, b.id, forged
    app.close()


COMMANDS: list[tuple[str, ...]] = [
    ("jobs",),
    ("jobs", "--state", "failed"),
    ("show", "{job}"),
    ("show", "{forged}"),
    ("stats",),
    ("queues",),
    ("batches",),
    ("batch", "show", "{batch}"),
    ("supervisors",),
]


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_every_command_prints_control_characters_escaped(
    capsys: pytest.CaptureFixture[str],
    dsn: str,
    hostile: tuple[int, int, int],
    argv: tuple[str, ...],
) -> None:
    job, batch, forged = hostile
    args = [a.format(job=job, batch=batch, forged=forged) for a in argv]
    code, out, err = run(capsys, *args, "--dsn", dsn)
    assert code == 0, err
    assert not RAW_CONTROL.search(out), repr(out)
    assert not RAW_CONTROL.search(err), repr(err)
    assert "\\x1b" in out or "{forged}" in argv, out


def test_a_name_with_a_newline_cannot_forge_a_field_in_show(
    capsys: pytest.CaptureFixture[str], dsn: str, hostile: tuple[int, int, int]
) -> None:
    code, out, _ = run(capsys, "show", str(hostile[2]), "--dsn", dsn)
    assert code == 0
    states = [line for line in out.splitlines() if line.startswith("state")]
    assert len(states) == 1 and "pending" in states[0], out
    assert "x.y\\x0astate:" in out, out
