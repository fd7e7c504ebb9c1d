"""scripts/eval_longmemeval.py: loading, the delivered-evidence rule, the split, the disk cache, a run end to end."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


loco = _load("eval_locomo")
ev = _load("eval_longmemeval")

LONG = ("Here is a plan for your week. " * 20 + "By the way, you told me the volleyball team record is 5-2 now. "
        + "Rest well on Sundays. " * 10)
DATA = {
    "questions": [
        {"question_id": "q1", "question_type": "multi-session", "question": "How many pets do I have?", "answer": "2",
         "question_date": "2023/06/01 (Thu) 10:00", "haystack": [["s1", "2023/05/01 (Mon) 09:00"], ["s2", "2023/05/20 (Sat) 18:30"]],
         "answer_session_ids": ["s1", "s2"], "answer_turns": [["s1", 0], ["s2", 0]]},
        {"question_id": "q2_abs", "question_type": "single-session-user", "question": "What is my cat's name?",
         "answer": "never said", "question_date": "2023/06/01 (Thu) 10:00",
         "haystack": [["s1", "2023/05/01 (Mon) 09:00"], ["s3", "2023/05/02 (Tue) 09:00"]],
         "answer_session_ids": [], "answer_turns": []},
    ],
    "sessions": {
        "s1": {"turns": [["user", "I adopted a dog named Rex last month."], ["assistant", "Congratulations on adopting Rex!"]]},
        "s2": {"turns": [["user", "My second pet is a parrot called Kiwi."], ["assistant", LONG]]},
        "s3": {"turns": [["user", "I bake sourdough bread on weekends."], ["assistant", "Sourdough takes patience."]]},
    },
}


@pytest.fixture
def data(tmp_path) -> Path:
    p = tmp_path / "lme.json.gz"
    with gzip.open(p, "wt", encoding="utf-8") as f:
        json.dump(DATA, f)
    return p


def test_loading_dates_turn_ids_and_abstention(data) -> None:
    qs = ev.load_questions(data)
    assert [q.qid for q in qs] == ["q1", "q2_abs"] and qs[1].abstention and not qs[0].abstention
    assert qs[0].date.isoformat() == "2023-06-01T10:00:00+00:00"
    assert qs[0].evidence_turns == ("s1#0", "s2#0") and qs[0].n_turns == 4
    msgs = ev.messages(qs[0].sessions[1])
    assert [m["metadata"]["dia_id"] for m in msgs] == ["s2#0", "s2#1"] and msgs[1]["time"] > msgs[0]["time"]


def test_a_turn_counts_when_one_of_its_long_sentences_is_quoted() -> None:
    sentences = {"t": ev.turn_sentences("Ok. I adopted a dog named Rex last month!\n\n**Also** I have a parrot.")}
    assert sentences["t"] == ["i adopted a dog named rex last month", "also i have a parrot"]
    # markdown, case and line breaks do not matter; a short sentence ("Ok.") never counts alone
    assert ev.delivered(["t"], "- [2023-05-01] user: i ADOPTED a dog named\nRex last month", set(), sentences) == 1.0
    assert ev.delivered(["t"], "Ok. a dog", set(), sentences) == 0.0
    assert ev.delivered(["t"], "", {"t"}, sentences) == 1.0  # a hit that names the turn


def test_split_halves_partition_the_questions_by_id_hash(data) -> None:
    qs = ev.load_questions(data) * 1
    ids = [f"id{i}" for i in range(200)]
    halves = [ev.half(i) for i in ids]
    assert set(halves) == {"a", "b"} and 60 < halves.count("a") < 140
    assert halves == [ev.half(i) for i in ids]  # the same every run
    a, b = ev.select(qs, split="a"), ev.select(qs, split="b")
    assert sorted(q.qid for q in a + b) == sorted(q.qid for q in qs)
    assert [q.qid for q in ev.select(qs, types=["multi-session"])] == ["q1"]


def test_disk_cache_returns_the_inner_vectors_and_shares_shards(tmp_path) -> None:
    from eidetica.providers import HashEmbedder

    inner = HashEmbedder(dim=32)
    texts = ["alpha beta", "gamma delta"]
    one = loco.cached_embedder(inner, tmp_path, shards=True)
    got = one.embed(texts)
    assert np.array_equal(got, inner.embed(texts))
    one.save()
    two = loco.cached_embedder(HashEmbedder(dim=32), tmp_path, shards=True)
    calls: list[list[str]] = []
    real = two.inner.embed
    two.inner.embed = lambda t: calls.append(list(t)) or real(t)
    assert np.array_equal(two.embed(texts), got) and calls == []  # read from the first one's shard
    # a shard written by another process after this one started is read on a miss
    three = loco.cached_embedder(HashEmbedder(dim=32), tmp_path, shards=True)
    one.embed(["epsilon"])
    one.save()
    three.inner.embed = lambda t: calls.append(list(t)) or inner.embed(t)
    three.embed(["epsilon"])
    assert calls == [] and len(list(tmp_path.glob("*.npz"))) == 2


def test_run_end_to_end_prints_the_json_line(data, tmp_path, capsys) -> None:
    code = ev.main(["--data", str(data), "--embedder", "hash", "--embed-cache", str(tmp_path / "cache"),
                    "--budgets", "200,400", "--ingest-questions", "1", "--stores", str(tmp_path / "stores")])
    assert code == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["questions"] == 1 and line["abstention"]["questions"] == 1
    for key in ("session_all_at_5", "session_any_at_5", "turn_recall_at_10", "context", "recall", "search"):
        assert 0.0 <= line[key] <= 1.0, key
    assert line["session_all_at_5"] == 1.0  # two sessions of three: both among the first five
    assert set(line["curve"]) == {"200", "400"} and line["by_type"]["multi-session"]["questions"] == 1
    assert line["ingest"]["turns"] == 4 and line["ingest"]["chunks"] >= 4 and line["context_ms_p50"] > 0
    # the kept stores answer a second run without ingesting again
    assert ev.main(["--data", str(data), "--embedder", "hash", "--embed-cache", "none", "--ingest-questions", "0",
                    "--stores", str(tmp_path / "stores"), "--json"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["stores_reused"] == 2 and again["context"] == line["context"]
