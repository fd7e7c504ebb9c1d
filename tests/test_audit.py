"""Audit and rewind through the public API: provenance (``explain``) and revert, embedded and over ``connect()``.

The scenario is the same on both: real log, real indices, and for ``remote`` a real
``eidetica serve`` process on 127.0.0.1 with an API key (whose name a deletion records).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid

import pytest

import eidetica
from eidetica.errors import InvalidInput, NotFound
from eidetica.providers import HashEmbedder

from .test_memory import T0, Clock, served  # noqa: F401 - the module's one server process

AGE30, AGE31 = "I am 30 years old.", "I am 31 years old."  # near-duplicates the offline checker calls contradictory


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["local", pytest.param("remote", marks=[pytest.mark.slow])])
def mem(request, tmp_path, clock):
    if request.param == "remote":
        from eidetica._server import KeyStore

        server = request.getfixturevalue("served")
        _, key = KeyStore(server.store).create(f"t-{uuid.uuid4().hex[:12]}", name="auditor")
        clock.sink = server.clock_file
        clock.now = clock.now
        m = eidetica.connect(server.url, api_key=key)
        m.by = "auditor"
        yield m
        m.close()
        return
    m = eidetica.open(tmp_path / "store", embedder=HashEmbedder(dim=64), clock=clock)
    m.by = ""
    yield m
    m.close()


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


def test_explain_after_assert_reinforce_supersede_delete(mem, clock) -> None:
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
    assert deleted["event"] == "deleted" and deleted["request_id"] == "req-42" and deleted["by"] == mem.by
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
    out = subprocess.run([sys.executable, "-m", "eidetica.cli", "why", fid, "--user", "u", "--path", str(store),
                          "--model", "hash-64"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["content"] == "Likes hiking"


PLANTED = "I am a billionaire."


def test_revert_retracts_a_sessions_facts_once(mem, clock) -> None:
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
    after = {h.text for h in mem.list_memories(user="u")}
    assert after == set(before) - {t for t in before if before[t] in planted}
    assert "My favourite colour is blue." in after and "I work as a nurse." in after
    assert not {h.id for h in mem.recall("billionaire pirate", user="u", top_k=20)} & set(planted)  # gone from the index
    assert len(mem.session("bad", user="u").history()) == 3  # the messages stay
    step = mem.explain(planted[0], user="u")["history"][-1]
    assert step["event"] == "revert" and step["session_id"] == "bad" and step["by"] == mem.by
    assert mem.revert(user="u", session_id="bad")["facts"] == []  # twice: nothing more
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
