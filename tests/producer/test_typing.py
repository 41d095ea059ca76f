"""Type checkers check enqueues: `Job[P, R].enqueue` takes the function's
parameters (less a leading `Context`), so mypy reports a misspelt keyword."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SNIPPET = """
from procqueue import App, Context

app = App()


@app.job
def add(x: int, y: int) -> int:
    return x + y


@app.job(queue="images")
def thumbnail(cx: Context, path: str, width: int = 256) -> dict[str, int]:
    return {"width": width}


add.enqueue(4, 4)
add.enqueue(x=1, y=2)
thumbnail.enqueue("a.png", width=128)
thumbnail.configure(delay=5).enqueue(path="a.png")
add.enqueue(x=1, yy=2)
thumbnail.configure(delay=5).enqueue(path="a.png", widht=3)
add.enqueue("four", 4)
"""


def test_mypy_reports_a_misspelt_keyword_and_a_wrong_type(tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text(textwrap.dedent(SNIPPET))
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "tasks.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["21", "22", "23"], out.stdout
    assert 'Unexpected keyword argument "yy" for "enqueue" of "Job"' in errors[0]
    assert 'Unexpected keyword argument "widht"' in errors[1]
    assert 'did you mean "width"' in errors[1]
    assert 'has incompatible type "str"; expected "int"' in errors[2]
