"""ChunkIndex: conformance, search semantics against brute-force references, deletes, ANN, compaction."""

from __future__ import annotations

import datetime as dt
import os
import re
from typing import Any

import numpy as np
import pytest

from eidetica.errors import DimensionMismatch, InvalidInput
from eidetica.events import (
    ArrowLog,
    FactDecayed,
    FactDeleted,
    FactReinforced,
    NewEvent,
    NoteDeleted,
    SessionForgotten,
    UserForgotten,
)
from eidetica.projections import ChunkIndex, Projection, Projector
from tests.contracts.projection import DIM, ProjectionConformance, Workload, emb, hvec

UTC = dt.timezone.utc


class TestChunkIndexConformance(ProjectionConformance):
    pytestmark = pytest.mark.slow  # LanceDB + Tantivy per case: `make test-unit` leaves it to `make test`
    durable = True

    def make_projection(self, path: str) -> Projection:
        return ChunkIndex(path, dim=DIM)

    def observe(self, proj: Projection) -> Any:
        assert isinstance(proj, ChunkIndex)
        snap = proj.snapshot()
        assert snap["lance"] == snap["text"], "LanceDB and Tantivy hold different rows"
        assert snap["lance_duplicates"] == 0 and snap["text_duplicates"] == 0
        return snap["lance"]

    def observe_empty(self) -> Any:
        return []


# -- a shared, fully built index ---------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The default workload projected into a ChunkIndex (module-wide, read-only for tests)."""
    root = tmp_path_factory.mktemp("built")
    w = Workload(seed=21, users=3, sessions=2, messages=6)
    log = ArrowLog(root / "log", partitions=2, fsync="never")
    w.append_to(log)
    idx = ChunkIndex(root / "idx", dim=DIM)
    Projector(log, [idx], batch_size=64).catch_up()
    rows = idx.snapshot()["lance"]
    yield w, idx, rows
    idx.close()
    log.close()


def row_dict(t: tuple) -> dict[str, Any]:
    keys = ("key", "id", "tenant", "user_id", "session_id", "kind", "source_id", "text", "category", "confidence",
            "ts", "etime", "metadata")
    return dict(zip(keys, t))


def matches(r: dict[str, Any], q: dict[str, Any]) -> bool:
    """The reference filter semantics."""
    since = q.get("since")
    until = q.get("until")
    return (
        r["tenant"] == q["tenant"]
        and (q.get("kinds") is None or r["kind"] in q["kinds"])
        and (q.get("user_id") is None or r["user_id"] == q["user_id"])
        and (q.get("session_id") is None or r["session_id"] == q["session_id"])
        and (q.get("exclude_session") is None or r["session_id"] != q["exclude_session"])
        and (q.get("category") is None or r["category"] == q["category"])
        and (since is None or r["ts"] >= int(since.timestamp() * 1e6))
        and (until is None or r["ts"] < int(until.timestamp() * 1e6))
    )


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_vector_mode_equals_brute_force(built) -> None:
    w, idx, rows = built
    rows = [row_dict(r) for r in rows]
    for q in w.queries(40, seed=3):
        q = {k: v for k, v in q.items() if k != "text"}
        got = idx.search(mode="vector", **q)
        cands = [r for r in rows if matches(r, q)]
        sims = {r["key"]: float(hvec(r["text"]) @ q["vector"]) for r in cands}
        want = sorted(sims, key=lambda k: -sims[k])[: q["top_k"]]
        assert len(got) == min(q["top_k"], len(cands))
        got_keys = [f"{h.tenant}\x1f{h.id}" for h in got]
        # equal up to float ties at the cut
        assert [round(sims[k], 4) for k in got_keys] == [round(sims[k], 4) for k in want]
        for h in got:
            assert abs(h.score - sims[f"{h.tenant}\x1f{h.id}"]) < 1e-4


