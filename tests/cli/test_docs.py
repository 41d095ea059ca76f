"""The user guides in docs/ stay consistent with the code: links resolve,
Python examples parse, config-file examples decode, and the APIs the guides
name exist."""

from __future__ import annotations

import ast
import re
import shlex
import tomllib
from pathlib import Path

import pytest

import procqueue
from procqueue import App
from procqueue import config as configfile
from procqueue.cli.main import build_parser
from procqueue.jobs.context import Context

ROOT = Path(__file__).resolve().parents[2]
GUIDES = [
    "getting-started.md",
    "defining-jobs.md",
    "producing.md",
    "configuration.md",
    "deploying.md",
    "migrating.md",
    "workflows.md",
]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHOWS_PYTHON = {
    *("getting-started.md", "defining-jobs.md", "producing.md", "migrating.md", "workflows.md")
}
"""The guides that show Python code; the others show commands and config only."""


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize("name", GUIDES)
def test_guides_exist_and_are_linked_from_the_readme(name: str) -> None:
    assert (ROOT / "docs" / name).is_file()
    assert f"(docs/{name})" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    text = page.read_text()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", file.read_text(), re.M)
            if anchor not in {_slug(h) for h in headings}:
                broken.append(target)
    assert broken == []


@pytest.mark.parametrize("name", GUIDES)
def test_python_examples_parse(name: str) -> None:
    """Every Python block parses, and the guides that show code have some
    (a guide whose blocks lost their language tag would pass unread)."""
    blocks = _blocks((ROOT / "docs" / name).read_text(), "python")
    assert bool(blocks) == (name in SHOWS_PYTHON)
    for block in blocks:
        ast.parse(block)


def test_toml_examples_are_valid_config(tmp_path: Path) -> None:
    blocks = _blocks((ROOT / "docs" / "configuration.md").read_text(), "toml")
    assert len(blocks) == 2
    for block in blocks:
        name = "pyproject.toml" if "[tool.procqueue]" in block else "procqueue.toml"
        (tmp_path / name).write_text(block)
        assert configfile.load(Path(name), cwd=tmp_path).given()
        tomllib.loads(block)


def test_named_apis_exist() -> None:
    """The calls the guides show are real."""
    text = "\n".join((ROOT / "docs" / name).read_text() for name in GUIDES)
    for method in re.findall(r"`app\.(\w+)\(", text):
        assert hasattr(App, method), method
    for member in re.findall(r"`cx\.(\w+)", text):
        assert hasattr(Context, member) or member in ("id", "attempt"), member
    for name in set(re.findall(r"`procqueue\.(\w+)", text)) - {"toml"}:  # procqueue.toml
        here = ROOT / "procqueue" / name
        assert hasattr(procqueue, name) or here.with_suffix(".py").exists() or here.is_dir(), name


def _command_lines() -> list[tuple[str, str]]:
    """(page, line) of every ``procqueue ...`` command shown in a code block."""
    found = []
    for page in PAGES:
        for block in re.findall(r"^```\w*\n(.*?)^```", page.read_text(), re.M | re.S):
            for line in block.splitlines():
                text = line.strip().removeprefix("$ ")
                if text.startswith("procqueue ") and "[" not in text.split("#")[0]:
                    found.append((page.name, text))
    return found


COMMAND_LINES = _command_lines()


def test_the_guides_show_commands() -> None:
    assert len(COMMAND_LINES) >= 20


@pytest.mark.parametrize(
    ("page", "line"), COMMAND_LINES, ids=[f"{p}:{x}" for p, x in COMMAND_LINES]
)
def test_every_command_shown_parses(page: str, line: str) -> None:
    """A command a guide shows is one the parser takes: no option it lost or
    never had, no value of the wrong form."""
    argv = shlex.split(line, comments=True)[1:]
    args, extra = build_parser().parse_known_args(argv)
    assert extra == [] or args.run is None, f"{page}: {line}: unknown {extra}"
