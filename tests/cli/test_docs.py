"""The user guides in docs/ stay consistent with the code: links resolve,
Python examples parse, config-file examples decode, and the APIs the guides
name exist."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

import procqueue
from procqueue import App, configfile
from procqueue.context import Context

ROOT = Path(__file__).resolve().parents[2]
GUIDES = [
    "getting-started.md",
    "defining-jobs.md",
    "producing.md",
    "configuration.md",
    "deploying.md",
    "migrating.md",
]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


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
    for block in _blocks((ROOT / "docs" / name).read_text(), "python"):
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
        assert hasattr(procqueue, name) or (ROOT / "procqueue" / f"{name}.py").exists(), name
