"""Audit and rewind through the public API: provenance (``explain``) and revert, embedded and over ``connect()``.

The scenario is the same on both: real log, real indices, and for ``remote`` a real
``eidetica serve`` process on 127.0.0.1 with an API key (whose name a deletion records).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

import eidetica
from eidetica.errors import InvalidInput, NotFound
from eidetica.providers import HashEmbedder
from tests.support import cli
from tests.support.clock import T0, Clock

AGE30, AGE31 = "I am 30 years old.", "I am 31 years old."  # near-duplicates the offline checker calls contradictory


@pytest.fixture(params=["local", pytest.param("remote", marks=[pytest.mark.slow])])
def runtime(request) -> str:
    """Every scenario embedded and over connect() (a tenant of the session's server)."""
    return request.param


@pytest.fixture
def key_options() -> dict:
    return {"name": "auditor"}


@pytest.fixture
def by(runtime) -> str:
    """Who the audit trail names: the remote key's name, nobody embedded."""
    return "auditor" if runtime == "remote" else ""


def _say(m, clock, session: str, text: str, minutes: int) -> None:
    clock.now = T0 + dt.timedelta(minutes=minutes)
    m.session(session, user="u").append("user", text, time=clock.now)


def _life(m, clock) -> tuple[str, str]:
    """Assert (s1), reinforce (s2), supersede (s3): returns (old fact, new fact)."""
    _say(m, clock, "s1", AGE30, 1)
    _say(m, clock, "s2", AGE30, 2)
    _say(m, clock, "s3", AGE31, 3)
    facts = {h.text: h.id for h in m.list_memories(user="u")}
    new = facts[AGE31]
    old = next(h["fact_id"] for h in [m.explain(new, user="u")] for h in h["history"] if h["event"] == "supersedes")
    return old, new


def test_explain_after_assert_reinforce_supersede_delete(mem, clock, by) -> None:
    old, new = _life(mem, clock)
    life = mem.explain(old, user="u")
    assert life["content"] == AGE30 and life["status"] == "superseded"
    assert [h["event"] for h in life["history"]] == ["asserted", "reinforced", "superseded"]
    first, again, sup = life["history"]
    src = first["sources"][0]
    assert (src["session_id"], src["sequence"], src["text"]) == ("s1", 0, AGE30)
    assert dt.datetime.fromisoformat(src["time"]) == T0 + dt.timedelta(minutes=1)
    assert again["sources"][0]["session_id"] == "s2" and again["sources"][0]["text"] == AGE30
    assert sup["by"] == new and sup["sources"][0]["session_id"] == "s3" and sup["sources"][0]["text"] == AGE31
    assert life["extractor"].startswith("offline:rules-")
    # both clocks: it held from its source message until the statement that superseded it
    assert dt.datetime.fromisoformat(life["valid_from"]) == T0 + dt.timedelta(minutes=1)
    assert dt.datetime.fromisoformat(life["valid_until"]) == T0 + dt.timedelta(minutes=3)
    assert life["recorded_at"] is not None

    mem.forget(new, user="u", request_id="req-42")
    gone = mem.explain(new, user="u")
    assert gone["status"] == "deleted" and gone["valid_until"] is None
    deleted = gone["history"][-1]
    assert deleted["event"] == "deleted" and deleted["request_id"] == "req-42" and deleted["by"] == by
    assert json.loads(json.dumps(gone)) == gone  # the same plain JSON on every mode


def test_explain_remembered_fact_and_errors(mem, clock) -> None:
    fid = mem.remember("Prefers tea over coffee", user="u")
    life = mem.explain(fid, user="u")
    assert life["extractor"] == "remember" and life["sources"] == [] and life["history"][0]["event"] == "asserted"
    with pytest.raises(NotFound):
        mem.explain("fact-nope", user="u")
    with pytest.raises(NotFound):
        mem.explain(fid, user="someone-else")  # another user's fact is not found


def test_cli_why(tmp_path) -> None:
    store = tmp_path / "store"
    with eidetica.open(store, embedder=HashEmbedder(dim=64)) as m:
        fid = m.remember("Likes hiking", user="u")
    out = cli.run("why", fid, "--user", "u", "--path", str(store), "--model", "hash-64")  # in process: no interpreter start
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["content"] == "Likes hiking"


PLANTED = "I am a billionaire."


def test_revert_retracts_a_sessions_facts_once(mem, clock, by) -> None:
    _say(mem, clock, "good", "I work as a nurse.", 1)
    _say(mem, clock, "good", "My favourite colour is blue.", 2)
    _say(mem, clock, "bad", "My favourite colour is blue.", 3)  # reinforces a fact another session stated: it stays
    _say(mem, clock, "bad", "I work as a pirate.", 4)
    _say(mem, clock, "bad", PLANTED, 5)
    before = {h.text: h.id for h in mem.list_memories(user="u")}
    planted = [before[t] for t in before if "pirate" in t or "billionaire" in t]
    assert len(planted) == 2
    with pytest.raises(NotFound):
        mem.revert(user="someone-else", session_id="bad")  # not theirs: nothing changes
    out = mem.revert(user="u", session_id="bad")
    assert sorted(out["facts"]) == sorted(planted) and out["messages_removed"] == 0
    assert len(out["restored"]) == (before.get("I work as a nurse.") is None)  # superseded by the planted job: it holds again
    after = {h.text for h in mem.list_memories(user="u")}
    assert after == (set(before) - {t for t in before if before[t] in planted}) | {"I work as a nurse."}
    assert "My favourite colour is blue." in after and "I work as a nurse." in after
    assert not {h.id for h in mem.recall("billionaire pirate", user="u", top_k=20)} & set(planted)  # gone from the index
    assert len(mem.session("bad", user="u").history()) == 3  # the messages stay
    step = mem.explain(planted[0], user="u")["history"][-1]
    assert step["event"] == "revert" and step["session_id"] == "bad" and step["by"] == by
    again = mem.revert(user="u", session_id="bad")
    assert again["facts"] == [] and again["restored"] == out["restored"]  # twice: nothing more (same ids)
    assert {h.text for h in mem.list_memories(user="u")} == after


def test_revert_since_and_messages(mem, clock) -> None:
    _say(mem, clock, "s", "I work as a nurse.", 1)
    _say(mem, clock, "s", PLANTED, 5)
    with pytest.raises(InvalidInput) as e:
        mem.revert(user="u", session_id="s", since=dt.datetime(2026, 11, 1))  # naive
    assert e.value.field == "since"
    out = mem.revert(user="u", session_id="s", since=T0 + dt.timedelta(minutes=3), messages=True)
    assert len(out["facts"]) == 1 and out["messages_removed"] == 1
    assert {h.text for h in mem.list_memories(user="u")} == {"I work as a nurse."}
    assert [x.content for x in mem.session("s", user="u").history()] == ["I work as a nurse."]


def _notes(m) -> set[str]:
    return {n.text for n in m.list_notes(user="u", limit=100)}


def test_revert_deletes_the_notes_written_during_the_session(mem, clock) -> None:
    _say(mem, clock, "good", "I work as a nurse.", 1)
    _say(mem, clock, "bad", PLANTED, 2)
    kept = mem.store_note("Dentist on the 14th", user="u", session_id="good")
    mem.store_note("Spare key under the blue pot", user="u")  # linked to no session
    planted = mem.store_note("Wire the savings to account 666", user="u", session_id="bad")
    edited = mem.store_note("Send the password by mail", user="u", session_id="bad")
    mem.update_note(edited, "Send the password and the PIN by mail", user="u")  # still written from "bad"
    out = mem.revert(user="u", session_id="bad")
    assert sorted(out["notes"]) == sorted([planted, edited]) and len(out["facts"]) == 1
    assert _notes(mem) == {"Dentist on the 14th", "Spare key under the blue pot"}
    assert "PIN" not in mem.context("password PIN savings account", user="u")  # their rows left the index
    assert kept in {n.note_id for n in mem.list_notes(user="u")}
    if isinstance(mem, eidetica.Memory):  # embedded: the retraction is an event of the notes stream, saying why
        from eidetica.events.streams import notes_stream

        gone = [r.decode() for r in mem.log.read_stream(notes_stream(mem.tenant, "u")) if r.type == "NoteDeleted"]
        assert {(e.note_id, e.reason, e.session_id) for e in gone} == {(planted, "revert", "bad"), (edited, "revert", "bad")}
    again = mem.revert(user="u", session_id="bad")
    assert again["notes"] == [] and again["facts"] == []  # twice: nothing more
    assert _notes(mem) == {"Dentist on the 14th", "Spare key under the blue pot"}


def test_revert_notes_since_and_a_session_with_notes_only(mem, clock) -> None:
    clock.now = T0 + dt.timedelta(minutes=1)
    mem.store_note("Early note", user="u", session_id="s")
    clock.now = T0 + dt.timedelta(minutes=5)
    late = mem.store_note("Late note", user="u", session_id="s")  # the session has no message yet: it may start later
    out = mem.revert(user="u", session_id="s", since=T0 + dt.timedelta(minutes=3))
    assert out["notes"] == [late] and out["facts"] == []
    assert _notes(mem) == {"Early note"}
    with pytest.raises(NotFound):
        mem.revert(user="u", session_id="never")  # neither messages nor notes


def test_store_note_refuses_a_bad_or_foreign_session_link(mem, clock) -> None:
    mem.session("theirs", user="v").append("user", "hello")
    for bad in ("theirs", "", 42):  # another user's session; malformed ids
        with pytest.raises(InvalidInput) as e:
            mem.store_note("x", user="u", session_id=bad)
        assert e.value.field == "session_id"
    assert _notes(mem) == set()  # nothing was written


def test_an_old_note_stored_event_without_a_session_still_decodes_and_replays(tmp_path) -> None:
    import msgspec

    from eidetica.events import NewEvent, NoteStored, decode
    from eidetica.events.streams import notes_stream

    class OldNoteStored(msgspec.Struct, frozen=True, tag="NoteStored", kw_only=True):  # the format before session links
        note_id: str
        user_id: str
        text: str

    payload = msgspec.msgpack.encode(OldNoteStored(note_id="note-old", user_id="u", text="Written long ago"))
    assert decode(payload) == NoteStored(note_id="note-old", user_id="u", text="Written long ago", session_id=None)
    store = tmp_path / "store"
    with eidetica.open(store, embedder=HashEmbedder(dim=64)) as m:
        m.session("s", user="u").append("user", "I work as a nurse.")
        m.log.append(notes_stream(m.tenant, "u"), [NewEvent(type="NoteStored", payload=payload, tenant=m.tenant)])
    with eidetica.open(store, embedder=HashEmbedder(dim=64)) as m:  # replayed by the state and the notes actor
        assert [n.note_id for n in m.list_notes(user="u")] == ["note-old"]
        assert m.revert(user="u", session_id="s")["notes"] == []  # linked to no session: a revert leaves it
        m.delete_note("note-old", user="u")
        assert m.list_notes(user="u") == []


MARK = "Zanzibarquux"  # in one message only: a fact's only source, quoted by the session summary


def _conversation(mem) -> object:
    s = mem.session("s", user="u")
    s.append("user", f"I live in {MARK} town.")
    s.append("user", "I work as a nurse.")
    for i in range(8):
        s.append("user" if i % 2 else "assistant", f"filler turn number {i} about the weather today")
    mem.session("t", user="u").append("user", "I work as a nurse.")  # the nurse fact has a second source
    assert s.summarize(force=True) and MARK in s.summary()
    return s


def test_forget_message_cascades_to_facts_summary_and_index(mem) -> None:
    s = _conversation(mem)
    facts = {h.text: h.id for h in mem.list_memories(user="u")}
    only = facts[f"I live in {MARK} town."]
    out = s.forget_message(0)
    assert out["facts"] == [only] and out["summaries"] == ["s"]
    assert MARK not in (s.summary() or "")  # summarised again without it
    assert f"I live in {MARK} town." not in {h.text for h in mem.list_memories(user="u")}
    assert not [h for h in mem.search(MARK, user="u", min_score=0.0) if MARK in h.text]  # its chunks left at once
    assert mem.explain(only, user="u")["history"][-1]["event"] == "erasure"
    assert s.forget_message(1)["facts"] == []  # the nurse fact keeps its other source
    assert "I work as a nurse." in {h.text for h in mem.list_memories(user="u")}
    with pytest.raises(NotFound):
        s.forget_message(0)  # already gone
    with pytest.raises(InvalidInput) as e:
        s.forget_message("1")
    assert e.value.field == "sequence"


def test_a_past_read_after_compact_holds_no_forgotten_text(mem, clock) -> None:
    """A server keeps its past views: ``compact`` must drop them, or one read before the erasure
    keeps serving the forgotten text (and offsets moved with the rewritten log)."""
    _say(mem, clock, "v", "the vault code is 7741", 1)
    _say(mem, clock, "v", "nothing else to say", 2)
    cut = mem.written[0]

    def said(view) -> list[str]:
        return [x.content for x in view.session("v", user="u").history()]

    with mem.as_of(cut) as past:
        assert "the vault code is 7741" in said(past)
    held = mem.as_of(cut)  # left open across the erasure
    assert "the vault code is 7741" in said(held)
    mem.session("v", user="u").forget_message(0)
    receipt = mem.compact()
    if isinstance(mem, eidetica.Memory):  # an embedded view holds files: compact closed it
        assert receipt["past_views_closed"] == 1
        for read in (lambda: said(held), lambda: held.search("vault code", user="u")):
            with pytest.raises(InvalidInput) as e:
                read()
            assert e.value.field == "memory"
    else:
        assert not [t for t in said(held) if "7741" in t]
    with mem.as_of(cut) as past:
        assert not [t for t in said(past) if "7741" in t]
        assert not [h for h in past.search("vault code 7741", user="u", min_score=0.0) if "7741" in h.text]


def test_forget_session_cascades_to_its_facts(mem) -> None:
    _say(mem, Clock(), "a", "I work as a pirate.", 1)
    _say(mem, Clock(), "a", "I work as a nurse.", 2)
    _say(mem, Clock(), "b", "I work as a nurse.", 3)
    mem.forget_session("a")
    assert {h.text for h in mem.list_memories(user="u")} == {"I work as a nurse."}


def test_compact_after_forget_message_leaves_no_byte_and_says_so(tmp_path) -> None:
    store = tmp_path / "store"
    with eidetica.open(store, embedder=HashEmbedder(dim=64)) as m:
        s = _conversation(m)
        only = next(h.id for h in m.list_memories(user="u") if MARK in h.text)
        s.forget_message(0)
        assert m.snapshot() is not None  # a state snapshot from before compact: it must go too
        receipt = m.compact()
        assert receipt["verified"] is True and receipt["found_in"] == []
        assert {"session_id": "s", "sequence": 0} in receipt["forgotten"]["messages"]
        assert only in receipt["facts"] and "s" in receipt["summaries"]
        assert receipt["forgotten"]["texts"] >= 2 and receipt["files_rewritten"]
        assert any(f.startswith("log/") for f in receipt["files_rewritten"])
        assert json.loads(open(receipt["receipt"]).read())["verified"] is True
        assert [x.content for x in m.session("t", user="u").history()] == ["I work as a nurse."]
    for f in store.rglob("*"):
        if f.is_file():
            assert MARK.encode() not in f.read_bytes(), f
    from eidetica._store.erasure import verify

    with eidetica.open(store, embedder=HashEmbedder(dim=64)) as m:  # through the engines too
        assert verify(store, m.views.index, {MARK}) == []
        m.session("t", user="u").append("user", f"Back to {MARK} again.")
        assert verify(store, m.views.index, {MARK})  # the check does see text where it is


def test_verify_reads_files_across_block_ends_and_every_index_version(tmp_path, monkeypatch) -> None:
    from eidetica._store import erasure as _erasure

    monkeypatch.setattr(_erasure, "_BLOCK", 5)  # the text lies across several blocks
    (tmp_path / "raw.bin").write_bytes(b"\x00" * 13 + f"said {MARK} once".encode() + b"\xff" * 9)
    (tmp_path / "empty").write_bytes(b"")
    assert _erasure.verify(tmp_path, None, {MARK, "nowhere at all"}) == ["raw.bin"]
    assert _erasure.verify(tmp_path, None, {"said nothing"}) == []
    monkeypatch.undo()
    with eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64)) as m:
        s = _conversation(m)
        s.forget_message(0)  # its rows leave the newest LanceDB version; an older version still holds them
        ac, _ = _erasure._automaton({MARK})
        assert not any(MARK in h.text for h in m.search(MARK, user="u"))
        assert any(_erasure._rows_have(col, ac) for col in _erasure._engine_columns(m.views.index))
        assert _erasure._rows_have(__import__("pyarrow").array(["x " + MARK[:5], MARK[5:] + " y"]), ac) is False


