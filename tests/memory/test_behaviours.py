"""Behaviours the design promises (issue #21): each test failed before its fix."""

from __future__ import annotations

import datetime as dt

import pytest

import eidetica
from eidetica.actors import MemoryConfig
from eidetica.errors import InvalidInput
from eidetica.providers import HashEmbedder, OpenAILLM
from tests.support._tmpfs import mounted_tmpfs
from tests.support.clock import T0
from tests.support.openai_server import FakeOpenAI


# -- 3: a resumed history starts with a question ---------------------------------------
def test_restore_and_read_do_not_start_with_an_answer(tmp_path, clock) -> None:
    cfg = MemoryConfig(restore_messages=20, window=20, auto_extract=False)
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), clock=clock, config=cfg) as m:
        s = m.session("c", user="u")
        for i in range(21):
            s.append("user" if i % 2 == 0 else "assistant", f"turn {i}")
        for msgs in (s.restore(), s.read(strategy="sliding_window", token_budget=25)):
            assert msgs[0].role == "user"
            assert msgs[-1].content == "turn 20"
        # the window asked for is returned whole: 20 turns, the first an answer (nothing cut by the budget)
        assert [x.content for x in s.read(strategy="sliding_window")] == [f"turn {i}" for i in range(1, 21)]
        # an agent-only session (no user turn at all) still restores
        t = m.session("tools", user="u")
        t.append("assistant", "started")
        t.append("tool", "result")
        assert [x.content for x in t.restore()] == ["started", "result"]


@pytest.mark.parametrize("turns", [9, 15, 16, 23, 40])
def test_every_message_is_in_the_summary_or_in_read(tmp_path, clock, turns) -> None:
    cfg = MemoryConfig(token_budget=200, auto_extract=False)
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=32), clock=clock, config=cfg) as m:
        s = m.session("c", user="u")
        for i in range(turns):
            s.append("user" if i % 2 == 0 else "assistant", f"Turn {i}: we talked about topic number {i} at length.")
        _, summary, upto = s._actor.summary()
        got = s.read()
        shown = [x.sequence for x in got if x.role != "system"]
        assert (summary is not None) == (got[0].role == "system")
        assert shown == list(range(upto + 1, turns))  # nothing between the summary and the window
        window = s.read(window=5)
        assert [x.sequence for x in window if x.role != "system"] == list(range(turns - 5, turns))


# -- 5: categories are sanitised, not replaced -----------------------------------------
def test_categories_keep_the_callers_word_sanitised(mem) -> None:
    mem.remember("likes ramen", "Food & Drink!", user="u")
    mem.remember("works at CERN", "a.b", user="u")
    mem.remember("plain", "", user="u")
    mem.remember("long", "x" * 70, user="u")
    cats = {h.text: h.category for h in mem.list_memories(user="u")}
    assert cats == {"likes ramen": "food___drink_", "works at CERN": "a_b", "plain": "general", "long": "x" * 64}
    # the caller's own spelling finds it again
    assert [h.text for h in mem.recall("ramen", user="u", category="Food & Drink!")] == ["likes ramen"]
    assert [h.text for h in mem.list_memories(user="u", category="A.B")] == ["works at CERN"]


# -- 6: laughter and filler never reach the extractor ----------------------------------
def test_trivial_messages_are_not_sent_to_the_llm(tmp_path, clock) -> None:
    with FakeOpenAI() as server:
        llm = OpenAILLM("fake-chat", base_url=server.base_url, backoff=0.01)
        with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), clock=clock, llm=llm) as m:
            s = m.session("c", user="u")
            for text in ("wkwk", "hahaha", "lol ok", "hehe", "xD", "kkkk", "hmm ok", "👍", "thanks!!"):
                s.append("user", text)
            chats = [r for r in server.requests if r.path.endswith("/chat/completions")]
            assert chats == []
            s.append("user", "I live in Berlin and I am allergic to shellfish.")
            chats = [r for r in server.requests if r.path.endswith("/chat/completions")]
            assert len(chats) >= 1  # a real statement is still extracted


