"""The agent-facing API end to end on the embedded LocalRuntime: real log, real indices."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import numpy as np
import pytest

import eidetica
import eidetica._remote.client
from eidetica.actors import MemoryConfig, Summarizer
from eidetica.errors import EmbeddingModelChanged, EventIdConflict, InvalidInput, NotFound
from eidetica.events.streams import facts_stream, session_stream, summary_stream
from eidetica.projections._ranking import default_options
from eidetica.providers import HashEmbedder, OfflineLLM
from tests.support.clock import T0
from tests.support.memories import ray_options


@pytest.fixture(params=["local", pytest.param("ray", marks=[pytest.mark.slow, pytest.mark.ray]),
                        pytest.param("remote", marks=[pytest.mark.slow]), "embedded-async",
                        pytest.param("remote-async", marks=[pytest.mark.slow])])
def runtime(request) -> str:
    """The behaviour suite runs on both runtimes, through eidetica.connect() against a served store, and through
    the async faces (AsyncMemory over an embedded store, connect_async against a served one) on one event loop."""
    return request.param


def wait_for_lock_release(lock_path, timeout: float = 60.0) -> None:
    """Block (bounded) until no process holds the log's writer lock."""
    import fcntl
    import os

    deadline = time.monotonic() + timeout
    fd = os.open(lock_path, os.O_RDWR)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                assert time.monotonic() < deadline, "the log's lock was never released"
                threading.Event().wait(0.05)
    finally:
        os.close(fd)


def is_remote(m) -> bool:
    """A client of a served store (sync or async)."""
    return isinstance(m.face.sync_object if is_async(m) else m, eidetica._remote.client.RemoteMemory)


def is_async(m) -> bool:
    """An async face (through the tests' sync adapter)."""
    from tests.support.synced import Synced

    return isinstance(m, Synced)


def embedded(m) -> bool:
    """A plain embedded or Ray handle, whose internals (runtime, log, state) a test may inspect."""
    return not is_remote(m) and not is_async(m)


def log_head(m) -> int:
    return m.log.head() if embedded(m) else m.stats()["events"]


def reopen(m, **kw):
    if is_async(m):  # a new async face over the same store, on the same loop
        m.close()
        if is_remote(m):
            return type(m)(m.loop.run(eidetica.connect_async(m.url, api_key=m.api_key)), m.loop)
        inner = m.face.sync_object
        return type(m)(eidetica.AsyncMemory(eidetica.open(inner.path, embedder=inner.embedder, clock=inner.clock, **kw)),
                       m.loop)
    if is_remote(m):  # a new client of the same served store
        m.close()
        return eidetica.connect(m.url, api_key=m.api_key)
    path, clock, emb = m.path, m.clock, m.embedder
    ray_mode = getattr(m.runtime, "key", None) is not None
    m.close()
    if ray_mode:
        from eidetica._ray import shutdown_store

        shutdown_store(path)
        wait_for_lock_release(path / "log" / "LOCK")  # the killed log actor's process lets go of it
        return eidetica.open(path, embedder=HashEmbedder(dim=64), clock=clock, runtime="ray", **ray_options("ray"), **kw)
    return eidetica.open(path, embedder=emb, clock=clock, **kw)


# -- conversation memory ---------------------------------------------------------------
def test_append_read_history_and_metadata(mem) -> None:
    s = mem.session("s1", user="ada")
    steps = {"steps": [{"tool": "search", "args": {"q": "x"}}]}
    s.append("user", "hello there")
    s.append("assistant", "hi, how can I help?", metadata=steps)
    s.append("tool", "result: 42")
    assert len(s) == 3
    hist = s.history()
    assert [m.role for m in hist] == ["user", "assistant", "tool"]
    assert [m.sequence for m in hist] == [0, 1, 2]
    assert hist[1].metadata == steps
    assert [m.content for m in s.history(2)] == ["hi, how can I help?", "result: 42"]
    assert [m.content for m in s.read()][-1] == "result: 42"


def test_an_event_id_is_a_retry_only_for_the_same_message(mem) -> None:
    import uuid

    s1, s2 = mem.session("s1", user="ada"), mem.session("s2", user="ada")
    eid = uuid.uuid4()
    first = s1.append("user", "booked the train to Porto", event_id=eid)
    head = log_head(mem)
    assert s1.append("user", "booked the train to Porto", event_id=eid) <= first  # a retry: nothing written
    # the same id with anything else would be acknowledged and never stored: refused, naming the id
    for session, content in ((s1, "booked the bus to Porto"), (s2, "booked the train to Porto"), (s2, "other")):
        with pytest.raises(EventIdConflict) as e:
            session.append("user", content, event_id=eid)
        assert e.value.event_id == str(eid) and str(eid) in str(e.value)
    with pytest.raises(EventIdConflict):
        s1.append("assistant", "booked the train to Porto", event_id=eid)
    with pytest.raises(EventIdConflict):  # with a fresh id beside it: still nothing of the append is stored
        s2.extend([{"role": "user", "content": "fresh"}, {"role": "user", "content": "x", "event_id": eid}])
    assert log_head(mem) == head
    mem = reopen(mem)
    assert [x.content for x in mem.session("s1", user="ada").history()] == ["booked the train to Porto"]
    assert [x.session_id for x in mem.list_sessions()] == ["s1"]
    if not is_remote(mem):  # another tenant's ids are its own: the same id there is its own event
        other = mem.for_tenant("globex")
        o = other.session("s1", user="ada").append("user", "globex's message", event_id=eid)
        assert o > first and other.session("s1", user="ada").append("user", "globex's message", event_id=eid) <= o
        assert [x.content for x in other.session("s1", user="ada").history()] == ["globex's message"]
        assert [x.content for x in mem.session("s1", user="ada").history()] == ["booked the train to Porto"]
    mem.close()


def test_compact_redacts_only_the_tenant_that_took_a_message_back(tmp_path, clock) -> None:
    import uuid

    eid = uuid.uuid4()
    with eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64), clock=clock) as m:
        b = m.for_tenant("globex")
        m.session("s", user="ada").append("user", "acme's words", event_id=eid)
        b.session("s", user="ada").append("user", "globex's words", event_id=eid)
        assert m.session("s", user="ada").pop().content == "acme's words"
        m.compact()
        b = m.for_tenant("globex")
        assert [x.content for x in b.session("s", user="ada").history()] == ["globex's words"]
        assert [h.text for h in b.search("globex words", user="ada", min_score=0.0)] == ["globex's words"]
        assert m.session("s", user="ada").history() == []


def test_import_rekeys_into_the_importing_tenant_and_counts_written_and_skipped(tmp_path, clock) -> None:
    with eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64), clock=clock) as m:
        m.session("s1", user="ada").append("user", "I moved to Lisbon last spring")
        fid = m.remember("Ada lives in Lisbon", user="ada")
        dump = tmp_path / "acme.jsonl"
        n = m.export(dump)
        assert m.import_(dump) == {"written": 0, "skipped": n, "conflicts": []}  # its own export: all there already
        b = m.for_tenant("globex")
        head = m.log.head()
        assert b.import_(dump) == {"written": n, "skipped": 0, "conflicts": []}  # another tenant's export: globex's own
        assert m.log.head() == head + n
        facts = sorted(h.id for h in m.list_memories(user="ada"))
        assert fid in facts and sorted(h.id for h in b.list_memories(user="ada")) == facts
        assert [x.content for x in b.session("s1", user="ada").history()] == ["I moved to Lisbon last spring"]
        assert b.import_(dump) == {"written": 0, "skipped": n, "conflicts": []}  # twice: nothing more, and it says so
        assert m.log.head() == head + n
        # acme's data is its own still: globex forgetting the fact leaves acme's
        b.forget(fid, user="ada")
        assert sorted(h.id for h in m.list_memories(user="ada")) == facts
        # an export whose id already names another event of the tenant: that event is skipped and named, the rest written
        rows = [json.loads(line) for line in dump.read_text().splitlines()]
        msg = next(r for r in rows if r["type"] == "MessageAppended")
        msg["event"]["content"] = "I moved to Porto"
        bad = tmp_path / "bad.jsonl"
        extra = dict(rows[0], event_id="00000000-0000-4000-8000-000000000001")
        bad.write_text("\n".join(json.dumps(r) for r in [extra, *rows]) + "\n")
        c = m.for_tenant("initech")
        c.import_(dump)
        head = m.log.head()
        assert c.import_(bad) == {"written": 1, "skipped": n, "conflicts": [msg["event_id"]]}
        assert m.log.head() == head + 1
        assert [x.content for x in c.session("s1", user="ada").history()] == ["I moved to Lisbon last spring"]