def test_as_of_four_moments_of_a_facts_life(mem, clock) -> None:
    from eidetica.errors import ReadOnly

    m = mem
    _say(m, clock, "s1", AGE30, 1)
    note = m.store_note("flight lands 10:40", user="u")
    t1 = clock.now + dt.timedelta(seconds=30)
    _say(m, clock, "s2", AGE30, 2)
    m.delete_note(note, user="u")  # (RemoteMemory has no update_note yet)
    m.store_note("flight lands 12:15", user="u")
    m.schedules.create("water plants", "interval", 3600, user="u")
    t2 = clock.now + dt.timedelta(seconds=30)
    _say(m, clock, "s3", AGE31, 3)
    t3 = clock.now + dt.timedelta(seconds=30)
    new = next(h.id for h in m.list_memories(user="u") if h.text == AGE31)
    clock.now = T0 + dt.timedelta(minutes=4)
    m.forget(new, user="u")
    m.session("s4", user="u").append("user", "I work as a nurse.", time=clock.now)
    offset = m.written[0]  # the message and what its extraction wrote
    _say(m, clock, "s5", "My favourite colour is blue.", 5)
    live = {h.text for h in m.list_memories(user="u")}

    def facts(view) -> list[str]:
        return sorted(h.text for h in view.list_memories(user="u"))

    with m.as_of(t1) as past:
        assert facts(past) == [AGE30]
        assert [s.session_id for s in past.list_sessions(user="u")] == ["s1"]
        assert "10:40" in past.context("when does the flight land", user="u")
        assert past.schedules.count(user="u") == 0
        assert [h.text for h in past.recall("how old", user="u") if h.kind == "fact"] == [AGE30]
        with pytest.raises(ReadOnly):
            past.remember("a new fact", user="u")
        with pytest.raises(ReadOnly):
            past.session("s1", user="u").append("user", "more")
        with pytest.raises(ReadOnly):
            past.store_note("x", user="u")
    with m.as_of(t2) as past:  # reinforced by s2: the same fact, stronger
        assert [h.confidence for h in past.list_memories(user="u")] == [1.0] and facts(past) == [AGE30]
        assert "12:15" in past.context("when does the flight land", user="u")
        assert [s.name for s in past.schedules.search("water", user="u")] == ["water plants"]
    with m.as_of(t3) as past:  # superseded: the new value, not yet deleted
        assert facts(past) == [AGE31]
        assert [x.content for x in past.session("s3", user="u").history()] == [AGE31]
        assert [h.text for h in past.search("years old", user="u", min_score=0.0) if h.kind == "message"]
    with m.as_of(offset) as past:  # by log offset: the delete and the s4 message, not s5
        assert set(facts(past)) == live - {"My favourite colour is blue."}
        assert [x.content for x in past.session("s4", user="u").read()] == ["I work as a nurse."]
        assert past.session("s5", user="u").history() == []
    assert {h.text for h in m.list_memories(user="u")} == live  # the live store is untouched
    with pytest.raises(InvalidInput) as e:
        m.as_of(dt.datetime(2026, 11, 1))
    assert e.value.field == "when"