# -- 10: search restricted to one session ----------------------------------------------
def test_search_session_id_restricts_to_one_session(mem) -> None:
    a = mem.session("a", user="u")
    b = mem.session("b", user="u")
    a.append("user", "the heron nests by the pond")
    b.append("user", "the heron flew over the pond")
    got = mem.search("heron pond", user="u", min_score=0.0)
    assert {h.session_id for h in got} == {"a", "b"}
    only = mem.search("heron pond", user="u", session_id="b", min_score=0.0)
    assert only and {h.session_id for h in only} == {"b"}
    with pytest.raises(InvalidInput) as ei:
        mem.search("heron", user="u", session_id="")
    assert ei.value.field == "session_id"


# -- 1: clearing memories leaves sessions; index and state agree after every clear ------
def _seed(m) -> None:
    s = m.session("chat", user="ada")
    s.append("user", "the blue heron nests by the pond")
    m.remember("Ada paints herons", user="ada")
    m.store_note("heron sketch due Friday", user="ada")


def _seen(m) -> dict:
    return {
        "sessions": [x.session_id for x in m.list_sessions()],
        "search": sorted(h.session_id for h in m.search("heron pond", user="ada", min_score=0.0, kinds=["message", "summary"])),
        "history": [x.content for x in m.session("chat", user="ada").history()],
        "facts": [h.text for h in m.list_memories(user="ada")],
        "facts_state": [f.content for f in m.state.facts(m.tenant, "ada")],
        "recall": [h.text for h in m.recall("herons", user="ada") if h.kind == "fact"],  # recall also answers from messages
        "notes_state": [n.text for n in m.state.notes(m.tenant, "ada")],
        "notes": [h.text for h in m._search("heron sketch", top_k=5, user="ada", kinds=["note"])],
    }


@pytest.mark.parametrize("sessions,memories", [(False, True), (True, False), (True, True)])
def test_clear_variants_keep_index_and_state_in_agreement(tmp_path, clock, sessions, memories) -> None:
    cfg = MemoryConfig(auto_extract=False)
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), clock=clock, config=cfg) as m:
        _seed(m)
        m.clear(sessions=sessions, memories=memories)
        got = _seen(m)
        want_chat = [] if sessions else ["chat"]
        assert got["sessions"] == want_chat and got["search"] == want_chat
        assert got["history"] == ([] if sessions else ["the blue heron nests by the pond"])
        mem_left = [] if memories else ["Ada paints herons"]
        assert got["facts"] == got["facts_state"] == got["recall"] == mem_left
        notes_left = [] if memories else ["heron sketch due Friday"]
        assert got["notes"] == got["notes_state"] == notes_left
        m.rebuild()
        assert _seen(m) == got
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), clock=clock, config=cfg) as m:
        assert _seen(m) == got  # the actors refold the same from the log


# -- 4: a repeated chunk moves to its latest occurrence ---------------------------------
def test_dedup_records_the_latest_occurrence(mem, clock) -> None:
    s = mem.session("c", user="u")
    s.append("user", "blue heron pond")
    s.append("assistant", "ok")
    clock.now = T0 + dt.timedelta(hours=1)
    s.extend([{"role": "user", "content": "blue heron pond"}, {"role": "assistant", "content": "seen it"},
              {"role": "user", "content": "blue heron pond"}])
    hits = [h for h in mem.search("blue heron pond", user="u", min_score=0.0) if h.text == "blue heron pond"]
    assert len(hits) == 1  # still one row
    assert hits[0].metadata["sequence"] == 4 and hits[0].time == T0 + dt.timedelta(hours=1)
    s.append("user", "blue heron pond")  # a later call moves it again, from the stored chunk
    hits = [h for h in mem.search("blue heron pond", user="u", min_score=0.0) if h.text == "blue heron pond"]
    assert len(hits) == 1 and hits[0].metadata["sequence"] == 5
    mem.rebuild()
    hits = [h for h in mem.search("blue heron pond", user="u", min_score=0.0) if h.text == "blue heron pond"]
    assert len(hits) == 1 and hits[0].metadata["sequence"] == 5


# -- 8: a cron schedule under the minimum interval is refused ---------------------------
def test_cron_shorter_than_the_minimum_interval_is_refused(tmp_path, clock) -> None:
    cfg = MemoryConfig(min_interval_seconds=300)
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), clock=clock, config=cfg) as m:
        for expr in ("* * * * *", "*/2 * * * *", "0,1 9 * * *"):
            with pytest.raises(InvalidInput) as ei:
                m.schedules.create("x", "cron", expr, user="u")
            assert ei.value.field == "expression"
        ok = m.schedules.create("x", "cron", "*/5 * * * *", user="u")
        with pytest.raises(InvalidInput):
            m.schedules.update(ok.id, expression="* * * * *")
        assert m.schedules.count() == 1 and m.schedules.get(ok.id).expression == "*/5 * * * *"


