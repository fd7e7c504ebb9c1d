"""Bulk mode of the chunk index (``_rebuild``): rows held in memory, deletes and confidence changes
applied there, spilled to LanceDB past ``bulk_rows``; a rebuild must give exactly the incremental rows."""

from __future__ import annotations

import datetime as dt

import pytest

import eidetica
from eidetica.actors import MemoryConfig
from eidetica.events import (
    ArrowLog,
    FactDeleted,
    FactReinforced,
    ItemDeleted,
    ItemPut,
    MessageRetracted,
    NewEvent,
)
from eidetica.projections import ChunkIndex, Projector
from eidetica.providers import HashEmbedder
from tests.contracts.projection import DIM, Workload, eid

# 0: every batch spilled; 1 and 5: spills all along (deletes and confidence changes reach rows
# already in LanceDB); 40: a few spills; the default: everything in memory until the end
LIMITS = [0, 1, 5, 40, ChunkIndex.bulk_rows]


def _extras(w: Workload, part: int) -> list[tuple[str, list[NewEvent]]]:
    """Events the workload lacks: items put again and deleted, a retracted message, a summary
    replaced many times, a chunk id written again under another source then deleted and reinforced."""
    t = w.tenants[0]
    out: list[tuple[str, list[NewEvent]]] = []

    def item(iid: str, n: int, chunk_ids: list[str]) -> tuple[str, list[NewEvent]]:
        put = NewEvent.of(ItemPut(item_id=iid, user_id="u0", namespace=["prefs"], key=iid, value={"n": n}), tenant=t,
                          event_id=eid(t, iid, "put", n))
        texts = [f"{iid} value {n} part {k} " + w.sentence() for k in range(len(chunk_ids))]
        return f"items:{t}:u0", [put, w.chunks(t, "item", iid, chunk_ids, texts, user="u0", session="prefs")]

    if part == 0:
        out.append(item("item-a", 0, ["item-a#0", "item-a#1"]))
        out.append(item("item-b", 0, ["item-b#0"]))
        out.append(("facts:acme:dup", [w.chunks(t, "fact", "fact-dup-A", ["dup", "dup-keep"], [w.sentence(), w.sentence()],
                                               user="u0", confidence=0.7)]))
        for epoch in range(12):  # one session's summary, replaced again and again
            text = f"summary many {epoch} " + w.sentence()
            out.append((f"summary:{t}:s9", [w.chunks(t, "summary", "summary:s9", [f"summary:s9:{epoch}"], [text],
                                                     user="u0", session="s9")]))
    else:
        out.append(item("item-a", 1, ["item-a#0"]))  # put again: same key, one chunk fewer
        out.append((f"items:{t}:u0", [NewEvent.of(ItemDeleted(item_id="item-b"), tenant=t, event_id=eid(t, "item-b", "del"))]))
        out.append((f"session:{t}:s0-0", [NewEvent.of(MessageRetracted(session_id="s0-0", sequence=2, message_id="s0-0:2"),
                                                       tenant=t, event_id=eid(t, "retract"))]))
        # the same chunk id again under another source: it replaces the first row, so deleting
        # the new source must take the key out of LanceDB even where the first row was spilled
        out.append(("facts:acme:dup", [w.chunks(t, "fact", "fact-dup-B", ["dup"], [w.sentence()], user="u0", confidence=0.6)]))
        out.append(("facts:acme:dup", [NewEvent.of(FactReinforced(fact_id="fact-dup-A", confidence=0.95), tenant=t,
                                                   event_id=eid(t, "dup", "reinforce"))]))
        # (in a batch of its own: a delete in the same batch as the row it deletes drops it before
        # it replaced anything, in the incremental index as well)
        for k in range(12):
            out.append(("facts:acme:dup", [w.chunks(t, "fact", f"fact-fill-{k}", [f"fill-{k}"], [w.sentence()], user="u0")]))
        out.append(("facts:acme:dup", [NewEvent.of(FactDeleted(fact_id="fact-dup-B"), tenant=t, event_id=eid(t, "dup", "del"))]))
        for epoch in range(12, 20):
            text = f"summary many {epoch} " + w.sentence()
            out.append((f"summary:{t}:s9", [w.chunks(t, "summary", "summary:s9", [f"summary:s9:{epoch}"], [text],
                                                     user="u0", session="s9")]))
    return out


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """A log with the workload and the extras interleaved, and the index built incrementally from it."""
    root = tmp_path_factory.mktemp("bulk")
    w = Workload(seed=41, users=3, sessions=2, messages=7)
    half = len(w.appends) // 2
    w.appends[half:half] = _extras(w, 0)
    w.appends.extend(_extras(w, 1))
    log = ArrowLog(root / "log", partitions=2, fsync="never")
    w.append_to(log)
    inc = ChunkIndex(root / "inc", dim=DIM)
    Projector(log, [inc], batch_size=7).catch_up()
    want = inc.snapshot()
    inc.close()
    yield log, want, root
    log.close()


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_bulk_rebuild_gives_exactly_the_incremental_rows(logged, limit) -> None:
    log, want, root = logged
    idx = ChunkIndex(root / f"reb{limit}", dim=DIM)
    try:
        idx.bulk_rows = limit
        Projector(log, [idx], batch_size=5).rebuild()
        got = idx.snapshot()
        assert got["lance_duplicates"] == got["text_duplicates"] == 0
        assert got["lance"] == want["lance"] and got["text"] == want["text"]
        ids = {r[1] for r in got["lance"] if r[2] == "acme"}
        # what each case left: the item's one chunk, no deleted item, no retracted message, the
        # last summary of s9 only, the reinforced first source's kept chunk and not the deleted key
        assert "item-a#0" in ids and not {"item-a#1", "item-b#0", "s0-0:2:0", "dup"} & ids
        assert [r[1] for r in got["lance"] if r[6] == "summary:s9"] == ["summary:s9:19"]
        assert [r[9] for r in got["lance"] if r[1] == "dup-keep"] == [0.95]
        assert idx.checkpoint() == {p: log.head(p) for p in range(log.partitions) if log.head(p)}
    finally:
        idx.close()


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_reopened_after_a_spilled_rebuild_it_keeps_converging(logged) -> None:
    """A rebuild that spilled (several LanceDB writes) is durable as a whole: reopened, it holds the same rows."""
    log, want, root = logged
    idx = ChunkIndex(root / "reopen", dim=DIM)
    idx.bulk_rows = 3
    Projector(log, [idx], batch_size=4).rebuild()
    idx.close()
    again = ChunkIndex(root / "reopen", dim=DIM)
    try:
        snap = again.snapshot()
        assert snap["lance"] == want["lance"] and snap["text"] == want["text"]
        Projector(log, [again]).catch_up()  # nothing left to apply
        assert again.snapshot()["lance"] == want["lance"]
    finally:
        again.close()


