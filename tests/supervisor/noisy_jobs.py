"""Jobs that write to stdout and stderr, each line naming the job that wrote it."""

from __future__ import annotations

import sys
import time

from procqueue import App, Context

app = App()


@app.job
def noisy(cx: Context) -> int:
    # 10 ms a job keeps a child under the per-child rate limit of logged lines
    # (200 a second a stream), which drops lines of a faster one by design
    time.sleep(0.01)
    print(f"out {cx.id}", flush=True)
    sys.stderr.write(f"err {cx.id}, unterminated")
    return cx.id
