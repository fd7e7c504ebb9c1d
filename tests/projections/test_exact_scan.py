"""Small scopes answered by an exact scan in memory (``projections._scan``): the same rows and
distances as LanceDB's exact filtered scan for every row kind and filter, the same search
results end to end, kept in step by every write (adds, deletes, forgetting, item puts,
retractions, rebuilds), nothing loaded at open, larger scopes left to LanceDB."""

from __future__ import annotations

import datetime as dt
import itertools

import numpy as np
import pytest

from eidetica.events import ArrowLog, ChunksEmbedded, NewEvent
from eidetica.events import types as ev
from eidetica.events.streams import facts_stream, items_stream, notes_stream, session_stream, summary_stream
from eidetica.projections import ChunkIndex, Projector
from eidetica.projections._rows import Filters

DIM = 16
UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 1, tzinfo=UTC)
KIND_STREAM = {"fact": facts_stream, "note": notes_stream, "item": items_stream}


class World:
    """A log, an index fed by a projector, and a counter of written chunks."""

    def __init__(self, tmp_path, **kw) -> None:
        self.rng = np.random.default_rng(5)
        self.log = ArrowLog(tmp_path / "log", partitions=2, fsync="never")
        self.idx = ChunkIndex(tmp_path / "idx", dim=DIM, **kw)
        self.proj = Projector(self.log, [self.idx], batch_size=16)
        self.n = 0

    def chunks(self, tenant: str, user: str, kind: str, count: int, *, session: str = "", source: str = "",
               category: str = "general") -> None:
        """Append ``count`` chunks of one kind (one event each) and fold them."""
        evs = []
        for _ in range(count):
            self.n += 1
            v = self.rng.standard_normal((1, DIM)).astype("<f4")
            src = source or f"{kind}-{self.n}"
            evs.append(ChunksEmbedded(model_id="m", dim=DIM, chunk_ids=[f"{kind}-{self.n}"], vectors=v.tobytes(),
                                      texts=[f"{kind} {self.n} of {user} word{self.n % 4}"], source_id=src,
                                      kind=kind, user_id=user, session_id=session, category=category,
                                      time=T0 + dt.timedelta(hours=self.n)))
        if kind in ("message",):
            stream = session_stream(tenant, session)
        elif kind == "summary":
            stream = summary_stream(tenant, session)
        else:
            stream = KIND_STREAM[kind](tenant, user)
        self.write(stream, tenant, evs)

    def write(self, stream: str, tenant: str, events: list) -> None:
        self.log.append(stream, [NewEvent.of(e, tenant=tenant) for e in events])
        self.proj.catch_up()

    def close(self) -> None:
        self.idx.close()
        self.log.close()


FILTERS = [
    dict(),
    dict(kinds=["fact"], user_id="u"),
    dict(kinds=["fact", "message"], user_id="u"),
    dict(kinds=["message"], user_id="u", session_id="s1"),
    dict(kinds=["message", "summary"], exclude_session="s1"),
    dict(kinds=["item"]),
    dict(kinds=["note", "fact"], user_id="v", category="food"),
    dict(user_id="u", since=T0 + dt.timedelta(hours=20), until=T0 + dt.timedelta(hours=60)),
    dict(kinds=["fact"], user_id="nobody"),
    dict(category="no-such-category"),
]


