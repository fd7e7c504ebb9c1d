"""The plots that lead BENCHMARKS.md, drawn from the figures in docs/bench/front.json.

    python scripts/plots.py [--out docs/bench]

Writes front_agent.png (what the agent receives, per benchmark), front_budget.png (the block's
evidence against its token budget) and front_speed.png (latency and adds beside the baselines).
Prints one JSON object on its last line: the files written.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIGURES = REPO / "docs" / "bench" / "front.json"


def _plt() -> Any:
    """matplotlib without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def agent(fig: dict[str, Any], out: Path) -> Path:
    """Grouped bars: share of evidence turns each call delivers, per benchmark, with the targets."""
    plt = _plt()
    rows, metrics = fig["rows"], fig["metrics"]
    width = 0.8 / len(rows)
    f, ax = plt.subplots(figsize=(7, 3.6))
    for i, row in enumerate(rows):
        xs = [j + (i - (len(rows) - 1) / 2) * width for j in range(len(metrics))]
        bars = ax.bar(xs, [row[m] for m in metrics], width, label=row["name"])
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    for j, m in enumerate(metrics):
        t = fig["targets"][m]
        ax.hlines(t, j - 0.45, j + 0.45, colors="black", linestyles="dashed", linewidth=1)
    ax.set_xticks(range(len(metrics)), [fig["labels"][m] for m in metrics])
    ax.set_ylim(0, 1.12)  # room for the legend above the bars
    ax.set_ylabel("share of evidence turns delivered")
    ax.set_title("What the agent receives, no options (dashed: issue 40 targets)")
    ax.legend(fontsize=8, loc="upper center", ncol=len(rows))
    return _save(f, out / "front_agent.png")


def budget(fig: dict[str, Any], out: Path) -> Path:
    """The block's share of evidence against max_tokens, one line per benchmark, the default marked."""
    plt = _plt()
    f, ax = plt.subplots(figsize=(6, 3.4))
    for series in fig["series"]:
        ax.plot(series["tokens"], series["share"], marker="o", label=series["name"])
    ax.axvline(fig["default"], color="gray", linestyle="dotted", label=f"default ({fig['default']})")
    ax.set_xscale("log")
    ticks = sorted({t for series in fig["series"] for t in series["tokens"]})
    ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("context(max_tokens=...)")
    ax.set_ylabel("share of evidence turns")
    ax.set_ylim(0.4, 1.0)
    ax.set_title(fig["name"], fontsize=9)
    ax.legend(fontsize=8)
    return _save(f, out / "front_budget.png")


def speed(fig: dict[str, Any], peers: dict[str, Any], out: Path) -> Path:
    """Left: p50 latency beside each baseline (log scale); right: adds per second beside the best peer."""
    plt = _plt()
    f, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4), gridspec_kw={"width_ratios": [3, 2]})
    rows = fig["rows"]
    ys = range(len(rows))
    a.barh([y + 0.2 for y in ys], [r["eidetica"] for r in rows], 0.4, label="eidetica")
    a.barh([y - 0.2 for y in ys], [r["baseline"] for r in rows], 0.4, label="baseline")
    for y, r in zip(ys, rows, strict=True):
        a.text(r["baseline"], y - 0.2, f" {r['baseline_name']}", va="center", fontsize=7)
    a.set_yticks(list(ys), [r["name"] for r in rows], fontsize=8)
    a.set_xscale("log")
    a.set_xlim(1, 100_000)
    a.set_xlabel(f"latency ({fig['unit']}, log scale)")
    a.legend(fontsize=8, loc="upper right")
    prow = peers["rows"]
    b.bar(range(len(prow)), [r["value"] for r in prow], color=["C0", "C0", "C1"])
    b.set_xticks(range(len(prow)), [textwrap.fill(r["name"], 14) for r in prow], fontsize=7)
    b.bar_label(b.containers[0], fmt="%.0f", fontsize=7)
    b.set_ylabel(peers["unit"], fontsize=8)
    return _save(f, out / "front_speed.png")


def _save(f: Any, path: Path) -> Path:
    f.tight_layout()
    f.savefig(path, dpi=110)
    _plt().close(f)
    return path


def main(argv: list[str] | None = None) -> int:
    """Draw the three front plots from the figures file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figures", type=Path, default=FIGURES)
    ap.add_argument("--out", type=Path, default=FIGURES.parent)
    args = ap.parse_args(argv)
    fig = json.loads(args.figures.read_text(encoding="utf-8"))
    args.out.mkdir(parents=True, exist_ok=True)
    written = [agent(fig["agent"], args.out), budget(fig["budget"], args.out),
               speed(fig["speed"], fig["peers"], args.out)]
    print(json.dumps({"plots": [str(p.relative_to(args.out)) for p in written]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
