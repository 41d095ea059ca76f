"""Jobs that write to stdout and stderr, each line naming the job that wrote it."""

from __future__ import annotations

import sys

from procqueue import App, Context

app = App()


@app.job
def noisy(cx: Context) -> int:
    print(f"out {cx.id}", flush=True)
    sys.stderr.write(f"err {cx.id}, unterminated")
    return cx.id
