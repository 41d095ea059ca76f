"""Jobs for the lifecycle tests: a cron schedule and an on_failure handler."""

from __future__ import annotations

import os

from procqueue import App, Context, JobInfo, Permanent

app = App()


@app.cron("* * * * *")
def every_minute(cx: Context) -> int:
    return cx.id


def record_failure(info: JobInfo) -> None:
    with open(info.args["log"], "a") as f:
        f.write(f"{info.id} {info.attempts} {info.error!r}\n")


@app.job(on_failure=record_failure, max_attempts=2)
def doomed(log: str) -> None:
    raise Permanent(f"doomed in {os.getpid()}")
