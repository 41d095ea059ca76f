"""`procqueue demo`: crash isolation, live.

Enqueues Mandelbrot tiles (`procqueue.demo.tiles`; a few of them segfault,
hang past their timeout, exit or raise) as one batch into a fresh SQLite
file, runs a supervisor over it in a background thread, draws each child and
the overall progress in the terminal, and ends with the picture the batch's
completion handler assembled from the tiles and a summary table.

Run it as ``procqueue demo`` or ``python -m procqueue.demo``.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import sys
import threading
import time
from pathlib import Path

from procqueue import errors, models
from procqueue.demo import tiles
from procqueue.demo.view import (
    _ANSI,
    BOLD,
    CYAN,
    DIM,
    GREEN,
    RED,
    YELLOW,
    Style,
    View,
    Watcher,
    clip,
    short,
    totals,
)
from procqueue.producer.app import App
from procqueue.supervisor.loop import Supervisor
from procqueue.supervisor.settings import Settings

__all__ = ["Style", "add_arguments", "clip", "main"]

SPEC = "procqueue.demo.tiles"
ASSEMBLE_QUEUE = tiles.assemble.options.queue
DEFAULT_JOBS = 300
DEFAULT_DB = "procqueue-demo.db"
_FRAME_S = 0.1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the demo's options to `parser`."""
    parser.add_argument(
        "--jobs", type=_positive, default=DEFAULT_JOBS, metavar="N",
        help=f"how many tiles to compute (default: {DEFAULT_JOBS})",
    )  # fmt: skip
    parser.add_argument(
        "--workers", type=_positive, default=os.cpu_count() or 1, metavar="N",
        help="child processes (default: one per CPU)",
    )  # fmt: skip
    parser.add_argument(
        "--db", default=DEFAULT_DB, metavar="PATH",
        help=f"SQLite file to use, replaced if it exists (default: ./{DEFAULT_DB})",
    )  # fmt: skip
    parser.add_argument(
        "--no-live", action="store_true", help="no live view: a progress line every 2 s"
    )


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


# -- the run ------------------------------------------------------------------


def main(args: argparse.Namespace) -> int:
    """Runs the demo. Returns 0 once every job has finished (some fail on
    purpose), 130 after Ctrl-C, 1 if the demo could not run."""
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except (OSError, errors.ProcqueueError) as exc:
        print(f"procqueue demo: {exc}", file=sys.stderr)
        return 1


