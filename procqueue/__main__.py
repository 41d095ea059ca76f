"""``python -m procqueue``: the command line."""

from __future__ import annotations

import sys

from procqueue.cli import entry

if __name__ == "__main__":
    sys.exit(entry())