def test_import_writes_everything_but_the_events_whose_ids_the_tenant_holds_for_others(tmp_path, clock) -> None:
    """#43: tenant B holds an id that A's export uses for another event: only that event is skipped."""
    with eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64), clock=clock) as m:
        a, b = m.for_tenant("acme"), m.for_tenant("globex")
        a.session("s1", user="ada").append("user", "I moved to Lisbon last spring")
        a.remember("Ada lives in Lisbon", user="ada")
        a.session("s2", user="bob").append("user", "Bob plays the cello")
        dump = tmp_path / "acme.jsonl"
        n = a.export(dump)
        rows = [json.loads(line) for line in dump.read_text().splitlines()]
        clash = next(r for r in rows if r["type"] == "MessageAppended" and r["event"]["content"].startswith("Bob"))
        b.session("s9", user="bob").append("user", "Bob plays the drums", event_id=uuid.UUID(clash["event_id"]))
        out = b.import_(dump)
        # the message's vector event derives its id from the message's: it names globex's vector, so it clashes too
        types = {r["event_id"]: r["type"] for r in rows}
        assert clash["event_id"] in out["conflicts"] and len(out["conflicts"]) == 2
        assert sorted(types[c] for c in out["conflicts"]) == ["ChunksEmbedded", "MessageAppended"]
        assert out["written"] == n - 2 and out["skipped"] == 2
        assert [x.content for x in b.session("s1", user="ada").history()] == ["I moved to Lisbon last spring"]
        assert [x.content for x in b.session("s9", user="bob").history()] == ["Bob plays the drums"]
        assert b.session("s2", user="bob").history() == []  # its one message was the conflicting event
        assert [f.text for f in b.list_memories(user="ada")] == ["Ada lives in Lisbon"]
        again = b.import_(dump)  # repeated: nothing written, the same conflicts named
        assert again["written"] == 0 and again["skipped"] == n and sorted(again["conflicts"]) == sorted(out["conflicts"])


def test_search_and_read_options_out_of_range_are_refused_naming_them(mem) -> None:
    s = mem.session("s", user="ada")
    s.append("user", "the lease ends in May")
    head = log_head(mem)
    for kw, field in (({"kinds": ["message", "memes"]}, "kinds"), ({"min_score": float("nan")}, "min_score"),
                      ({"min_score": 5}, "min_score"), ({"min_score": -0.5}, "min_score")):
        with pytest.raises(InvalidInput) as e:
            mem.search("lease", user="ada", **kw)
        assert e.value.field == field
    for call in (lambda: s.read(token_budget=-1), lambda: s.restore(token_budget=-1), lambda: s.read(window=-2)):
        with pytest.raises(InvalidInput) as e:
            call()
        assert e.value.field in ("token_budget", "window")
    with pytest.raises(NotFound):  # forgetting a session that never was writes nothing
        mem.session("nope", user="ada").forget()
    assert mem.session("nope", user="ada").history() == []  # a handle on a new session: empty, as before
    assert log_head(mem) == head


def test_read_returns_the_last_n_within_budget(tmp_path, clock) -> None:
    cfg = MemoryConfig(window=4, token_budget=10_000)
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), clock=clock, config=cfg) as m:
        s = m.session("s", user="u", strategy="sliding_window")
        for i in range(10):
            s.append("user" if i % 2 == 0 else "assistant", f"turn number {i}")
        assert [x.content for x in s.read()] == [f"turn number {i}" for i in range(6, 10)]
        assert len(s.read(strategy="simple")) == 10  # a per-run strategy overrides the handle's
        tight = s.read(token_budget=4)
        assert 1 <= len(tight) < 4


def test_sequences_are_monotonic_and_repeats_rejected(mem) -> None:
    s = mem.session("s1", user="ada")
    s.append("user", "one", sequence=5)
    with pytest.raises(InvalidInput) as ei:
        s.append("user", "again", sequence=5)
    assert ei.value.field == "sequence"
    with pytest.raises(InvalidInput):
        s.append("user", "older", sequence=3)
    s.append("user", "next")
    assert [m.sequence for m in s.history()] == [5, 6]


@pytest.mark.parametrize(
    "role,content,field",
    [("wizard", "x", "role"), ("user", "", "content"), ("user", 5, "content"), ("user", "a\x00b", "content")],
)
def test_bad_messages_name_the_field_and_store_nothing(mem, role, content, field) -> None:
    s = mem.session("s1", user="ada")
    s.append("user", "keep me")
    before = log_head(mem)
    with pytest.raises(InvalidInput) as ei:
        s.append(role, content)
    assert ei.value.field == field
    assert log_head(mem) == before
    assert len(s) == 1


def test_system_prompts_are_not_persisted(mem) -> None:
    s = mem.session("s1", user="ada")
    s.append("system", "You are terse.")
    s.append("user", "hi")
    assert [m.role for m in s.history()] == ["user"]
    assert s.read()[0].role == "system" and s.read()[0].content == "You are terse."
    m2 = reopen(mem)
    assert [m.role for m in m2.session("s1", user="ada").read()] == ["user"]
    m2.close()


def test_appended_returns_only_this_runs_messages(mem) -> None:
    s = mem.session("s1", user="ada")
    s.append("user", "before")
    run = mem.session("s1", user="ada")
    run.append("assistant", "during 1")
    run.append("user", "during 2")
    assert [m.content for m in run.appended()] == ["during 1", "during 2"]


def test_a_session_belongs_to_one_user(mem) -> None:
    mem.session("s1", user="ada").append("user", "mine")
    with pytest.raises(InvalidInput) as ei:
        mem.session("s1", user="bob")
    assert ei.value.field == "user"


def test_restore_resumes_the_last_messages(tmp_path, clock) -> None:
    cfg = MemoryConfig(restore_messages=5)
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), clock=clock, config=cfg) as m:
        s = m.session("s", user="u")
        for i in range(12):
            s.append("user", f"message {i}")
        assert [x.content for x in s.restore()] == [f"message {i}" for i in range(7, 12)]
        assert len(s.restore(token_budget=3)) == 1


# -- rolling summaries -----------------------------------------------------------------
def summarizing_config() -> MemoryConfig:
    return MemoryConfig(window=4, token_budget=120, retain_recent=4, auto_extract=False)


def test_rolling_summary_triggers_and_read_puts_it_first(tmp_path, clock) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), clock=clock, config=summarizing_config()) as m:
        s = m.session("s", user="u")
        for i in range(20):
            s.append("user" if i % 2 == 0 else "assistant", f"We planned the trip to Kyoto, day {i}, visiting temple number {i}.")
        assert s.summary() is not None
        msgs = s.read()
        assert msgs[0].role == "system" and msgs[0].content.startswith("Rolling session summary: ")
        _, _, upto = s._actor.summary()
        assert all(x.sequence > upto for x in msgs[1:])
        assert len(s.history()) == 20  # summaries never drop stored history