def compare(w: World, tenant: str, **kw) -> list[str]:
    """In-memory vs LanceDB exact scan, raw (keys and distances) and end to end (search hits)."""
    lance = w.idx._lance
    f = Filters.build(tenant, kw.get("kinds"), kw.get("user_id"), kw.get("session_id"), kw.get("exclude_session"),
                      kw.get("category"), kw.get("since"), kw.get("until"))
    q = w.rng.standard_normal(DIM).astype(np.float32)
    mem = lance.vector_search(q, f.sql(), 10, exact=True, filters=f)
    ref = lance.vector_search(q, f.sql(), 10, exact=True)
    assert sorted(k for k, _ in mem) == sorted(k for k, _ in ref), kw
    d = dict(ref)
    for k, dist in mem:
        assert dist == pytest.approx(d[k], abs=1e-5)
    assert set(lance.vectors(tenant, [k for k, _ in mem])) == {k for k, _ in mem}
    # end to end: hybrid search with the scans on equals the same search with them off
    hits = w.idx.search(tenant=tenant, text="word1 word2", vector=q, top_k=8, min_score=None, **kw)
    scans, lance.scans.scope_rows = lance.scans.scope_rows, 0
    saved = dict(lance.scans.scopes)
    lance.scans.scopes.clear()
    try:
        plain = w.idx.search(tenant=tenant, text="word1 word2", vector=q, top_k=8, min_score=None, **kw)
    finally:
        lance.scans.scope_rows = scans
        lance.scans.scopes.update(saved)
    assert [h.id for h in hits] == [h.id for h in plain], kw
    assert [h.score for h in hits] == pytest.approx([h.score for h in plain], abs=1e-5)
    # every other field too: the rows a search takes from the scan's memory equal Tantivy's
    assert [_fields(h) for h in hits] == [_fields(h) for h in plain], kw
    return [k for k, _ in mem]


def _fields(h) -> tuple:
    """A hit without its scores (those come from float32 products that may differ in the last bits)."""
    return (h.id, h.kind, h.text, h.time, h.tenant, h.user_id, h.session_id, h.category, h.confidence, h.source_id,
            h.metadata)


def compare_all(w: World) -> None:
    for tenant, kw in itertools.product(("a", "b"), FILTERS):
        compare(w, tenant, **kw)