def test_cli_as_of(tmp_path) -> None:
    store = tmp_path / "store"
    with eidetica.open(store, embedder=HashEmbedder(dim=64)) as m:
        m.remember("Likes hiking", user="u")
        then = m.log.head(0) - 1
        m.remember("Plays the violin", user="u")

    def run(*args: str) -> subprocess.CompletedProcess:
        return cli.run(*args, "--user", "u", "--path", str(store), "--model", "hash-64")  # in process: no interpreter start

    now = run("list", "--json")
    past = run("list", "--json", "--as-of", str(then))
    assert now.returncode == 0 and past.returncode == 0, past.stderr
    assert {h["text"] for h in json.loads(now.stdout)} == {"Likes hiking", "Plays the violin"}
    assert [h["text"] for h in json.loads(past.stdout)] == ["Likes hiking"]
    bad = run("list", "--as-of", "yesterday")
    assert bad.returncode != 0 and "as_of" in bad.stderr and "Traceback" not in bad.stderr


def _facts(m) -> set[tuple[str, str]]:
    return {(h.text, json.dumps(h.metadata["sources"], sort_keys=True)) for h in m.list_memories(user="u", limit=1000)}


def _seed(store) -> None:
    with eidetica.open(store, embedder=HashEmbedder(dim=64)) as m:
        for i, text in enumerate(["I work as a pirate.", "I live in Paris.", "I love the violin, I play it daily.",
                                  "My favourite colour is blue.", "I have two cats.", "I am 30 years old."]):
            m.session(f"s{i % 2}", user="u").append("user", text)
        m.remember("Prefers tea over coffee", user="u")