def test_summary_race_has_one_winner_per_epoch(tmp_path, clock) -> None:
    class BarrierLLM(OfflineLLM):
        """Both summarizers have read the same epoch before either commits."""

        def __init__(self, barrier: threading.Barrier) -> None:
            super().__init__()
            self.barrier = barrier

        def summarize(self, messages, *, target_tokens, previous_summary=""):
            self.barrier.wait(timeout=30)
            return super().summarize(messages, target_tokens=target_tokens, previous_summary=previous_summary)

    cfg = MemoryConfig(window=4, token_budget=100_000, retain_recent=1, auto_extract=False, strategy="sliding_window")
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), clock=clock, config=cfg) as m:
        s = m.session("s", user="u")
        barrier = threading.Barrier(2)
        racers = [Summarizer(m.log, BarrierLLM(barrier), m.embedder, cfg) for _ in range(2)]
        appended = 0
        for epoch in range(100):
            s.append("user", f"fact number {epoch} about the project")
            s.append("assistant", f"noted {epoch}")
            appended += 2
            results = [None, None]

            def run(k: int) -> None:
                results[k] = racers[k].summarize(s._actor, force=True)  # noqa: B023 (joined within the iteration)

            ts = [threading.Thread(target=run, args=(k,)) for k in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            assert sorted(r.committed for r in results) == [False, True], epoch
        assert sum(r.committed for r in racers) == 100
        assert sum(r.stale for r in racers) == 100
        commits = [e for e in m.log.read_stream(summary_stream("default", "s")) if e.type == "SummaryCommitted"]
        assert len(commits) == 100
        assert len(s.history()) == appended


# -- facts -----------------------------------------------------------------------------
def test_remember_recall_render_and_list(mem) -> None:
    fid = mem.remember("Ada is allergic to peanuts", category="Health", user="ada")
    mem.remember("Ada lives in Lisbon", category="location", user="ada")
    mem.remember("Bob likes jazz", user="bob")
    hits = mem.recall("peanuts allergy", user="ada")
    assert hits and hits[0].id == fid
    assert all(h.kind == "fact" and h.user_id == "ada" for h in hits)
    text = str(hits[0])
    assert text.startswith("[Health | ") and text.endswith("]  Ada is allergic to peanuts")
    assert {h.text for h in mem.list_memories(user="ada")} == {"Ada is allergic to peanuts", "Ada lives in Lisbon"}
    assert [h.text for h in mem.list_memories(user="ada", category="location")] == ["Ada lives in Lisbon"]
    assert [h.category for h in mem.recall("peanuts", user="ada", category="health")] == ["health"]


def test_recall_makes_hits_of_only_what_it_returns_and_returns_what_the_full_search_gives(tmp_path, clock) -> None:
    # recall searches 4 x top_k facts and messages and keeps the user's own words and the facts;
    # only the kept hits become Hits: the answer must equal filtering the full list of Hits
    cfg = MemoryConfig(auto_extract=False)
    with eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64), clock=clock, config=cfg) as m:
        words = ["tea", "jazz", "Lisbon", "bees", "chess", "sailing", "Porto", "piano"]
        facts = [f"Ada likes {a} and {b}" for a in words for b in words[:3]]
        m.remember_many(facts, user="ada")
        s = m.session("s1", user="ada")
        s.extend([{"role": "user" if i % 2 else "assistant", "content": f"we talked about {w} today {i}"}
                  for i, w in enumerate(words * 2)] + [{"role": "user", "content": facts[0]}])
        for q in ("tea jazz", "Lisbon", "bees and chess today", "piano"):
            for k in (1, 3, 10):
                # one calibrated scale, search's defaults: no fact-first re-sort
                full = m._search(q, top_k=4 * k, user="ada", kinds=["fact", "message"], names=True,
                                 **default_options())
                seen = {h.text for h in full if h.kind == "fact"}
                want = [h for h in full if h.kind == "fact" or (h.metadata.get("role", "user") == "user"
                                                                and h.text not in seen)][:k]
                got = m.recall(q, top_k=k, user="ada")
                assert got == want and got, (q, k)
                assert any(h.kind == "message" for h in m.recall("today", top_k=10, user="ada"))


def test_remember_many_stores_in_order_on_every_runtime(mem) -> None:
    ids = mem.remember_many(["Ada keeps bees", ("Ada lives in Porto", "location"), "Ada keeps bees"], user="ada")
    assert len(ids) == 3 and ids[0] == ids[2] != ids[1]
    assert [h.id for h in mem.recall("Porto", user="ada", top_k=1)] == [ids[1]]
    with pytest.raises(InvalidInput):
        mem.remember_many(["ok", ""], user="ada")


def test_categories_are_sanitised(mem) -> None:
    mem.remember("a", category="Food & Drink!", user="u")
    mem.remember("b", category="Work_Life-2", user="u")
    mem.remember("c", category="x" * 65, user="u")
    cats = {h.text: h.category for h in mem.list_memories(user="u")}
    assert cats == {"a": "food___drink_", "b": "work_life-2", "c": "x" * 64}


def test_reinforcement_raises_confidence_capped_at_one(mem) -> None:
    fid = mem.remember("User prefers dark mode", user="u")
    assert mem.remember("User prefers dark mode", user="u") == fid
    [f] = mem.list_memories(user="u")
    assert f.confidence == 1.0  # capped
    for week in (1, 2, 3):
        mem.sweep(T0 + dt.timedelta(days=8 * week))
    assert mem.list_memories(user="u")[0].confidence == pytest.approx(0.95**3)
    assert mem.remember("user prefers dark mode", user="u") == fid
    assert mem.list_memories(user="u")[0].confidence == pytest.approx(0.95**3 + 0.1)


def test_forget_and_forget_matching(mem) -> None:
    a = mem.remember("Ada drinks coffee", user="ada")
    mem.remember("Ada plays chess", user="ada")
    mem.forget(a, user="ada")
    assert [h.text for h in mem.list_memories(user="ada")] == ["Ada plays chess"]
    assert all(h.id != a for h in mem.recall("coffee", user="ada"))
    with pytest.raises(NotFound):
        mem.forget(a, user="ada")
    with pytest.raises(NotFound):
        mem.forget("fact-nope", user="ada")
    gone = mem.forget_matching("Ada plays chess", 0.9, user="ada")
    assert len(gone) == 1 and mem.list_memories(user="ada") == []


def test_decay_and_prune_run_on_the_sweep(mem, clock) -> None:
    fid = mem.remember("Ada likes tea", user="ada")
    clock.now = T0 + dt.timedelta(days=8)
    assert mem.sweep()["decayed"] == 1
    assert mem.list_memories(user="ada")[0].confidence == pytest.approx(0.95)
    assert mem.sweep()["decayed"] == 0  # not again until another 7 days pass
    for week in range(2, 40):
        clock.now = T0 + dt.timedelta(days=8 * week)
        mem.sweep()
        if fid not in {h.id for h in mem.list_memories(user="ada")}:
            break
    if embedded(mem):
        assert mem.runtime.curator("default", "ada").facts[fid].status == "pruned"
    assert clock.now - T0 >= dt.timedelta(days=30)


