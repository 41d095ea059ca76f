"""The ``procqueue`` command line; `entry` is its entry point."""

from __future__ import annotations


def entry() -> int:
    """Runs the command line (`procqueue.cli.main.main`); a Ctrl-C while its
    modules are still being imported exits 130 without a traceback, as one
    during a command does."""
    try:
        from procqueue.cli.main import main as run
    except KeyboardInterrupt:
        return 130
    return run()