# -- 9: run records carry an output summary; schedules count consecutive failures -------
def test_run_records_output_summary_and_consecutive_failures(mem, clock) -> None:
    sch = mem.schedules
    job = sch.create("sync", "interval", 600, user="u")
    sch.record_run(job.id, {"status": "error", "output": "x" * 2000})
    sch.record_run(job.id, {"status": "error", "output": "short"})
    got = sch.get(job.id)
    assert got.consecutive_failures == 2 and got.run_count == 2
    long, short = got.runs[-2]["output_summary"], got.runs[-1]["output_summary"]
    assert len(long) <= 500 and long.startswith("x" * 400) and "cut" in long and short == "short"
    clock.now = T0 + dt.timedelta(hours=1)
    (due,) = sch.due(clock.now)
    assert due.id == job.id and due.consecutive_failures == 2 and due.runs[-1]["output_summary"] == "short"
    sch.record_run(job.id, "ok")
    assert sch.get(job.id).consecutive_failures == 0


# -- #17: one schedule read model; the update folds agree ------------------------------
def test_schedule_updates_fold_the_same_in_the_actor_and_the_state(mem, clock) -> None:
    sch = mem.schedules
    job = sch.create("water", "cron", "0 9 * * *", user="u")
    upd = sch.update(job.id, enabled=False, name="water plants")
    assert upd == sch.get(job.id)  # the actor's answer is the facade's read model
    assert not upd.enabled and upd.name == "water plants" and isinstance(upd.next_run_at, dt.datetime)
    assert sch.due(T0 + dt.timedelta(days=3)) == []  # disabled: never due
    mem.rebuild()
    assert sch.get(job.id) == upd
    assert mem.runtime.schedules(mem.tenant, "u").get(job.id) == upd


# -- 7: notes can be updated, keeping their id ------------------------------------------
def test_update_note_keeps_the_id_and_replaces_the_text_everywhere(mem) -> None:
    from eidetica.errors import NotFound

    nid = mem.store_note("flight lands 10:40 Friday", user="ada")
    mem.update_note(nid, "flight lands 12:15 Saturday", user="ada")

    def seen() -> tuple:
        hits = mem._search("when does the flight land", top_k=5, user="ada", kinds=["note"])
        return ([(h.id, h.text) for h in hits], [(n.note_id, n.text) for n in mem.state.notes(mem.tenant, "ada")])

    want = ([(nid, "flight lands 12:15 Saturday")], [(nid, "flight lands 12:15 Saturday")])
    assert seen() == want
    assert "12:15 Saturday" in mem.context("flight", user="ada")
    mem.rebuild()
    assert seen() == want
    with pytest.raises(NotFound):
        mem.update_note("note-nope", "x", user="ada")
    with pytest.raises(NotFound):
        mem.update_note(nid, "x", user="bob")  # not bob's note
    with pytest.raises(InvalidInput) as ei:
        mem.update_note(nid, "  ", user="ada")
    assert ei.value.field == "text"
    # the old text is history, forgettable: deleting the note and compacting erases both texts
    mem.delete_note(nid, user="ada")
    mem.compact()
    texts = [e.decode() for p in range(mem.log.partitions) for e in mem.log.read(partition=p) if e.type != "Redacted"]
    assert not any("flight lands" in str(getattr(x, "text", "")) + str(getattr(x, "texts", "")) for x in texts)


# -- 2: storage failures are typed; best-effort mode queues and loses nothing ----------
@pytest.fixture
def small_disk(tmp_path):
    """A 32 MiB tmpfs (needs root), unmounted afterwards."""
    yield from mounted_tmpfs(tmp_path / "small", "32m")


def _fill(disk) -> object:
    """Fill the disk to the last byte; returns the filler file."""
    filler = disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_raises_storage_error_in_the_tree(small_disk, clock) -> None:
    from eidetica.errors import EideticaError, StorageError

    with eidetica.open(small_disk / "s", embedder=HashEmbedder(dim=64), clock=clock,
                       config=MemoryConfig(auto_extract=False)) as m:
        s = m.session("c", user="u")
        s.append("user", "before")
        filler = _fill(small_disk)
        for call in (lambda: s.append("user", "x" * 20_000), lambda: m.remember("y" * 20_000, user="u"),
                     lambda: m.store_note("z" * 20_000, user="u")):
            with pytest.raises(StorageError) as ei:
                call()
            assert isinstance(ei.value, EideticaError) and ei.value.errno == 28 and str(small_disk) in ei.value.path
        filler.unlink()
        s.append("user", "after")
        assert [x.content for x in s.history()] == ["before", "after"]