def test_max_memories_prunes_the_weakest(tmp_path, clock) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), clock=clock, config=MemoryConfig(max_memories=3)) as m:
        ids = [m.remember(f"distinct fact {w}", user="u") for w in ("alpha", "bravo", "charlie")]
        clock.now = T0 + dt.timedelta(days=8)
        m.sweep()  # all three decay to 0.95 ...
        clock.now = T0 + dt.timedelta(days=9)
        for i in (0, 2):  # ... and two are restated: "bravo" is the weakest
            assert m.remember(f"distinct fact {('alpha', 'bravo', 'charlie')[i]}", user="u") == ids[i]
        m.remember("distinct fact delta", user="u")
        assert {h.id for h in m.list_memories(user="u")} == {ids[0], ids[2]} | {
            h.id for h in m.list_memories(user="u") if h.text == "distinct fact delta"
        }
        assert len(m.list_memories(user="u")) == 3


def test_auto_extraction_from_user_messages(mem) -> None:
    s = mem.session("s1", user="ada")
    s.append("user", "I'm allergic to shellfish.", metadata={"turn": "D1:1"})
    s.append("user", "thanks")
    s.append("assistant", "I am a language model.")  # not the user's fact
    facts = mem.list_memories(user="ada")
    assert len(facts) == 1 and "shellfish" in facts[0].text
    assert facts[0].metadata["sources"][0]["turn"] == "D1:1"
    hits = mem.recall("shellfish", user="ada")
    assert hits[0].metadata["sources"][0]["session_id"] == "s1"


def test_a_failing_llm_never_loses_the_message_and_is_retried(tmp_path, clock) -> None:
    class Flaky(OfflineLLM):
        def __init__(self) -> None:
            super().__init__()
            self.down = True

        def extract_facts(self, text):
            if self.down:
                from eidetica.errors import ProviderError

                raise ProviderError("provider down")
            return super().extract_facts(text)

    llm = Flaky()
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), llm=llm, clock=clock) as m:
        s = m.session("s", user="u")
        s.append("user", "I live in Porto.")
        assert [x.content for x in s.history()] == ["I live in Porto."]
        assert m.list_memories(user="u") == [] and m.extraction_failures == 1
        llm.down = False
        assert m.sweep()["extracted"] == 1
        assert "Porto" in m.list_memories(user="u")[0].text
        assert m.sweep()["extracted"] == 0  # never extracted twice


def test_curator_serializes_concurrent_writers(tmp_path, clock) -> None:
    base = ["the user lives in Paris", "the user works at Acme", "the user likes jazz", "the user has a cat", "the user drinks tea"]
    inputs = [(i, base[i % 5] + ("" if i % 3 else " ")) for i in range(50)]
    with eidetica.open(tmp_path / "a", embedder=HashEmbedder(dim=64), clock=clock, config=MemoryConfig(auto_extract=False)) as m:
        chunks = [inputs[k::8] for k in range(8)]

        def work(items):
            cur = m.runtime.curator("default", "u")
            for i, text in items:
                cur.remember(text, sources=[{"i": i}])

        ts = [threading.Thread(target=work, args=(c,)) for c in chunks]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        order = []
        for rec in m.log.read_stream(facts_stream("default", "u")):
            ev = rec.decode()
            if rec.type in ("FactAsserted", "FactReinforced"):
                order += [s["i"] for s in ev.sources]
        assert sorted(order) == list(range(50))  # every call landed exactly once
        concurrent = sorted((f.content, round(f.confidence, 6)) for f in m.runtime.curator("default", "u").active())
    with eidetica.open(tmp_path / "b", embedder=HashEmbedder(dim=64), clock=clock, config=MemoryConfig(auto_extract=False)) as m2:
        text = dict(inputs)
        for i in order:
            m2.remember(text[i], user="u")
        sequential = sorted((f.content, round(f.confidence, 6)) for f in m2.runtime.curator("default", "u").active())
    assert concurrent == sequential
    assert len({c for c, _ in concurrent}) == len(concurrent)  # no duplicate facts


# -- notes, search, context --------------------------------------------------------------
def test_notes_store_delete_and_update(mem) -> None:
    nid = mem.store_note("Ada's flight lands at 10:40 on Friday", user="ada")
    assert nid.startswith("note-")
    assert "flight" in mem.context("flight", user="ada")
    mem.delete_note(nid, user="ada")
    with pytest.raises(NotFound):
        mem.delete_note(nid, user="ada")
    with pytest.raises(NotFound):
        mem.delete_note(mem.store_note("x", user="ada"), user="bob")
    assert "flight" not in mem.context("flight", user="ada")


def test_cross_thread_search_excludes_the_current_session(mem) -> None:
    mem.session("trip", user="ada").append("user", "Book the ryokan in Kyoto for April")
    mem.session("work", user="ada").append("user", "The Kyoto offsite budget is approved")
    mem.session("other", user="bob").append("user", "Kyoto ryokan for Bob")
    hits = mem.search("Kyoto ryokan", user="ada", min_score=0.0)
    assert {h.session_id for h in hits} == {"trip", "work"}
    hits = mem.search("Kyoto ryokan", user="ada", exclude_session="trip", min_score=0.0)
    assert {h.session_id for h in hits} == {"work"}
    assert hits[0].metadata["role"] == "user"


def test_search_drops_participant_names_from_the_query(mem) -> None:
    s = mem.session("chat", user="ada")
    s.append("user", "Ana: Ana here, Ana again, it is Ana", metadata={"name": "Ana"})
    s.append("user", "Ben: I adopted a kitten yesterday", metadata={"name": "Ben"})
    s.append("user", "Ana: The weather is grey", metadata={"name": "Ana"})
    assert mem.participant_names("ada") == {"Ana", "Ben"}
    q = "What did Ana adopt?"
    named = [h.text for h in mem.search(q, user="ada", mode="text", min_score=0.0, names=False)]
    assert len(named) == 3  # the name matches every one of Ana's messages
    plain = [h.text for h in mem.search(q, user="ada", mode="text", min_score=0.0)]
    assert plain == ["Ben: I adopted a kitten yesterday"]  # only the topic is searched
    assert eidetica.memory.strip_names("Where did Ana's cat and Ben go?", {"Ana", "Ben"}) == "Where did cat and go?"
    assert eidetica.memory.strip_names("Ana?", {"Ana"}) == "Ana?"  # nothing left: the query as given
    # the names cache follows new messages
    s.append("user", "Cy: hello", metadata={"name": "Cy"})
    assert mem.participant_names("ada") == {"Ana", "Ben", "Cy"}


def test_a_search_catches_up_once_and_reads_no_message_body(tmp_path, clock, monkeypatch) -> None:
    m = eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64), clock=clock)
    try:
        s = m.session("chat", user="ada")
        for text in ("Ben: I paint every day", "Ana: I paint portraits", "Ben: see you", "Ana: bye"):
            s.append("user", text)  # speakers from "Name: " labels only: folded at apply time
        catch_ups: list[int] = []
        catch_up = m.projector.catch_up
        monkeypatch.setattr(m.projector, "catch_up", lambda: catch_ups.append(1) or catch_up())

        def no_bodies(*a, **kw):
            raise AssertionError("a search read message bodies")

        monkeypatch.setattr(m.state, "messages", no_bodies)
        hits = m.search("What does Ana paint?", user="ada", min_score=0.0)
        assert len(catch_ups) == 1  # one look at the log heads per read
        assert hits[0].text == "Ana: I paint portraits"  # "Ana" left the query and boosts her turns
        assert m.participant_names("ada") == {"Ana", "Ben"}
    finally:
        m.close()


