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
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "procqueue"

LAYERS: list[tuple[str, set[str]]] = [
    (
        "records",
        {
            "errors",
            "_clock",
            "_faults",
            "models",
            "protocol",
            "retry",
            "cron",
            "config",
            "configfile",
            "logs",
            "events",
            "_proctree",
            "_faultlog",
        },
    ),
    ("storage", {"store"}),
    (
        "jobs and children",
        {
            "",  # the package itself: `import procqueue` is what job modules do
            "context",
            "jobdef",
            "codec",
            "runner",
            "registry",
            "app",
            "child",
            "_process",
            "_forkserver",
            "_template",
            "_childio",
            "spawner",
            "pool",
            "demo_jobs",
        },
    ),
    ("client", {"client", "batching"}),
    (
        "supervision",
        {
            "supervisor",
            "attempt",
            "attempts",
            "attempt_writes",
            "limits",
            "claims",
            "dbcalls",
            "heartbeat",
            "maintenance",
            "metrics",
        },
    ),
    (
        "interface",
        {
            "cli",
            "_commands",
            "_ops_commands",
            "_batch_commands",
            "_format",
            "__main__",
            "testing",
            "demo",
            "demo_view",
            "dashboard",
        },
    ),
]
"""Bottom to top, by module name relative to ``procqueue`` (a package
stands for its submodules). A module imports only from its own layer or
lower ones."""

FORBIDDEN: list[tuple[set[str], set[str], str]] = [
    (
        {"store"},
        {"protocol", "context", "runner", "child", "registry", "app", "jobdef", "supervisor"},
        "storage knows rows, not job callables or the pipe",
    ),
    (
        {"child", "runner", "context", "registry", "app", "jobdef", ""},
        {"store", "client", "supervisor", "attempts", "maintenance", "dbcalls"},
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

EXCEPTIONS: set[tuple[str, str]] = set()
"""(importer, imported) pairs exempt from the rules above, each with its
reason in a comment. None today."""

CHILD_ENTRY_POINTS = ("procqueue.child", "procqueue")
"""What a child process imports before the job module."""

DATABASE_CODE = ("procqueue.store", "procqueue.client", "psycopg", "psycopg_pool")


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


def _targets(importer: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The procqueue modules whose code runs because of `node` in `importer`."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = importer.split(".")
            if MODULES[importer].name != "__init__.py":
                package.pop()
            package = package[: len(package) - node.level + 1]
            base = ".".join([*package, base] if base else package)
        submodules = [f"{base}.{alias.name}" for alias in node.names]
        names = [base, *(n for n in submodules if n in MODULES)]
    found: set[str] = set()
    for name in names:
        found |= {n for n in _ancestors(name) if n in MODULES}
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges: set[str] = set()
        for node in _run_at_import(tree.body):
            edges |= _targets(name, node)
        graph[name] = edges - {name}
    return graph


GRAPH = _graph()
"""Module -> the procqueue modules it imports at import time, packages above
them included (Python runs a package's ``__init__`` before its submodules)."""


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
    assert "procqueue.registry" in GRAPH["procqueue.app"]
    assert "procqueue.store" in GRAPH["procqueue.client"]
    assert "procqueue.store" in GRAPH["procqueue.store.sqlite"]  # its parent package
    assert "procqueue.client" not in GRAPH["procqueue.app"]  # only inside a method
    assert "procqueue.registry" not in GRAPH["procqueue.runner"]  # only under TYPE_CHECKING


def test_no_module_imports_from_a_higher_layer() -> None:
    upward = [
        f"{_short(m)} ({LAYERS[_layer(m)][0]}) imports {_short(t)} ({LAYERS[_layer(t)][0]})"
        for m, t in _edges()
        if _layer(t) > _layer(m) and (_short(m), _short(t)) not in EXCEPTIONS
    ]
    assert upward == []


@pytest.mark.parametrize("importers,imported,why", FORBIDDEN, ids=[f[2] for f in FORBIDDEN])
def test_forbidden_imports(importers: set[str], imported: set[str], why: str) -> None:
    found = [
        f"{_short(m) or 'procqueue'} imports {_short(t)}"
        for m, t in _edges()
        if _matches(m, importers)
        and _matches(t, imported)
        and (_short(m), _short(t)) not in EXCEPTIONS
    ]
    assert found == [], why


def test_no_import_cycles() -> None:
    """Every module can be imported first: no two modules need each other
    at import time (app.py and runner.py once did)."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(GRAPH[module] - _ancestors(module)):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)
    assert cycles == []


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
        import procqueue.child
        app = procqueue.app.load_app("tests.jobs.basic")
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
        assert "procqueue.client" not in sys.modules
        basic.app.client
        assert "procqueue.client" in sys.modules and "procqueue.store" in sys.modules
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
