"""The import direction of procqueue's modules (docs/architecture.md).

Read from the source: every import that runs when a module is imported
(module level, class bodies, try/if blocks; not function bodies, which
import lazily on purpose, nor ``if TYPE_CHECKING:`` blocks, which never
run). Importing ``procqueue.a.b`` counts as importing ``procqueue.a`` too,
since Python runs the package's ``__init__`` first.

Then checked for real: a fresh interpreter doing what a child does at
startup loads no database code.
"""

from __future__ import annotations

import ast
import collections
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "procqueue"

LAYERS: list[tuple[str, set[str]]] = [
    ("records", {"errors", "clock", "codec", "config", "models", "protocol", "events", "rates"}),
    ("storage", {"store"}),
    ("jobs", {"jobs"}),
    ("producer", {"producer", ""}),  # "": `import procqueue`, what job modules do
    ("integrations", {"contrib"}),  # imported only by whoever uses them
    ("child", {"child"}),
    ("supervisor", {"supervisor"}),
    ("interface", {"cli", "dashboard", "demo", "testing", "__main__"}),
]
"""Bottom to top, by module or package name relative to ``procqueue`` (a
package stands for its submodules): each folder of the package is a layer.
A module imports only from its own layer or lower ones."""

FORBIDDEN: list[tuple[set[str], set[str], str]] = [
    (
        {"store"},
        {"protocol", "jobs", "producer", "child", "supervisor"},
        "storage knows rows, not job callables or the pipe",
    ),
    (
        {"child", "jobs", "producer.app", "producer.batches", "producer.control", ""},
        {"store", "producer.client", "supervisor"},
        "what a child imports never loads database or supervisor code",
    ),
    (
        {"dashboard"},
        {"store"},
        "the dashboard reads and controls jobs through App (its Client)",
    ),
]
"""(importers, imported, why): pairs the layers alone would allow, or that
are worth naming. A module matches a name if it is that module or inside
that package."""

CHILD_ENTRY_POINTS = ("procqueue.child.__main__", "procqueue")
"""What a child process imports before the job module."""

