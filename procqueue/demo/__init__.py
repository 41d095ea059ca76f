"""`procqueue demo`: crash isolation, live (`run`), drawn in the terminal
(`view`), on Mandelbrot tiles (`tiles`, the module the children import).

The demo's code is imported when the demo runs, not with this package:
children import `procqueue.demo.tiles` and need none of the supervisor.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options on `parser`."""
    from procqueue.demo import run

    run.add_arguments(parser)


def main(args: argparse.Namespace) -> int:
    """Runs the demo with `args`; returns the exit code."""
    from procqueue.demo import run

    return run.main(args)