def test_speaker_weight_prefers_what_the_named_participant_said(mem) -> None:
    s = mem.session("chat", user="ada")
    s.append("user", "Ben: I paint, I paint every day, painting is my life", metadata={"name": "Ben"})
    s.append("user", "Ana: I paint portraits sometimes", metadata={"name": "Ana"})
    s.append("user", "Ana: the weather is grey", metadata={"name": "Ana"})
    q = "What does Ana paint?"
    assert eidetica.memory.names_in(q, mem.participant_names("ada")) == {"Ana"}
    plain = [h.text for h in mem.search(q, user="ada", min_score=0.0, speaker_weight=0.0)]
    assert plain[0].startswith("Ben:")
    boosted = mem.search(q, user="ada", min_score=0.0, speaker_weight=0.5)
    assert boosted[0].text == "Ana: I paint portraits sometimes"
    # a query naming nobody is not boosted
    def ranked(**kw):
        return [(h.text, round(h.score, 6)) for h in mem.search("who paints?", user="ada", min_score=0.0, **kw)]

    assert ranked(speaker_weight=0.5) == ranked(speaker_weight=0.0)


def test_a_search_looks_up_participant_names_once(tmp_path, clock, monkeypatch) -> None:
    m = eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64), clock=clock)
    try:
        s = m.session("chat", user="ada")
        s.append("user", "Ben: I paint every day", metadata={"name": "Ben"})
        s.append("user", "Ana: I paint portraits", metadata={"name": "Ana"})
        walks: list[str] = []
        participants = m.state.participants

        def counting(tenant, user):
            walks.append(user)
            return participants(tenant, user)

        monkeypatch.setattr(m.state, "participants", counting)
        q = "What does Ana paint?"
        for kw, n in (({"names": True, "speaker_weight": 0.5}, 1), ({"names": True}, 1),
                      ({"names": False, "speaker_weight": 0.5}, 1), ({"names": False, "speaker_weight": 0.0}, 0)):
            walks.clear()
            hits = m.search(q, user="ada", min_score=0.0, **kw)
            assert len(walks) == n, kw
            assert hits
        # both uses still see the names: stripped from the query and boosting Ana
        boosted = m.search(q, user="ada", min_score=0.0, names=True, speaker_weight=0.5,
                           kinds=("message", "summary"))  # Ben's turn is also a fact now
        assert boosted[0].text == "Ana: I paint portraits"
    finally:
        m.close()


@pytest.mark.parametrize("together", [False, True])
def test_embed_context_finds_a_reply_by_what_it_answers(tmp_path, clock, together) -> None:
    turns = [("user", "which floor did you park the van on"), ("assistant", "level three, next to the lifts"),
             ("user", "my van needs new tyres")]
    emb = HashEmbedder(dim=256)
    found = {}
    for ec in (0, 1):
        cfg = MemoryConfig(embed_context=ec, auto_extract=False)
        with eidetica.open(tmp_path / f"ec{ec}", embedder=emb, clock=clock, config=cfg) as m:
            s = m.session("s", user="u")
            if together:  # the context of a batch's first message comes from the batch itself
                s.extend([{"role": r, "content": c} for r, c in turns])
            else:
                for r, c in turns:
                    s.append(r, c)
            hits = m.search("van parking floor", user="u", mode="vector", min_score=0.0, top_k=3, kinds=["message"])
            found[ec] = [h.text for h in hits]
            embedded = [r.decode() for r in m.log.read_stream(session_stream(m.tenant, "s"))]
        vecs = {e.texts[0]: np.frombuffer(e.vectors, dtype=np.float32) for e in embedded if hasattr(e, "vectors")}
        want = turns[1][1] if ec == 0 else f"{turns[0][1]}\n{turns[1][1]}"
        assert np.allclose(vecs[turns[1][1]], emb.embed([want])[0])  # indexed text stays the message's own
    assert found[0] == [turns[0][1], turns[2][1], turns[1][1]]  # the reply shares no word with the query
    assert found[1][:2] == [turns[0][1], turns[1][1]]  # the reply now ranks with its question
    with pytest.raises(InvalidInput) as e:
        MemoryConfig(embed_context=-1)
    assert e.value.field == "embed_context"


def test_search_hits_carry_both_scores_and_options_are_checked(mem) -> None:
    s = mem.session("chat", user="ada")
    s.append("user", "The zebra crossing near the school")
    s.append("user", "Quantum physics lecture notes")
    (h, *_) = mem.search("zebra crossing", user="ada", min_score=0.0)
    assert h.text.startswith("The zebra") and h.vector_score > 0 and h.text_score > 0
    for field, value in (("vector_weight", 2.0), ("neighbors", -1), ("mmr", "x"), ("session_weight", None),
                         ("recency_half_life", 60), ("confidence_weight", 1.5), ("speaker_weight", 2)):
        with pytest.raises(InvalidInput) as e:
            mem.search("zebra", user="ada", **{field: value})
        assert field in str(e.value)
    with pytest.raises(InvalidInput) as e:
        mem.recall("zebra", user="ada", mmr=1.5)
    assert "mmr" in str(e.value)
    with pytest.raises(InvalidInput) as e:
        mem.search("zebra", user="ada", names="yes")
    assert "names" in str(e.value)


def test_recency_option_prefers_newer_messages(mem, clock) -> None:
    mem.session("old", user="ada").append("user", "kyoto ryokan booking")
    clock.now = T0 + dt.timedelta(days=400)
    mem.session("new", user="ada").append("user", "kyoto ryokan booking for the april trip with friends")
    kw = dict(user="ada", mode="vector", min_score=0.0)
    assert [h.session_id for h in mem.search("kyoto ryokan booking", **kw)] == ["old", "new"]
    hits = mem.search("kyoto ryokan booking", **kw, recency_half_life=dt.timedelta(days=30), now=clock.now)
    assert [h.session_id for h in hits] == ["new", "old"]


def test_context_block(mem) -> None:
    mem.remember("Ada is vegetarian", category="food", user="ada")
    mem.store_note("Ada asked for a window seat", user="ada")
    mem.remember("I am allergic to shellfish", category="health", user="ada")
    mem.session("c1", user="ada").append("user", "I adopted a greyhound called Biscuit last spring")
    block = mem.context("what should Ada eat", user="ada")
    assert block.startswith("## Relevant Memory")
    # #43: facts stored with remember are profile whatever their category, the most relevant first
    assert "### Profile\n- Ada is vegetarian (food)\n- I am allergic to shellfish (health)" in block
    assert "### Facts" not in block  # what the profile shows is not repeated
    dog = mem.context("what breed is the dog Biscuit", user="ada")
    assert "### From past conversations\n- [" in dog and ", c1] user: I adopted a greyhound" in dog
    # a question about someone never discussed: the profile alone
    dinner = mem.context("plan Ada's dinner", user="ada")  # the README's example: both facts
    assert "Ada is vegetarian (food)" in dinner.split("###")[1] and "allergic to shellfish" in dinner.split("###")[1]
    other = mem.context("What did Caroline research for her thesis?", user="ada")
    assert "### Profile" in other and "### Facts" not in other and "past conversations" not in other
    data = mem.context("what breed is the dog Biscuit", user="ada", as_data=True)
    assert data["conversations"][0]["session_id"] == "c1" and "greyhound" in data["conversations"][0]["text"]
    assert sorted(p["text"] for p in data["profile"]) == ["Ada is vegetarian", "I am allergic to shellfish"]
    assert data["tokens"] > 0
    # the profile keeps to its share of the budget: with room for one line, the most relevant one
    from eidetica._store.context import PROFILE_SHARE
    from eidetica.providers import count_tokens
    need = count_tokens("### Profile") + 1 + count_tokens("- Ada is vegetarian (food)")
    one = mem.context("what should Ada eat", user="ada", max_tokens=int(need / PROFILE_SHARE) + 2, as_data=True)
    assert [p["text"] for p in one["profile"]] == ["Ada is vegetarian"]
    small = mem.context("what should Ada eat", user="ada", max_tokens=12)
    assert len(small) < len(block)
    with pytest.raises(InvalidInput):
        mem.context("x", user="ada", max_tokens=0)
    with pytest.raises(InvalidInput):
        mem.context("x", user="ada", as_data="yes")