DATABASE_CODE = (
    "procqueue.store",
    "procqueue.producer.client",
    "procqueue.supervisor",
    "psycopg",
    "psycopg_pool",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_at_import(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements executed when a module with `body` is imported."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _run_at_import(node.orelse)
        else:  # class bodies, try/except, if/else, with, match
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    yield from _run_at_import([child])
                elif isinstance(child, ast.excepthandler | ast.match_case):
                    yield from _run_at_import(child.body)


def _ancestors(name: str) -> set[str]:
    """`name` and every package above it."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def _named(importer: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The procqueue modules `node` in `importer` names itself: a module
    imported, a submodule taken from its package, or the package whose own
    names (defined in its ``__init__``) are taken."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in MODULES}
    base = node.module or ""
    if node.level:
        package = importer.split(".")
        if MODULES[importer].name != "__init__.py":
            package.pop()
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, base] if base else package)
    submodules = {f"{base}.{alias.name}" for alias in node.names} & MODULES.keys()
    if len(submodules) < len(node.names) and base in MODULES:
        submodules.add(base)
    return submodules


def _targets(importer: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The procqueue modules whose code runs because of `node` in
    `importer`: the ones it names and every package above them."""
    found: set[str] = set()
    for name in _named(importer, node):
        found |= {n for n in _ancestors(name) if n in MODULES}
    return found


def _every_import(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement in a module, wherever it stands."""
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield node


def _graph(
    reader: Callable[[list[ast.stmt]], Iterator[ast.Import | ast.ImportFrom]],
    targets: Callable[[str, ast.Import | ast.ImportFrom], set[str]] = _targets,
) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges: set[str] = set()
        for node in reader(tree.body):
            edges |= targets(name, node)
        graph[name] = edges - {name}
    return graph


GRAPH = _graph(_run_at_import)
"""Module -> the procqueue modules it imports at import time, packages above
them included (Python runs a package's ``__init__`` before its submodules)."""

EVERY_IMPORT = _graph(_every_import)
"""Module -> every procqueue module it names in an import: deferred ones in
function bodies and ``TYPE_CHECKING`` ones included."""

EVERY_NAMED = _graph(_every_import, _named)
"""Module -> the procqueue modules its imports name themselves (not the
packages Python runs first): a module's own package among them when it
takes a name the package's ``__init__`` defines."""


def _edges() -> Iterator[tuple[str, str]]:
    """The imports the layer rules judge: not a module's own enclosing
    packages, which run first whatever it imports (the closure tests cover
    them)."""
    for module, targets in sorted(GRAPH.items()):
        for target in sorted(targets - _ancestors(module)):
            yield module, target


def _short(module: str) -> str:
    return module.removeprefix("procqueue").removeprefix(".")


def _matches(module: str, names: set[str]) -> bool:
    short = _short(module)
    if "" in names and short == "":
        return True
    return any(n and (short == n or short.startswith(n + ".")) for n in names)


def _layer(module: str) -> int:
    for index, (_, names) in enumerate(LAYERS):
        if _matches(module, names):
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in tests/test_imports.py")


def test_every_module_has_a_layer_and_every_name_a_module() -> None:
    for module in MODULES:
        _layer(module)
    named = {n for _, names in LAYERS for n in names} | {
        n for importers, imported, _ in FORBIDDEN for n in importers | imported
    }
    assert {n for n in named if not any(_matches(m, {n}) for m in MODULES)} == set()


def test_the_graph_is_read() -> None:
    """Guards the reader itself: known edges are found, lazy ones are not."""
    assert "procqueue.jobs.registry" in GRAPH["procqueue.producer.app"]
    assert "procqueue.store" in GRAPH["procqueue.producer.client"]
    assert "procqueue.store" in GRAPH["procqueue.store.sqlite"]  # its parent package
    assert "procqueue.producer.client" not in GRAPH["procqueue.producer.app"]  # in a method
    assert "procqueue.producer.client" in EVERY_IMPORT["procqueue.producer.app"]
    assert "procqueue.store" not in GRAPH["procqueue.producer.batches"]  # TYPE_CHECKING only
    assert "procqueue.store" in EVERY_IMPORT["procqueue.producer.batches"]
    importer = "procqueue.store._sql_ops"  # its package's name, and its package's submodule
    (own_name,) = ast.parse("from procqueue.store import DEFAULT_DSN").body
    (submodule,) = ast.parse("from . import _rows").body
    assert isinstance(own_name, ast.ImportFrom) and isinstance(submodule, ast.ImportFrom)
    assert _named(importer, own_name) == {"procqueue.store"}
    assert _named(importer, submodule) == {"procqueue.store._rows"}


def test_no_module_imports_from_a_higher_layer() -> None:
    upward = [
        f"{_short(m)} ({LAYERS[_layer(m)][0]}) imports {_short(t)} ({LAYERS[_layer(t)][0]})"
        for m, t in _edges()
        if _layer(t) > _layer(m)
    ]
    assert upward == []


@pytest.mark.parametrize("importers,imported,why", FORBIDDEN, ids=[f[2] for f in FORBIDDEN])
def test_forbidden_imports(importers: set[str], imported: set[str], why: str) -> None:
    found = [
        f"{_short(m) or 'procqueue'} imports {_short(t)}"
        for m, t in _edges()
        if _matches(m, importers) and _matches(t, imported)
    ]
    assert found == [], why


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph`, one path for each back edge found."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_cycles_of_any_kind() -> None:
    """No two modules need each other, not even through a deferred import
    in a function or an import for type checking only: each module can be
    read, and imported, after the ones it names. The packages above a
    module run before it whatever it imports, so they count only where it
    names them: a module that takes a name from its own package, whose
    ``__init__`` imports that module, closes a circle."""
    graph = {m: (EVERY_IMPORT[m] - _ancestors(m)) | EVERY_NAMED[m] for m in MODULES}
    assert _cycles(graph) == []


def _folder(module: str) -> str:
    """The top-level module or folder of procqueue that `module` is in."""
    return _short(module).split(".")[0]


def test_no_cycles_between_folders() -> None:
    """The folders are layers: no two of them import each other, by any path."""
    graph: dict[str, set[str]] = {}
    for module, targets in EVERY_IMPORT.items():
        here = _folder(module)
        graph.setdefault(here, set())
        graph[here] |= {_folder(t) for t in targets if _folder(t) not in ("", here)}
    assert _cycles(graph) == []


def _folder_of(module: str) -> str:
    """The package `module` is in, relative to procqueue ('' at the top)."""
    return _short(module).rpartition(".")[0]


def _in_folder(module: str, folder: str) -> bool:
    """Whether `module` is in `folder` ('' is the top of the package) or below it."""
    return _matches(module, {folder}) if folder else "." not in _short(module)


def test_a_leading_underscore_means_its_folder_only() -> None:
    """A module whose name starts with one underscore is imported only from
    its own folder and the folders below it (one at the package's top, only
    from the top)."""
    found = [
        f"{_short(m)} imports {_short(t)}"
        for m, targets in sorted(EVERY_NAMED.items())
        for t in sorted(targets)
        if re.match(r"_[^_]", t.rsplit(".", 1)[-1]) and not _in_folder(m, _folder_of(t))
    ]
    assert found == []


def test_top_level_stays_small() -> None:
    """At most 12 modules at the top of the package; the rest live in the
    folder of their layer."""
    assert len([p for p in PACKAGE.glob("*.py")]) <= 12


def test_the_architecture_doc_lists_every_module_once() -> None:
    """docs/architecture.md names each module of the package that holds
    code, by its path, exactly once (empty ``__init__.py`` files only mark
    their folder), and no module that does not exist."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = collections.Counter(re.findall(r"`(procqueue/[\w/]+\.py)`", text))
    modules = {str(path.relative_to(ROOT)) for path in MODULES.values() if path.read_text().strip()}
    assert sorted(modules - set(named)) == [], "missing from docs/architecture.md"
    assert sorted(set(named) - modules) == [], "named in docs/architecture.md, not in the package"
    assert sorted(m for m, n in named.items() if n > 1) == [], "named more than once"


def _closure(start: str) -> dict[str, str]:
    """Every module imported when `start` is, each with the module that imports it."""
    reached = {start: ""}
    todo = [start]
    while todo:
        module = todo.pop()
        for target in GRAPH[module]:
            if target not in reached:
                reached[target] = module
                todo.append(target)
    return reached


@pytest.mark.parametrize("entry", CHILD_ENTRY_POINTS)
def test_a_child_imports_no_database_code(entry: str) -> None:
    reached = _closure(entry)
    bad = {m: by for m, by in reached.items() if m.startswith(DATABASE_CODE)}
    assert bad == {}, "imported by: " + ", ".join(f"{m} <- {by}" for m, by in bad.items())


def test_a_child_at_startup_loads_no_database_code() -> None:
    """What ``python -m procqueue.child`` does before its first job, in a
    fresh interpreter: import the package and the child, load the app."""
    script = textwrap.dedent(
        """
        import sys
        import procqueue
        import procqueue.child.__main__
        app = procqueue.load_app("tests.jobs.basic")
        assert "tests.jobs.basic.add" in app.registry
        loaded = sorted(m for m in sys.modules if m.startswith(tuple(sys.argv[1:])))
        print(",".join(loaded))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *DATABASE_CODE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_the_client_is_imported_when_the_database_is_first_needed() -> None:
    script = textwrap.dedent(
        """
        import sys
        from tests.jobs import basic
        basic.add.configure(key="x")
        assert "procqueue.producer.client" not in sys.modules
        basic.app.client
        assert "procqueue.producer.client" in sys.modules and "procqueue.store" in sys.modules
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
