"""scripts/eval_locomo.py: loading, metrics on a hand-computed case, and a run on one dev conversation."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "eval_locomo.py"
DEV = ROOT.parent / "shared" / "data" / "locomo-dev"


def _load():
    spec = importlib.util.spec_from_file_location("eval_locomo", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["eval_locomo"] = mod
    spec.loader.exec_module(mod)
    return mod


ev = _load()

# A tiny conversation: two sessions, five turns, one photo, malformed evidence ids.
TINY = {
    "speaker_a": "Ana",
    "speaker_b": "Ben",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a cat named Pixel."},
        {"speaker": "Ben", "dia_id": "D1:2", "text": "Cute! Look at my garden.", "img_url": ["x"], "blip_caption": "a photo of tomatoes"},
        {"speaker": "Ana", "dia_id": "D1:3", "text": "I start a pottery class on Monday."},
    ],
    "session_2_date_time": "12:05 am on 1 June, 2023",
    "session_2": [
        {"speaker": "Ben", "dia_id": "D2:1", "text": "My tomatoes won a prize at the fair."},
        {"speaker": "Ana", "dia_id": "D2:2", "text": "Pixel broke my first pot, haha."},
    ],
    "session_3_date_time": "9:00 am on 2 June, 2023",  # a date without a session is ignored
    "qa": [
        {"question": "What pet does Ana have?", "answer": "a cat", "evidence": ["D1:1"], "category": 4},
        {"question": "What did Ben grow?", "answer": "tomatoes", "evidence": ["D1:2 D2:1"], "category": 1},
        {"question": "What hobby did Ana start?", "answer": "pottery", "evidence": ["D:1:3", "D2:2", "D9:9", "D"], "category": 1},
        {"question": "Is Ben a pilot?", "answer": "", "evidence": [], "category": 3},
        {"question": "What did Ana's dog win?", "adversarial_answer": "a prize", "evidence": ["D2:1"], "category": 5},
    ],
}


@pytest.fixture
def tiny(tmp_path):
    p = tmp_path / "7.json"
    p.write_text(json.dumps(TINY))
    return ev.load_conversation(p)


def test_session_dates_are_aware_utc() -> None:
    assert ev.parse_session_date("1:56 pm on 8 May, 2023") == dt.datetime(2023, 5, 8, 13, 56, tzinfo=dt.timezone.utc)
    assert ev.parse_session_date("12:05 am on 1 June, 2023") == dt.datetime(2023, 6, 1, 0, 5, tzinfo=dt.timezone.utc)
    with pytest.raises(ValueError):
        ev.parse_session_date("yesterday")


def test_loading_turn_text_and_evidence(tiny) -> None:
    assert [s.number for s in tiny.sessions] == [1, 2]
    t = tiny.sessions[0].turns
    assert t[0].text == "Ana: I adopted a cat named Pixel."
    assert t[1].text == "Ben: Cute! Look at my garden. [image: a photo of tomatoes]"
    assert t[1].plain == "Cute! Look at my garden. [image: a photo of tomatoes]"
    # the README's way: what was said, the speaker in the metadata; or the label in the text
    assert ev.turn_message(t[0])["content"] == "I adopted a cat named Pixel."
    assert ev.turn_message(t[0])["metadata"] == {"dia_id": "D1:1", "name": "Ana"}
    assert ev.turn_message(t[0], "label")["content"] == "Ana: I adopted a cat named Pixel."
    assert "name" not in ev.turn_message(t[0], "label")["metadata"]
    assert t[1].time - t[0].time == ev.TURN_STEP and t[0].time.tzinfo is not None
    assert tiny.sessions[1].turns[0].time == dt.datetime(2023, 6, 1, 0, 5, tzinfo=dt.timezone.utc)
    qs = tiny.questions
    assert qs[1].evidence == ("D1:2", "D2:1") and qs[1].dropped == 0
    assert qs[2].evidence == ("D1:3", "D2:2") and qs[2].dropped == 2  # "D9:9" names no turn, "D" is no id
    assert qs[3].evidence == () and tiny.dropped_evidence == 2
    assert ev.normalize_evidence(["D8:6; D9:17", "D8:6"], {"D8:6", "D9:17"}) == (("D8:6", "D9:17"), 0)


def test_hits_map_to_turns_in_order_without_duplicates() -> None:
    hits = [
        {"kind": "message", "metadata": {"dia_id": "D1:3"}},
        {"kind": "fact", "metadata": {"sources": [{"dia_id": "D2:2", "sequence": 1}, {"dia_id": "D1:3"}]}},
        {"kind": "message", "metadata": {"dia_id": "D1:3"}},  # a second chunk of the same turn
        {"kind": "summary", "metadata": {"sources": [{"dia_id": "D1:1"}, {"sequence": 4}, {"dia_id": "D1:2"}]}},
        {"kind": "note", "metadata": {}},
    ]
    assert ev.hits_to_turns(hits) == ["D1:3", "D2:2", "D1:1", "D1:2"]


def test_metrics_by_hand(tiny) -> None:
    # Rankings chosen so every number below is easy to compute by hand.
    ranked = {
        "What pet does Ana have?": ["D1:3", "D1:1", "D2:1"],  # hit at rank 2
        "What did Ben grow?": ["D2:1", "D1:1", "D1:3", "D2:2", "D1:2"],  # 1 of 2 by rank 1, both by 5
        "What hobby did Ana start?": ["D1:1", "D2:1", "D1:2", "D2:2", "D1:3"],  # 1 of 2 by rank 4, both by 5
        "What did Ana's dog win?": ["D1:1", "D1:2"],  # miss
    }
    sc = ev.Scores((1, 2, 5))
    skipped = 0
    for q in tiny.questions:
        if not q.evidence:
            skipped += 1
            continue
        sc.add(q.category, ranked[q.question], q.evidence)
    assert skipped == 1
    s = sc.summary()
    assert s["questions"] == 4
    # recall@1: 0, 1/2, 0, 0 -> 0.125; recall@2: 1, 1/2, 0, 0 -> 0.375; recall@5: 1, 1, 1, 0 -> 0.75
    assert s["recall_at_1"] == 0.125 and s["recall_at_2"] == 0.375 and s["recall_at_5"] == 0.75
    assert s["any_at_1"] == 0.25 and s["any_at_2"] == 0.5 and s["any_at_5"] == 0.75
    assert s["all_at_1"] == 0.0 and s["all_at_2"] == 0.25 and s["all_at_5"] == 0.75
    cat = sc.by_category()
    assert set(cat) == {"1", "4", "5"}
    assert cat["1"]["questions"] == 2 and cat["1"]["recall_at_2"] == 0.25 and cat["1"]["all_at_5"] == 1.0
    assert cat["4"]["recall_at_1"] == 0.0 and cat["4"]["recall_at_2"] == 1.0
    assert cat["5"]["recall_at_5"] == 0.0
    assert ev.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5 and ev.percentile([], 95) == 0.0


def test_leave_one_out_chooses_on_the_others_and_scores_the_held_out() -> None:
    grid = [ev.SearchParams(vector_weight=0.5), ev.SearchParams(vector_weight=0.7)]
    # per conversation, per grid point: recall@10 of each question
    scores = {
        "a": [[1.0, 1.0], [0.0, 0.0]],  # a likes grid 0
        "b": [[1.0], [0.5]],  # b likes grid 0
        "c": [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]],  # c likes grid 1, and outweighs a + b on all
    }
    h = ev.leave_one_out(scores, grid)
    chosen = {f["held_out"]: f["chosen"]["vector_weight"] for f in h["folds"]}
    # held out a: b + c -> grid 0 scores 1/4, grid 1 3.5/4 -> 1; held out b: a + c -> 2/5 vs 3/5 -> 1;
    # held out c: a + b -> grid 0 (3/3 vs 0.5/3)
    assert chosen == {"a": 0.7, "b": 0.7, "c": 0.5}
    # held-out questions: a under grid 1 (0, 0), b under grid 1 (0.5), c under grid 0 (0, 0, 0)
    assert h["recall_at_10"] == pytest.approx(0.5 / 6, abs=1e-4)
    assert h["tuned_on_all"]["params"]["vector_weight"] == 0.7  # 3.5/6 vs 3/6
    assert ev.SearchParams() in ev.GRID  # the product's defaults are a grid point


def test_modes_call_the_product_search_with_their_options(tiny, tmp_path) -> None:
    calls = []

    class Spy:
        def search(self, query, **kw):
            calls.append((query, kw))
            return [{"kind": "summary", "metadata": {"sources": [{"dia_id": "D1:1"}]}},
                    {"kind": "fact", "metadata": {"sources": [{"dia_id": "D1:3"}]}},
                    {"kind": "message", "metadata": {"dia_id": "D2:1"}}]

    assert ev.retrieve(Spy(), tiny, "q?", "derived", 5) == ["D1:3", "D2:1"]  # summaries are not expanded
    assert ev.retrieve(Spy(), tiny, "q?", "hybrid", 5) == ["D1:3", "D2:1"]
    assert ev.retrieve(Spy(), tiny, "q?", "seed", 5) == ["D1:3", "D2:1"]
    derived, hybrid, seed = calls[0][1], calls[1][1], calls[2][1]
    assert derived["kinds"] == ["message", "summary", "fact"] and "neighbors" not in derived
    # the headline row is search() with no options at all
    assert set(hybrid) == {"user", "top_k", "min_score"}
    assert seed["kinds"] == ["message"] and seed["vector_weight"] == 0.7 and seed["time_weight"] == 0.0
    assert seed["fusion"] == "minmax"  # the seed's fusion, whatever the product's default


def test_eval_on_the_tiny_conversation_through_the_api(tiny, tmp_path) -> None:
    res = ev.run_eval([tiny], modes=["bm25", "seed", "hybrid", "derived"], ks=(1, 5), store=tmp_path / "store",
                      embedder="hash", progress=False, log=lambda s: None, holdout=True)
    assert res["questions"] == 4 and res["skipped_questions"] == 1 and res["dropped_evidence"] == 2
    for mode, r in res["by_mode"].items():
        assert 0.0 <= r["recall_at_1"] <= r["recall_at_5"] <= 1.0, mode
        assert r["all_at_5"] <= r["recall_at_5"] <= r["any_at_5"]
    # BM25 finds the turns that share a topic word with the question ("start" the pottery class); a
    # participant's name is not a topic word, so "What pet does Ana have?" finds nothing by text
    assert res["by_mode"]["bm25"]["by_category"]["1"]["recall_at_5"] > 0.0
    assert res["by_mode"]["bm25"]["by_category"]["4"]["recall_at_5"] == 0.0
    line = ev.summary_line(res)
    assert line["best_mode"] in res["by_mode"] and "recall_at_5" in line
    h = line["holdout"]  # one conversation: nothing to choose on, the first grid point is used
    assert len(h["folds"]) == 1 and h["folds"][0]["questions"] == 4 and 0.0 <= h["recall_at_10"] <= 1.0


def test_every_run_ingests_the_same_store_whatever_modes_run(tiny, tmp_path, monkeypatch) -> None:
    # the defaults search summaries too: a hybrid-only run must see the summaries a full run has
    seen: list[bool] = []
    real = ev.ingest
    monkeypatch.setattr(ev, "ingest", lambda m, conv, *, summarize, **kw: seen.append(summarize) or real(
        m, conv, summarize=summarize, **kw))
    ev.run_eval([tiny], modes=["hybrid"], ks=(1, 5), store=tmp_path / "store", embedder="hash", progress=False,
                log=lambda s: None)
    assert seen == [True]


def test_one_dev_conversation_end_to_end(tmp_path) -> None:
    if not (DEV / "26.json").exists():
        pytest.skip(f"LoCoMo dev data not found at {DEV} (see ../shared/data/README.md)")
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--data", str(DEV), "--limit-conversations", "1", "--embedder", "hash",
         "--json", "--modes", "bm25", "hybrid", "derived", "--out", str(tmp_path / "full.json")],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    last = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("recall_at_10", "recall_at_5", "any_at_10", "all_at_10", "by_mode", "questions", "dropped_evidence"):
        assert key in last, key
    assert set(last["by_mode"]) == {"bm25", "hybrid", "derived"}
    assert last["questions"] == 197 and last["skipped_questions"] == 2  # conversation 26: 199 questions, 2 without evidence
    assert last["dropped_evidence"] == 0  # "D8:6; D9:17" splits into two real turns
    for mode, r in last["by_mode"].items():
        assert 0.0 <= r["recall_at_5"] <= r["recall_at_10"] <= r["recall_at_25"] <= 1.0, mode
        assert r["all_at_10"] <= r["recall_at_10"] <= r["any_at_10"]
        assert set(r["by_category"]) == {"1", "2", "3", "4", "5"}
        assert len(r["recall_curve"]) == 25 and r["query_ms_p50"] <= r["query_ms_p95"]
        assert r["query_cpu_ms_p50"] > 0  # CPU time per query (holds under load), beside the wall clock
    # BM25 alone finds well over a third of the evidence turns in the top 10 (0.56 measured)
    assert last["by_mode"]["bm25"]["recall_at_10"] > 0.4
    # the headline is the defaults row, whatever scores best (with the hash embedder, BM25 may)
    assert last["mode"] == "hybrid" and last["recall_at_10"] == last["by_mode"]["hybrid"]["recall_at_10"]
    assert last["query_cpu_ms_p50"] == last["by_mode"]["hybrid"]["query_cpu_ms_p50"]
    full = json.loads((tmp_path / "full.json").read_text())
    assert full["turns"] == 419 and full["ingest_s"] > 0


def test_agent_rows_count_quoted_and_named_turns(tiny, tmp_path) -> None:
    # a turn counts when a hit names it or the text quotes one of its sentences (short ones alone never count)
    sents = {"D1:1": ev.turn_sentences("Wow! I adopted a cat named Pixel."), "D1:2": ev.turn_sentences("Cute!")}
    assert sents["D1:1"] == ["I adopted a cat named Pixel."] and sents["D1:2"] == ["Cute!"]
    assert ev.delivered(["D1:1", "D1:2"], "- I adopted a  cat named Pixel. (2023)", set(), sents) == 0.5
    assert ev.delivered(["D1:1", "D1:2"], "", {"D1:2"}, sents) == 0.5
    assert ev.context_sections("## Relevant Memory\n\n### Profile\n- a\n\n### Facts\n- b\n") == {
        "Profile": ["- a"], "Facts": ["- b"]}
    other = ev.Conversation("8", "A", "B", [], [ev.Question(f"q{i}?", 4, ("D1:1",)) for i in range(90)])
    assert ev.foreign_questions(tiny, [tiny, other]) == [f"q{i}?" for i in range(0, 80, 2)]
    other.questions[0] = ev.Question("What did A paint?", 4, ("D1:1",))
    assert ev.foreign_questions(tiny, [tiny, other], swap=True)[0] == "What did Ana paint?"
    res = ev.run_eval([tiny], modes=[], ks=(1, 5), store=tmp_path / "store", embedder="hash", progress=False,
                      log=lambda s: None, agent=True, others=[tiny, other])
    a = res["agent"]
    assert a["questions"] == 4 and a["foreign_questions"] == 40 and res["by_mode"] == {}
    for key in ("context", "recall", "search", "foreign_search", "foreign_context"):
        assert 0.0 <= a[key] <= 1.0, key
    assert a["context_ms_p50"] > 0 and "agent" in ev.summary_line(res)
