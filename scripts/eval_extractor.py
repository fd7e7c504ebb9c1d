"""Precision and recall of the offline extractor (facts and attributes) on labelled statements.

Usage: ``python scripts/eval_extractor.py`` prints a per-kind table and one JSON object on the
last line. The statements are ``tests/support/extraction_cases.py`` (written for eidetica).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eidetica.providers import OfflineLLM  # noqa: E402
from tests.support.extraction_cases import CASES, HELD_OUT  # noqa: E402


def measure(cases: list[tuple[str, str, str]] = CASES) -> dict[str, Any]:
    """Extraction precision/recall (a statement counts when it yields any fact), recall per kind, and
    attribute precision/recall (the first non-empty attribute of its facts against the label)."""
    llm = OfflineLLM()
    tp = fp = fn = 0
    a_right = a_said = a_labelled = 0
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    misses: list[str] = []
    for text, kind, attribute in cases:
        facts = llm.extract_facts(text)
        got = bool(facts)
        said = next((a for f in facts if (a := getattr(f, "attribute", ""))), "")  # "" before attributes existed
        if kind == "none":
            fp += got
            if got:
                misses.append(f"false fact: {text!r} -> {[f.content for f in facts]}")
        else:
            kinds[kind][0] += got
            kinds[kind][1] += 1
            tp += got
            fn += not got
            if not got:
                misses.append(f"missed ({kind}): {text!r}")
        a_labelled += bool(attribute)
        a_said += bool(said)
        a_right += bool(attribute) and said == attribute
        if said != attribute and kind != "none":
            misses.append(f"attribute {said!r} != {attribute!r}: {text!r}")
    return {
        "statements": len(cases),
        "positives": tp + fn,
        "extraction_precision": round(tp / max(1, tp + fp), 3),
        "extraction_recall": round(tp / max(1, tp + fn), 3),
        "attribute_precision": round(a_right / max(1, a_said), 3),
        "attribute_recall": round(a_right / max(1, a_labelled), 3),
        "recall_by_kind": {k: round(v[0] / v[1], 3) for k, v in sorted(kinds.items())},
        "misses": misses,
    }


def main() -> None:
    """Print a table per set (the tuning set, the held-out set), the misses, and the JSON line."""
    out = {}
    for name, cases in (("tuning", CASES), ("held_out", HELD_OUT)):
        r = measure(cases)
        counts: dict[str, int] = defaultdict(int)
        for _, kind, _ in cases:
            counts[kind] += 1
        print(f"\n{name}: {len(cases)} statements\n| kind | statements | recall |\n|---|---|---|")
        for k, v in r["recall_by_kind"].items():
            print(f"| {k} | {counts[k]} | {v:.2f} |")
        for m in r["misses"]:
            print("  ", m)
        out[name] = {k: v for k, v in r.items() if k != "misses"}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
