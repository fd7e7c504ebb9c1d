"""ChunkIndex's ranked output on a fixed corpus equals what it was before the fusion was split (issue 41).

``fuse_golden.json`` holds the hits (id, kind, score, vector and text scores) that main produced for
every query x options case below before ``ChunkIndex._fuse`` was split into candidate gathering and
``_ranking.fuse``. Regenerate only on a deliberate ranking change: ``python tests/projections/test_fuse_golden.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from eidetica.events import ArrowLog
from eidetica.projections import ChunkIndex, Projector
from eidetica.projections._ranking import SEARCH_DEFAULTS, SELF, SearchOptions, time_windows
from tests.contracts.projection import DIM, emb, hvec

# (no "rrf" case: hybrid RRF ranks candidates in the order of a set of keys, i.e. by string hash,
# so its ties differ between processes; tests/projections/test_fuse.py covers it on fixed input)
GOLDEN = Path(__file__).with_name("fuse_golden.json")
T0 = dt.datetime(2024, 3, 1, 12, tzinfo=dt.timezone.utc)
WORDS = ("grace eats oat porridge every morning", "bob is allergic to peanuts and cannot eat them",
         "the hiking trip to the alps was in may", "we talked about the weather and rain",
         "grace said she avoids gluten at dinner", "the budget meeting moved to friday",
         "alice: my dog loves the park near the river", "bob: I cooked pasta with tomato sauce")


def corpus() -> list[Any]:
    """Two sessions of messages (sequence, speaker names), facts with confidences, a note, a summary."""
    out = []
    for s in range(2):
        for q, text in enumerate(WORDS):
            who = ("grace", "bob", "alice")[(q + s) % 3]
            out.append(emb([f"m{s}-{q}"], [f"{text} ({s})"], kind="message", user="u1", session=f"s{s}",
                           time=T0 + dt.timedelta(days=10 * s + q), metadata={"sequence": q, "name": who}))
    for i, text in enumerate(WORDS[:5]):
        out.append(emb([f"f{i}"], [f"fact: {text}"], kind="fact", source=f"fact{i}", user="u1",
                       time=T0 + dt.timedelta(days=i), confidence=0.5 + 0.1 * i))
    out.append(emb(["n0"], ["note: grace prefers tea over coffee"], kind="note", source="note0", user="u1",
                   time=T0 + dt.timedelta(days=3)))
    out.append(emb(["sum0"], ["summary: grace and bob talked about food and allergies"], kind="summary",
                   source="summary0", user="u1", session="s0", time=T0 + dt.timedelta(days=8)))
    return out


QUERIES = ("what does grace eat", "peanut allergy", "trip in May 2024", "dog park river", "xyzzy nothing")
NOW = T0 + dt.timedelta(days=30)
CASES: dict[str, dict[str, Any]] = {
    "bare": {},
    "defaults": {f: getattr(SEARCH_DEFAULTS, f) for f in SEARCH_DEFAULTS.__struct_fields__},
    "dated": {"windows": time_windows("trip in May 2024")[0], "time_weight": 0.5},
    "absolute": {"fusion": "absolute"},
    "zscore": {"fusion": "zscore", "vector_weight": 0.3},
    "no_rescore": {"rescore": False, "calibrate": False},
    "neighbours": {"neighbors": (0.2, 0.1), "session_weight": 0.3},
    "speakers": {"speaker_weight": 0.2, "speakers": frozenset({"grace", SELF})},
    "confidence_recency": {"confidence_weight": 0.5, "recency_half_life": dt.timedelta(days=7), "now": NOW},
    "restriction": {"restrict": True, "restriction_weight": 0.5},
    "mmr": {"mmr": 0.5},
}


def run_all(idx: ChunkIndex) -> dict[str, list[list[Any]]]:
    """Every query x mode x case's hits, as plain lists."""
    out: dict[str, list[list[Any]]] = {}
    for q in QUERIES:
        for mode in ("hybrid", "vector", "text"):
            for c, fields in CASES.items():
                opts = msgspec.structs.replace(SearchOptions(), **fields)
                hits = idx.search(tenant="t", text=q, vector=hvec(q, DIM), top_k=6, mode=mode, options=opts)
                out[f"{q}|{mode}|{c}"] = [[h.id, h.kind, round(h.score, 12), round(h.vector_score, 12),
                                           round(h.text_score, 12)] for h in hits]
    return out


def build(root: Path) -> tuple[ArrowLog, ChunkIndex]:
    log = ArrowLog(root / "log", fsync="never")
    for i, e in enumerate(corpus()):
        log.append(f"s{i}", [e])
    idx = ChunkIndex(root / "idx", dim=DIM)
    Projector(log, [idx], batch_size=64).catch_up()
    return log, idx


@pytest.mark.slow  # LanceDB + Tantivy: `make test-unit` leaves it to `make test`
def test_the_ranked_hits_are_the_ones_before_the_split(tmp_path) -> None:
    log, idx = build(tmp_path)
    try:
        got = run_all(idx)
    finally:
        idx.close()
        log.close()
    want = json.loads(GOLDEN.read_text())
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == want[k], k


if __name__ == "__main__":  # regenerate: python tests/projections/test_fuse_golden.py [out.json]
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        lg, ix = build(Path(d))
        res = run_all(ix)
        ix.close()
        lg.close()
    Path(sys.argv[1] if len(sys.argv) > 1 else GOLDEN).write_text(json.dumps(res, indent=0, sort_keys=True) + "\n")