def _rows(m) -> list[tuple]:
    """The index's rows: (id, kind, text, confidence, source), sorted, once every write is applied."""
    m.gate.sync()  # items' vectors are written behind their puts
    return sorted((r[1], r[5], r[7], r[9], r[6]) for r in m.index.snapshot()["lance"])


@pytest.mark.parametrize("limit", [1, ChunkIndex.bulk_rows])
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_memory_rebuild_equals_the_live_index_after_every_kind_of_change(tmp_path, limit) -> None:
    """Through the public API: rolling summaries replaced many times, facts superseded, reinforced
    and deleted, notes updated and deleted, a session and a user forgotten, an item put twice and
    deleted, a message popped and one forgotten; then ``m.rebuild()`` gives the live index's rows."""
    t0 = dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)
    cfg = MemoryConfig(window=2, retain_recent=2, min_turns_outside=1)
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64), config=cfg) as m:
        for k, u in enumerate(("ada", "bob", "cy")):
            s = m.session(f"talk-{u}", user=u)
            summaries = 0
            for r in range(4):
                s.extend([{"role": "user" if i % 2 else "assistant", "content": f"{u} round {r} turn {i} about herons and ponds",
                           "time": t0 + dt.timedelta(minutes=10 * r + i)} for i in range(6)])
                summaries += s.summarize(force=True)
            assert summaries >= 3  # each replaces the last
            s.append("user", "I am 30 years old.")
            s.append("user", "I am 30 years old.")  # reinforced
            s.append("user", "I am 31 years old.")  # supersedes
            fid = m.remember(f"{u} likes green tea", user=u)
            m.remember(f"{u} keeps bees", user=u)
            m.forget(fid, user=u)
            nid = m.store_note(f"{u} note to delete", user=u)
            kept = m.store_note(f"{u} note to update", user=u)
            m.update_note(kept, f"{u} note updated", user=u)
            m.delete_note(nid, user=u)
            m.items.put([{"namespace": (u, "prefs"), "key": "colour", "value": {"v": 1}, "user": u,
                          "texts": [f"{u} likes red", f"{u} likes red a lot"]}])
            m.items.put([{"namespace": (u, "prefs"), "key": "colour", "value": {"v": 2}, "user": u, "texts": [f"{u} likes blue"]}])
            m.items.put([{"namespace": (u, "prefs"), "key": "size", "value": {"v": 3}, "user": u, "texts": [f"{u} size L"]}])
            m.items.put([{"namespace": (u, "prefs"), "key": "size", "value": None, "user": u}])
            s.append("user", f"{u} says something to take back")
            assert s.pop() is not None
            s.forget_message(1)
            m.session(f"gone-{u}", user=u).append("user", f"{u} forgotten session text {k}")
            m.forget_session(f"gone-{u}")
        m.forget_user("cy")
        live = _rows(m)
        kinds = {r[1] for r in live}
        assert kinds == {"message", "summary", "fact", "note", "item"}
        assert not [r for r in live if "forgotten session" in r[2] or "take back" in r[2] or "cy " in r[2]]
        m.index.bulk_rows = limit
        m.rebuild()
        assert _rows(m) == live
