"""The offline extractor's precision and recall on labelled personal statements (scripts/eval_extractor.py
prints the table; BENCHMARKS.md has it): floors a regression must not cross."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.support.extraction_cases import CASES, HELD_OUT

_spec = importlib.util.spec_from_file_location("eval_extractor", Path(__file__).parents[2] / "scripts" / "eval_extractor.py")
assert _spec and _spec.loader
_eval = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_eval)


def test_the_labelled_statements_cover_every_kind() -> None:
    kinds = {k for _, k, _ in CASES}
    assert kinds == {"places", "tools", "habits", "relations", "work", "plans", "health", "diet", "none"}
    assert len(CASES) >= 80 and sum(k != "none" for _, k, _ in CASES) >= 80


def test_extraction_and_attributes_on_the_tuning_set() -> None:
    r = _eval.measure(CASES)
    assert r["extraction_precision"] >= 0.95 and r["extraction_recall"] >= 0.95, r["misses"]
    assert r["attribute_precision"] >= 0.95 and r["attribute_recall"] >= 0.95, r["misses"]
    assert min(r["recall_by_kind"].values()) >= 0.9, r["recall_by_kind"]


def test_extraction_on_statements_it_was_not_tuned_on() -> None:
    r = _eval.measure(HELD_OUT)
    assert r["extraction_precision"] >= 0.9 and r["extraction_recall"] >= 0.75, r["misses"]
    assert r["attribute_precision"] >= 0.75 and r["attribute_recall"] >= 0.7, r["misses"]
