"""What `procqueue demo` draws: terminal helpers, the `Watcher` that builds
each child's line from the supervisor's events, and the `View` that draws
them (redrawn in place on a terminal, plain lines otherwise)."""

from __future__ import annotations

import collections
import dataclasses
import math
import queue
import re
import shutil
import threading
import time
from dataclasses import dataclass
from typing import TextIO

from procqueue import events
from procqueue.demo import tiles
from procqueue.producer.app import App

_PLAIN_EVERY_S = 2.0
_EVENTS_SHOWN = 5

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
RED, GREEN, YELLOW, CYAN, DIM, BOLD = "31", "32", "33", "36", "2", "1"
ASSEMBLE_QUEUE = tiles.assemble.options.queue


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
