"""`procqueue demo`: crash isolation, live.

Enqueues Mandelbrot tiles (`procqueue.demo_jobs`; a few of them segfault,
hang past their timeout, exit or raise) as one batch into a fresh SQLite
file, runs a supervisor over it in a background thread, draws each child and
the overall progress in the terminal, and ends with the picture the batch's
completion handler assembled from the tiles and a summary table.

Run it as ``procqueue demo`` or ``python -m procqueue.demo``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import logging
import math
import os
import queue
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from procqueue import config, demo_jobs, errors, events, models
from procqueue.app import App
from procqueue.supervisor import Supervisor

SPEC = "procqueue.demo_jobs"
ASSEMBLE_QUEUE = demo_jobs.assemble.options.queue
DEFAULT_JOBS = 300
DEFAULT_DB = "procqueue-demo.db"
_FRAME_S = 0.1
_PLAIN_EVERY_S = 2.0
_EVENTS_SHOWN = 5

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
RED, GREEN, YELLOW, CYAN, DIM, BOLD = "31", "32", "33", "36", "2", "1"


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


# -- terminal helpers ---------------------------------------------------------


class Style:
    """ANSI colours, or none."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, *codes: str) -> str:
        if not self.enabled or not codes or not text:
            return text
        return f"\x1b[{';'.join(codes)}m{text}\x1b[0m"


def clip(line: str, width: int) -> str:
    """`line` cut to `width` visible characters (ANSI sequences don't count)."""
    out: list[str] = []
    seen = pos = 0
    for match in [*_ANSI.finditer(line), None]:
        text = line[pos : len(line) if match is None else match.start()]
        if seen + len(text) > width:
            out.append(text[: width - seen])
            return "".join(out) + ("\x1b[0m" if _ANSI.search(line) else "")
        out.append(text)
        seen += len(text)
        if match is not None:
            out.append(match.group())
            pos = match.end()
    return "".join(out)


def bar(parts: list[tuple[float, str]], width: int, style: Style) -> str:
    """A bar of `width` cells: the coloured parts (fractions) in order, then the rest."""
    cells, used = [], 0
    for fraction, colour in parts:
        n = min(width - used, round(max(0.0, fraction) * width))
        cells.append(style("█" * n, colour))
        used += n
    return "".join(cells) + style("░" * (width - used), DIM)


def short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


# -- what the supervisor tells ------------------------------------------------


@dataclass
class ChildLine:
    """What the view shows of one child, built from supervisor events."""

    pid: int = 0
    first_pid: int = 0
    ready: bool = False
    job: events.Started | None = None
    started: float = 0.0
    text: str | None = None
    fraction: float | None = None


class Watcher:
    """Subscribes to the supervisor's events: keeps each child's line and
    turns deaths, retries and failures into one-line demo events.

    Events arrive in the supervisor's thread; the view reads under `lock`.
    """

    def __init__(self, style: Style, workers: int) -> None:
        self.style = style
        self.lock = threading.Lock()
        self.children = {i + 1: ChildLine() for i in range(workers)}
        self.new: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.deaths = 0
        self.retries = 0

    def __call__(self, event: events.Event) -> None:
        with self.lock:
            line = self._apply(event)
        if line:
            self.new.put(line)

    def _apply(self, event: events.Event) -> str | None:
        s = self.style
        if isinstance(event, events.ChildStarted):
            c = self.children[event.child]
            c.pid, c.ready, c.job = event.pid, False, None
            c.first_pid = c.first_pid or event.pid
        elif isinstance(event, events.ChildReady):
            self.children[event.child].ready = True
        elif isinstance(event, events.Started):
            c = self.children[event.child]
            c.job, c.started, c.text, c.fraction = event, time.monotonic(), None, None
        elif isinstance(event, events.Progress):
            c = self.children[event.child]
            c.text, c.fraction = event.text, event.fraction
        elif isinstance(event, events.Finished):
            for c in self.children.values():
                if c.job is not None and c.job.job_id == event.job_id:
                    c.job = None
            return self._finished(event)
        elif isinstance(event, events.ChildDied) and (
            not event.expected or event.kill == "timeout"
        ):
            self.deaths += 1
            job = f" running #{event.job_id} {short(event.name or '')}" if event.job_id else ""
            how, mark = event.reason.replace("child process ", ""), "✖"
            if event.kill == "timeout":
                how, mark = f"{event.kill_words}, {how}", "⏱"
            return s(
                f"{mark} child {event.child} (pid {event.pid}) died{job}: {how} — replaced", RED
            )
        return None

    def _finished(self, event: events.Finished) -> str | None:
        s, error = self.style, events.first_line(event.error)
        if event.outcome == "retried":
            self.retries += 1
            if error.startswith(("child process", "timed out")):
                return None  # its child's death is the event
            line = f"↻ job #{event.job_id} {short(event.name)} attempt {event.attempt}: {error}"
            return s(f"{line} — retry in {event.retry_in or 0:.1f}s", YELLOW)
        if event.outcome in ("failed", "cancelled"):
            line = f"✖ job #{event.job_id} {short(event.name)} {event.outcome} for good: {error}"
            return s(line, RED, BOLD)
        return None


