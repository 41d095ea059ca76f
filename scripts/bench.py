#!/usr/bin/env python3
"""procqueue against its peers, side by side in one run; the program is the
package ``scripts/benchkit`` (its docstring describes the systems, workloads
and durations).

    python scripts/bench.py --sweep    # each peer's fastest configuration (~10 min quiet)
    python scripts/bench.py            # full run: 3 interleaved repetitions (~25 min)
    python scripts/bench.py --quick    # 1 repetition, smaller counts (< 5 min)

    # a subset: two systems, one shared workload, two procqueue-only parts
    python scripts/bench.py --quick --systems procqueue-sqlite,huey-redis \\
        --workloads throughput_noop --extras storm,pending --json /tmp/b.json \\
        --md /tmp/b.md --img-dir /tmp/b-img

    # only rewrite docs/benchmarks.md and the charts from an earlier run's JSON
    python scripts/bench.py --render docs/benchmarks.json

Creates a virtual environment of its own (``--venv``) and re-runs this file
with its interpreter; writes docs/benchmarks.json, docs/benchmarks.md and
docs/img/bench-*.png.
"""

from __future__ import annotations

import sys

from benchkit.cli import main

if __name__ == "__main__":
    sys.exit(main())
