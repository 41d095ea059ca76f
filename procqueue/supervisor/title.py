"""What a person sees of a supervisor's load without asking it: its process
title (``ps``, ``top``) and the busy-children gauge of its metrics.

`BusyTitle` is their one writer, and writes them only when the count of busy
children changes: the loop may ask at every pass for nothing.
"""

from __future__ import annotations

from prometheus_client import Gauge


class BusyTitle:
    """Shows how many of `workers` children run a job."""

    def __init__(self, *, spec: str, workers: int, titles: bool, gauge: Gauge) -> None:
        self._spec = spec
        self._workers = workers
        self._titles = titles
        """Whether the process title is set (the CLI sets it; in-process tests do not)."""
        self._gauge = gauge
        self._shown = -1

    def show(self, busy: int) -> None:
        """Shows `busy` children at work (nothing is written when it is what is shown)."""
        if busy == self._shown:
            return
        self._shown = busy
        self._gauge.set(busy)
        if not self._titles:
            return
        try:
            import setproctitle
        except ImportError:  # titles are optional: the gauge still says it
            return
        setproctitle.setproctitle(f"procqueue supervisor {self._spec} {busy}/{self._workers} busy")
