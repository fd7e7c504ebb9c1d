"""Precision and recall of the offline extractor's diet and health categories, tuned half beside held-out half.

Usage: ``python scripts/eval_categories.py`` prints a table per half and one JSON object on the last
line. The statements are ``tests/support/category_cases.py`` (written for eidetica before the rules): the
rules were tuned on ``TUNE``; ``HELD_OUT`` includes ``FRESH``, written after a first run had printed
the misses of the other held-out statements, and reported on its own as the cleanest held-out figure. A statement's
predicted category is its first extracted fact's ("other" for any other category or no fact);
``profile`` is whether a diet or health statement reaches ``context()``'s profile (its category
is one the profile treats as standing).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eidetica._store.context import PROFILE_CATEGORIES  # noqa: E402
from eidetica.providers import OfflineLLM  # noqa: E402
from tests.support.category_cases import FRESH, HELD_OUT, TUNE  # noqa: E402

LABELS = ("diet", "health")


def measure(cases: list[tuple[str, str]]) -> dict[str, Any]:
    """Per label: precision, recall and counts; ``profile_recall``: labelled diet/health statements that reach the profile."""
    llm = OfflineLLM()
    out: dict[str, Any] = {}
    pairs = []
    reached = standing = 0
    for text, label in cases:
        facts = llm.extract_facts(text)
        cat = facts[0].category if facts else ""
        pairs.append((label, cat if cat in LABELS else "other", text))
        if label in LABELS:
            standing += 1
            reached += bool(facts) and cat in PROFILE_CATEGORIES
    for lab in LABELS:
        tp = sum(1 for g, p, _ in pairs if g == lab and p == lab)
        said = sum(1 for _, p, _ in pairs if p == lab)
        real = sum(1 for g, _, _ in pairs if g == lab)
        out[lab] = {"precision": round(tp / said, 3) if said else 0.0, "recall": round(tp / real, 3) if real else 0.0,
                    "tp": tp, "predicted": said, "labelled": real}
    out["profile_recall"] = round(reached / standing, 3) if standing else 0.0
    out["misses"] = [f"{t!r}: {g} -> {p}" for g, p, t in pairs if g != p]
    return out


def main() -> None:
    """Print both halves and the JSON line."""
    result = {"tuned": measure(TUNE), "held_out": measure(HELD_OUT), "fresh": measure(FRESH),
              "n_tuned": len(TUNE), "n_held_out": len(HELD_OUT), "n_fresh": len(FRESH)}
    for half in ("tuned", "held_out", "fresh"):
        r = result[half]
        print(f"{half}: " + "  ".join(f"{lab} P={r[lab]['precision']:.2f} R={r[lab]['recall']:.2f}" for lab in LABELS)
              + f"  profile recall={r['profile_recall']:.2f}")
        if half == "tuned":  # the held-out misses are never printed: looking at them would tune on them
            for miss in r["misses"]:
                print("   ", miss)
    for half in ("tuned", "held_out", "fresh"):
        result[half].pop("misses")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