# -- sessions ------------------------------------------------------------------------------
def test_list_and_forget_sessions(mem, clock) -> None:
    mem.session("old", user="ada").append("user", "old secret plan")
    clock.now += dt.timedelta(hours=1)
    mem.session("new", user="ada").append("user", "new plan")
    assert [s.session_id for s in mem.list_sessions(user="ada")] == ["new", "old"]
    mem.forget_session("old")
    assert [s.session_id for s in mem.list_sessions(user="ada")] == ["new"]
    assert all(h.session_id != "old" for h in mem.search("secret plan", user="ada", min_score=0.0))
    with pytest.raises(NotFound):
        mem.forget_session("nope")


def test_max_sessions_prunes_the_oldest(tmp_path, clock) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), clock=clock, config=MemoryConfig(max_sessions=2)) as m:
        for k in range(4):
            clock.now += dt.timedelta(minutes=1)
            m.session(f"s{k}", user="u").append("user", f"hello {k}")
        assert [s.session_id for s in m.list_sessions()] == ["s3", "s2"]


def test_forget_user_removes_everything_of_that_user(mem) -> None:
    mem.session("s", user="ada").append("user", "ada private message")
    mem.remember("ada private fact", user="ada")
    mem.store_note("ada private note", user="ada")
    mem.remember("bob fact", user="bob")
    mem.forget_user("ada")
    assert mem.list_memories(user="ada") == []
    assert mem.recall("private", user="ada") == []
    assert mem.search("private", user="ada", min_score=0.0) == []
    assert mem.list_sessions(user="ada") == []
    assert [h.text for h in mem.list_memories(user="bob")] == ["bob fact"]


# -- schedules -----------------------------------------------------------------------------
def test_schedules_lifecycle(mem, clock) -> None:
    sch = mem.schedules
    daily = sch.create("water plants", "cron", "0 9 * * *", user="ada", timezone="Europe/Lisbon", payload={"msg": "water"})
    once = sch.create("call mum", "once", (T0 + dt.timedelta(hours=2)).isoformat(), user="ada")
    every = sch.create("sync inbox", "interval", 600, user="bob")
    assert sch.count() == 3 and sch.count(user="ada") == 2
    assert sch.get(daily.id).next_run_at == dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.timezone.utc) + dt.timedelta(days=1)
    assert [s.id for s in sch.search("water", user="ada")] == [daily.id]
    clock.now = T0 + dt.timedelta(hours=3)
    due = sch.due(clock.now)
    assert {s.id for s in due} == {once.id, every.id}
    sch.record_run(once.id, {"status": "ok", "result": "called"})
    assert sch.get(once.id).next_run_at is None and not sch.get(once.id).enabled
    sch.record_run(every.id, "ok")
    assert sch.get(every.id).next_run_at == clock.now + dt.timedelta(seconds=600)
    sch.update(every.id, expression=3600)
    assert sch.get(every.id).expression == "3600"
    sch.delete(daily.id)
    with pytest.raises(NotFound):
        sch.get(daily.id)
    m2 = reopen(mem)
    assert m2.schedules.count() == 2
    assert m2.schedules.get(every.id).runs[-1]["status"] == "ok"
    m2.close()


@pytest.mark.parametrize(
    "cadence,expr,tz,field",
    [
        ("cron", "61 * * * *", "UTC", "expression"),
        ("once", "2020-01-01T00:00:00+00:00", "UTC", "expression"),
        ("interval", "5", "UTC", "expression"),
        ("weekly", "x", "UTC", "cadence"),
        ("cron", "0 9 * * *", "Mars/Olympus", "timezone"),
    ],
)
def test_schedule_validation(mem, cadence, expr, tz, field) -> None:
    with pytest.raises(InvalidInput) as ei:
        mem.schedules.create("x", cadence, expr, user="u", timezone=tz)
    assert ei.value.field == field
    assert mem.schedules.count() == 0


# -- restart, model identity, runtime ---------------------------------------------------------
def test_restart_gives_identical_results(mem) -> None:
    s = mem.session("s1", user="ada")
    for i in range(15):
        s.append("user", f"I like hiking trail {i}" if i % 3 == 0 else f"message {i} about the weekend")
    mem.remember("Ada owns a red bicycle", category="possessions", user="ada")
    before = ([m.content for m in s.read()], [(h.id, h.score) for h in mem.recall("bicycle", user="ada")],
              [(h.id, h.confidence) for h in mem.list_memories(user="ada")])
    m2 = reopen(mem)
    s2 = m2.session("s1", user="ada")
    after = ([m.content for m in s2.read()], [(h.id, h.score) for h in m2.recall("bicycle", user="ada")],
             [(h.id, h.confidence) for h in m2.list_memories(user="ada")])
    assert after == before
    m2.close()


@pytest.mark.timeout(900)  # runs the printed `eidetica reembed` command (up to 600 s) in a subprocess
def test_opening_with_another_embedder_is_refused_with_a_command_that_runs_as_printed(tmp_path) -> None:
    import shlex
    from pathlib import Path

    from eidetica.errors import DimensionMismatch

    class OtherModel(HashEmbedder):
        def __init__(self, dim: int) -> None:
            super().__init__(dim=dim)
            self.model_id = f"other-{dim}"

    store = tmp_path / "my store"  # a space: the hint must quote the path
    with eidetica.open(store, embedder=HashEmbedder(dim=64)) as m:
        m.session("s", user="u").append("user", "I grow tomatoes on the balcony")
    with pytest.raises(EmbeddingModelChanged) as ei:  # same dimension, another model
        eidetica.open(store, embedder=OtherModel(dim=64))
    assert ei.value.hint == f"eidetica reembed --path {shlex.quote(str(store))} --from hash-64 --model other-64"
    with pytest.raises(DimensionMismatch) as ei:  # another dimension: the design's name for it
        eidetica.open(store, embedder=HashEmbedder(dim=32))
    hint = ei.value.hint
    assert hint in str(ei.value) and "-d)" not in hint
    argv = shlex.split(hint)
    argv[0] = str(Path(sys.executable).with_name("eidetica"))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    with eidetica.open(store, embedder=HashEmbedder(dim=32)) as m:  # the switch took: the new model opens it
        assert [h.text for h in m.search("tomatoes", user="u", min_score=0.0)][:1] == ["I grow tomatoes on the balcony"]


def test_reembed_and_import_append_only_through_each_streams_writer(tmp_path) -> None:
    """One writer per stream: the facade decides what reembed and import write; the streams' actors append it."""
    callers: list[tuple[str, str]] = []
    with eidetica.open(tmp_path / "a", embedder=HashEmbedder(dim=64)) as m:
        s = m.session("s", user="ada")
        s.extend([{"role": "user", "content": f"Turn {i}: I like hiking in the Alps"} for i in range(12)])
        s.summarize()
        m.remember("Ada likes hiking", user="ada")
        m.store_note("Buy new boots", user="ada")
        m.items.put([{"namespace": ["prefs"], "key": "k", "value": {"v": 1}, "user": "ada", "texts": ["boots"]}])
        m.schedules.create("hike", "interval", 3600, user="ada")
        m.export(tmp_path / "dump.jsonl")
        append = m.log.append

        def spy(stream, events, *a, **kw):
            callers.append((stream, sys._getframe(1).f_globals["__name__"]))
            return append(stream, events, *a, **kw)

        m.log.append = spy
        assert m.reembed(HashEmbedder(dim=32)) > 0
        kinds = {st.split(":")[0] for st, _ in callers}
        assert {"session", "summary", "facts", "notes", "items"} <= kinds
        assert all(mod.startswith("eidetica.actors.") for _, mod in callers), callers
    callers.clear()
    with eidetica.open(tmp_path / "b", embedder=HashEmbedder(dim=64)) as m:
        append = m.log.append
        m.log.append = spy
        assert m.import_(tmp_path / "dump.jsonl")["written"] > 0
        assert {st.split(":")[0] for st, _ in callers} >= {"session", "summary", "facts", "notes", "items", "schedules"}
        assert all(mod.startswith("eidetica.actors.") for _, mod in callers), callers
        assert [n.text for n in m.list_notes(user="ada")] == ["Buy new boots"]
        m.update_note(m.list_notes(user="ada")[0].note_id, "Buy boots and socks", user="ada")  # its writer knows it