def test_every_hit_passes_the_filters(built) -> None:
    w, idx, rows = built
    t0 = dt.datetime(2024, 1, 3, tzinfo=UTC)
    variants = [
        {"kinds": ["fact"]}, {"kinds": ["message", "summary"]}, {"user_id": "u0"}, {"session_id": "s0-0"},
        {"exclude_session": "s0-0"}, {"category": "work's"}, {"since": t0}, {"until": t0},
        {"since": t0, "until": t0 + dt.timedelta(days=2)}, {"user_id": "u' OR 1=1 --", "kinds": ["note", "fact"]},
    ]
    for q in w.queries(10, seed=4):
        for v in variants:
            qq = {**{k: x for k, x in q.items() if k not in ("kinds", "user_id", "exclude_session")}, **v}
            for mode in ("hybrid", "vector", "text"):
                for h in idx.search(mode=mode, **qq):
                    r = {"tenant": h.tenant, "kind": h.kind, "user_id": h.user_id, "session_id": h.session_id,
                         "category": h.category, "ts": int(h.time.timestamp() * 1e6)}
                    assert matches(r, qq), (mode, qq, h)


def test_text_mode_hits_share_a_term_and_are_ranked(built) -> None:
    w, idx, _ = built
    for q in w.queries(30, seed=5):
        hits = idx.search(mode="text", tenant=q["tenant"], text=q["text"])
        stems = {t[:4] for t in re.findall(r"\w+", q["text"].lower())}
        for h in hits:
            assert stems & {t[:4] for t in re.findall(r"\w+", h.text.lower())}
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        if hits:
            assert hits[0].score == pytest.approx(1.0)