def test_best_effort_mode_queues_failed_writes_and_loses_nothing(small_disk, clock, caplog) -> None:
    with eidetica.open(small_disk / "s", embedder=HashEmbedder(dim=64), clock=clock, on_write_error="queue",
                       config=MemoryConfig(auto_extract=False)) as m:
        s = m.session("c", user="u")
        s.append("user", "before the disk filled")
        filler = _fill(small_disk)
        big = "a long message about the heron " * 800
        assert s.append("user", big) == -1  # never raises into the agent
        assert s.append("assistant", "a short reply") == -1  # queued behind, in order
        fid = m.remember("Ada paints herons " + "x" * 20_000, user="ada")
        nid = m.store_note("heron sketch " + "y" * 20_000, user="ada")
        assert fid.startswith("pending:") and nid.startswith("note-")
        assert m.pending_writes == 4 and m.retry_pending() == 4  # still full
        assert any("queued for retry" in r.getMessage() for r in caplog.records)
        filler.unlink()
        assert m.retry_pending() == 0
        assert [x.content for x in s.history()] == ["before the disk filled", big, "a short reply"]
        assert [h.text[:17] for h in m.list_memories(user="ada")] == ["Ada paints herons"]
        assert [x.session_id for x in m.list_sessions()] == ["c"]  # (also catches the views up)
        assert [n.note_id for n in m.state.notes(m.tenant, "ada")] == [nid]
    with pytest.raises(InvalidInput) as ei:
        eidetica.open(small_disk / "t", on_write_error="ignore")
    assert ei.value.field == "on_write_error"


# -- #17: one fact read model, read by the facade ---------------------------------------
def test_list_memories_reads_the_one_fact_read_model(mem, clock) -> None:
    a = mem.remember("Ada lives in Lisbon", "location", user="ada")
    mem.remember("Ada lives in Lisbon", "location", user="ada")  # reinforced
    b = mem.remember("cello lessons happen every Tuesday evening", "hobby", user="ada")
    clock.now = T0 + dt.timedelta(days=8)
    mem.sweep()  # decays both
    listed = mem.list_memories(user="ada")
    state = {f.fact_id: f for f in mem.state.facts(mem.tenant, "ada")}
    assert sorted(h.id for h in listed) == sorted([a, b]) == sorted(state)
    assert [h.confidence for h in listed] == sorted((h.confidence for h in listed), reverse=True)
    for h in listed:
        f = state[h.id]
        assert (h.text, h.category, h.confidence, h.metadata["sources"]) == (f.content, f.category, f.confidence, f.sources)
    assert [h.id for h in mem.list_memories(user="ada", category="Hobby")] == [b]
    import eidetica.actors as actors

    assert not hasattr(actors, "FactState")  # the second fact model is gone from the API


# -- tool-call arguments are indexed with their message ----------------------------------
def test_a_word_only_in_tool_call_arguments_finds_its_message(mem) -> None:
    import json

    s = mem.session("t", user="u")
    s.append("user", "Book me a flight please.")
    s.append("assistant", "Let me look that up.", metadata={"tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "search_flights", "arguments": json.dumps({"destination": "Reykjavik", "seats": 2})}}]})
    s.append("assistant", "And a hotel.", metadata={"tool_calls": [{"name": "lookup_hotel", "args": {"city": "Akureyri"}}]})
    s.append("tool", "3 flights found")
    found = {q: [(h.kind, h.text) for h in mem.search(q, user="u")] for q in ("Reykjavik", "Akureyri")}
    assert found["Reykjavik"][0] == ("message", "Let me look that up.\n[search_flights: destination: Reykjavik, seats: 2]")
    assert found["Akureyri"][0] == ("message", "And a hotel.\n[lookup_hotel: city: Akureyri]")
    assert [x.content for x in s.history()][1] == "Let me look that up."  # the message itself is unchanged
    mem.rebuild()  # a replay of the log indexes the same text
    assert {q: [(h.kind, h.text) for h in mem.search(q, user="u")] for q in found} == found
