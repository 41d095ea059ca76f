"""The PNG charts of docs/img/bench-*.png, drawn with matplotlib from a result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchkit.settings import PQ_SYSTEMS

COLORS = {"procqueue-pg": "#1f6feb", "procqueue-sqlite": "#58a6ff"}
PEER_COLOR = "#8b949e"


def write_charts(result: dict[str, Any], img_dir: Path) -> list[Path]:
    """bench-throughput.png, bench-latency.png, bench-scaling.png and bench-pending.png
    in `img_dir`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    img_dir.mkdir(parents=True, exist_ok=True)
    per = result["summary"]["per_system"]
    systems = list(result["systems"])
    written: list[Path] = []
    subtitle = f"{result['mode']} run, {result['sizes']['reps']} rep(s); median, bars = min-max"

    def bars(ax: Any, workload: str, key: str, title: str) -> None:
        names = [s for s in systems if per.get(workload, {}).get(s)]
        if not names:  # a subset run without this workload: an empty panel, not a crash
            ax.set_title(f"{title} (not run)", fontsize=10)
            ax.axis("off")
            return
        stats = [per[workload][s].get(key) for s in names]
        med = [st["median"] if st else 0.0 for st in stats]
        lo = [m - st["min"] if st else 0.0 for st, m in zip(stats, med, strict=True)]
        hi = [st["max"] - m if st else 0.0 for st, m in zip(stats, med, strict=True)]
        colors = [COLORS.get(s, PEER_COLOR) for s in names]
        ax.barh(names, med, xerr=[lo, hi], color=colors, capsize=3)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        floor = min((m for m in med if m > 0), default=1.0) / 3
        ax.set_xlim(left=floor, right=max(m + h for m, h in zip(med, hi, strict=True)) * 2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("jobs/s (log scale)")
        for y, (name, v, top) in enumerate(zip(names, med, hi, strict=True)):
            if v > 0:
                ax.text((v + top) * 1.04, y, f"{v:,.0f}", va="center", fontsize=8)
            else:
                alive = per[workload][name].get("worker_alive", [True])
                why = "worker process died" if not all(alive) else "did not finish"
                ax.text(floor * 1.05, y, f" {why}", va="center", fontsize=8, color="#b3261e")
        ax.grid(axis="x", which="both", alpha=0.3)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    bars(
        axes[0],
        "throughput_noop",
        "drain_jobs_s",
        "No-op drain (each peer at its fastest; -2slot: 2 workers)",
    )
    bars(axes[1], "crashy", "drain_jobs_s", "Crashy drain: 2% of jobs segfault")
    fig.suptitle(f"Throughput — {subtitle}", fontsize=10)
    fig.tight_layout()
    path = img_dir / "bench-throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    names = [s for s in systems if per.get("latency", {}).get(s, {}).get("p50_ms")]
    if names:
        fig, ax = plt.subplots(figsize=(10, 4.2))
        xs = range(len(names))
        for offset, key, alpha in ((-0.2, "p50_ms", 1.0), (0.2, "p99_ms", 0.55)):
            med = [per["latency"][s][key]["median"] for s in names]
            ax.bar(
                [x + offset for x in xs],
                med,
                width=0.4,
                color=[COLORS.get(s, PEER_COLOR) for s in names],
                alpha=alpha,
                label=key[:3],
            )
            for x, v in zip(xs, med, strict=True):
                ax.text(x + offset, v, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(list(xs), names, fontsize=9)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_ylabel("enqueue call → job start, ms (log)")
        ax.set_title(
            "Latency into an idle system: p50 (solid), p99 (light) — "
            f"{result['mode']} run, median of {result['sizes']['reps']} rep(s)",
            fontsize=10,
        )
        ax.grid(axis="y", which="both", alpha=0.3)
        fig.tight_layout()
        path = img_dir / "bench-latency.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    if result.get("scaling"):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4))
        for name in PQ_SYSTEMS:
            pts = [
                (r["workers"], r["drain_jobs_s"])
                for r in result["scaling"]
                if r["system"] == name and r.get("drain_jobs_s")
            ]
            if pts:
                axes[0].plot(*zip(*pts, strict=True), marker="o", label=name, color=COLORS[name])
        axes[0].set_xscale("log", base=2)
        axes[0].set_xticks(list(result["sizes"]["scaling_workers"]))
        axes[0].xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        axes[0].set_xlabel("children")
        axes[0].set_ylabel("no-op drain jobs/s")
        axes[0].set_title("procqueue: drain rate by number of children", fontsize=10)
        axes[0].legend()
        axes[0].grid(alpha=0.3)
        for b in result.get("backlog", []):
            rates = b.get("window_jobs_s") or []
            if rates:
                step = b["completed"] / len(rates)
                xs2 = [step * (k + 0.5) for k in range(len(rates))]
                axes[1].plot(
                    xs2, rates, marker="o", label=f"{b['system']} (rate)", color=COLORS[b["system"]]
                )
        axes[1].set_xlabel(f"jobs done, of {result['sizes']['backlog_jobs']:,} pending at start")
        axes[1].set_ylabel("drain jobs/s per window")
        axes[1].set_ylim(bottom=0)
        axes[1].set_title("procqueue: drain rate while a large backlog shrinks", fontsize=10)
        axes[1].grid(alpha=0.3)
        axes[1].legend(loc="center right")
        fig.tight_layout()
        path = img_dir / "bench-scaling.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    pending = [r for r in result.get("pending", []) if r.get("status") != "error"]
    if pending:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4))
        for name in PQ_SYSTEMS:
            mine = sorted(
                (r for r in pending if r["system"] == name), key=lambda r: r["pending_per_child"]
            )
            if not mine:
                continue
            xs3 = [r["pending_per_child"] for r in mine]
            cpu = [r.get("supervisor_cpu_us_per_job") or float("nan") for r in mine]
            axes[0].plot(xs3, cpu, marker="o", label=name, color=COLORS[name])
            for key, style, what in (
                ("supervisor_rss_mb_max", "-", "max during the drain"),
                ("rss_mb_pending", "--", "with the jobs pending"),
            ):
                axes[1].plot(
                    xs3,
                    [r.get(key) or float("nan") for r in mine],
                    marker="o",
                    linestyle=style,
                    label=f"{name}, {what}",
                    color=COLORS[name],
                )
        for ax in axes:
            ax.set_xscale("log")
            ax.set_xticks(list(result["sizes"]["pending_per_child"]))
            ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_xlabel("jobs pending per child (2 children)")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        axes[0].set_ylabel("supervisor CPU µs per job")
        axes[0].set_title("procqueue: supervisor CPU per job by backlog", fontsize=10)
        axes[1].set_ylabel("supervisor RSS MB")
        axes[1].set_title("procqueue: supervisor memory by backlog", fontsize=10)
        fig.tight_layout()
        path = img_dir / "bench-pending.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