def fill(w: World) -> None:
    for tenant in ("a", "b"):  # the same user and session ids in both tenants
        w.chunks(tenant, "u", "fact", 12, category="food")
        w.chunks(tenant, "u", "fact", 8)
        w.chunks(tenant, "v", "fact", 6, category="food")
        w.chunks(tenant, "v", "note", 5, category="food")
        w.chunks(tenant, "u", "message", 15, session="s1")
        w.chunks(tenant, "u", "message", 10, session="s2")
        w.chunks(tenant, "u", "summary", 1, session="s1", source="sum-s1")
        w.chunks(tenant, "", "item", 6, source="item-1")
        w.chunks(tenant, "", "item", 4)


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_every_kind_and_filter_matches_lancedb_and_tracks_writes(tmp_path) -> None:
    w = World(tmp_path)
    fill(w)
    assert not w.idx._lance.scans.scopes  # nothing loaded before the first query
    compare(w, "a", kinds=["fact"], user_id="u")  # loads the narrowest scope: u's facts
    assert list(w.idx._lance.scans.scopes) == [("a", "u", ("fact",))]
    compare_all(w)  # the first tenant-wide query loads the tenant; later ones use the smallest that covers
    assert ("a", None, None) in w.idx._lance.scans.scopes and ("a", "u", ("fact",)) in w.idx._lance.scans.scopes
    # writes after the load: new rows of every kind, then every kind of delete
    fill(w)
    w.write(facts_stream("a", "u"), "a", [ev.FactDeleted(fact_id="fact-3"), ev.FactPruned(fact_id="fact-5"),
                                          ev.FactSuperseded(fact_id="fact-7", by="fact-8")])
    w.write(notes_stream("a", "v"), "a", [ev.NoteDeleted(note_id="note-30")])
    w.write(session_stream("a", "s2"), "a", [ev.MessageRetracted(session_id="s2", sequence=1, message_id="message-50")])
    w.write(items_stream("a", ""), "a", [ev.ItemDeleted(item_id="item-1")])
    w.chunks("a", "", "item", 1, source="item-2")  # a put with no ItemPut first: an upsert
    w.write(items_stream("a", ""), "a", [ev.ItemPut(item_id="item-2", user_id="", namespace=["n"], key="k")])
    w.chunks("a", "u", "summary", 1, session="s1", source="sum-s1")  # a newer summary replaces the old one
    compare_all(w)
    keys = w.idx._lance.scans.scopes[("a", None, None)].slot
    assert "a\x1ffact-3" not in keys and "a\x1fnote-30" not in keys and "a\x1fitem-1" not in keys
    w.write(session_stream("a", "s1"), "a", [ev.SessionForgotten(session_id="s1", user_id="u")])
    w.write(facts_stream("a", "u"), "a", [ev.UserForgotten(user_id="u")])
    compare_all(w)
    assert not w.idx._lance.scans.scopes[("a", "u", ("fact",))].slot
    # a rebuild replays into the table in bulk: the memory copies are dropped and reloaded
    w.proj.rebuild()
    assert not w.idx._lance.scans.scopes
    compare_all(w)
    w.close()


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_hits_take_rows_from_memory_and_confidence_changes_reach_them(tmp_path) -> None:
    w = World(tmp_path)
    fill(w)
    compare(w, "a", kinds=["fact", "message"], user_id="u")  # loads u's facts and messages
    fetched: list[list[str]] = []
    real = w.idx._text.fetch

    def counting(tenant, keys):
        fetched.append(list(keys))
        return real(tenant, keys)

    w.idx._text.fetch = counting
    # confidence changes after the load: the hits must carry them (compare checks every field)
    w.write(facts_stream("a", "u"), "a", [ev.FactReinforced(fact_id="fact-2", confidence=0.75),
                                          ev.FactDecayed(fact_id="fact-4", confidence=0.5)])
    compare(w, "a", kinds=["fact", "message"], user_id="u")
    q = w.rng.standard_normal(DIM).astype(np.float32)
    fetched.clear()
    hits = w.idx.search(tenant="a", text="zzz", vector=q, top_k=60, min_score=None, kinds=["fact", "message"],
                        user_id="u")
    assert len(hits) == 45 and fetched == []  # every row from memory: no Tantivy fetch by key
    conf = {h.id: h.confidence for h in hits}
    assert conf["fact-2"] == 0.75 and conf["fact-4"] == 0.5 and conf["fact-6"] == 1.0
    w.close()


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_larger_scopes_go_to_lancedb_and_the_budget_holds(tmp_path) -> None:
    w = World(tmp_path, scan_rows=30, scan_cache_rows=40)
    fill(w)
    scans = w.idx._lance.scans
    compare(w, "a")  # 68 rows in the tenant: too large, answered by LanceDB
    assert ("a", None, None) in scans.too_large and not scans.scopes
    compare(w, "a", kinds=["fact"], user_id="u")  # 20 rows: in memory
    compare(w, "a", kinds=["message"], user_id="u")  # 25 more: the budget drops the older scope
    assert list(scans.scopes) == [("a", "u", ("message",))]
    w.chunks("a", "u", "message", 6, session="s3")  # grows past scan_rows: dropped, left to LanceDB
    assert not scans.scopes and ("a", "u", ("message",)) in scans.too_large
    compare(w, "a", kinds=["message"], user_id="u")
    assert w.idx.stats()["scan"]["rows"] == 0
    w.close()


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_a_vector_given_as_a_callable_is_computed_while_bm25_runs(tmp_path) -> None:
    w = World(tmp_path)
    fill(w)
    q = w.rng.standard_normal(DIM).astype(np.float32)
    calls: list[int] = []

    def later() -> np.ndarray:
        calls.append(1)
        return q

    for kw in (dict(), dict(kinds=["fact", "message"], user_id="u")):
        want = w.idx.search(tenant="a", text="word1 fact", vector=q, top_k=8, min_score=None, **kw)
        got = w.idx.search(tenant="a", text="word1 fact", vector=later, top_k=8, min_score=None, **kw)
        assert [(h.id, h.score) for h in got] == [(h.id, h.score) for h in want]
    assert len(calls) == 2
    w.idx.search(tenant="a", text="word1", vector=later, mode="text")  # text only: never embedded
    assert len(calls) == 2

    def broken() -> np.ndarray:
        raise RuntimeError("model down")

    with pytest.raises(RuntimeError, match="model down"):
        w.idx.search(tenant="a", text="word1", vector=broken)
    w.close()


def test_scan_sizes_are_checked(tmp_path) -> None:
    from eidetica.errors import InvalidInput

    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidInput, match="scan_rows"):
            ChunkIndex(tmp_path / "idx", dim=DIM, scan_rows=bad)
    idx = ChunkIndex(tmp_path / "idx", dim=DIM, scan_rows=5, scan_cache_rows=0)
    assert idx.name == "chunks" and idx.stats()["scan"]["scope_rows"] == 5
    idx.close()
