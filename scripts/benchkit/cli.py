"""The command line of scripts/bench.py: options, re-running itself in the benchmark's venv,
writing the JSON, charts and page.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from benchkit.charts import write_charts
from benchkit.environment import ensure_services, ensure_venv, export_revision
from benchkit.report import render_markdown
from benchkit.run import run_all
from benchkit.settings import (
    CPU_JOB_S,
    DEFAULT_VENV,
    EXTRAS,
    ROOT,
    SCRIPTS,
    SYSTEMS,
    WORKLOADS,
    say,
)
from benchkit.sweep import run_sweep
from benchkit.targets import evaluate_targets

DESCRIPTION = "procqueue against its peers, side by side in one run."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="1 repetition, smaller counts")
    parser.add_argument("--reps", type=int, help="repetitions (default 3, or 1 with --quick)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset")
    parser.add_argument(
        "--extras",
        default=",".join(EXTRAS),
        help="comma-separated procqueue-only parts to run (empty: none); default all: "
        + ",".join(EXTRAS),
    )
    parser.add_argument(
        "--scale-rows",
        type=int,
        metavar="N",
        help="pending and finished rows of the scale extra, rows to prune of the prune extra "
        "(default 1,000,000; 20,000 quick)",
    )
    parser.add_argument("--no-scaling", action="store_true", help="skip scaling and backlog")
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy profile")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="first wait up to S seconds for the 1-minute load average to fall below 1",
    )
    parser.add_argument("--venv", default=str(DEFAULT_VENV), help="the benchmark's own venv")
    parser.add_argument("--work-dir", default="/tmp/procqueue-bench-runs", help="per-run files")
    parser.add_argument("--json", default=str(ROOT / "docs" / "benchmarks.json"))
    parser.add_argument("--md", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--img-dir", default=str(ROOT / "docs" / "img"))
    parser.add_argument(
        "--procqueue-src",
        default=str(ROOT),
        help="procqueue checkout to install (editable) and measure; default this one",
    )
    parser.add_argument(
        "--procqueue-rev",
        help="measure this git revision of procqueue (exported with git archive) instead",
    )
    parser.add_argument(
        "--render",
        metavar="JSON",
        help="only rewrite the markdown and charts from a results file of an earlier run",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="find each peer's fastest configuration (short no-op drains of every one) and "
        "write them to --sweep-json; a later run uses the winners",
    )
    parser.add_argument(
        "--sweep-json",
        default=str(ROOT / "docs" / "benchmarks-sweep.json"),
        help="where --sweep writes the configurations and a run reads them",
    )
    parser.add_argument("--in-venv", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    args.extras = [x.strip() for x in args.extras.split(",") if x.strip()]
    if args.no_scaling:
        args.extras = [x for x in args.extras if x not in ("scaling", "backlog")]
    if args.no_profile:
        args.extras = [x for x in args.extras if x != "profile"]
    unknown = (
        sorted(set(args.systems) - set(SYSTEMS))
        + sorted(set(args.workloads) - set(WORKLOADS))
        + sorted(set(args.extras) - set(EXTRAS))
    )
    if unknown:
        parser.error(f"unknown system, workload or extra: {', '.join(unknown)}")
    if not args.in_venv:
        ensure_services()
        extra: list[str] = []
        if args.procqueue_rev:
            args.procqueue_src = str(export_revision(args.procqueue_rev))
            extra = ["--procqueue-src", args.procqueue_src]
        python = ensure_venv(Path(args.venv), Path(args.procqueue_src).resolve())
        argv_out = [
            str(python),
            str(SCRIPTS / "bench.py"),
            "--in-venv",
            *sys.argv[1:],
            *extra,
        ]
        os.execv(str(python), argv_out)
    sys.path.insert(0, str(SCRIPTS))
    if args.render:
        result = json.loads(Path(args.render).read_text())
        result["targets"] = evaluate_targets(result)  # the goals as this checkout states them
        charts = write_charts(result, Path(args.img_dir))
        Path(args.md).write_text(render_markdown(result, charts, Path(args.md).parent))
        say(f"bench: rendered {args.md} and {len(charts)} charts from {args.render}")
        return 0
    ensure_services()
    if args.wait_quiet:
        give_up = time.monotonic() + args.wait_quiet
        while os.getloadavg()[0] >= 1.0 and time.monotonic() < give_up:
            say(f"bench: waiting for a quiet machine (load average {os.getloadavg()[0]:.2f})")
            time.sleep(15)
    if args.sweep:
        import bench_jobs

        sweep = run_sweep(
            args, args.systems, bench_jobs.calibrate(CPU_JOB_S), Path(args.sweep_json)
        )
        for system, knobs in sweep["winners"].items():
            say(f"  fastest {system:<14} {knobs}")
        say(f"bench: wrote {args.sweep_json} in {sweep['elapsed_s']:.0f} s")
        return 0
    result = run_all(args)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1, default=str) + "\n")
    charts = write_charts(result, Path(args.img_dir))
    Path(args.md).write_text(render_markdown(result, charts, Path(args.md).parent))
    say(
        f"bench: wrote {args.json}, {args.md} and {len(charts)} charts "
        f"in {result['elapsed_s']:.0f} s"
    )
    for t in result["targets"]:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        say(f"  target {verdict:<12} {t['target']}: {t['value']}")
    return 0
