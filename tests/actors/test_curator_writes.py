"""Writes of facts whose cost does not grow with a user's facts: incremental structures,
``remember_many`` (one embedding batch, one commit) and one commit per ``remember``."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eidetica
from eidetica.actors import MemoryConfig
from eidetica.actors.curator import _VectorSet
from eidetica.errors import InvalidInput
from eidetica.events.streams import facts_stream
from eidetica.providers import HashEmbedder
from tests.support.clock import T0, Clock


def commits(m: eidetica.Memory, user: str = "u") -> int:
    """Record batches (one per commit, so one fsync each) holding the user's facts stream."""
    stream = facts_stream(m.tenant, user)
    p = m.log.partition_of(stream)
    return sum(1 for b in m.log.read_batches(partition=p) if stream in b.column("stream").to_pylist())


@pytest.fixture
def mem_options() -> dict:
    return {"embedder": HashEmbedder(dim=64), "config": MemoryConfig(max_memories=5)}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 11)), min_size=1, max_size=60), st.integers(0, 2**31))
def test_vector_set_nearest_equals_a_full_scan(ops, seed) -> None:
    rng = np.random.default_rng(seed)
    vs, live = _VectorSet(8), {}
    for add, i in ops:
        if add:
            v = rng.standard_normal(8).astype(np.float32)
            vs.add(f"f{i}", v)
            live[f"f{i}"] = v
        else:
            vs.remove(f"f{i}")
            live.pop(f"f{i}", None)
        q = rng.standard_normal(8).astype(np.float32)
        got, sim = vs.best_above(q, float("-inf"))  # every row reaches -inf: the closest one
        if not live:
            assert got is None
            continue
        want = max(live, key=lambda k: float(live[k] @ q))
        best = float(live[want] @ q)
        if best > 0:  # removed rows score 0: below every threshold the curator uses
            assert got in live and sim == pytest.approx(best, rel=1e-5, abs=1e-5)  # float32 dot products near 0


def test_remember_is_one_commit_even_when_the_cap_prunes(mem) -> None:
    for i in range(8):
        mem.remember(f"distinct fact number {i} about topic {i * 7}", user="u")
    assert commits(mem) == 8  # no separate commit for the max_memories pruning
    assert len(mem.list_memories(user="u")) == 5
    cur = mem.runtime.curator("default", "u")
    assert len(cur._vectors.slot) == 5 and len(cur._vectors.keys) <= 6  # pruned rows are reused


def test_remember_many_one_commit_in_order_and_reinforcing(mem) -> None:
    ids = mem.remember_many(["Ada likes tea", ("Ada lives in Lisbon", "Location"), {"content": "Ada likes tea"}], user="u")
    assert ids[0] == ids[2] != ids[1]
    assert commits(mem) == 1
    facts = {h.text: h for h in mem.list_memories(user="u")}
    assert facts["Ada lives in Lisbon"].category == "location"
    assert facts["Ada likes tea"].confidence == 1.0
    assert mem.recall("Lisbon", user="u")[0].id == ids[1]


def test_remember_many_over_the_cap_keeps_the_newest(mem) -> None:
    ids = mem.remember_many([f"fact {w}" for w in "alpha bravo charlie delta echo foxtrot golf hotel".split()], user="u")
    assert commits(mem) == 1
    assert {h.id for h in mem.list_memories(user="u")} == set(ids[3:])


def test_remember_many_bad_item_names_it_and_writes_nothing(mem) -> None:
    mem.remember("Ada likes tea", user="u")
    before = mem.log.stream_version(facts_stream("default", "u"))
    for bad, field in ((["ok", ""], "items[1].content"), (["ok", 3], "items[1]"), ([{"text": "x"}], "items[0]"),
                       ("just a string", "items")):
        with pytest.raises(InvalidInput) as e:
            mem.remember_many(bad, user="u")
        assert e.value.field == field
    assert mem.log.stream_version(facts_stream("default", "u")) == before
    assert mem.remember_many([], user="u") == []


def test_the_fold_after_reopen_equals_the_incremental_state(tmp_path) -> None:
    clock = Clock()
    path = tmp_path / "s"
    with eidetica.open(path, embedder=HashEmbedder(dim=64), clock=clock, config=MemoryConfig(max_memories=4)) as m:
        for i in range(7):
            clock.now = T0 + dt.timedelta(minutes=i)
            m.remember(f"fact {i} " + "word " * i, user="u")
        m.forget(m.list_memories(user="u")[-1].id, user="u")
        cur = m.runtime.curator("default", "u")
        live = {f.fact_id for f in cur.active()}
        order = [f.fact_id for f in cur._weakest(10)]
    with eidetica.open(path, embedder=HashEmbedder(dim=64), clock=clock, config=MemoryConfig(max_memories=4)) as m:
        cur = m.runtime.curator("default", "u")
        assert set(cur._vectors.slot) == {f.fact_id for f in cur.active()} == live
        assert [f.fact_id for f in cur._weakest(10)] == order


def test_stats_count_facts_pruned_by_the_cap(mem) -> None:
    mem.remember_many([f"fact {w}" for w in "alpha bravo charlie delta echo foxtrot golf".split()], user="u")
    mem.remember("Bob keeps bees", user="b")
    facts = mem.stats()["facts"]
    assert facts["active"] == 6 and facts["pruned"] == 2 and facts["max_memories"] == 5
    assert facts["users"] == 2 and facts["users_at_cap"] == 1


def test_extraction_of_one_extend_is_one_embedding_call_and_one_commit(tmp_path) -> None:
    """Every user message of one ``extend``: their facts in one model call, committed with their
    ``ExtractionCompleted`` in one append (a long history paid a call and two fsyncs per message)."""
    calls: list[int] = []

    class Counting(HashEmbedder):
        def embed(self, texts):  # noqa: ANN001, ANN202 - the port's signature
            calls.append(len(texts))
            return super().embed(texts)

    with eidetica.open(tmp_path / "s", embedder=Counting(dim=64), clock=Clock()) as m:
        said = ["I am allergic to peanuts.", "I live in Lisbon.", "I work as a nurse.", "I love hiking."]
        before = len(calls)
        m.session("s1", user="u").extend([{"role": "user", "content": t} for t in said]
                                         + [{"role": "assistant", "content": "Noted, thanks!"}])
        assert len(calls) - before == 2  # the messages' chunks, then every fact of them
        assert commits(m) == 1
        facts = m.list_memories(user="u", limit=20)
        assert len(facts) >= 3
        assert {m_["sequence"] for f in facts for m_ in f.metadata["sources"]} <= {0, 1, 2, 3}
        done = [e for e in m.log.read_stream(facts_stream(m.tenant, "u")) if e.type == "ExtractionCompleted"]
        assert len(done) == len(said)
