"""``python -m procqueue.demo``: the demo without the command line."""

from __future__ import annotations

import argparse
import sys

from procqueue.demo import run

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="procqueue demo", description="crash isolation, live")
    run.add_arguments(parser)
    sys.exit(run.main(parser.parse_args()))
