"""Plot the share of evidence turns in ``context()``'s block against its budget, for both benchmarks.

Reads the JSON line of ``eval_longmemeval.py --budgets ...`` (its ``curve`` and ``by_type``) and of
``eval_locomo.py --agent --budgets ... --json`` (``agent.curve``); writes a PNG (default
``docs/budget_curve.png``) and prints the markdown table BENCHMARKS.md carries.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def last_json(path: Path) -> dict[str, Any]:
    """The last line of a file that parses as a JSON object (an eval's output or its ``--out`` file)."""
    text = path.read_text(encoding="utf-8").strip()
    try:
        data = json.loads(text)
        return data.get("summary", data) if isinstance(data, dict) else {}
    except json.JSONDecodeError:
        return json.loads(text.splitlines()[-1])


def curves(lme: Mapping[str, Any] | None, locomo: Mapping[str, Any] | None) -> dict[str, dict[int, float]]:
    """Series name -> {budget: share}: LongMemEval overall and its multi-session / temporal rows, LoCoMo."""
    out: dict[str, dict[int, float]] = {}
    if lme:
        out["LongMemEval-S dev"] = {int(b): v for b, v in lme.get("curve", {}).items() if v is not None}
        for t in ("multi-session", "temporal-reasoning"):
            row = lme.get("by_type", {}).get(t, {})
            pts = {int(k[11:]): v for k, v in row.items() if k.startswith("context_at_") and v is not None}
            if pts:
                out[f"LongMemEval {t}"] = pts
    if locomo:
        agent = locomo.get("agent", locomo)
        out["LoCoMo dev"] = {int(b): v for b, v in agent.get("curve", {}).items() if v is not None}
    return {k: dict(sorted(v.items())) for k, v in out.items() if v}


def table(series: Mapping[str, Mapping[int, float]]) -> str:
    """The curve as a markdown table, one row per series."""
    budgets: Sequence[int] = sorted({b for s in series.values() for b in s})
    lines = ["| evidence turns in the block | " + " | ".join(f"{b} tokens" for b in budgets) + " |",
             "|---|" + "---|" * len(budgets)]
    for name, pts in series.items():
        lines.append(f"| {name} | " + " | ".join(f"{pts[b]:.3f}" if b in pts else "" for b in budgets) + " |")
    return "\n".join(lines)


def plot(series: Mapping[str, Mapping[int, float]], out: Path, default: int | None) -> None:
    """Write the PNG (log-scaled budget axis, the default budget marked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for name, pts in series.items():
        ax.plot(list(pts), list(pts.values()), marker="o", label=name,
                linestyle="--" if name.startswith("LongMemEval ") else "-")
    if default:
        ax.axvline(default, color="grey", linewidth=0.8, linestyle=":")
        ax.text(default, 0.02, f" default {default}", color="grey", fontsize=8)
    ax.set_xscale("log")
    budgets = sorted({b for s in series.values() for b in s})
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.set_ylim(0, 1)
    ax.set_xlabel("context() max_tokens")
    ax.set_ylabel("share of evidence turns in the block")
    ax.set_title("What the agent receives: evidence against the block's budget")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (see ``--help``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lme", default=None, help="eval_longmemeval.py output (its JSON line or --out file)")
    ap.add_argument("--locomo", default=None, help="eval_locomo.py --agent --budgets output (its JSON line)")
    ap.add_argument("--out", default=str(REPO / "docs" / "budget_curve.png"), help="PNG to write (default: %(default)s)")
    ap.add_argument("--default", type=int, default=None, help="the default budget to mark")
    args = ap.parse_args(argv)
    series = curves(last_json(Path(args.lme)) if args.lme else None,
                    last_json(Path(args.locomo)) if args.locomo else None)
    if not series:
        print("no curve in the inputs (run the evals with --budgets)", file=sys.stderr)
        return 2
    plot(series, Path(args.out), args.default)
    print(table(series))
    return 0


if __name__ == "__main__":
    sys.exit(main())