# -- the view -----------------------------------------------------------------


def totals(app: App) -> collections.Counter[str]:
    """Tiles per state (the handler runs in a queue of its own)."""
    t: collections.Counter[str] = collections.Counter()
    for q in app.stats().values():
        if q.name == ASSEMBLE_QUEUE:
            continue
        t.update(done=q.done, failed=q.failed, cancelled=q.cancelled)
        t.update(pending=q.pending, running=q.running)
    return t


class View:
    """Draws the run: redrawn in place on a terminal, plain lines otherwise,
    from what the `Watcher` collected."""

    def __init__(self, watcher: Watcher, n: int, live: bool, out: TextIO) -> None:
        self.watcher, self.n, self.live, self.out = watcher, n, live, out
        self.style = watcher.style
        self.recent: collections.deque[str] = collections.deque(maxlen=_EVENTS_SHOWN)
        self.stopped = False
        self.height = 0
        self.last_plain = -math.inf
        self.start = time.monotonic()

    def tick(self, t: collections.Counter[str], *, final: bool = False) -> None:
        """Takes in new events and draws (a plain line every ~2 s)."""
        fresh: list[str] = []
        while not self.watcher.new.empty():
            fresh.append(self.watcher.new.get())
        if self.live:
            self.recent.extend(fresh)
            recent = [f"  {line}" for line in self.recent]
            recent += [""] * (_EVENTS_SHOWN - len(recent))
            self._draw([*self._children(), "", *recent, self._overall(t)])
            return
        self.out.writelines(f"  {line}\n" for line in fresh)
        now = time.monotonic()
        if final or now - self.last_plain >= _PLAIN_EVERY_S:
            self.last_plain = now
            self.out.write(self._overall(t) + "\n")
        self.out.flush()

    def close(self) -> None:
        if self.live:
            self.out.write("\x1b[?25h")  # the cursor, hidden while drawing
            self.out.flush()

    def _children(self) -> list[str]:
        s = self.style
        with self.watcher.lock:
            children = [(i, dataclasses.replace(c)) for i, c in self.watcher.children.items()]
        room = max(1, shutil.get_terminal_size().lines - _EVENTS_SHOWN - 4)
        shown = children[:room] if len(children) > room + 1 else children
        lines = []
        for index, c in shown:
            head = f"  child {index:<{len(str(len(children)))}}  "
            head += s(f"pid {c.pid or '-':<7}", DIM) + "  "
            job = c.job
            if job is None:
                if self.stopped or c.ready:
                    state = "stopped" if self.stopped else "idle"
                elif c.pid == c.first_pid:
                    state = "starting…"
                else:
                    state = "replacement starting…"
                lines.append(head + s(state, DIM))
                continue
            done = c.fraction or 0.0
            elapsed = time.monotonic() - c.started
            again = s(f"  attempt {job.attempt}", YELLOW) if job.attempt > 1 else ""
            lines.append(
                f"{head}{s('▶', GREEN)} job #{job.job_id:<5} {short(job.name):<16}"
                f"[{bar([(done, CYAN)], 12, s)}] {done:4.0%}  {c.text or '':<11}"
                f"{s(f'{elapsed:4.1f}s', DIM)}{again}"
            )
        if len(shown) < len(children):
            busy = sum(1 for _, c in children[len(shown) :] if c.job is not None)
            more = len(children) - len(shown)
            lines.append(s(f"  … and {more} more children, {busy} busy", DIM))
        return lines

    def _overall(self, t: collections.Counter[str]) -> str:
        s, n = self.style, max(self.n, 1)
        elapsed = max(time.monotonic() - self.start, 1e-9)
        done, failed, cancelled = t["done"], t["failed"], t["cancelled"]
        finished = done + failed + cancelled
        parts = [(done / n, GREEN), (failed / n, RED), (cancelled / n, DIM)]
        retries = self.watcher.retries
        return (
            f"  [{bar(parts, 30, s)}] {finished}/{self.n}  {s(f'done {done}', GREEN)}  "
            f"{s(f'retries {retries}', YELLOW)}  {s(f'failed {failed}', RED)}  "
            f"{finished / elapsed:5.1f} jobs/s  {s(f'{elapsed:5.1f}s', DIM)}"
        )

    def _draw(self, lines: list[str]) -> None:
        width = max(20, shutil.get_terminal_size().columns - 1)  # no wrapping: we count lines
        up = f"\x1b[{self.height}F" if self.height else "\x1b[?25l"
        body = "".join(f"\x1b[2K{clip(line, width)}\n" for line in lines)
        self.out.write(f"{up}{body}\x1b[J")
        self.out.flush()
        self.height = len(lines)


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
    app = demo_jobs.app.using(dsn)
    batch = demo_jobs.plan(args.jobs)
    kinds = collections.Counter(short(name) for name, _, _ in batch)
    print(style(f"procqueue demo: {args.jobs} Mandelbrot tiles, {args.workers} children", BOLD))
    print(style(f"  database {path}", DIM))
    for kind, words in demo_jobs.KINDS.items():
        if kinds[kind] and kind != "mandelbrot_tile":
            print(f"  {kinds[kind]:3} of {args.jobs} tiles: {words}")
    print()
    meta = {"dsn": dsn, "tiles": args.jobs}
    with app.batch("mandelbrot", on_complete=demo_jobs.assemble, meta=meta) as tiles:
        app.enqueue_many(batch)  # one transaction; the block's exit seals the batch
    settings = config.Settings(workers=args.workers, poll=0.05, lease=10, grace=5, kill_grace=0.5)
    logger, quiet = logging.getLogger("procqueue"), logging.NullHandler()
    logger.addHandler(quiet)
    logger.propagate = False  # the supervisor's own lines would tear the live view
    try:
        sup = Supervisor(app, spec=SPEC, settings=settings)
        watcher = Watcher(style, args.workers)
        sup.events.subscribe(watcher)
        return _watch(app, sup, watcher, args, tiles.id)
    finally:
        logger.removeHandler(quiet)
        logger.propagate = True
        app.close()


def _assembled(app: App, batch_id: int) -> models.JobInfo | None:
    """The batch's handler job once the batch is complete and it has ended."""
    if app.batch_info(batch_id).state != models.BatchState.COMPLETE:
        return None
    jobs = app.jobs(name=demo_jobs.assemble.name, limit=1)
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
    causes = collections.Counter(demo_jobs.cause(j.error) for j in failed)
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


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="procqueue demo", description="crash isolation, live")
    add_arguments(_parser)
    sys.exit(main(_parser.parse_args()))