def _fresh_db(path: Path) -> None:
    """Removes a previous demo database (and its -wal/-shm) at `path`."""
    if path.exists() and path.stat().st_size:
        with path.open("rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                raise errors.ConfigError(f"{path} is not a SQLite file; not replacing it")
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _run(args: argparse.Namespace) -> int:
    style = Style(sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
    path = Path(args.db).resolve()
    _fresh_db(path)
    dsn = f"sqlite:///{path}"
    app = tiles.app.using(dsn)
    batch = tiles.plan(args.jobs)
    kinds = collections.Counter(short(name) for name, _, _ in batch)
    print(style(f"procqueue demo: {args.jobs} Mandelbrot tiles, {args.workers} children", BOLD))
    print(style(f"  database {path}", DIM))
    for kind, words in tiles.KINDS.items():
        if kinds[kind] and kind != "mandelbrot_tile":
            print(f"  {kinds[kind]:3} of {args.jobs} tiles: {words}")
    print()
    meta = {"dsn": dsn, "tiles": args.jobs}
    with app.batch("mandelbrot", on_complete=tiles.assemble, meta=meta) as opened:
        app.enqueue_many(batch)  # one transaction; the block's exit seals the batch
    settings = Settings(workers=args.workers, poll=0.05, lease=10, grace=5, kill_grace=0.5)
    logger, quiet = logging.getLogger("procqueue"), logging.NullHandler()
    logger.addHandler(quiet)
    logger.propagate = False  # the supervisor's own lines would tear the live view
    try:
        sup = Supervisor(app, spec=SPEC, settings=settings)
        watcher = Watcher(style, args.workers)
        sup.events.subscribe(watcher)
        return _watch(app, sup, watcher, args, opened.id)
    finally:
        logger.removeHandler(quiet)
        logger.propagate = True
        app.close()


def _assembled(app: App, batch_id: int) -> models.JobInfo | None:
    """The batch's handler job once the batch is complete and it has ended."""
    if app.batch_info(batch_id).state != models.BatchState.COMPLETE:
        return None
    jobs = app.jobs(name=tiles.assemble.name, limit=1)
    return jobs[0] if jobs and jobs[0].state in models.TERMINAL_STATES else None


def _watch(
    app: App, sup: Supervisor, watcher: Watcher, args: argparse.Namespace, batch_id: int
) -> int:
    """Runs `sup` in a thread and draws until every tile is final and the
    batch's handler has assembled the picture, then summarizes."""
    crashed: list[BaseException] = []

    def supervise() -> None:
        try:
            sup.run()
        except BaseException as exc:
            crashed.append(exc)

    thread = threading.Thread(target=supervise, name="procqueue-demo-supervisor")
    live = sys.stdout.isatty() and not args.no_live
    view = View(watcher, args.jobs, live=live, out=sys.stdout)
    interrupted = False
    try:
        thread.start()
        while not crashed:
            t = totals(app)
            if t["pending"] + t["running"] == 0 and _assembled(app, batch_id):
                break
            view.tick(t)
            time.sleep(_FRAME_S)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        wall = time.monotonic() - view.start
        sup.request_stop()  # a drain: running jobs may finish (grace 5 s)
        try:
            while thread.is_alive():
                try:
                    thread.join(0.1)
                except KeyboardInterrupt:
                    interrupted = True
                    sup.request_stop()  # the second stop kills and hands back at once
            view.stopped = True
            view.tick(totals(app), final=True)
        finally:
            view.close()
    if crashed:
        print(f"procqueue demo: the supervisor stopped: {crashed[0]}", file=sys.stderr)
        return 1
    print()
    if interrupted:
        print("interrupted: the supervisor stopped cleanly; unfinished jobs stay in the database")
        return 130
    summary(app, args, wall, watcher.retries, watcher.deaths, watcher.style, batch_id)
    return 0


# -- the summary --------------------------------------------------------------


def summary(
    app: App,
    args: argparse.Namespace,
    wall: float,
    retries: int,
    deaths: int,
    s: Style,
    batch_id: int,
) -> None:
    """Prints the picture, the table of outcomes and what the run showed."""
    done = list(app.batch_results(batch_id, state="done"))
    failed = list(app.batch_results(batch_id, state="failed"))
    retried = sum(1 for j in done if j.attempts > 1)
    causes = collections.Counter(tiles.cause(j.error) for j in failed)
    order = ["segfault", "timeout", "exit code", "killed", "exception"]
    breakdown = ", ".join(f"{causes[c]} {c}" for c in order if causes[c])
    print(mosaic(_assembled(app, batch_id), s), end="\n\n")
    rows = [
        ("done", s(str(len(done)), GREEN, BOLD), f"{len(done) / args.jobs:.0%} of {args.jobs}"),
        ("retried", s(str(retried), YELLOW, BOLD), f"done after a retry ({retries} retries)"),
        ("failed", s(str(len(failed)), RED, BOLD), breakdown or "none"),
        ("jobs/s", f"{args.jobs / max(wall, 1e-9):.1f}", f"with {args.workers} workers"),
        ("wall time", f"{wall:.1f} s", ""),
    ]
    rule = s("  " + "─" * 60, DIM)
    print(rule)
    for label, value, note in rows:
        pad = " " * (8 - len(_ANSI.sub("", value)))
        print(f"  {label:<10}{pad}{value}   {s(note, DIM)}")
    print(rule)
    print(s(f"{deaths} children crashed and were replaced; the supervisor never stopped.", BOLD))


def mosaic(handler: models.JobInfo | None, s: Style) -> str:
    """The picture the batch's handler assembled, one character a tile; ✖ for failed tiles."""
    result = handler.result if handler is not None else None
    if not isinstance(result, dict) or not isinstance(result.get("picture"), list):
        error = handler.error if handler is not None else "it did not run"
        return s(f"  the batch's handler assembled no picture: {error}", RED)
    lines = [
        "  " + "".join(s(c, RED, BOLD) if c == "✖" else s(c, CYAN) for c in str(line))
        for line in result["picture"]
    ]
    caption = "the image the batch's on_complete handler assembled from the tiles (✖ failed)"
    return "\n".join([*lines, s(f"  {caption}", DIM)])