def test_exact_text_finds_its_chunk_first(built) -> None:
    w, idx, rows = built
    for t in rows[:: max(1, len(rows) // 25)]:
        r = row_dict(t)
        for mode in ("hybrid", "vector", "text"):
            hits = idx.search(tenant=r["tenant"], text=r["text"], vector=hvec(r["text"]), mode=mode, top_k=3)
            assert hits and hits[0].id == r["id"], (mode, r["text"])
            assert hits[0].tenant == r["tenant"] and hits[0].text == r["text"]


def test_hit_fields_and_metadata(built) -> None:
    w, idx, rows = built
    msgs = [row_dict(t) for t in rows if t[5] == "message"]
    r = msgs[0]
    (h,) = idx.search(tenant=r["tenant"], text=r["text"], vector=hvec(r["text"]), top_k=1)
    assert h.kind == "message" and h.metadata["quote"] == "it's" and isinstance(h.metadata["turn"], int)
    assert h.session_id == r["session_id"] and h.user_id == r["user_id"] and h.source_id == r["source_id"]
    assert h.time.tzinfo is not None and 0.0 <= h.score <= 1.0 and h.vector_score > 0.99
    summaries = [row_dict(t) for t in rows if t[5] == "summary"]
    assert summaries and all(s["text"].startswith("summary") for s in summaries)


def test_one_summary_row_per_session(built) -> None:
    _, _, rows = built
    by_source: dict[tuple[str, str], list[str]] = {}
    for t in rows:
        r = row_dict(t)
        if r["kind"] == "summary":
            by_source.setdefault((r["tenant"], r["source_id"]), []).append(r["id"])
    assert by_source
    for ids in by_source.values():
        assert len(ids) == 1  # only the newest epoch survives


def test_min_score_and_modes_fall_back(built) -> None:
    w, idx, _ = built
    q = w.queries(1, seed=9)[0]
    hits = idx.search(**q)
    assert all(0.0 <= h.score <= 1.0 for h in hits)
    cut = hits[len(hits) // 2].score
    assert all(h.score >= cut for h in idx.search(**q, min_score=cut))
    assert idx.search(**q, min_score=1.01) == []
    no_text = {k: v for k, v in q.items() if k != "text"}
    assert [h.id for h in idx.search(**no_text)] == [h.id for h in idx.search(mode="vector", **no_text)]
    no_vec = {k: v for k, v in q.items() if k != "vector"}
    assert [h.id for h in idx.search(**no_vec)] == [h.id for h in idx.search(mode="text", **no_vec)]
    # a text of stopwords only has no term to search: hybrid is the vector side, with the vector
    # given or computed on demand
    vector_side = idx.search(mode="vector", **no_text)
    assert vector_side
    for vec in (q["vector"], lambda: q["vector"]):
        stop = {**q, "text": "the of and", "vector": vec}
        assert [h.id for h in idx.search(**stop)] == [h.id for h in vector_side]
    assert idx.search(**{**q, "top_k": 0}) == []
    assert idx.search(**q, kinds=[]) == []
    with pytest.raises(InvalidInput):
        idx.search(tenant=q["tenant"])
    with pytest.raises(InvalidInput):
        idx.search(**q, mode="fuzzy")
    with pytest.raises(DimensionMismatch):
        idx.search(tenant=q["tenant"], vector=np.ones(DIM + 1, np.float32))


@pytest.fixture
def fresh(tmp_path):
    log = ArrowLog(tmp_path / "log", partitions=2, fsync="never")
    idx = ChunkIndex(tmp_path / "idx", dim=DIM)
    pj = Projector(log, [idx])
    yield log, idx, pj
    idx.close()
    log.close()


def test_fusion_weights_and_recency_ties(fresh) -> None:
    log, idx, pj = fresh
    old, new = dt.datetime(2020, 1, 1, tzinfo=UTC), dt.datetime(2025, 1, 1, tzinfo=UTC)
    log.append("a", [emb(["old"], ["zebra crossing"], time=old), emb(["new"], ["zebra crossing"], time=new),
                     emb(["other"], ["quantum physics lecture"])])
    pj.catch_up()
    hits = idx.search(tenant="t", text="zebra", vector=hvec("zebra crossing"))
    assert [h.id for h in hits[:2]] == ["new", "old"]  # identical scores: the newer first
    assert hits[0].score == pytest.approx(1.0) and hits[-1].id == "other"
    # vector-only candidate gets 0.7 * its normalised similarity, nothing from text
    assert hits[-1].score == pytest.approx(0.0) and hits[-1].text_score == 0.0


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_deletes_and_confidence_flow_through(fresh) -> None:
    log, idx, pj = fresh

    def ids(**kw: Any) -> set[str]:
        return {h.id for h in idx.search(tenant="t", text="alpha", vector=hvec("alpha"), top_k=50, **kw)}

    log.append("facts:t:u", [emb(["f1"], ["alpha fact one"], kind="fact", source="f1", confidence=0.5),
                             emb(["f2"], ["alpha fact two"], kind="fact", source="f2")])
    log.append("notes:t:u", [emb(["n1"], ["alpha note"], kind="note", source="n1")])
    log.append("session:t:s", [emb(["m1", "m2"], ["alpha message", "alpha again"], source="msg1", session="s")])
    log.append("summary:t:s", [emb(["sum:0"], ["alpha summary"], kind="summary", source="summary:s", session="s")])
    log.append("session:t:keep", [emb(["k1"], ["alpha kept"], source="msg2", session="keep", user="v")])
    pj.catch_up()
    assert ids() == {"f1", "f2", "n1", "m1", "m2", "sum:0", "k1"}
    log.append("facts:t:u", [NewEvent.of(FactReinforced(fact_id="f1", confidence=0.9), tenant="t")])
    pj.catch_up()
    (h,) = [h for h in idx.search(tenant="t", text="alpha fact one", top_k=5) if h.id == "f1"]
    assert h.confidence == pytest.approx(0.9)
    log.append("facts:t:u", [NewEvent.of(FactDecayed(fact_id="f1", confidence=0.4), tenant="t")])
    pj.catch_up()
    (h,) = [h for h in idx.search(tenant="t", text="alpha fact one", top_k=5) if h.id == "f1"]
    assert h.confidence == pytest.approx(0.4)
    log.append("summary:t:s", [emb(["sum:1"], ["alpha summary newer"], kind="summary", source="summary:s", session="s")])
    pj.catch_up()
    assert "sum:0" not in ids() and "sum:1" in ids()
    log.append("facts:t:u", [NewEvent.of(FactDeleted(fact_id="f2"), tenant="t")])
    log.append("notes:t:u", [NewEvent.of(NoteDeleted(note_id="n1"), tenant="t")])
    pj.catch_up()
    assert ids() == {"f1", "m1", "m2", "sum:1", "k1"}
    log.append("session:t:s", [NewEvent.of(SessionForgotten(session_id="s", user_id="u"), tenant="t")])
    pj.catch_up()
    assert ids() == {"f1", "k1"}
    log.append("facts:t:u", [NewEvent.of(UserForgotten(user_id="u"), tenant="t")])
    pj.catch_up()
    assert ids() == {"k1"} and idx.count("t") == 1
    # the user comes back: new rows are kept
    log.append("facts:t:u", [emb(["f9"], ["alpha new fact"], kind="fact", source="f9")])
    pj.catch_up()
    assert ids() == {"k1", "f9"}


def test_late_rows_from_another_partition_stay_deleted(fresh) -> None:
    """A delete applied before older rows arrive (other partition) still removes them."""
    log, idx, pj = fresh
    log.append("session:t:s", [emb(["m1"], ["beta words"], source="msg1", session="s")])
    log.append("facts:t:u", [emb(["f1"], ["beta fact"], kind="fact", source="f1", user="u")])
    log.append("forget", [NewEvent.of(UserForgotten(user_id="u"), tenant="t")])
    parts = {log.partition_of(s) for s in ("session:t:s", "forget")}
    assert len(parts) == 2
    forget_part = log.partition_of("forget")
    idx.apply(log.read(partition=forget_part))  # the tombstone first
    idx.apply(log.read(partition=1 - forget_part))
    assert idx.count("t") == 0


def test_bad_chunk_events_are_skipped_not_fatal(fresh) -> None:
    log, idx, pj = fresh
    log.append("s", [emb(["x"], ["wrong dimension"], dim=DIM * 2), emb(["y"], ["right dimension"])])
    pj.catch_up()
    assert idx.count() == 1 and idx.stats()["skipped_events"] == 1


def test_reopen_with_another_dimension_raises(tmp_path) -> None:
    ChunkIndex(tmp_path / "i", dim=DIM).close()
    with pytest.raises(DimensionMismatch):
        ChunkIndex(tmp_path / "i", dim=DIM + 8)


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_ann_index_is_built_past_the_threshold_and_stays_correct(tmp_path) -> None:
    w = Workload(seed=5, users=3, sessions=3, messages=8)
    log = ArrowLog(tmp_path / "log", partitions=1, fsync="never")
    w.append_to(log)
    idx = ChunkIndex(tmp_path / "idx", dim=DIM, ann_threshold=150, optimize_every=3)
    try:
        Projector(log, [idx], batch_size=50).rebuild()
        st = idx.stats()
        assert st["rows"] >= 150 and st["ann"]["indexed"] and st["ann"]["trained_rows"] >= 150
        assert st["lance"]["fragments"] <= 6  # optimize() keeps fragments from piling up (>= 12 write batches)
        rows = [row_dict(t) for t in idx.snapshot()["lance"]]
        found = total = 0
        for q in w.queries(30, seed=8):
            got = {h.id for h in idx.search(tenant=q["tenant"], vector=q["vector"], mode="vector", top_k=10)}
            cands = [r for r in rows if r["tenant"] == q["tenant"]]
            sims = sorted(cands, key=lambda r: -float(hvec(r["text"]) @ q["vector"]))[:10]
            found += len(got & {r["id"] for r in sims})
            total += len(sims)
        assert found / total >= 0.95
    finally:
        idx.close()
        log.close()


def test_compact_makes_deletions_physical(tmp_path) -> None:
    log = ArrowLog(tmp_path / "log", fsync="never")
    idx = ChunkIndex(tmp_path / "idx", dim=DIM)
    pj = Projector(log, [idx])
    try:
        secret = "xylophonesecret"
        log.append("session:t:s", [emb(["m1"], [f"my {secret} number"], source="msg1", session="s")])
        log.append("session:t:k", [emb(["k1"], ["keep this row"], source="msg2", session="k")])
        for i in range(3):
            log.append("session:t:k", [emb([f"k{i + 2}"], [f"more rows {i}"], source=f"x{i}", session="k")])
            pj.catch_up()
        log.append("session:t:s", [NewEvent.of(SessionForgotten(session_id="s"), tenant="t")])
        pj.catch_up()
        assert idx.search(tenant="t", text=secret, mode="text") == []
        assert idx._text.terms_with_prefix("text", secret[:8])  # still in the segment before compaction
        idx.compact()
        assert idx.search(tenant="t", text=secret, mode="text") == []
        assert idx._text.terms_with_prefix("text", secret[:8]) == []
        table = idx._lance.table
        for v in table.list_versions():  # no version of the table still holds the row
            table.checkout(v["version"])
            assert secret not in " ".join(table.to_arrow().column("text").to_pylist())
        table.checkout_latest()
        assert idx.count() == 4
        assert {h.id for h in idx.search(tenant="t", text="rows keep", vector=hvec("keep this row"))} == {"k1", "k2", "k3", "k4"}
        gens = [d for d in os.listdir(tmp_path / "idx" / "text") if d.startswith("g")]
        assert len(gens) == 1  # the old Tantivy generation is gone
        # writes keep working after the swap
        log.append("session:t:k", [emb(["k9"], ["after compaction"], source="x9", session="k")])
        pj.catch_up()
        assert idx.search(tenant="t", text="compaction", mode="text")[0].id == "k9"
    finally:
        idx.close()
        log.close()


def test_stats_and_count(built) -> None:
    w, idx, rows = built
    st = idx.stats()
    assert st["rows"] == len(rows) == idx.count() == st["text"]["docs"]
    assert st["disk_bytes"] > 0 and st["lance"]["versions"] >= 1
    assert sum(idx.count(t) for t in w.tenants) == len(rows)
    assert idx.count("nobody") == 0


# -- scoring options and re-ranking ---------------------------------------------------------


def test_rescore_gives_text_only_candidates_their_real_cosine(fresh) -> None:
    log, idx, pj = fresh
    log.append("a", [emb(["lex"], ["zebra zebra crossing"]), emb(["vec"], ["quantum physics lecture"]),
                     emb(["mid"], ["zebra quantum notes"])])
    pj.catch_up()
    q = hvec("quantum physics lecture")
    # one candidate per side: "lex" is only in the BM25 list, "vec" only in the vector list
    kw = dict(tenant="t", text="zebra", vector=q, candidates=1, top_k=1)
    (plain,) = idx.search(**kw, rescore=False, vector_weight=0.0)
    (full,) = idx.search(**kw, vector_weight=0.0)
    assert plain.id == full.id == "lex"
    assert plain.vector_score == 0.0
    assert full.vector_score == pytest.approx(float(np.dot(q, hvec("zebra zebra crossing"))), abs=1e-5)
    (top,) = idx.search(**kw, vector_weight=1.0)
    assert top.id == "vec" and top.text_score == 0.0  # it really matches no query term
    # the whole union is scored on both sides: "mid" (in both lists) keeps both its scores
    both = {h.id: h for h in idx.search(tenant="t", text="zebra", vector=q, top_k=3)}
    assert both["mid"].vector_score > 0 and both["mid"].text_score > 0


def test_vector_weight_moves_hybrid_between_the_two_sides(fresh) -> None:
    log, idx, pj = fresh
    log.append("a", [emb(["t"], ["zebra crossing"]), emb(["v"], ["quantum physics"])])
    pj.catch_up()
    kw = dict(tenant="t", text="zebra", vector=hvec("quantum physics"))
    assert idx.search(**kw, vector_weight=1.0)[0].id == "v"
    assert idx.search(**kw, vector_weight=0.0)[0].id == "t"
    assert [h.id for h in idx.search(**kw, vector_weight=0.3)] == ["t", "v"]


def test_query_stopwords_leave_only_topic_terms(fresh) -> None:
    log, idx, pj = fresh
    log.append("a", [emb(["fn"], ["what did you do when it was there"]), emb(["topic"], ["the zebra crossing"])])
    pj.catch_up()
    q = "what did the zebra do when it was there"
    assert [h.id for h in idx.search(tenant="t", text=q, mode="text")] == ["topic"]
    assert idx.search(tenant="t", text=q, mode="text", stopwords=False)[0].id == "fn"
    # a query of function words only still searches (all its terms)
    assert [h.id for h in idx.search(tenant="t", text="what did you do", mode="text")] == ["fn"]


def _conversation(log: Any) -> None:
    """Session s: three messages in sequence; session o: one unrelated message."""
    log.append("session:t:s", [
        emb(["q"], ["which colour did you paint the shed"], session="s", metadata={"sequence": 1}),
        emb(["a"], ["bright turquoise with white trim"], session="s", metadata={"sequence": 2}),
        emb(["x"], ["anyway how was the weekend"], session="s", metadata={"sequence": 3}),
    ])
    log.append("session:t:o", [emb(["o"], ["the shed roof leaks"], session="o", metadata={"sequence": 1})])


def test_neighbors_lift_the_message_next_to_a_match(fresh) -> None:
    log, idx, pj = fresh
    _conversation(log)
    pj.catch_up()
    kw = dict(tenant="t", text="colour paint shed", mode="text", top_k=4, calibrate=False)  # raw sums
    plain = [h.id for h in idx.search(**kw)]
    assert plain[0] == "q" and "a" not in plain  # the answer shares no term with the question
    kw["mode"] = "hybrid"
    kw["vector"] = hvec("colour paint shed")
    base = {h.id: h.score for h in idx.search(**kw)}
    lifted = {h.id: h.score for h in idx.search(**kw, neighbors=0.6)}
    assert lifted["a"] == pytest.approx(base["a"] + 0.6 * (base["q"] + base["x"]))
    assert lifted["o"] == pytest.approx(base["o"])  # alone in its session
    assert [h.id for h in idx.search(**kw, neighbors=0.6)][:2] == ["q", "a"]


def test_session_weight_adds_the_sessions_best_score(fresh) -> None:
    log, idx, pj = fresh
    _conversation(log)
    pj.catch_up()
    kw = dict(tenant="t", text="colour paint shed", vector=hvec("colour paint shed"), top_k=4, calibrate=False)
    base = {h.id: h.score for h in idx.search(**kw)}
    sess = {h.id: h.score for h in idx.search(**kw, session_weight=0.4)}
    best = max(base[k] for k in ("q", "a", "x"))
    for k in ("q", "a", "x"):
        assert sess[k] == pytest.approx(base[k] + 0.4 * best)
    assert sess["o"] == pytest.approx(base["o"] + 0.4 * base["o"])


def test_mmr_drops_a_near_duplicate_from_the_top(fresh) -> None:
    log, idx, pj = fresh
    v = hvec("alpha beta gamma")
    other = hvec("alpha delta")
    dup = v + 0.01 * hvec("noise")
    log.append("a", [emb(["a1", "a2", "c"], ["alpha beta gamma", "alpha beta gamma again", "alpha delta"],
                         vectors=np.stack([v, dup / np.linalg.norm(dup), other]))])
    pj.catch_up()
    kw = dict(tenant="t", vector=v, mode="vector", top_k=2)
    assert [h.id for h in idx.search(**kw)] == ["a1", "a2"]
    assert [h.id for h in idx.search(**kw, mmr=0.3)] == ["a1", "c"]
    assert [h.id for h in idx.search(**kw, mmr=1.0)] == ["a1", "a2"]  # lambda 1: relevance only


def test_recency_half_life_prefers_the_newer_of_two_close_hits(fresh) -> None:
    log, idx, pj = fresh
    old, new = dt.datetime(2020, 1, 1, tzinfo=UTC), dt.datetime(2025, 1, 1, tzinfo=UTC)
    log.append("a", [emb(["old"], ["zebra crossing"], time=old), emb(["new"], ["zebra crossing in town"], time=new)])
    pj.catch_up()
    kw = dict(tenant="t", vector=hvec("zebra crossing"), mode="vector")  # cosine scores, no min-max
    assert [h.id for h in idx.search(**kw)] == ["old", "new"]  # the old one matches better
    hl = dt.timedelta(days=365)
    hits = idx.search(**kw, recency_half_life=hl, now=new)
    assert [h.id for h in hits] == ["new", "old"]
    plain = {h.id: h.score for h in idx.search(**kw)}
    age = (new - old) / hl
    assert hits[1].score == pytest.approx(plain["old"] * 0.5 ** age)


def test_confidence_weight_puts_the_surer_fact_first(fresh) -> None:
    log, idx, pj = fresh
    log.append("facts:t:u", [emb(["weak"], ["likes green tea"], kind="fact", source="weak", confidence=0.35),
                             emb(["sure"], ["likes green tea a lot"], kind="fact", source="sure", confidence=1.0)])
    pj.catch_up()
    kw = dict(tenant="t", vector=hvec("likes green tea"), mode="vector", kinds=["fact"])  # cosine, no min-max
    assert [h.id for h in idx.search(**kw)] == ["weak", "sure"]
    assert [h.id for h in idx.search(**kw, confidence_weight=1.0)] == ["sure", "weak"]


def test_row_metadata_is_parsed_once_and_the_memo_never_shows(monkeypatch) -> None:
    from eidetica.projections import _rows

    parsed: list[bytes] = []
    decode = _rows._decode_meta
    monkeypatch.setattr(_rows, "_decode_meta", lambda blob: parsed.append(blob) or decode(blob))
    meta = _rows.pack_meta({"name": "Ana", "sequence": 3})
    r = _rows.Row(key="t\x1fa", id="a", tenant="t", user_id="u", session_id="s", kind="message", source_id="",
                  text="hi", category="", confidence=1.0, ts=1, etime=2, metadata=meta)
    twin = _rows.Row.unpack(r.pack())
    d = r.meta_dict()
    assert d == {"name": "Ana", "sequence": 3} and r.meta_dict() is d and len(parsed) == 1
    # fields alone make a row: equality, repr and packing ignore the memo
    assert r == twin and repr(r) == repr(twin) and r.pack() == twin.pack()
    assert twin.meta_dict() == d and len(parsed) == 2  # another row parses its own
    bad = _rows.Row.unpack(r.pack())
    bad.metadata = b"\xc1"  # not msgpack: {} as before, and remembered too
    assert bad.meta_dict() == {} and bad.meta_dict() == {} and len(parsed) == 3


def test_speakers_and_smoothing_parse_each_rows_metadata_once(fresh, monkeypatch) -> None:
    from eidetica.projections import _rows

    log, idx, pj = fresh
    names = ["Ben", "Ana", "Ben", "Ana", "Ben"]
    texts = ["which colour did you paint the shed", "bright turquoise with white trim", "anyway how was the weekend",
             "we painted the fence too", "the shed roof leaks"]
    log.append("session:t:s", [emb([f"m{i}"], [t], session="s", metadata={"sequence": i + 1, "name": n})
                               for i, (t, n) in enumerate(zip(texts, names))])
    pj.catch_up()
    kw = dict(tenant="t", text="colour paint shed", vector=hvec("colour paint shed"), top_k=5,
              neighbors=0.3, session_weight=0.2, speakers={"Ana"}, speaker_weight=0.5)
    expected = [(h.id, h.score, h.metadata) for h in idx.search(**kw)]
    made: dict[bytes, int] = {}
    unpack = _rows.Row.unpack.__func__

    def counting_unpack(cls, data):
        row = unpack(cls, data)
        made[row.metadata] = made.get(row.metadata, 0) + 1
        return row

    parsed: dict[bytes, int] = {}
    decode = _rows._decode_meta

    def counting_decode(blob):
        parsed[blob] = parsed.get(blob, 0) + 1
        return decode(blob)

    monkeypatch.setattr(_rows.Row, "unpack", classmethod(counting_unpack))
    monkeypatch.setattr(_rows, "_decode_meta", counting_decode)
    hits = idx.search(**kw)
    assert [(h.id, h.score, h.metadata) for h in hits] == expected
    assert {h.id for h in hits if h.metadata["name"] == "Ana"} == {"m1", "m3"}
    # every message's metadata is unique, so per blob: no more parses than row objects made
    assert parsed and all(n <= made.get(blob, 0) for blob, n in parsed.items()), (parsed, made)


@pytest.mark.parametrize("field,value", [
    ("vector_weight", 1.5), ("vector_weight", "0.5"), ("neighbors", -0.1), ("session_weight", True),
    ("mmr", 2), ("confidence_weight", float("nan")), ("rescore", 1), ("stopwords", None),
    ("recency_half_life", 3600), ("recency_half_life", dt.timedelta(0)), ("now", dt.datetime(2025, 1, 1)),
    ("speakers", "Ana"), ("speakers", [1]), ("speaker_weight", -0.5),
])
def test_bad_search_options_name_the_field(fresh, field: str, value: Any) -> None:
    _, idx, _ = fresh
    with pytest.raises(InvalidInput) as e:
        idx.search(tenant="t", text="x", **{field: value})
    assert field in str(e.value)
