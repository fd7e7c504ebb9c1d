"""``_ranking.fuse``: the ranking of gathered candidates, pure (no LanceDB, no Tantivy; issue 41)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from eidetica.projections._ranking import SELF, Candidates, SearchOptions, fuse
from eidetica.projections._rows import Row, pack_meta, to_us

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def row(key: str, *, kind: str = "message", session: str = "s", seq: int | None = None, days: int = 0,
        text: str = "", confidence: float = 1.0, name: str | None = None) -> Row:
    meta: dict[str, Any] = {}
    if seq is not None:
        meta["sequence"] = seq
    if name is not None:
        meta["name"] = name
    ts = to_us(T0 + dt.timedelta(days=days))
    return Row(key=key, id=key, tenant="t", user_id="u", session_id=session if kind in ("message", "summary") else "",
               kind=kind, source_id="", text=text or key, category="", confidence=confidence, ts=ts, etime=ts,
               metadata=pack_meta(meta))


def cands(rows: list[Row], vsim: dict[str, float] | None = None, bm25: dict[str, float] | None = None,
          idf_sum: float = 4.0) -> Candidates:
    return Candidates(rows={r.key: r for r in rows}, vsim=dict(vsim or {}), bm25=dict(bm25 or {}), idf_sum=idf_sum)


def test_vector_mode_ranks_by_cosine_and_breaks_ties_by_recency_then_key() -> None:
    c = cands([row("a", days=1), row("b", days=2), row("c", days=2), row("d")], vsim={"a": 0.5, "b": 0.5, "c": 0.5,
                                                                                       "d": 0.9})
    ranked, score = fuse("vector", c, SearchOptions())
    assert ranked == ["d", "b", "c", "a"]  # d best; then the newer tie (b, c by key); a oldest
    assert score == {"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.9}


def test_text_mode_scores_relative_to_the_best_bm25_and_drops_keys_without_a_row() -> None:
    c = cands([row("a"), row("b")], bm25={"a": 2.0, "b": 8.0})
    ranked, score = fuse("text", c, SearchOptions())
    assert ranked == ["b", "a"] and score == {"b": 1.0, "a": 0.25}
    # a key whose row was not found (another tenant's, or written mid-apply) is never a hit
    ranked, score = fuse("text", cands([row("a")], bm25={"a": 2.0, "gone": 1.0}), SearchOptions())
    assert ranked == ["a"] and set(score) == {"a"}


def test_hybrid_minmax_is_the_weighted_sum_of_each_side_min_maxed() -> None:
    c = cands([row("a"), row("b"), row("c")], vsim={"a": 0.9, "b": 0.5, "c": 0.1}, bm25={"a": 0.0, "b": 1.0, "c": 3.0})
    ranked, score = fuse("hybrid", c, SearchOptions(vector_weight=0.7, calibrate=False))
    want = {"a": 0.7 * 1.0 + 0.3 * 0.0, "b": 0.7 * 0.5 + 0.3 * (1 / 3), "c": 0.7 * 0.0 + 0.3 * 1.0}
    assert score == pytest.approx(want) and ranked == ["a", "b", "c"]


def test_hybrid_calibrate_keeps_the_order_and_scales_the_best_to_its_absolute_relevance() -> None:
    rows = [row("a"), row("b")]
    plain, s0 = fuse("hybrid", cands(rows, vsim={"a": 0.8, "b": 0.2}, bm25={"a": 2.0}), SearchOptions(calibrate=False))
    cal, s1 = fuse("hybrid", cands(rows, vsim={"a": 0.8, "b": 0.2}, bm25={"a": 2.0}), SearchOptions(calibrate=True))
    assert plain == cal == ["a", "b"]
    assert s1["b"] / s1["a"] == pytest.approx(s0["b"] / s0["a"]) and 0 < s1["a"] <= 1


def test_rrf_and_zscore_and_absolute_fusions() -> None:
    rows = [row("a"), row("b"), row("c")]
    c = cands(rows, vsim={"a": 0.9, "b": 0.8, "c": 0.1}, bm25={"b": 3.0, "c": 1.0}, idf_sum=4.0)  # shares 0.75, 0.25, 0
    assert fuse("hybrid", c, SearchOptions(fusion="rrf", calibrate=False))[0][0] == "b"  # 1st and 2nd
    assert fuse("hybrid", c, SearchOptions(fusion="zscore", calibrate=False))[0] == ["b", "a", "c"]
    _, s = fuse("hybrid", c, SearchOptions(fusion="absolute", calibrate=False, vector_weight=1.0))
    assert s == pytest.approx({"a": 0.9, "b": 0.8, "c": 0.1})  # all weight on the (clipped) cosine


def test_min_score_drops_the_low_hits_but_score_keeps_every_candidate() -> None:
    c = cands([row("a"), row("b")], vsim={"a": 0.9, "b": 0.2})
    ranked, score = fuse("vector", c, SearchOptions(), min_score=0.5)
    assert ranked == ["a"] and set(score) == {"a", "b"}


def test_neighbours_lift_the_message_after_a_strong_one_within_its_session() -> None:
    rows = [row("q", seq=1), row("ans", seq=2), row("other", seq=2, session="s2")]
    vsim = {"q": 0.9, "ans": 0.3, "other": 0.35}
    assert fuse("vector", cands(rows, vsim), SearchOptions())[0] == ["q", "other", "ans"]
    ranked, score = fuse("vector", cands(rows, vsim), SearchOptions(neighbors=(0.2, 0.0)))
    assert ranked == ["q", "ans", "other"] and score["ans"] == pytest.approx(0.3 + 0.2 * 0.9)


def test_the_speaker_bonus_goes_to_messages_of_the_named_speakers_only() -> None:
    rows = [row("g", name="grace"), row("b", name="bob"), row("f", kind="fact", text="grace: hi")]
    vsim = {"g": 0.5, "b": 0.6, "f": 0.55}
    _, score = fuse("vector", cands(rows, vsim), SearchOptions(speaker_weight=0.2, speakers=frozenset({"grace", SELF})))
    assert score == pytest.approx({"g": 0.7, "b": 0.6, "f": 0.55})


def test_confidence_and_recency_at_a_given_now() -> None:
    rows = [row("old", days=0, confidence=1.0), row("new", days=10, confidence=0.5)]
    vsim = {"old": 0.8, "new": 0.8}
    _, s = fuse("vector", cands(rows, vsim), SearchOptions(confidence_weight=1.0))
    assert s == pytest.approx({"old": 0.8, "new": 0.4})
    now = T0 + dt.timedelta(days=10)
    _, s = fuse("vector", cands(rows, vsim), SearchOptions(recency_half_life=dt.timedelta(days=10), now=now))
    assert s == pytest.approx({"old": 0.4, "new": 0.8})


def test_a_time_window_lifts_messages_of_the_named_period_above_the_rest() -> None:
    day = T0 + dt.timedelta(days=5)
    window = (day.year, day.month, day.day, 1, 0)  # that one day, no late days
    rows = [row("in", days=5), row("out", days=20), row("fact", kind="fact", days=5)]
    vsim = {"in": 0.1, "out": 0.9, "fact": 0.5}
    plain = fuse("vector", cands(rows, vsim), SearchOptions())[0]
    dated = fuse("vector", cands(rows, vsim), SearchOptions(windows=(window,), time_weight=1.0))[0]
    assert plain == ["out", "fact", "in"]
    assert dated == ["in", "out", "fact"]  # a fact of that day gets nothing: the bonus is for messages


def test_fuse_is_pure_the_same_input_gives_the_same_output_and_is_not_mutated() -> None:
    rows = [row(k, seq=i, days=i) for i, k in enumerate("abcdef")]
    c = cands(rows, vsim={k: 0.1 * i for i, k in enumerate("abcdef")}, bm25={"a": 3.0, "c": 1.0})
    before = (dict(c.vsim), dict(c.bm25), list(c.rows))
    opts = SearchOptions(neighbors=(0.2, 0.2), session_weight=0.3)
    assert fuse("hybrid", c, opts) == fuse("hybrid", c, opts)
    assert (c.vsim, c.bm25, list(c.rows)) == before
