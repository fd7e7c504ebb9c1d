"""``as_of`` on a store large enough that the past view replays in bulk: it answers exactly as the
live store did at that moment, after the live store has moved on (more messages, summaries
replaced, a session forgotten, facts superseded and deleted, notes changed)."""

from __future__ import annotations

import datetime as dt
import random
import time

import pytest

import eidetica
from eidetica.projections._projector import BULK_EVENTS
from eidetica.providers import HashEmbedder

QUERIES = ["kw17 kw250 in berlin", "kw901 and kw44", "kw1200 summer trip", "where do I live", "my job"]
SESSIONS = [f"s{i}" for i in range(8)]


def _text(i: int) -> str:
    # a large vocabulary: each query term matches a few messages, so every index ranks them alike
    # (with a handful of words in every message, BM25's candidate pool depends on the segments)
    rng = random.Random(i)
    return f"note {i}: " + " ".join(f"kw{rng.randrange(3000)}" for _ in range(10))


def _seen(v) -> dict:
    """What an agent gets from a store, every read of the public API."""
    return {
        "search": [[(h.id, h.kind, h.text, round(h.score, 6)) for h in v.search(q, user="u")] for q in QUERIES],
        "recall": [[(h.id, h.text) for h in v.recall(q, user="u")] for q in QUERIES],
        "context": [v.context(q, user="u") for q in QUERIES],
        "facts": sorted((h.id, h.text, h.confidence) for h in v.list_memories(user="u", limit=1000)),
        "sessions": sorted(s.session_id for s in v.list_sessions(user="u")),
        "read": {s: [x.content for x in v.session(s, user="u").read()] for s in SESSIONS},
        "history": {s: [x.content for x in v.session(s, user="u").history()] for s in SESSIONS},
        "summaries": {s: v.session(s, user="u").summary() for s in SESSIONS},
        "notes": sorted(n.text for n in v.list_notes(user="u", limit=100)),
        "items": [(it.key, it.value) for it, _ in v.items.search(("docs",), query="kw5 kw7 item")],
    }


def _write(m, lo: int, hi: int) -> None:
    for i in range(lo, hi, 50):
        m.session(SESSIONS[(i // 50) % len(SESSIONS)], user="u").extend(
            [{"role": "user", "content": _text(j)} for j in range(i, min(i + 50, hi))])


@pytest.mark.slow
@pytest.mark.parametrize("how", ["derived", "tantivy-rebuilt", "replayed"])
def test_as_of_a_large_store_answers_as_the_store_did(tmp_path, monkeypatch, how) -> None:
    if how == "tantivy-rebuilt":  # the live index merged away a file while it was being linked: built from the rows
        monkeypatch.setattr("eidetica._store.asof.link_generation", lambda source, root: False)
    if how == "replayed":  # what a store whose index lives elsewhere (Ray) does: the copy is folded in bulk
        monkeypatch.setattr("eidetica._store.asof.BULK_EVENTS", 10**12)
    import eidetica._store.asof as asof

    derived = []  # the real derive_past, counted: the derived variants must not fall back to a replay
    real = asof.derive_past
    monkeypatch.setattr(asof, "derive_past", lambda *a, **k: derived.append(1) or real(*a, **k))
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), fsync="never") as m:
        m.remember("I live in Berlin.", user="u")
        m.remember("I work as a nurse.", user="u")
        note = m.store_note("flight lands 10:40", user="u")
        m.items.put([{"namespace": ("docs",), "key": "a", "value": {"v": 1}, "texts": ["kw5 alpha item"], "user": "u"}])
        _write(m, 0, 2600)
        m.gate.sync()
        assert m.log.head(0) >= BULK_EVENTS  # the past view replays in bulk
        cut = m.log.head(0) - 1
        time.sleep(0.01)
        when = dt.datetime.now(dt.timezone.utc)
        then = _seen(m)
        time.sleep(0.01)
        # the store moves on: every kind of change the index and the state fold
        _write(m, 2600, 3400)
        m.remember("I live in Lisbon.", user="u")  # supersedes Berlin
        m.items.put([{"namespace": ("docs",), "key": "a", "value": {"v": 2}, "texts": ["kw7 beta item"], "user": "u"}])
        nurse = next(h.id for h in m.list_memories(user="u") if "nurse" in h.text)
        m.forget(nurse, user="u")
        m.update_note(note, "flight lands 12:15", user="u")
        m.forget_session("s3")
        m.session("s5", user="u").forget_message(3)
        assert _seen(m) != then
        for moment in (cut, when):
            with m.as_of(moment) as past:
                assert _seen(past) == then
        assert len(derived) == (0 if how == "replayed" else 2)
        # an event recorded later but dated before the moment belongs to it (times, not positions)
        m.session("s9", user="u").append("user", "a late entry about kyoto trains", time=when - dt.timedelta(seconds=1))
        with m.as_of(when) as past:
            assert [x.content for x in past.session("s9", user="u").history()] == ["a late entry about kyoto trains"]
            assert _seen(past)["facts"] == then["facts"]