def test_local_runtime_imports_no_ray(tmp_path) -> None:
    code = textwrap.dedent(f"""
        import sys, eidetica
        from eidetica.providers import HashEmbedder
        with eidetica.open({str(tmp_path / 's')!r}, embedder=HashEmbedder(dim=16)) as m:
            m.session("s", user="u").append("user", "hello")
            m.recall("hello", user="u")
        print("ray" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_bad_arguments_are_clear(mem, tmp_path) -> None:
    with pytest.raises(InvalidInput) as ei:
        mem.recall("x", user="")
    assert ei.value.field == "user"
    with pytest.raises(InvalidInput) as ei:
        mem.recall("x", top_k=0, user="u")
    assert ei.value.field == "top_k"
    with pytest.raises(InvalidInput) as ei:
        mem.session("s", user="u", strategy="magic")
    assert ei.value.field == "strategy"
    with pytest.raises(InvalidInput):
        eidetica.open(tmp_path / "other", runtime="cloud")


# -- the read floor (issue #20): ``written`` and ``min_offset`` on every way to reach a store ---------------------
def test_written_grows_with_each_write_and_min_offset_reads_it(mem) -> None:
    s = mem.session("floor", user="u")
    first = s.append("assistant", "The kayak trip starts at the north pier")
    assert first >= 0 and mem.written == {0: first}  # the offset the write reached (over HTTP: the server's answer)
    mem.remember("My kayak is green", user="u")
    after_fact = mem.written
    assert after_fact[0] > first
    second = s.append("assistant", "We packed the dry bags on Friday")
    assert second > after_fact[0] and mem.written == {0: second}
    hits = mem.search("dry bags", user="u", min_offset=mem.written, min_score=0.0)
    assert [h.text for h in hits][:1] == ["We packed the dry bags on Friday"]
    hits = mem.search("north pier", user="u", min_offset=first, min_score=0.0)  # an offset a write returned
    assert [h.text for h in hits][:1] == ["The kayak trip starts at the north pier"]
    assert [h.text for h in mem.recall("kayak colour", user="u", min_offset=mem.written)][:1] == ["My kayak is green"]
    assert mem.recall("kayak", user="u", category="general", min_offset=after_fact)
    assert mem.recall("kayak", user="u", min_offset=-1)  # -1: a buffered append wrote nothing yet
    assert mem.written == {0: second}  # reads write nothing


def test_a_bad_min_offset_is_refused_naming_the_field_and_changes_nothing(mem) -> None:
    mem.session("c", user="u").append("assistant", "I went hiking on Sunday")
    before, events = mem.written, log_head(mem)
    for bad in ("latest", 1.5, True, {99: 3}, {-1: 3}, {0: "3"}, {0: True}, {0: 2.0}, {"x": 3}, {"99": 3},
                {"0": 3, "00": 3}, {True: 3}, [0, 3]):
        for read in (mem.search, mem.recall):
            with pytest.raises(InvalidInput) as e:
                read("hiking", user="u", min_offset=bad)
            assert e.value.field == "min_offset", bad
    assert mem.written == before and log_head(mem) == events


@pytest.mark.slow
def test_two_clients_of_one_server_read_each_others_writes_through_min_offset(served) -> None:
    import uuid

    from eidetica._server import KeyStore

    _, key = KeyStore(served.store).create(f"t-{uuid.uuid4().hex[:12]}")
    with eidetica.connect(served.url, api_key=key) as a, eidetica.connect(served.url, api_key=key) as b:
        offset = a.session("trip", user="u").append("assistant", "The ferry leaves at dawn")
        assert a.written == {0: offset} and b.written == {}  # b wrote nothing
        hits = b.search("ferry", user="u", min_offset=a.written, min_score=0.0)
        assert [h.text for h in hits][:1] == ["The ferry leaves at dawn"]
        # any HTTP client: a write's answer names its offsets; JSON's {"partition": offset} is accepted
        import httpx

        auth = {"Authorization": f"Bearer {key}"}
        r = httpx.post(served.url + "/v1/users/u/notes", json={"text": "bring a rain jacket"}, headers=auth)
        assert r.status_code == 201 and json.loads(r.headers["eidetica-written"])["0"] > offset
        r = httpx.post(served.url + "/v1/search", headers=auth,
                       json={"query": "ferry", "user": "u", "min_score": 0.0, "min_offset": {"0": offset}})
        assert r.status_code == 200 and [h["text"] for h in r.json()][:1] == ["The ferry leaves at dawn"]
        fact = a.remember("My bike is red", user="u")
        assert a.written[0] > offset
        assert [h.id for h in b.recall("bike", user="u", min_offset=a.written)][:1] == [fact]
        # one client, many threads: written is the highest offset any of its writes reached
        offsets: list[int] = []

        def write(i: int) -> None:
            offsets.append(a.session(f"t{i}", user="u").append("assistant", f"thread {i} was here"))

        threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(offsets) == 8 and a.written == {0: max(offsets)} and b.written == {}


# -- one API (issue #36): what connect() lacked, on every way to reach a store ------------------------------------
def test_notes_are_listed_and_updated_in_place(mem, clock, runtime) -> None:
    first = mem.store_note("The spare key is under the blue pot", user="ada")
    clock.now += dt.timedelta(minutes=1)
    second = mem.store_note("Dentist on the 14th at 9:00", user="ada")
    mem.store_note("Bob's note", user="bob")
    listed = [n.note_id for n in mem.list_notes(user="ada")]
    assert sorted(listed) == sorted([first, second]) and len(mem.list_notes(user="ada", limit=1)) == 1
    if runtime != "ray":  # Ray's actors keep their own copy of the test clock
        assert listed == [second, first]  # newest first
    mem.update_note(first, "The spare key is with the neighbour now", user="ada")
    texts = {n.note_id: n.text for n in mem.list_notes(user="ada")}
    assert texts[first] == "The spare key is with the neighbour now"
    assert "neighbour" in mem.context("spare key", user="ada")
    with pytest.raises(NotFound):
        mem.update_note(first, "not hers", user="bob")
    with pytest.raises(InvalidInput) as e:
        mem.list_notes(user="ada", limit=0)
    assert e.value.field == "limit"


def test_every_search_option_reaches_the_store(mem) -> None:
    mem.session("trip", user="ada").append("user", "The ryokan in Kyoto is booked for April")
    mem.session("work", user="ada").append("user", "The Kyoto offsite budget is approved")
    only = mem.search("Kyoto", user="ada", session_id="work", min_score=0.0, fusion="minmax", time_weight=0.0,
                      neighbors=(0.1, 0.1), kinds=("message",), candidates=20)
    assert {h.session_id for h in only} == {"work"}
    with pytest.raises(InvalidInput) as e:
        mem.search("Kyoto", user="ada", fusion="magic")
    assert e.value.field == "fusion"


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_export_writes_the_format_its_name_asks_and_import_reads_it_back(mem, tmp_path, suffix) -> None:
    mem.session("s", user="ada").append("user", "I keep bees on the roof")
    mem.store_note("Harvest honey in August", user="ada")
    path = tmp_path / f"dump.{suffix}"
    n = mem.export(path)
    assert n >= 3
    if suffix == "parquet":
        import pyarrow.parquet as pq

        assert pq.read_table(path).num_rows == n  # Parquet, not JSONL under that name
    else:
        assert len(path.read_text().splitlines()) == n
    assert mem.import_(path) == {"written": 0, "skipped": n, "conflicts": []}  # idempotent by event id: nothing is doubled
    assert [m.content for m in mem.session("s", user="ada").history()] == ["I keep bees on the roof"]


def test_maintenance_runs_on_every_mode(mem) -> None:
    mem.session("s", user="ada").append("user", "My locker code is 4471")
    fact = mem.remember("Ada's locker code is 4471", user="ada")
    mem.forget(fact, user="ada")
    report = mem.compact()
    assert isinstance(report, dict)
    assert not [h for h in mem.list_memories(user="ada") if h.id == fact]
    assert mem.rebuild() >= 1
    assert mem.search("locker", user="ada", min_score=0.0)
    assert isinstance(mem.snapshot(), str)  # the store holds events: a snapshot is written
    assert set(mem.housekeep()) >= {"log_checkpoints", "state_snapshot"}
    assert mem.retry_pending() == 0 and mem.pending_writes == 0
    assert mem.for_tenant(mem.tenant).tenant == mem.tenant


def test_what_cannot_cross_the_wire_is_refused_clearly(mem) -> None:
    if not is_remote(mem):
        pytest.skip("embedded and Ray handles hold the store")
    with pytest.raises(InvalidInput) as e:
        mem.reembed(HashEmbedder(dim=32))
    assert e.value.field == "embedder" and "eidetica reembed --path" in str(e.value)
    with pytest.raises(InvalidInput) as e:
        mem.for_tenant("someone-else")
    assert e.value.field == "tenant"


def test_min_offset_takes_the_headers_own_form(mem) -> None:
    offset = mem.session("h", user="u").append("assistant", "The tide turns at noon")
    header = {str(p): o for p, o in mem.written.items()}  # Eidetica-Written's JSON: string keys
    assert header == {"0": offset}
    hits = mem.search("tide", user="u", min_offset=header, min_score=0.0)
    assert [h.text for h in hits][:1] == ["The tide turns at noon"]
    assert mem.recall("tide", user="u", min_offset=header) is not None


def test_an_embedded_read_waits_for_a_future_min_offset_then_refuses(tmp_path) -> None:
    from eidetica.errors import ReplicaBehind

    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), replica_timeout=0.2) as m:
        head = m.session("a", user="u").append("assistant", "The gate code is 1234")
        with pytest.raises(ReplicaBehind) as e:  # never an answer that silently misses the offset
            m.search("gate", user="u", min_offset=head + 1000)
        assert e.value.wanted == {0: head + 1001} and e.value.timeout == 0.2
    with pytest.raises(InvalidInput) as e:
        eidetica.open(tmp_path / "t", embedder=HashEmbedder(dim=64), replica_timeout=-1)
    assert e.value.field == "replica_timeout"
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        s = m.session("b", user="u")
        wanted = m.log.head()  # the next write's first offset (one atomic batch with its message)
        late = threading.Timer(0.3, lambda: s.append("assistant", "The boat leaves from pier 9"))
        late.start()
        hits = m.search("boat pier", user="u", min_offset=wanted, min_score=0.0)  # another thread's write, waited for
        late.join()
        assert [h.text for h in hits][:1] == ["The boat leaves from pier 9"]


def test_schedule_runs_keep_their_full_output_an_id_and_local_times(mem, clock) -> None:
    sch = mem.schedules
    job = sch.create("nightly report", "cron", "0 22 * * *", user="ada", timezone="Asia/Tokyo")
    long_output = "line of the report\n" * 100  # 1,900 characters: beyond the 500-character summary
    sch.record_run(job.id, {"status": "ok", "output": long_output})
    sch.record_run(job.id, {"status": "error", "output": "disk full", "run_id": "run-retry-1"})
    got = sch.get(job.id)
    first, second = got.runs
    assert first["output"] == long_output and len(first["output_summary"]) <= 500
    assert first["run_id"].startswith("run-") and second["run_id"] == "run-retry-1"
    assert second["output"] == "disk full" == second["output_summary"]
    tokyo = dt.timezone(dt.timedelta(hours=9))
    assert got.next_run_local == got.next_run_at and got.next_run_local.utcoffset() == tokyo.utcoffset(None)
    assert got.next_run_local.hour == 22  # the cron's hour, in the schedule's zone
    assert first["run_at_local"].utcoffset() == tokyo.utcoffset(None)
    assert [r["run_id"] for r in sch.get(job.id, history=1).runs] == ["run-retry-1"]  # history: the last N runs
    assert sch.get(job.id, history=0).runs == []
    with pytest.raises(InvalidInput) as e:
        sch.get(job.id, history=-1)
    assert e.value.field == "history"


def test_schedule_search_pages_filters_by_status_and_counts_the_total(mem, clock) -> None:
    sch = mem.schedules
    ids = []
    for i in range(5):
        ids.append(sch.create(f"backup {i}", "interval", 3600, user="ada").id)
        clock.now += dt.timedelta(seconds=1)
    sch.create("water plants", "interval", 3600, user="ada")
    sch.update(ids[1], enabled=False)
    assert [s.id for s in sch.search("backup", limit=2)] == ids[:2]
    assert [s.id for s in sch.search("backup", limit=2, offset=2)] == ids[2:4]
    assert sch.count(query="backup") == 5 and sch.count() == 6
    assert [s.id for s in sch.search("backup", status="disabled")] == [ids[1]]
    assert sch.count(query="backup", status="enabled") == 4
    assert len(sch.list_all(status="enabled", offset=1)) == 4
    for bad, field in (({"status": "paused"}, "status"), ({"offset": -1}, "offset"), ({"limit": 0}, "limit")):
        with pytest.raises(InvalidInput) as e:
            sch.search("backup", **bad)
        assert e.value.field == field


def test_facts_carry_metadata_and_are_filtered_by_it(mem) -> None:
    trip = mem.remember("Ada is allergic to peanuts", user="ada", metadata={"source": "intake", "priority": 1})
    mem.remember("Ada likes peanut-free granola", user="ada", metadata={"source": "chat"})
    mem.remember("Ada drinks oat milk", user="ada")
    listed = mem.list_memories(user="ada", metadata={"source": "intake"})
    assert [h.id for h in listed] == [trip] and listed[0].metadata["priority"] == 1 and "sources" in listed[0].metadata
    assert len(mem.list_memories(user="ada")) == 3
    hits = mem.recall("peanuts", user="ada", metadata={"source": "chat"})
    assert [h.text for h in hits] == ["Ada likes peanut-free granola"] and hits[0].metadata["source"] == "chat"
    assert mem.recall("peanuts", user="ada", metadata={"source": "nowhere"}) == []
    with pytest.raises(InvalidInput) as e:
        mem.remember("x", user="ada", metadata=["not", "a", "dict"])
    assert e.value.field == "metadata"
    m2 = reopen(mem)  # the log (and any snapshot) keeps it
    assert [h.id for h in m2.list_memories(user="ada", metadata={"priority": 1})] == [trip]
    m2.close()