def test_reextract_brings_facts_in_line_and_is_idempotent(tmp_path) -> None:
    from tests.support._reextract_child import NewExtractor

    store = tmp_path / "store"
    _seed(store)
    with eidetica.open(store, embedder=HashEmbedder(dim=64)) as m:
        before = {h.text: h.id for h in m.list_memories(user="u")}
        out = m.reextract(llm=NewExtractor())
        after = {h.text: h.id for h in m.list_memories(user="u")}
        assert out == {"asserted": 1, "kept": len(before) - 2, "retracted": 1}
        assert "I work as a pirate." not in after and after["Plays the violin."]
        assert all(after[t] == before[t] for t in before if t != "I work as a pirate.")  # same ids
        assert after["Prefers tea over coffee"] == before["Prefers tea over coffee"]  # remembered: untouched
        pirate = m.explain(before["I work as a pirate."], user="u")
        assert pirate["history"][-1]["event"] == "reextract"
        heads = [m.log.head(p) for p in range(m.log.partitions)]
        assert m.reextract(llm=NewExtractor()) == {"asserted": 0, "kept": len(after) - 1, "retracted": 0}
        assert [m.log.head(p) for p in range(m.log.partitions)] == heads  # a second run writes nothing


@pytest.mark.crash
def test_reextract_killed_halfway_and_run_again_ends_like_one_run(tmp_path) -> None:
    from tests.support._reextract_child import NewExtractor

    killed, whole = tmp_path / "killed", tmp_path / "whole"
    _seed(killed)
    _seed(whole)
    child = [sys.executable, "-m", "tests.support._reextract_child", str(killed), "6"]  # dies on its last extraction
    out = subprocess.run(child, capture_output=True, text=True, timeout=300, cwd=str(Path(__file__).parents[2]))
    assert out.returncode == -9, out.stderr
    with eidetica.open(killed, embedder=HashEmbedder(dim=64)) as m:
        halfway = _facts(m)
        m.reextract(llm=NewExtractor())
        resumed = _facts(m)
    with eidetica.open(whole, embedder=HashEmbedder(dim=64)) as m:
        before = _facts(m)
        m.reextract(llm=NewExtractor())
        assert _facts(m) == resumed != before
    texts = lambda facts: {t for t, _ in facts}  # noqa: E731
    assert {"Plays the violin.", "I work as a pirate."} <= texts(halfway)  # killed after an assert, before retracting
    assert "I work as a pirate." not in texts(resumed)


def test_cli_reextract(tmp_path) -> None:
    store = tmp_path / "store"
    _seed(store)
    out = cli.run("reextract", "--llm", "offline", "--user", "u", "--path", str(store), "--model", "hash-64")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"asserted": 0, "kept": 6, "retracted": 0}  # the same rules: nothing changes


def test_reextract_through_the_api(mem, clock) -> None:
    _say(mem, clock, "s", "I work as a nurse.", 1)
    assert mem.reextract(user="u") == {"asserted": 0, "kept": 1, "retracted": 0}  # the same extractor: in line already
    assert mem.reextract() == {"asserted": 0, "kept": 1, "retracted": 0}
