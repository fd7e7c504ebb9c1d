"""Scores that must not move by accident: pinned hybrid defaults, and tenant isolation of every score.

The pinned case is built by hand so each number can be worked out on paper (below); it
pins the default fusion (min-max, vector weight 0.7) and the BM25 constants (k1 1.2,
b 0.75). When the retrieval defaults change on purpose, this test changes with them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from eidetica.events import ArrowLog, FactDeleted, NewEvent, NoteDeleted, SessionForgotten, UserForgotten
from eidetica.projections import ChunkIndex, Projector
from tests.contracts.projection import DIM, emb, hvec


def unit(*pairs: tuple[int, float]) -> np.ndarray:
    """A DIM-d vector with the given (axis, value) entries."""
    v = np.zeros(DIM, dtype=np.float32)
    for i, x in pairs:
        v[i] = x
    return v


def build(root, appends: list[tuple[str, NewEvent]]) -> tuple[ArrowLog, ChunkIndex]:
    """A log holding ``appends`` and a ChunkIndex caught up with it."""
    log = ArrowLog(root / "log", partitions=2, fsync="never")
    for stream, e in appends:
        log.append(stream, [e])
    idx = ChunkIndex(root / "idx", dim=DIM)
    Projector(log, [idx]).catch_up()
    return log, idx


# -- the pinned case --------------------------------------------------------------------
# Tenant t, query text "zebra", query vector e0:
#   a  "lion tiger"                vector e0               cosine 1.0   no "zebra"
#   b  "zebra zebra zebra"         vector e1               cosine 0.0   tf 3, length 3
#   c  "zebra lion tiger bear"     vector 0.6 e0 + 0.8 e1  cosine 0.6   tf 1, length 4
# BM25 within tenant t only: N = 3, df(zebra) = 2, avgdl = 3, idf = ln(1 + 1.5 / 2.5) = ln 1.6
#   b: idf * 3 * 2.2 / (3 + 1.2 * (0.25 + 0.75 * 3/3)) = ln1.6 * 6.6 / 4.2
#   c: idf * 1 * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 4/3)) = ln1.6 * 2.2 / 2.5
# min-max over the candidates: vector a 1, b 0, c 0.6; text b 1, c 0.88 / (6.6 / 4.2) = 0.56, a 0
# hybrid = 0.7 * vector + 0.3 * text: a 0.7, c 0.42 + 0.168 = 0.588, b 0.3
# Tenant x's "zebra" documents must change none of it.
LN16 = math.log(1.6)
PINNED_HYBRID = [("a", 0.7), ("c", 0.588), ("b", 0.3)]
PINNED_TEXT = [("b", 1.0), ("c", 0.56)]
PINNED_BM25 = {"b": LN16 * 6.6 / 4.2, "c": LN16 * 2.2 / 2.5}
PINNED_VECTOR = [("a", 1.0), ("c", 0.6), ("b", 0.0)]


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
    root = tmp_path_factory.mktemp("pinned")
    appends = [
        ("session:t:s", emb(["a"], ["lion tiger"], vectors=unit((0, 1.0))[None])),
        ("session:x:s", emb(["xa"], ["zebra"], tenant="x", vectors=unit((0, 1.0))[None])),
        ("session:t:s", emb(["b"], ["zebra zebra zebra"], vectors=unit((1, 1.0))[None])),
        ("session:x:s", emb(["xb"], ["zebra crossing zebra herd of zebra on the plain"], tenant="x",
                            vectors=unit((1, 1.0))[None])),
        ("session:t:s", emb(["c"], ["zebra lion tiger bear"], vectors=unit((0, 0.6), (1, 0.8))[None])),
    ]
    log, idx = build(root, appends)
    yield idx
    idx.close()
    log.close()


def test_default_hybrid_scores_are_pinned(pinned) -> None:
    # the raw fusion (min-max, 0.7/0.3) is pinned with calibrate=False; calibration (#24, on by
    # default) keeps the order and the ratios and rescales to the best candidate's relevance
    hits = pinned.search(tenant="t", text="zebra", vector=unit((0, 1.0)), calibrate=False)
    assert [(h.id, round(h.score, 6)) for h in hits] == [(i, round(s, 6)) for i, s in PINNED_HYBRID]
    for h in hits:
        assert h.text_score == pytest.approx(PINNED_BM25.get(h.id, 0.0), abs=1e-9)
    cal = pinned.search(tenant="t", text="zebra", vector=unit((0, 1.0)))
    assert [h.id for h in cal] == [h.id for h in hits]
    assert [c.score / cal[0].score for c in cal] == pytest.approx([h.score / hits[0].score for h in hits])
    assert 0.0 < cal[0].score <= 1.0


def test_text_and_vector_scores_are_pinned(pinned) -> None:
    text = pinned.search(tenant="t", text="zebra", mode="text")
    assert [(h.id, round(h.score, 6)) for h in text] == [(i, round(s, 6)) for i, s in PINNED_TEXT]
    vec = pinned.search(tenant="t", vector=unit((0, 1.0)), mode="vector")
    assert [(h.id, round(h.score, 5)) for h in vec] == [(i, round(s, 5)) for i, s in PINNED_VECTOR]


# -- tenant isolation of scores ------------------------------------------------------------
B_TEXTS = [
    "the garden needs tomato and basil before summer",
    "booked a flight to tokyo for the cherry blossom",
    "my sister plays the violin in a jazz band",
    "tomato soup with basil is the best lunch",
    "the jazz concert in tokyo was sold out",
    "basil grows fast in a sunny garden",
]
# A writes a lot about the same words, in longer and shorter documents: pooled statistics
# (document counts, average length, document frequencies) would move every B score.
A_TEXTS = [
    "tomato tomato tomato", "garden", "jazz jazz tokyo tokyo tokyo flight flight",
    "basil " * 30, "a very long note about the garden and the tomato harvest and the basil and jazz " * 4,
    "violin", "tokyo", "tomato basil garden jazz tokyo violin sister flight",
]
QUERIES = ["tomato basil", "jazz in tokyo", "garden", "violin sister", "flight tokyo cherry", "tomato"]


def b_appends() -> list[tuple[str, NewEvent]]:
    return [(f"session:b:s{i % 2}", emb([f"b{i}"], [t], tenant="b", session=f"s{i % 2}", user="ub",
                                        kind=["message", "fact", "note"][i % 3], source=f"bsrc{i}"))
            for i, t in enumerate(B_TEXTS)]


def a_appends() -> list[tuple[str, NewEvent]]:
    kinds = ["message", "fact", "note"]
    return [(f"session:a:s{i % 3}", emb([f"a{i}", f"a{i}x"], [t, t + " again"], tenant="a", session=f"s{i % 3}",
                                        user=f"ua{i % 2}", kind=kinds[i % 3], source=f"asrc{i}"))
            for i, t in enumerate(A_TEXTS)]


def b_results(idx: ChunkIndex) -> list:
    out = []
    for q in QUERIES:
        for mode in ("text", "vector", "hybrid"):
            hits = idx.search(tenant="b", text=q, vector=hvec(q), mode=mode, top_k=10, min_score=None)
            out.append((q, mode, [(h.id, round(h.score, 9), round(h.text_score, 9), round(h.vector_score, 9))
                                  for h in hits]))
    return out


def test_another_tenants_data_never_moves_a_score(tmp_path) -> None:
    alone_log, alone = build(tmp_path / "alone", b_appends())
    a, b = a_appends(), b_appends()
    mixed_appends = [x for pair in zip(a, b) for x in pair] + a[len(b):]  # interleaved, A first
    mixed_log, mixed = build(tmp_path / "mixed", mixed_appends)
    try:
        expected = b_results(alone)
        assert all(hits for _, _, hits in expected)  # every query finds B's rows in every mode
        assert b_results(mixed) == expected
        # A deletes: a fact, a note, a session, then a whole user; B's scores still do not move
        for stream, ev in (
            ("facts:a:ua1", FactDeleted(fact_id="asrc1")),
            ("notes:a:ua0", NoteDeleted(note_id="asrc2")),
            ("session:a:s0", SessionForgotten(session_id="s0", user_id="ua0")),
            ("facts:a:ua1", UserForgotten(user_id="ua1")),
        ):
            mixed_log.append(stream, [NewEvent.of(ev, tenant="a")])
            Projector(mixed_log, [mixed]).catch_up()
            assert b_results(mixed) == expected, ev
        assert mixed.count("a") < 2 * len(A_TEXTS)  # the deletes took effect
    finally:
        for x in (alone, mixed, alone_log, mixed_log):
            x.close()
